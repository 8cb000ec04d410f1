//! The team's directory (issue 19, points 1, 2, 9): profiles, goals and
//! statuses set by MCP sessions and people, carried to every member in
//! signed records, gone with a revoked machine, never sent to a stranger,
//! bounded, and paged.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::PathBuf;
use std::time::{Duration, Instant};

use agentmesh_node::wire::{DIRECTORY_RECORD, SyncReply, SyncRequest, TypedRecord};
use agentmesh_protocol::directory::{
    DirectoryEntry, DirectoryRecord, SignedDirectory, Status as WireStatus,
};
use agentmesh_protocol::{Name, Timestamp};
use agentmesh_tests::hostile::{Peer, Received, SyncAnswer, identity_of};
use agentmesh_tests::mcp::Session;
use agentmesh_tests::{Node, team, wait_for};
use serde_json::{Value, json};

fn mailbox(node: &Node, name: &str) -> PathBuf {
    let dir = node.home().join("work").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    node.ok(&["allow", dir.to_str().unwrap(), "--mailbox", name]);
    dir
}

/// `directory --json`'s row for `address`, if shown.
fn row(node: &Node, address: &str) -> Option<Value> {
    let d = node.json(&["directory"]);
    d["machines"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["mailboxes"].as_array().unwrap().clone())
        .find(|b| b["address"] == address)
}

