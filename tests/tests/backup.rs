//! `agentmesh backup export|import`: a machine restored from its backup
//! into a new home, on a new address, is the same machine to its team (its
//! mail reaches it there); a file that is not whole, not right or not a
//! backup is refused with its own code and nothing is written.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use agentmesh_tests::natlab::team::inbox_texts as texts;
use agentmesh_tests::{Node, team, wait_for_within};
use serde_json::Value;

const PASS: &str = "correct horse battery staple";

/// `agentmesh ARGS --json` on `node` with `pass` in $AGENTMESH_PASSPHRASE.
fn with_pass(node: &Node, args: &[&str], pass: &str) -> Output {
    node.command(args)
        .arg("--json")
        .env("AGENTMESH_PASSPHRASE", pass)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The parsed stdout of a command that succeeded.
fn ok(out: Output) -> Value {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The code of a command that failed with a JSON error.
fn code(out: &Output) -> String {
    assert!(!out.status.success(), "should have failed");
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("not JSON: {err}"));
    v["code"].as_str().unwrap().to_owned()
}

/// Everything under `dir`, as relative paths (nothing if it is missing).
fn contents(dir: &Path) -> Vec<String> {
    let mut all = vec![];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            all.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    all.sort();
    all
}

#[test]
fn a_machine_restored_on_a_new_address_receives_its_teams_mail() {
    let [alpha, mut beta] = team([("alpha", "ann"), ("beta", "bob")]);
    // What beta's person set up: a profile, a setting, and mail.
    beta.ok(&["profile", "set", "@", "--goal", "ship the parser"]);
    beta.ok(&["config", "set", "agents.max_hop", "1"]);
    beta.ok(&["trust", "alpha"]);
    let before = alpha.send("@beta", "before the backup");
    alpha.reaches(&before, "delivered");

    // A backup made while the daemon runs (through it: it holds the store).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("beta.agentmesh");
    let file = file.to_str().unwrap();
    let made = ok(with_pass(&beta, &["backup", "export", file], PASS));
    let meta = std::fs::metadata(file).unwrap();
    let size = meta.len();
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o600,
            "the file is its user's alone"
        );
    }
    assert_eq!(
        contents(dir.path()),
        vec!["beta.agentmesh"],
        "no .partial left behind"
    );
    assert_eq!(made["bytes"], size, "{made}");
    assert_eq!(made["name"], "beta");
    assert_eq!(made["team"], "core");
    assert_eq!(made["with_mail"], false);
    // With the mail, only with the daemon stopped (mail moves between the
    // store's parts while it runs).
    let dir_path = dir.path().join("refused.agentmesh");
    let refused = with_pass(
        &beta,
        &[
            "backup",
            "export",
            dir_path.to_str().unwrap(),
            "--with-mail",
        ],
        PASS,
    );
    assert_eq!(code(&refused), "daemon_running");
    assert!(!dir_path.exists());
    let peer_id = beta.peer_id();
    // The old laptop runs on a while after its backup (a new address, so
    // a new contact record numbered above the backup's), then is put away.
    beta.stop();
    beta.start();
    let old_addr = beta.addr();
    let old_port = old_addr.split("/p2p/").next().unwrap().to_owned();
    wait_for_within(
        "alpha to take beta's record after its restart",
        Duration::from_secs(30),
        || {
            let row = alpha.peer_row(&peer_id)?;
            row["addresses"]
                .as_array()?
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.contains(&old_port)))
                .then_some(())
        },
    );
    beta.stop();
    // And one with the mail, made by the command itself while it is down.
    let mailed = dir.path().join("beta-mail.agentmesh");
    let mailed = mailed.to_str().unwrap();
    let made_mail = ok(with_pass(
        &beta,
        &["backup", "export", mailed, "--with-mail"],
        PASS,
    ));
    assert_eq!(made_mail["with_mail"], true);
    assert!(
        made_mail["entries"].as_u64() > made["entries"].as_u64(),
        "{made_mail} vs {made}"
    );

    // The new laptop: an empty home, another address.
    let mut laptop = Node::empty("beta");
    let restore_started = Instant::now();
    let restored = ok(with_pass(&laptop, &["backup", "import", file], PASS));
    let import_took = restore_started.elapsed();
    assert_eq!(restored["peer_id"], peer_id.as_str(), "{restored}");
    assert_eq!(restored["name"], "beta");
    assert_eq!(restored["with_mail"], false);
    laptop.start();
    assert_ne!(laptop.addr(), old_addr, "the laptop has a new address");
    assert_eq!(laptop.peer_id(), peer_id, "the same machine");
    // Its settings came with it; its mail did not.
    let shown = laptop.json(&["config", "show"]);
    assert_eq!(shown["config"]["agents"]["max_hop"], 1, "{shown}");
    let profile = laptop.json(&["profile", "show", "@"]);
    assert!(profile.to_string().contains("ship the parser"), "{profile}");
    assert!(
        texts(&laptop).is_empty(),
        "mail stays out without --with-mail"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(laptop.home().join("data"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o077,
            0,
            "the restored store is its user's alone: {mode:o}"
        );
    }

    // Its team's mail reaches it at the new address.
    let after = alpha.send("@beta", "after the move");
    wait_for_within(
        "the restored machine to receive its team's mail",
        Duration::from_secs(60),
        || {
            texts(&laptop)
                .contains(&"after the move".to_owned())
                .then_some(())
        },
    );
    let reached = restore_started.elapsed();
    alpha.reaches(&after, "delivered");
    // Its team knows it at its new address: the record it made is the
    // one alpha keeps (numbered above the backed-up machine's).
    let row = alpha.peer_row(&peer_id).unwrap();
    assert_eq!(row["membership"], "member", "{row}");
    assert!(
        restored["contact_seq"].as_u64().unwrap() > 1_000_000,
        "{restored}"
    );
    // It won at once: its record was numbered above the old laptop's
    // later ones, so no member passed it one of those (which a daemon
    // takes as a second copy of itself running).
    assert!(
        !laptop
            .log()
            .contains("another daemon runs with this machine's key"),
        "{}",
        laptop.log()
    );
    eprintln!(
        "backup: {size} bytes without mail, {} with; import {import_took:?}; mail sent after the start reached the restored machine {reached:?} after the import began",
        made_mail["bytes"]
    );

    // The backup with mail restores the inbox too (read with no daemon).
    let second = Node::empty("beta");
    let r = ok(with_pass(&second, &["backup", "import", mailed], PASS));
    assert_eq!(r["with_mail"], true);
    assert!(
        texts(&second).contains(&"before the backup".to_owned()),
        "{:?}",
        texts(&second)
    );
}

