//! Messages between real daemons: threads, restarts, kill -9, consent.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_tests::{Node, join, wait_for};
use serde_json::Value;

/// Two machines of one person (so nothing is held), in one team.
fn pair() -> (Node, Node) {
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    a.start();
    b.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    join(&a, &b, "Ada");
    (a, b)
}

fn inbox(n: &Node) -> Vec<Value> {
    n.json(&["inbox"]).as_array().unwrap().clone()
}

#[test]
fn an_ask_and_its_reply_are_threaded() {
    let (a, b) = pair();
    let asked = a.json(&["send", "@bravo", "how do you handle late rows?", "--ask"]);
    let id = asked["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    let got = wait_for("bravo to receive the ask", || {
        inbox(&b).into_iter().find(|m| m["id"] == id.as_str())
    });
    assert_eq!(got["kind"], "ask");
    assert_eq!(got["from"], "@alpha");
    assert_eq!(got["text"], "how do you handle late rows?");
    assert_eq!(got["thread"], id.as_str());
    assert_eq!(got["in_reply_to"], Value::Null);
    assert_eq!(got["read"], false);
    assert_eq!(got["who"]["kind"], "human");
    assert!(got["received_at"].as_str().unwrap().ends_with('Z'));
    // Reading marks it read.
    let read = b.json(&["read", &id]);
    assert_eq!(read["read"], true);
    assert_eq!(b.json(&["inbox", "--unread"]).as_array().unwrap().len(), 0);

    let replied = b.json(&[
        "send",
        "@alpha",
        "a side table, merged hourly",
        "--reply-to",
        &id,
    ]);
    let rid = replied["id"].as_str().unwrap().to_owned();
    let reply = wait_for("alpha to receive the reply", || {
        inbox(&a).into_iter().find(|m| m["id"] == rid.as_str())
    });
    assert_eq!(reply["kind"], "reply");
    assert_eq!(reply["in_reply_to"], id.as_str());
    assert_eq!(reply["thread"], id.as_str());
    assert_eq!(reply["from"], "@bravo");
    // Both outboxes say delivered.
    wait_for("alpha's outbox to say delivered", || {
        let o = a.json(&["outbox"]);
        (o[0]["status"] == "delivered").then_some(())
    });
    let out = b.json(&["outbox"]);
    assert_eq!(out[0]["to"], "@alpha");
    // The audit trail has both ends, with a body hash and never the body.
    let audit = b.json(&["audit"]);
    let received = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "received" && e["id"] == id.as_str())
        .unwrap();
    assert_eq!(received["body_sha256"].as_str().unwrap().len(), 64);
    assert!(
        !audit.to_string().contains("late rows"),
        "the audit log holds a body"
    );
}

#[test]
fn a_message_waits_for_a_receiver_that_is_down_and_arrives_once() {
    let (a, mut b) = pair();
    b.stop();
    let id = a.json(&["send", "@bravo", "are you there?"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        a.json(&["outbox"])[0]["status"]
            .as_str()
            .map(|s| s == "queued" || s == "sent"),
        Some(true)
    );
    b.start();
    wait_for("bravo to receive the message after coming back", || {
        inbox(&b).into_iter().find(|m| m["id"] == id.as_str())
    });
    wait_for("alpha to see it delivered", || {
        (a.json(&["outbox"])[0]["status"] == "delivered").then_some(())
    });
    assert_eq!(
        inbox(&b).iter().filter(|m| m["id"] == id.as_str()).count(),
        1
    );
}

#[test]
fn clear_errors_for_bad_recipients_and_bodies() {
    let (a, _b) = pair();
    let e = a.fails(&["send", "@nobody", "hi"]);
    assert!(
        e.contains("no machine named nobody") && e.contains("bravo"),
        "{e}"
    );
    let e = a.fails(&["send", "@alpha", "talking to myself"]);
    assert!(e.contains("alpha is this machine"), "{e}");
    let e = a.fails(&["send", "Bad@bravo", "hi"]);
    assert!(e.contains("invalid mailbox name"), "{e}");
    let e = a.fails(&["send", "bravo", "hi"]);
    assert!(e.contains("MAILBOX@MACHINE"), "{e}");
    let big = "x".repeat(70 * 1024);
    let e = a.fails(&["send", "@bravo", &big]);
    assert!(
        e.contains("over the limit") && e.contains("send less"),
        "{e}"
    );
    let e = a.fails(&["read", "00000000000000000000000000000000"]);
    assert!(e.contains("no received message"), "{e}");
}

#[test]
fn text_from_stdin_and_a_revoked_recipient() {
    use std::io::Write;
    let (a, b) = pair();
    let mut child = a
        .command(&["send", "@bravo", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"line one\nline two\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let id = serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = wait_for("the piped message", || {
        inbox(&b).into_iter().find(|m| m["id"] == id.as_str())
    });
    assert_eq!(got["text"], "line one\nline two\n");
    a.ok(&["revoke", "bravo"]);
    let e = a.fails(&["send", "@bravo", "still there?"]);
    assert!(e.contains("bravo was revoked from the team"), "{e}");
}
