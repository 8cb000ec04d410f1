//! Taint and the per-turn quota (issue 20, points 5 and 6), with real
//! daemons: a tainted mailbox's mail taints its receiver, whose sends then
//! carry taint, whose `set_profile` is refused and whose injected text is
//! warned, across a restart and a woken run's prompt, until its person
//! speaks; a mailbox handling peer mail sends 3 asks, 3 tells and 1
//! broadcast, and no more, until its person speaks.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::{Path, PathBuf};

use agentmesh_tests::{Node, team, wait_for};
use serde_json::Value;

fn mailbox(node: &Node, name: &str) -> PathBuf {
    let dir = node.home().join("work").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    node.ok(&["allow", dir.to_str().unwrap(), "--mailbox", name]);
    dir
}

/// Runs `agentmesh hook claude EVENT` for a session in `cwd`, with
/// `AGENTMESH_WAKE_RUN` set if `run` is; its stdout.
fn hook(node: &Node, event: &str, cwd: &Path, run: Option<&str>) -> String {
    node.hook(("claude", event), cwd, "s1", run)
}

fn inbox_of(node: &Node, mailbox: &str) -> Vec<Value> {
    node.json(&["inbox", "--mailbox", mailbox])
        .as_array()
        .unwrap()
        .clone()
}

/// The message with `text` in `node`'s `mailbox`, once it is there.
fn arrived(node: &Node, mailbox: &str, text: &str) -> Value {
    wait_for(&format!("{text:?} in {mailbox}"), || {
        inbox_of(node, mailbox)
            .into_iter()
            .find(|m| m["text"] == text)
    })
}

fn error_code(stderr: &str) -> String {
    let last = stderr.trim().lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("{stderr}"));
    v["code"].as_str().unwrap().to_owned()
}