#[test]
fn a_backup_that_is_not_whole_not_right_or_not_one_is_refused_writing_nothing() {
    let alpha = Node::new("alpha");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("alpha.agentmesh");
    let file_s = file.to_str().unwrap();
    // No passphrase: an empty one, or none and nobody at a terminal.
    assert_eq!(
        code(&with_pass(&alpha, &["backup", "export", file_s], "")),
        "empty_passphrase"
    );
    let none = alpha
        .command(&["backup", "export", file_s, "--json"])
        .env_remove("AGENTMESH_PASSPHRASE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&none), "passphrase_needed");
    assert!(!file.exists(), "nothing written without a passphrase");
    let made = ok(with_pass(&alpha, &["backup", "export", file_s], PASS));
    let whole = std::fs::read(&file).unwrap();
    assert!(whole.starts_with(b"agentmesh backup 1\n"));
    assert!(
        !whole.windows(b"alpha".len()).any(|w| w == b"alpha"),
        "the name (and all else) is encrypted"
    );

    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let mut flipped = whole.clone();
    let at = whole.len() - 20;
    flipped[at] ^= 0x01;
    let mut header_changed = whole.clone();
    // A byte of the age header after the recipient line (its MAC covers it).
    let mac = whole.windows(4).position(|w| w == b"--- ").unwrap();
    header_changed[mac + 6] ^= 0x01;
    let cases = [
        (
            write("short", &whole[..whole.len() - 100]),
            PASS,
            "backup_truncated",
        ),
        (write("shorter", &whole[..30]), PASS, "backup_truncated"),
        (write("flipped", &flipped), PASS, "backup_tampered"),
        (write("mac", &header_changed), PASS, "backup_tampered"),
        (
            write("longer", &[&whole[..], b"extra"].concat()),
            PASS,
            "backup_tampered",
        ),
        (file_s.to_owned(), "not the passphrase", "wrong_passphrase"),
        (write("other", b"name = \"alpha\"\n"), PASS, "not_a_backup"),
        (
            // A plain age file: the same, without agentmesh's two lines.
            write("age", &whole[46..]),
            PASS,
            "not_a_backup",
        ),
        (file_s.to_owned(), "", "empty_passphrase"),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (path, pass, want) in &cases {
        let target = Node::empty("target");
        std::fs::remove_dir(target.home()).unwrap();
        let out = with_pass(&target, &["backup", "import", path], pass);
        assert_eq!(&code(&out), want, "importing {path}");
        assert!(
            !target.home().exists(),
            "{path}: nothing written, not even the home: {:?}",
            contents(&target.home())
        );
        seen.insert(*want);
        // Into an empty folder that exists: it stays empty.
        let target = Node::empty("target");
        let out = with_pass(&target, &["backup", "import", path], pass);
        assert_eq!(&code(&out), want, "importing {path} into an empty folder");
        assert_eq!(contents(&target.home()), Vec::<String>::new(), "{path}");
    }
    assert_eq!(seen.len(), 5, "a code each: {seen:?}");

    // A home with a key, or with anything else in it, is not replaced.
    assert_eq!(
        code(&with_pass(&alpha, &["backup", "import", file_s], PASS)),
        "home_has_key"
    );
    let busy = Node::empty("busy");
    std::fs::write(busy.home().join("notes.txt"), "mine").unwrap();
    assert_eq!(
        code(&with_pass(&busy, &["backup", "import", file_s], PASS)),
        "home_not_empty"
    );
    assert_eq!(contents(&busy.home()), vec!["notes.txt"]);
    // The real one, after all that, restores.
    let fresh = Node::empty("fresh");
    let r = ok(with_pass(&fresh, &["backup", "import", file_s], PASS));
    assert_eq!(r["peer_id"], made["peer_id"]);
}