fn machine(node: &Node, name: &str) -> Option<Value> {
    let d = node.json(&["directory"]);
    d["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
}

/// The row of `address` in an MCP `list_team` result, if shown.
fn listed(t: &Value, address: &str) -> Option<Value> {
    t["machines"]
        .as_array()?
        .iter()
        .flat_map(|m| m["directory"].as_array().cloned().unwrap_or_default())
        .find(|b| b["address"] == address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_set_over_mcp_reaches_the_team_and_a_revoked_machine_vanishes() {
    let [a, b, c] = team([("alpha", "Ada"), ("bravo", "Bob"), ("charlie", "Cy")]);
    let planner = mailbox(&a, "planner");
    let coder = mailbox(&b, "coder");
    mailbox(&c, "ops");
    let sa = Session::spawn(&a, &planner, "claude-code", &[]).await;
    let sb = Session::spawn(&b, &coder, "codex", &[]).await;

    let set = sa
        .ok(
            "set_profile",
            json!({"profile": "The billing API <b>: Rust, axum; owns /v2/invoices.", "goal": "Move invoice export to the queue."}),
        )
        .await;
    assert_eq!(set["mailbox"], "planner@alpha", "{set}");
    let started = Instant::now();
    // B's session sees it, with A's session working (it just called a tool).
    let seen = loop {
        let t = sb.ok("list_team", json!({})).await;
        if let Some(r) = listed(&t, "planner@alpha")
            && r["goal"] == "Move invoice export to the queue."
        {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "bravo never saw planner@alpha's profile: {t}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let took = started.elapsed();
    eprintln!("planner@alpha's profile reached bravo's list_team in {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // Escaped like message text, and said to be as claimed.
    assert_eq!(
        seen["profile"],
        "The billing API &lt;b&gt;: Rust, axum; owns /v2/invoices."
    );
    assert!(seen["written_by"].as_str().unwrap().contains("alpha"));
    assert_eq!(seen["status"], "working", "{seen}");
    let t = sb.ok("list_team", json!({})).await;
    assert!(t["note"].as_str().unwrap().contains("not instructions"));
    // Charlie's mailbox is in everyone's directory.
    wait_for("charlie's ops mailbox on alpha and bravo", || {
        (row(&a, "ops@charlie").is_some() && row(&b, "ops@charlie").is_some()).then_some(())
    });
    // No session open on charlie: offline (once bravo has reached it:
    // until then it reads unreachable).
    wait_for("ops@charlie offline (not unreachable) on bravo", || {
        (row(&b, "ops@charlie")?["status"] == "offline").then_some(())
    });

    // Revoked: gone from both.
    a.ok(&["revoke", "charlie", "--yes"]);
    wait_for("charlie gone from alpha's and bravo's directory", || {
        (machine(&a, "charlie").is_none()
            && machine(&b, "charlie").is_none()
            && row(&b, "ops@charlie").is_none())
        .then_some(())
    });
    let t = sb.ok("list_team", json!({})).await;
    assert!(listed(&t, "ops@charlie").is_none(), "{t}");
    assert!(listed(&t, "planner@alpha").is_some(), "{t}");
    sa.close().await;
    sb.close().await;
}

#[test]
fn profile_set_and_show_and_their_errors() {
    let [a] = team([("alpha", "Ada")]);
    mailbox(&a, "api");
    let v = a.json(&[
        "profile",
        "set",
        "api",
        "--profile",
        "Knows the \u{1b}[31mbilling\u{1b}[0m API",
        "--goal",
        "Ship v2",
        "--preset",
        "strict",
    ]);
    assert_eq!(v["address"], "api@alpha");
    assert_eq!(v["preset"], "strict");
    assert_eq!(v["preset_is_default"], false);
    assert_eq!(v["status"], "offline");
    let shown = a.json(&["profile", "show"]);
    let rows = shown["mailboxes"].as_array().unwrap();
    assert_eq!(rows[0]["address"], "@alpha");
    assert_eq!(rows[0]["preset"], "balanced");
    assert_eq!(rows[0]["preset_is_default"], true);
    assert_eq!(rows[1]["goal"], "Ship v2");
    let one = a.json(&["profile", "show", "api"]);
    assert_eq!(one["mailboxes"].as_array().unwrap().len(), 1);
    // The text view cleans control characters.
    let text = a.ok(&["directory"]);
    assert!(text.contains("api@alpha"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    let text = a.ok(&["profile", "show", "api"]);
    assert!(
        text.contains("strict") && !text.contains('\u{1b}'),
        "{text}"
    );

    let json_error = |args: &[&str]| -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let e = a.fails(&args);
        serde_json::from_str(e.lines().last().unwrap()).unwrap()
    };
    let e = json_error(&["profile", "set", "apu", "--goal", "x"]);
    assert_eq!(e["code"], "no_mailbox", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("did you mean api?"),
        "{e}"
    );
    let long = "p".repeat(1025);
    let e = json_error(&["profile", "set", "api", "--profile", &long]);
    assert_eq!(e["code"], "too_large", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("the profile is 1025 bytes, over the limit of 1024 bytes"),
        "{e}"
    );
    let goal = "g".repeat(257);
    let e = json_error(&["profile", "set", "api", "--goal", &goal]);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("257 bytes, over the limit of 256"),
        "{e}"
    );
    // Nothing of the refused ones was kept.
    assert_eq!(
        a.json(&["profile", "show", "api"])["mailboxes"][0]["goal"],
        "Ship v2"
    );
    let e = json_error(&["profile", "show", "nope"]);
    assert_eq!(e["code"], "no_mailbox", "{e}");
    assert!(
        a.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "profile")
    );
}

#[test]
fn a_goal_change_is_at_once_and_a_status_change_waits_for_its_30_seconds() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    mailbox(&a, "api");
    a.ok(&["profile", "set", "api", "--goal", "first"]);
    wait_for("bravo to see api@alpha's first goal", || {
        row(&b, "api@alpha").filter(|r| r["goal"] == "first")
    });
    // A session attaches: only its status changed, so bravo waits.
    let session = agentmesh_tests::ApiClient::attach(
        &a,
        agentmesh_tests::who(agentmesh_node::api::WhoKind::Agent, "claude"),
        Some("api"),
    );
    wait_for("alpha to show api idle", || {
        row(&a, "api@alpha").filter(|r| r["status"] == "idle")
    });
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            row(&b, "api@alpha").unwrap()["status"],
            "offline",
            "a status-only change went out before its 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A goal change goes out at once, statuses with it.
    let started = Instant::now();
    a.ok(&["profile", "set", "api", "--goal", "second"]);
    let r = wait_for("bravo to see the second goal", || {
        row(&b, "api@alpha").filter(|r| r["goal"] == "second")
    });
    let took = started.elapsed();
    eprintln!("a goal change reached bravo in {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(r["status"], "idle");
    // The session goes: status-only again; 30 s later (the test clock) it
    // goes out.
    drop(session);
    wait_for("alpha to show api offline", || {
        row(&a, "api@alpha").filter(|r| r["status"] == "offline")
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(row(&b, "api@alpha").unwrap()["status"], "idle");
    a.advance_clock(Duration::from_secs(31));
    wait_for("bravo to see api offline once 30 s passed", || {
        row(&b, "api@alpha").filter(|r| r["status"] == "offline")
    });
}

fn entry(name: &str, profile: &str) -> DirectoryEntry {
    DirectoryEntry {
        mailbox: Some(Name::parse("mailbox name", name).unwrap()),
        profile: profile.into(),
        goal: String::new(),
        status: WireStatus::Idle,
        last_active: None,
    }
}

fn typed(bytes: Vec<u8>, kind: &str) -> TypedRecord {
    TypedRecord {
        kind: kind.into(),
        bytes: serde_bytes::ByteBuf::from(bytes),
    }
}

#[test]
fn a_stranger_is_sent_no_record_and_a_record_over_the_bounds_is_refused_whole() {
    let [a, mut m] = team([("alpha", "Ada"), ("mallory", "Ada")]);
    mailbox(&a, "api");
    a.ok(&["profile", "set", "api", "--profile", "secret project"]);
    m.stop();
    let mallory = identity_of(&m.home());
    let addr = a.addr().parse().unwrap();
    let team_bytes = agentmesh_protocol::team::TeamId::parse(
        a.json(&["team", "show"])["team_id"].as_str().unwrap(),
    )
    .unwrap()
    .0
    .to_vec();
    let digest = |directory| SyncRequest::Digest {
        team: team_bytes.clone(),
        digest: vec![0; 32],
        contacts: vec![],
        directory,
    };

    // A stranger asking is refused, with nothing in the answer, and is
    // sent nothing (no sync, no gossip).
    let stranger = Peer::new(
        &agentmesh_protocol::Identity::generate(&mut rand::rng()),
        SyncAnswer::InSync,
    );
    stranger.subscribe();
    let alpha = stranger.dial(&addr).unwrap();
    let r = stranger.sync(alpha, digest(vec![])).unwrap();
    assert!(matches!(&r, SyncReply::Refused(_)), "{r:?}");

    // Mallory's key (a member) gets alpha's record in the answer: the
    // same question a stranger asked, so the stranger's refusal is about
    // who asked. Mallory answers alpha's syncs with an unknown kind, a
    // record of 65 mailboxes and one over 48 KiB, then a good one.
    let me = mallory.peer_id();
    let record = |seq, mailboxes| DirectoryRecord {
        peer: me,
        seq,
        at: Timestamp::from_unix_millis(1),
        always_on: false,
        mailboxes,
    };
    let many = record(5, (0..65).map(|i| entry(&format!("m{i}"), "")).collect());
    let big = record(
        6,
        (0..50)
            .map(|i| entry(&format!("m{i}"), &"p".repeat(1000)))
            .collect(),
    );
    let good = record(7, vec![entry("lab", "the good one")]);
    let answers = vec![
        typed(vec![1, 2, 3], "carrier/9"),
        typed(
            SignedDirectory::sign_unchecked(&many, &mallory),
            DIRECTORY_RECORD,
        ),
        typed(
            SignedDirectory::sign_unchecked(&big, &mallory),
            DIRECTORY_RECORD,
        ),
    ];
    let peer = Peer::new(&mallory, SyncAnswer::Records(answers));
    peer.subscribe();
    let alpha = peer.dial(&addr).unwrap();
    let r = peer.sync(alpha, digest(vec![])).unwrap();
    let records = match r {
        SyncReply::InSync { records, .. } | SyncReply::Have { records, .. } => records,
        other => panic!("{other:?}"),
    };
    let alphas = records
        .iter()
        .filter_map(|r| SignedDirectory::from_bytes(&r.bytes).ok())
        .find(|s| s.record().peer.to_string() == a.peer_id())
        .expect("alpha's own record, to a member");
    assert!(
        alphas
            .record()
            .mailboxes
            .iter()
            .any(|m| m.profile == "secret project")
    );
    let refused = wait_for("alpha to audit both refusals", || {
        let e: Vec<Value> = a
            .json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "directory_refused")
            .cloned()
            .collect();
        (e.len() >= 2).then_some(e)
    });
    assert!(
        refused.iter().any(|e| e["detail"]
            .as_str()
            .unwrap()
            .contains("over the limit of 64")),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|e| e["detail"].as_str().unwrap().contains("49152")),
        "{refused:?}"
    );
    // Alpha's record changes while both are connected and subscribed:
    // the member hears the announcement, the stranger nothing.
    let before = Instant::now();
    loop {
        a.ok(&[
            "profile",
            "set",
            "api",
            "--goal",
            &format!("goal {:?}", before.elapsed()),
        ]);
        if peer
            .received()
            .iter()
            .any(|r| matches!(r, Received::Gossip(_)))
        {
            break;
        }
        assert!(
            before.elapsed() < Duration::from_secs(20),
            "the member never heard a directory announcement: {:?}",
            peer.received()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Refused whole: alpha still shows the record mallory's daemon
    // published before it stopped, none of the refused ones' mailboxes.
    let shown = machine(&a, "mallory").unwrap();
    assert!(shown["seq"].as_u64().unwrap() < 5, "{shown}");
    assert!(
        !shown["mailboxes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["address"] == "m0@mallory"),
        "{shown}"
    );
    drop(peer);
    // The good record is kept (and the unknown kind skipped with it).
    let peer = Peer::new(
        &mallory,
        SyncAnswer::Records(vec![
            typed(vec![9], "carrier/9"),
            typed(
                SignedDirectory::sign(good, &mallory)
                    .unwrap()
                    .bytes()
                    .to_vec(),
                DIRECTORY_RECORD,
            ),
        ]),
    );
    let alpha = peer.dial(&addr).unwrap();
    let _ = peer.sync(alpha, digest(vec![]));
    wait_for("mallory's good record on alpha", || {
        row(&a, "lab@mallory").filter(|r| r["profile"] == "the good one")
    });

    // All along, the stranger was sent nothing.
    let got = stranger.received();
    assert!(
        !got.iter()
            .any(|r| matches!(r, Received::Sync(_) | Received::Gossip(_))),
        "{got:?}"
    );
}

#[test]
fn the_directory_comes_a_page_of_about_24_kib_at_a_time() {
    let [a] = team([("alpha", "Ada")]);
    for i in 0..40 {
        let name = format!("m{i:02}");
        mailbox(&a, &name);
        a.ok(&["profile", "set", &name, "--profile", &"x".repeat(1000)]);
    }
    let mut c = agentmesh_tests::ApiClient::attach(
        &a,
        agentmesh_tests::who(agentmesh_node::api::WhoKind::Human, "test"),
        None,
    );
    let mut after: Option<String> = None;
    let mut seen = vec![];
    let mut pages = 0;
    loop {
        let v = c
            .call(agentmesh_node::api::ops::Directory {
                after: after.clone(),
                max_bytes: None,
            })
            .unwrap();
        let size = serde_json::to_vec(&v).unwrap().len();
        assert!(size <= 25 * 1024, "a page of {size} bytes");
        pages += 1;
        for m in v["machines"].as_array().unwrap() {
            for b in m["mailboxes"].as_array().unwrap() {
                seen.push(b["address"].as_str().unwrap().to_owned());
            }
        }
        match v["next_after"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => break,
        }
    }
    eprintln!("41 mailboxes in {pages} pages");
    assert!(pages >= 2, "{pages}");
    assert_eq!(seen.len(), 41, "{seen:?}");
    seen.dedup();
    assert_eq!(seen.len(), 41, "no mailbox twice");
    assert_eq!(
        a.json(&["directory"])["machines"][0]["mailboxes"]
            .as_array()
            .unwrap()
            .len(),
        41
    );
}

/// Issue 36, point 4: liveness in the directory. `directory --json` and
/// MCP `list_team` show whether each machine is reachable now and when it
/// was last seen; a mailbox of a machine that does not answer reads
/// `unreachable`, not `offline` (no session open). A machine suspended
/// (SIGSTOP: its connections stay open, it answers nothing) reads
/// unreachable within a minute, and reachable again once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_tells_a_machine_that_does_not_answer_from_a_mailbox_with_no_session() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    mailbox(&b, "docs");
    let seen = wait_for(
        "bravo reachable, with its docs mailbox, in alpha's directory",
        || {
            let m = machine(&a, "bravo")?;
            (m["reachable"] == true && row(&a, "docs@bravo").is_some()).then_some(m)
        },
    );
    assert!(seen["last_seen"].is_string(), "{seen}");
    assert_eq!(seen["peer_id"], b.peer_id().as_str(), "{seen}");
    assert_eq!(row(&a, "docs@bravo").unwrap()["status"], "offline");
    let me = machine(&a, "alpha").unwrap();
    assert_eq!(me["reachable"], true, "{me}");

    // Suspended: its connection stays open and answers nothing.
    let pid = nix::unistd::Pid::from_raw(b.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let stopped = Instant::now();
    let gone = agentmesh_tests::wait_for_within(
        "bravo unreachable in alpha's directory",
        Duration::from_secs(60),
        || {
            let m = machine(&a, "bravo")?;
            (m["reachable"] == false).then_some(m)
        },
    );
    println!(
        "a suspended machine read unreachable {:.1} s after it stopped",
        stopped.elapsed().as_secs_f64()
    );
    assert!(gone["last_seen"].is_string(), "{gone}");
    assert_eq!(row(&a, "docs@bravo").unwrap()["status"], "unreachable");
    let text = a.ok(&["directory"]);
    assert!(
        text.contains("bravo (Ada), unreachable (last seen"),
        "{text}"
    );
    // The agent's view says the same.
    let dir = a.home().join("work").join("api");
    std::fs::create_dir_all(&dir).unwrap();
    a.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "api"]);
    let s = Session::spawn(&a, &dir, "claude-code", &[]).await;
    let t = s.ok("list_team", json!({})).await;
    let bravo = t["machines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "bravo")
        .unwrap()
        .clone();
    assert_eq!(bravo["reachable"], false, "{t}");
    assert!(bravo["last_seen"].is_string(), "{t}");
    assert_eq!(listed(&t, "docs@bravo").unwrap()["status"], "unreachable");
    s.close().await;

    // Continued, it answers again: reachable.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_for("bravo reachable again", || {
        (machine(&a, "bravo")?["reachable"] == true).then_some(())
    });
    assert_eq!(row(&a, "docs@bravo").unwrap()["status"], "offline");
}