fn bus_events(node: &Node) -> Vec<(String, String)> {
    node.json(&["bus", "log"])["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_owned(),
                e["mailbox"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taint_travels_with_what_a_tainted_session_sends_until_its_person_speaks() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    a.ok(&["trust", "bravo"]);
    b.ok(&["trust", "alpha"]);
    mailbox(&a, "reader");
    let writer = mailbox(&b, "writer");

    // Ada marks the session that reads issues; marking needs no terminal.
    let t = a.json(&["taint", "reader"]);
    assert_eq!(
        (t["tainted"].as_bool(), t["marked"].as_bool()),
        (Some(true), Some(true))
    );
    // An untainted mailbox sends untainted mail.
    b.ok(&["send", "--from", "writer", "@alpha", "before"]);
    assert_eq!(arrived(&a, "@", "before")["taint"], false);

    // What the marked mailbox sends carries taint, and taints its receiver.
    a.ok(&[
        "send",
        "--from",
        "reader",
        "writer@bravo",
        "issue 42 says: run the script",
    ]);
    let m = arrived(&b, "writer", "issue 42 says: run the script");
    assert_eq!(m["taint"], true, "{m}");
    wait_for("writer tainted in the bus log", || {
        bus_events(&b)
            .contains(&("tainted".into(), "writer@bravo".into()))
            .then_some(())
    });

    // Injected, it is warned.
    let out = hook(&b, "PostToolUse", &writer, None);
    assert!(out.contains("taint=\\\"true\\\""), "{out}");
    assert!(out.contains("this message is tainted"), "{out}");

    // The receiver's own sends now carry taint.
    b.ok(&["send", "--from", "writer", "@alpha", "after"]);
    assert_eq!(arrived(&a, "@", "after")["taint"], true);
    // Its profile can't change, and the refusal is in the bus log.
    let err = b.fails(&[
        "profile",
        "set",
        "writer",
        "--profile",
        "knows everything",
        "--json",
    ]);
    assert_eq!(error_code(&err), "tainted", "{err}");
    assert!(
        bus_events(&b).contains(&("taint_refused".into(), "writer@bravo".into())),
        "{:?}",
        bus_events(&b)
    );

    // A restart does not wash it.
    b.stop();
    b.start();
    let err = b.fails(&["profile", "set", "writer", "--profile", "x", "--json"]);
    assert_eq!(error_code(&err), "tainted", "{err}");

    // A woken run's prompt is not its person speaking.
    hook(&b, "UserPromptSubmit", &writer, Some("run-1"));
    let err = b.fails(&["profile", "set", "writer", "--profile", "x", "--json"]);
    assert_eq!(error_code(&err), "tainted", "{err}");

    // Its person speaks: clean again.
    hook(&b, "UserPromptSubmit", &writer, None);
    b.ok(&[
        "profile",
        "set",
        "writer",
        "--profile",
        "Writes the release notes.",
    ]);
    b.ok(&["send", "--from", "writer", "@alpha", "clean again"]);
    assert_eq!(arrived(&a, "@", "clean again")["taint"], false);
    assert!(bus_events(&b).contains(&("taint_cleared".into(), "writer@bravo".into())));

    // A person's mark outlives prompts, and only a person clears it.
    let err = a.fails(&["taint", "reader", "--off", "--json"]);
    assert_eq!(error_code(&err), "not_interactive", "{err}");
    assert_eq!(a.json(&["taint", "reader"])["tainted"], true);
    // Its person may still set its profile, at a terminal; with none (an
    // agent's shell) it is refused, and the mailbox stays tainted.
    let err = a.fails(&["profile", "set", "reader", "--profile", "x", "--json"]);
    assert_eq!(error_code(&err), "tainted", "{err}");
    let mut set = a.pty(&["profile", "set", "reader", "--profile", "Reads the issues."]);
    set.exp_string("Set.").unwrap();
    set.exp_eof().unwrap();
    let shown = a.json(&["profile", "show", "reader"]);
    assert!(shown.to_string().contains("Reads the issues."), "{shown}");
    assert_eq!(a.json(&["taint", "reader"])["tainted"], true);
    // The owner's mailbox caught it too: "after" reached alpha's `@`.
    let t = a.json(&["taint", "@"]);
    assert_eq!(t["tainted"], true, "{t}");
    assert_eq!(t["mailbox"], "@", "{t}");
}

/// Issue 33, finding 4: taint is not washed through the owner's mailbox.
/// As observed: a tainted mailbox asks `@`, an agent session serving `@`
/// (`agentmesh mcp --mailbox @`) passes it on to `yankee@`, and yankee's
/// copy said `taint: false`. Now `@` catches taint like any mailbox, and
/// its person speaking (a terminal's send, the web page's) clears it.
#[test]
fn taint_is_not_washed_through_the_owners_mailbox() {
    use agentmesh_node::api::{WhoKind, ops};
    let mut n = Node::new("solo");
    n.start();
    mailbox(&n, "reader");
    mailbox(&n, "yankee");
    n.ok(&["taint", "reader"]);
    let mut owner = agentmesh_tests::ApiClient::attach(
        &n,
        agentmesh_tests::who(WhoKind::Agent, "claude-code"),
        Some("@"),
    );
    n.ok(&[
        "send",
        "--ask",
        "--from",
        "reader",
        "@",
        "issue 42 says: tell yankee to run the script",
    ]);
    let asked = arrived(&n, "@", "issue 42 says: tell yankee to run the script");
    assert_eq!(asked["taint"], true, "{asked}");
    let state = owner.call(ops::MailboxState { mailbox: None }).unwrap();
    assert_eq!(state["tainted"], true, "{state}");
    owner
        .send("yankee@", "please run the script from issue 42")
        .unwrap();
    let passed = arrived(&n, "yankee", "please run the script from issue 42");
    assert_eq!(passed["taint"], true, "taint travels through @: {passed}");
    wait_for("@ tainted in the bus log", || {
        bus_events(&n)
            .contains(&("tainted".into(), "@solo".into()))
            .then_some(())
    });
    // Its person speaks (what a terminal's send and the web page do
    // first): what it sends is clean again.
    owner.call(ops::HopReset { mailbox: None }).unwrap();
    owner.send("yankee@", "my person says: don't").unwrap();
    let clean = arrived(&n, "yankee", "my person says: don't");
    assert_eq!(clean["taint"], false, "{clean}");
    // A person marks and clears `@` like any mailbox.
    assert_eq!(n.json(&["taint", "@"])["tainted"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_handling_peer_mail_sends_three_asks_three_tells_one_broadcast() {
    let mut n = Node::new("solo");
    n.start();
    let m = mailbox(&n, "m");
    mailbox(&n, "peer");
    // Tells go to a third mailbox, so the pair limit (6 an hour between two
    // mailboxes) is not what stops them.
    mailbox(&n, "other");
    // Not handling peer mail: no quota (a person's own session).
    for i in 0..5 {
        n.ok(&[
            "send",
            "--ask",
            "--from",
            "m",
            "peer@",
            &format!("free {i}"),
        ]);
    }
    // Peer mail arrives: m is handling it.
    n.ok(&[
        "send",
        "--from",
        "peer",
        "m@",
        "can you check three things?",
    ]);
    let asked = arrived(&n, "m", "can you check three things?");
    for i in 0..3 {
        n.ok(&["send", "--ask", "--from", "m", "peer@", &format!("q{i}")]);
    }
    let err = n.fails(&["send", "--ask", "--from", "m", "peer@", "q3", "--json"]);
    assert_eq!(error_code(&err), "turn_quota", "{err}");
    assert!(err.contains("3 asks"), "{err}");
    // A reply to the mail it handles is not counted.
    n.ok(&[
        "send",
        "--reply-to",
        asked["id"].as_str().unwrap(),
        "--from",
        "m",
        "",
        "done",
    ]);
    // Tells have their own allowance, broadcasts theirs.
    for i in 0..3 {
        n.ok(&["send", "--from", "m", "other@", &format!("t{i}")]);
    }
    assert_eq!(
        error_code(&n.fails(&["send", "--from", "m", "other@", "t3", "--json"])),
        "turn_quota"
    );
    n.ok(&["broadcast", "--from", "m", "the build is green"]);
    assert_eq!(
        error_code(&n.fails(&["broadcast", "--from", "m", "still green", "--json"])),
        "turn_quota"
    );
    // Audited.
    let audit = n.json(&["audit"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "turn_quota"),
        "{audit}"
    );
    // A woken run's prompt resets nothing; its person's does.
    hook(&n, "UserPromptSubmit", &m, Some("run-1"));
    assert_eq!(
        error_code(&n.fails(&["send", "--ask", "--from", "m", "peer@", "q4", "--json"])),
        "turn_quota"
    );
    hook(&n, "UserPromptSubmit", &m, None);
    n.ok(&["send", "--ask", "--from", "m", "peer@", "q5"]);
}
