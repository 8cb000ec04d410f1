//! Messages between real daemons: threads, restarts, kill -9, consent.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::api::WhoKind;
use agentmesh_tests::{ApiClient, Node, team, wait_for, wait_for_within, who};
use serde_json::Value;

/// Two machines of one person (so nothing is held), in one team.
fn pair() -> (Node, Node) {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    (a, b)
}

#[test]
fn an_ask_and_its_reply_are_threaded() {
    let (a, b) = pair();
    let asked = a.json(&["send", "@bravo", "how do you handle late rows?", "--ask"]);
    let id = asked["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);
    let got = wait_for("bravo to receive the ask", || {
        b.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
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
        a.inbox_all().into_iter().find(|m| m["id"] == rid.as_str())
    });
    assert_eq!(reply["kind"], "reply");
    assert_eq!(reply["in_reply_to"], id.as_str());
    assert_eq!(reply["thread"], id.as_str());
    assert_eq!(reply["from"], "@bravo");
    // Alpha's outbox says bravo read the ask (it was delivered first).
    wait_for("alpha's outbox to say read", || {
        let o = a.json(&["outbox"]);
        (o[0]["status"] == "read").then_some(())
    });
    let o = a.json(&["outbox"]);
    let states: Vec<&str> = o[0]["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["queued", "delivered", "read"], "{o}");
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
    // The sender's trail: accepted, sent, delivered, each with the same
    // body hash as the receiver's.
    let trail = a.json(&["audit"]);
    for event in ["accepted", "sent", "delivered"] {
        let e = trail
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == event && e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no {event} entry in {trail}"));
        assert_eq!(e["body_sha256"], received["body_sha256"], "{event}");
    }
    // --since counts back from now: two hours later, the last hour is
    // empty of these, the last three hours are not.
    a.advance_clock(std::time::Duration::from_secs(2 * 3600));
    let has = |since: &str| {
        a.json(&["audit", "--since", since])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str())
    };
    assert!(!has("1h"));
    assert!(has("3h"));
}

#[test]
fn a_message_waits_for_a_receiver_that_is_down_and_arrives_once() {
    let (a, mut b) = pair();
    b.stop();
    let id = a.send("@bravo", "are you there?");
    assert_eq!(
        a.json(&["outbox"])[0]["status"]
            .as_str()
            .map(|s| s == "queued" || s == "sent"),
        Some(true)
    );
    // An attempt was made and could not connect: the mail never left, so
    // the outbox says queued, the recipient offline, and why. (A first
    // attempt may go out on the connection bravo is closing, and be lost
    // with it: the next one finds no connection.)
    let m = wait_for("alpha to try and fail to connect", || {
        let m = a.json(&["outbox"])[0].clone();
        (m["reason"].is_string() && m["offline"] == true).then_some(m)
    });
    assert_eq!(m["status"], "queued", "{m}");
    assert_eq!(m["offline"], true, "{m}");
    assert!(
        m["reason"].as_str().unwrap().contains("bravo is offline"),
        "{m}"
    );
    assert!(m["attempts"].as_u64().unwrap() >= 1, "{m}");
    let text = a.ok(&["outbox"]);
    assert!(
        text.contains("queued — retrying in") && text.contains("(bravo offline)"),
        "{text}"
    );
    b.start();
    wait_for("bravo to receive the message after coming back", || {
        b.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
    wait_for("alpha to see it delivered", || {
        (a.json(&["outbox"])[0]["status"] == "delivered").then_some(())
    });
    assert_eq!(
        b.inbox_all()
            .iter()
            .filter(|m| m["id"] == id.as_str())
            .count(),
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
    // This machine's own mailboxes are reached without the network (issue
    // 10: the `own_machine` refusal is gone); one that does not exist is
    // refused at once, saying how to make it.
    let e = a.fails(&["send", "nobox@", "hi"]);
    assert!(
        e.contains("no mailbox nobox") && e.contains("agentmesh allow"),
        "{e}"
    );
    let e = a.fails(&["send", "nobox@alpha", "hi"]);
    assert!(e.contains("no mailbox nobox"), "{e}");
    // Another machine's refusal: its code in the JSON, its words in text.
    let refused = a.send("nobox@bravo", "hi");
    let m = wait_for("bravo's refusal", || {
        Some(a.outbox_entry(&refused)).filter(|m| m["status"] == "refused")
    });
    assert!(
        m["reason"]
            .as_str()
            .unwrap()
            .starts_with("bravo refused it (no_mailbox): no mailbox nobox on bravo"),
        "{m}"
    );
    let text = a.ok(&["outbox"]);
    assert!(
        text.contains("bravo refused it: no mailbox nobox on bravo")
            && !text.contains("(no_mailbox)"),
        "{text}"
    );
    let e = a.fails(&["send", "Bad@bravo", "hi"]);
    assert!(e.contains("invalid mailbox name"), "{e}");
    let e = a.fails(&["send", "bravo", "hi"]);
    assert!(e.contains("MAILBOX@MACHINE"), "{e}");
    let big = "x".repeat(70 * 1024);
    let e = a.fails(&["send", "@bravo", &big]);
    assert!(
        e.contains("the text is 71680 bytes, more than one message carries")
            && e.contains("split it into parts"),
        "{e}"
    );
    // Text that JSON escapes to more than an API frame (1 MiB) gets the
    // same answer, not a complaint about frames.
    let mut child = a
        .command(&["send", "@bravo", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // The client stops reading one byte past the limit.
        let _ = stdin.write_all("\u{1}".repeat(300_000).as_bytes());
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    // Said by the client, before the text is framed, with the text's own
    // size (all of standard input counted, not kept).
    assert!(
        e.contains("the text is 300000 bytes") && e.contains("split it into parts"),
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
        b.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
    assert_eq!(got["text"], "line one\nline two\n");
    a.ok(&["revoke", "bravo", "--yes"]);
    let e = a.fails(&["send", "@bravo", "still there?"]);
    assert!(e.contains("bravo was revoked from the team"), "{e}");
}

#[test]
fn an_inbox_of_bodies_that_grow_when_escaped_still_lists() {
    let (a, b) = pair();
    // Control characters are six bytes each in JSON: four such messages
    // are 240 KB as text and 1.4 MB as one page of JSON, over the 1 MiB
    // frame a page must fit.
    let text: String = "\u{1}".repeat(60_000);
    let mut sender = ApiClient::attach(&a, who(WhoKind::Agent, "escaper"), None);
    let ids: Vec<String> = (0..4)
        .map(|_| sender.send("@bravo", &text).unwrap())
        .collect();
    let inbox = wait_for("the four messages to arrive", || {
        let inbox = b.inbox_all();
        (inbox.len() == 4).then_some(inbox)
    });
    for id in &ids {
        let m = inbox.iter().find(|m| m["id"] == id.as_str()).unwrap();
        assert_eq!(m["text"].as_str().unwrap(), text);
    }
}

#[test]
fn a_returning_receiver_gets_its_mail_without_waiting_out_the_backoff() {
    let (a, mut b) = pair();
    b.stop();
    let id = a.send("@bravo", "whenever you are back");
    // Five failed attempts (after 1, 2, 4 and 8 s of backoff): the next one
    // is 16 s away.
    let (seen_at, retry_in) = wait_for_within(
        "five failed attempts",
        std::time::Duration::from_secs(60),
        || {
            let m = a.json(&["outbox"])[0].clone();
            let retry_in = m["retry_in_ms"].as_u64().filter(|&ms| ms >= 12_000);
            (m["attempts"].as_u64() >= Some(5))
                .then_some(retry_in)
                .flatten()
                .map(|ms| (std::time::Instant::now(), ms))
        },
    );
    b.start();
    // The connection coming up sends it at once: it must arrive before the
    // backoff would have run out (less a second), whatever bravo's start
    // took.
    let backoff_ends = seen_at + std::time::Duration::from_millis(retry_in - 1000);
    wait_for_within(
        "the message to arrive before the backoff runs out",
        backoff_ends.saturating_duration_since(std::time::Instant::now()),
        || b.inbox_all().into_iter().find(|m| m["id"] == id.as_str()),
    );
}

#[test]
fn reply_answers_from_the_mailbox_that_received_to_its_sender() {
    let (a, b) = pair();
    let coder = b.home().join("work").join("coder");
    std::fs::create_dir_all(&coder).unwrap();
    b.ok(&["allow", coder.to_str().unwrap(), "--mailbox", "coder"]);
    let asked = a.json(&["send", "coder@bravo", "which port?", "--ask"]);
    let id = asked["id"].as_str().unwrap().to_owned();
    wait_for("coder@bravo to receive the ask", || {
        b.json(&["inbox", "--mailbox", "coder"])
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str())
            .then_some(())
    });
    // No address and no --from: both come from the message. A prefix of
    // the id is enough, as for `read`.
    let replied = b.json(&["reply", &id[..8], "7650, TCP and QUIC"]);
    assert_eq!(replied["to"], "@alpha", "{replied}");
    let rid = replied["id"].as_str().unwrap().to_owned();
    let got = wait_for("the reply in the asker's inbox", || {
        a.inbox_all().into_iter().find(|m| m["id"] == rid.as_str())
    });
    assert_eq!(got["kind"], "reply");
    assert_eq!(got["in_reply_to"], id.as_str());
    assert_eq!(got["thread"], id.as_str());
    assert_eq!(
        got["from"], "coder@bravo",
        "from the mailbox that received it"
    );
    assert_eq!(got["mailbox"], Value::Null, "to the asker's own mailbox");
    assert_eq!(got["text"], "7650, TCP and QUIC");
    // The text from standard input, as `send -` takes it; text output is
    // the id, as `send` prints.
    let mut reply = b.command(&["reply", &id, "-"]);
    reply
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = reply.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"and UDP for QUIC").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let second = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(second.len(), 32, "{second}");
    let got = wait_for("the second reply", || {
        a.inbox_all()
            .into_iter()
            .find(|m| m["id"] == second.as_str())
    });
    assert_eq!(got["text"], "and UDP for QUIC");
    assert_eq!(got["in_reply_to"], id.as_str());
    // A message this machine never received, and empty text, are refused.
    let e = b.fails(&["reply", "00000000000000000000000000000000", "hi", "--json"]);
    assert!(e.contains("\"unknown_message\""), "{e}");
    let e = b.fails(&["reply", &id, " ", "--json"]);
    assert!(e.contains("\"empty_text\""), "{e}");
}

#[test]
fn outbox_limit_shows_the_newest() {
    let mut solo = Node::new("solo");
    solo.start();
    let ids: Vec<String> = (0..4)
        .map(|i| solo.send("@", &format!("note {i}")))
        .collect();
    let all = solo.json(&["outbox"]);
    assert_eq!(all.as_array().unwrap().len(), 4, "{all}");
    let newest = solo.json(&["outbox", "--limit", "2"]);
    let shown: Vec<&str> = newest
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(shown, [ids[2].as_str(), ids[3].as_str()]);
    let text = solo.ok(&["outbox", "--limit", "1"]);
    assert_eq!(text.lines().count(), 2, "a header and one row: {text}");
    assert!(text.contains(&ids[3]) && !text.contains(&ids[2]), "{text}");
    let e = solo.fails(&["outbox", "--limit", "two"]);
    assert!(e.contains("invalid value"), "{e}");
}

/// `send` with `wait_first_answer_ms` (issue 35, point 4): one round trip
/// answers where the message stands once the recipient first answered,
/// as `message_status` shows it, and the sending mailbox's counts; to a
/// machine that is down, once it is found offline or the wait ends, at
/// most 10 s whatever is asked. Without it the answer is as before.
#[test]
fn a_send_waits_for_its_first_answer_in_one_round_trip() {
    use agentmesh_node::api::ops;
    let (a, mut b) = pair();
    let mut c = ApiClient::attach(&a, who(WhoKind::Human, "Ada"), None);
    let send = |c: &mut ApiClient, text: &str, wait: Option<u64>| {
        c.call(ops::Send {
            to: "@bravo".into(),
            text: text.into(),
            ask: false,
            reply_to: None,
            from_mailbox: None,
            wait_first_answer_ms: wait,
        })
        .unwrap()
    };
    let v = send(&mut c, "first one", Some(5_000));
    assert_eq!(v["first"]["status"], "delivered", "{v}");
    assert_eq!(v["first"]["id"], v["id"], "{v}");
    assert_eq!(v["mailbox_state"]["address"], "@alpha", "{v}");
    assert!(v["mailbox_state"]["unread"].is_u64(), "{v}");
    let status = c
        .call(ops::MessageStatus {
            id: v["id"].as_str().unwrap().into(),
        })
        .unwrap();
    assert_eq!(status["status"], v["first"]["status"], "{status}");
    // Without the wait: answered once durable, with neither.
    let v = send(&mut c, "second one", None);
    assert!(
        v.get("first").is_none() && v.get("mailbox_state").is_none(),
        "{v}"
    );
    // Bravo is down: answered with the message still queued, found
    // offline (or the wait over), never past the 10 s cap.
    b.stop();
    let asked = std::time::Instant::now();
    let v = send(&mut c, "into the void", Some(600_000));
    let took = asked.elapsed();
    assert_eq!(v["first"]["status"], "queued", "{v}");
    assert!(
        took < std::time::Duration::from_secs(15),
        "a 10-minute wait was asked and took {took:?}: the 10 s cap did not hold"
    );
    b.start();
    let id = v["id"].as_str().unwrap().to_owned();
    wait_for("bravo to get the queued one once back", || {
        b.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
}

/// A send that waits for its first answer holds up nothing else on its
/// connection: a request made after it, on the same connection, is
/// answered first (the daemon answers it while the send waits), and the
/// send's answer still comes, with its first answer.
#[test]
fn a_waiting_send_does_not_hold_up_the_requests_behind_it() {
    use agentmesh_node::api::{MailboxStateView, SentView, ops};
    let (a, _b) = pair();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = agentmesh_node::home::Home::at(a.home());
        let client =
            agentmesh_node::client::Client::attach(&home, who(WhoKind::Human, "Ada"), None, None)
                .await
                .unwrap();
        let (requests, _events) = client.split();
        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let send = {
            let (requests, order_tx) = (requests.clone(), order_tx.clone());
            async move {
                let v: SentView = requests
                    .call(ops::Send {
                        to: "@bravo".into(),
                        text: "waits for bravo".into(),
                        ask: false,
                        reply_to: None,
                        from_mailbox: None,
                        wait_first_answer_ms: Some(5_000),
                    })
                    .await
                    .unwrap();
                order_tx.send("send").unwrap();
                v
            }
        };
        let state = async {
            // Asked once the send is on its way to the daemon.
            tokio::task::yield_now().await;
            let s: MailboxStateView = requests
                .call(ops::MailboxState { mailbox: None })
                .await
                .unwrap();
            order_tx.send("state").unwrap();
            s
        };
        let (sent, _) = tokio::join!(send, state);
        assert_eq!(
            sent.first.map(|f| f.status),
            Some(agentmesh_node::api::MessageState::Delivered)
        );
        let got: Vec<&str> = std::iter::from_fn(|| order.try_recv().ok()).collect();
        assert_eq!(
            got,
            ["state", "send"],
            "the later request waited for the send"
        );
    });
}
