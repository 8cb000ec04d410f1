//! Carriers: a member its person marks as always on (`carry = true`)
//! says so in its signed directory record, and every member's
//! `directory` and `team show` show it.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_tests::bench_carry::{carrier_team_with, carrying};
use agentmesh_tests::{Node, states, team, wait_for};
use serde_json::Value;

#[test]
fn a_machine_marked_carry_is_announced_to_the_team() {
    let [a, mut c] = team([("alpha", "Ada"), ("charlie", "Ada")]);
    let set = c.json(&["config", "set", "carry", "true"]);
    assert_eq!(set["value"], true, "{set}");
    c.stop();
    c.start();
    c.ok(&["connect", &a.addr()]);
    // Its own view at once; the team's once its new record arrives.
    let me = shown_member(&c, "charlie");
    assert_eq!(me["always_on"], true, "{me}");
    let row = wait_for("alpha's directory to show charlie as a carrier", || {
        a.json(&["directory"])["machines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "charlie" && m["always_on"] == true)
            .cloned()
    });
    assert_eq!(row["known"], true, "{row}");
    let shown = shown_member(&a, "charlie");
    assert_eq!(shown["always_on"], true, "{shown}");
    assert!(a.ok(&["team", "show"]).contains("charlie (carrier)"));
    assert!(a.ok(&["directory"]).contains("carrier"));
    // Not every machine is one.
    let alpha = shown_member(&a, "alpha");
    assert_eq!(alpha["always_on"], false, "{alpha}");
}

/// Machine `name` as `team show --json` on `n` lists it.
fn shown_member(n: &Node, name: &str) -> Value {
    n.json(&["team", "show"])["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap()
}

/// [`carrier_team_with`] the default bounds.
fn carrier_team() -> [Node; 3] {
    carrier_team_with(&[])
}

/// Waits until `n`'s audit trail says `what` (its entries are written
/// with the flush after what they record); the whole trail.
fn audited(n: &Node, what: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let audit = n.ok(&["audit"]);
        if audit.contains(what) {
            return audit;
        }
        assert!(
            start.elapsed() < agentmesh_tests::DEADLINE,
            "{}'s audit never said {what:?}:\n{audit}",
            n.name
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn mail_reaches_a_recipient_that_is_never_online_with_its_sender() {
    let [mut a, mut b, c] = carrier_team();
    b.stop();
    let id = a.send("@bravo", "are the migrations safe to run?");
    // Bravo is offline: after a second, a copy goes to charlie.
    let m = a.reaches(&id, "carried");
    assert_eq!(m["carrier"], "charlie", "{m}");
    assert_eq!(states(&m), ["queued", "carried"], "{m}");
    assert!(
        a.ok(&["outbox"]).contains("charlie"),
        "the text form names the carrier"
    );
    // An agent's `message_status` says the same.
    let folder = tempfile::tempdir().unwrap();
    let status = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let s = agentmesh_tests::mcp::Session::spawn(&a, folder.path(), "claude-code", &[]).await;
        let v = s
            .ok("message_status", serde_json::json!({ "id": id }))
            .await;
        s.close().await;
        v
    });
    assert_eq!(status["status"], "carried", "{status}");
    assert_eq!(status["carrier"], "charlie", "{status}");
    assert_eq!(carrying(&c), 1);
    // The sender goes away before the recipient comes back.
    a.stop();
    b.start();
    b.ok(&["connect", &c.addr()]);
    wait_for("charlie to carry the message to bravo", || {
        b.inbox_counts().get(&id).copied()
    });
    // Bravo's person reads it; both receipts (delivered, read) wait for
    // alpha, and go to charlie too, since alpha is offline.
    b.ok(&["read", &id]);
    wait_for("charlie to hold bravo's two receipts for alpha", || {
        (carrying(&c) == 2).then_some(())
    });
    b.stop();
    // The sender comes back and learns both from the carrier, though it
    // and the recipient were never online together.
    a.start();
    a.ok(&["connect", &c.addr()]);
    let m = a.reaches(&id, "read");
    assert_eq!(
        states(&m),
        ["queued", "carried", "delivered", "read"],
        "{m}"
    );
    assert_eq!(m["carrier"], "charlie", "{m}");
    wait_for("charlie to forget what it carried", || {
        (carrying(&c) == 0).then_some(())
    });
    // Its audit says what it did, with no body.
    let audit = audited(&c, "carried on 1 envelope held for this machine: 1 taken");
    assert!(!audit.contains("migrations"), "{audit}");
}

#[test]
fn a_carrier_that_changes_a_byte_gets_its_copy_refused_and_the_sender_is_not_misled() {
    use agentmesh_node::wire::{CarryRequest, MailOutcome};
    use agentmesh_tests::hostile::{Peer, Received, SyncAnswer, identity_of, with_header_item};
    let [mut a, mut b, mut c] = carrier_team();
    // Charlie's key, in a program that holds what it is handed and
    // passes it on changed.
    c.stop();
    let mallory = Peer::new(&identity_of(&c.home()), SyncAnswer::InSync);
    let at = mallory.listen().unwrap();
    a.ok(&["connect", &format!("{at}/p2p/{}", mallory.peer_id)]);
    b.stop();
    let id = a.send("@bravo", "the real text");
    let m = a.reaches(&id, "carried");
    assert_eq!(m["carrier"], "charlie", "{m}");
    let envelope = wait_for("alpha to hand mallory the envelope", || {
        mallory.received().into_iter().find_map(|r| match r {
            Received::Hold(mut e) if e.len() == 1 => e.pop(),
            _ => None,
        })
    });
    a.stop();
    b.start();
    let bravo = mallory.dial(&b.addr().parse().unwrap()).unwrap();
    let flip = |at: usize| {
        let mut e = envelope.clone();
        e[at] ^= 1;
        e
    };
    let changed = vec![
        // The sealed body's last byte (before the signature's 2-byte head
        // and 64 bytes), and the signature's last.
        serde_bytes::ByteBuf::from(flip(envelope.len() - 67)),
        serde_bytes::ByteBuf::from(flip(envelope.len() - 1)),
        // The header's clear fields a carrier can read: hop and taint.
        serde_bytes::ByteBuf::from(with_header_item(&envelope, 9, 2.into())),
        serde_bytes::ByteBuf::from(with_header_item(&envelope, 10, true.into())),
    ];
    let reply = mallory
        .carry(bravo, CarryRequest::Deliver { envelopes: changed })
        .unwrap();
    assert_eq!(reply.outcomes.len(), 4, "{reply:?}");
    let codes: Vec<&str> = (reply.outcomes.iter())
        .map(|o| match o {
            MailOutcome::Refused { code, .. } => code.as_str(),
            _ => "not refused",
        })
        .collect();
    assert_eq!(
        codes,
        [
            "TamperedCiphertext",
            "BadSignature",
            "TamperedHeader",
            "TamperedHeader"
        ],
        "every changed envelope is refused: {reply:?}"
    );
    assert!(b.inbox_all().is_empty(), "nothing changed is stored");
    // The bytes as alpha sealed them are taken, once, as they were.
    let reply = mallory
        .carry(
            bravo,
            CarryRequest::Deliver {
                envelopes: vec![serde_bytes::ByteBuf::from(envelope)],
            },
        )
        .unwrap();
    assert!(
        matches!(
            reply.outcomes[..],
            [MailOutcome::Accepted { held: false, .. }]
        ),
        "{reply:?}"
    );
    let inbox = b.inbox_all();
    assert_eq!(inbox.len(), 1, "{inbox:?}");
    assert_eq!(inbox[0]["id"], id.as_str());
    assert_eq!(inbox[0]["text"], "the real text");
    assert_eq!(inbox[0]["hop"], 0);
    drop(mallory);
    // Alpha comes back and learns `delivered` from bravo; the refused
    // copies told it nothing (receipts travel in order: a refusal would
    // have come first).
    a.start();
    b.ok(&["connect", &a.addr()]);
    let m = a.reaches(&id, "delivered");
    assert_eq!(states(&m), ["queued", "carried", "delivered"], "{m}");
}

#[test]
fn mail_that_arrives_both_directly_and_carried_is_in_the_inbox_once() {
    let [mut a, mut b, mut c] = carrier_team();
    // Directly first, then the carrier's copy (charlie is down while
    // bravo comes back, or bravo's daemon would reach it first).
    b.stop();
    let first = a.send("@bravo", "first");
    a.reaches(&first, "carried");
    c.stop();
    b.start();
    b.ok(&["connect", &a.addr()]);
    let m = a.reaches(&first, "delivered");
    c.start();
    c.ok(&["connect", &b.addr()]);
    wait_for("charlie to carry its copy on", || {
        (carrying(&c) == 0).then_some(())
    });
    audited(&c, "0 taken, 1 it already had");
    assert_eq!(states(&m), ["queued", "carried", "delivered"], "{m}");
    // The carrier's copy first, then the sender's own (or its receipt
    // first, and then no attempt is needed).
    b.stop();
    let second = a.send("@bravo", "second");
    a.reaches(&second, "carried");
    a.stop();
    b.start();
    b.ok(&["connect", &c.addr()]);
    wait_for("charlie to carry the second on", || {
        b.inbox_counts().get(&second).copied()
    });
    a.start();
    b.ok(&["connect", &a.addr()]);
    let m = a.reaches(&second, "delivered");
    assert_eq!(states(&m), ["queued", "carried", "delivered"], "{m}");
    let counts = b.inbox_counts();
    assert_eq!(counts.get(&first), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&second), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 2, "{counts:?}");
}

#[test]
fn a_full_carrier_refuses_and_the_sender_keeps_its_copy_and_a_revoked_recipients_mail_is_dropped() {
    let [a, mut b, c] = carrier_team_with(&[("carrier.per_sender", "2")]);
    b.stop();
    let ids: Vec<String> = (0..3).map(|i| a.send("@bravo", &format!("m{i}"))).collect();
    // Two are carried; charlie refuses the third (at most 2 per sender).
    wait_for("charlie to hold two", || (carrying(&c) == 2).then_some(()));
    let carried = wait_for("two to show carried", || {
        let shown: Vec<Value> = ids.iter().map(|id| a.outbox_entry(id)).collect();
        let n = shown.iter().filter(|m| m["status"] == "carried").count();
        (n == 2).then_some(shown)
    });
    let kept = carried.iter().find(|m| m["status"] != "carried").unwrap();
    assert_eq!(kept["status"], "queued", "{kept}");
    assert!(kept["carrier"].is_null(), "{kept}");
    // Full may not last: alpha offers it again after the handoff wait
    // (a second here), and charlie refuses again.
    wait_for("alpha to offer the third to charlie again", || {
        (a.log().matches("carrier_full").count() >= 2).then_some(())
    });
    assert_eq!(carrying(&c), 2, "still two after it was offered again");
    // Bravo is revoked while charlie holds its mail: charlie drops it,
    // and says so in its audit (it never learns what the mail said).
    a.ok(&["revoke", "bravo", "--yes"]);
    wait_for("charlie to drop what it held for bravo", || {
        (carrying(&c) == 0).then_some(())
    });
    audited(&c, "2 from or for a machine no longer in the team");
    // Alpha's own copies fail with the revocation, as mail to a revoked
    // machine does.
    for id in &ids {
        let m = a.reaches(id, "failed");
        assert!(m["reason"].as_str().unwrap().contains("revoked"), "{m}");
    }
}

#[test]
fn a_carrier_drops_what_expired_unseen() {
    let [a, mut b, c] = carrier_team();
    b.stop();
    let id = a.send("@bravo", "soon stale");
    a.reaches(&id, "carried");
    assert_eq!(carrying(&c), 1);
    // Eight days on for charlie: past the message's 7-day lifetime and
    // the allowed clock skew.
    c.advance_clock(std::time::Duration::from_secs(8 * 24 * 3600));
    wait_for("charlie to drop the expired envelope", || {
        (carrying(&c) == 0).then_some(())
    });
    let audit = audited(&c, "1 expired");
    assert!(!audit.contains("carried on"), "{audit}");
}

#[test]
fn kill_9_of_sender_carrier_and_recipient_at_each_step_loses_and_duplicates_nothing() {
    const N: usize = 20;
    let [mut a, mut b, mut c] = carrier_team();
    b.stop();
    let ids: Vec<String> = (0..N).map(|i| a.send("@bravo", &format!("m{i}"))).collect();
    let carried = |a: &Node| {
        let out = a.json(&["outbox"]);
        let rows = out.as_array().unwrap();
        ids.iter()
            .filter(|id| {
                rows.iter()
                    .any(|m| m["id"] == **id && m["status"] == "carried")
            })
            .count()
    };
    // The carrier dies as soon as it holds anything, and the sender as
    // soon as it noted anything carried: each then finds the other's
    // work where it left it (what was answered is durable, what was not
    // is handed over again, and taken once).
    wait_for("charlie to hold some", || (carrying(&c) > 0).then_some(()));
    c.kill9();
    c.start();
    a.ok(&["connect", &c.addr()]);
    wait_for("alpha to note some carried", || {
        (carried(&a) > 0).then_some(())
    });
    a.kill9();
    a.start();
    a.ok(&["connect", &c.addr()]);
    wait_for("every message to be carried", || {
        (carried(&a) == N).then_some(())
    });
    assert_eq!(carrying(&c), N as u64, "held once each");
    a.kill9();
    // The recipient dies while the carrier brings the mail, and the
    // carrier while it still has some to bring.
    b.start();
    b.ok(&["connect", &c.addr()]);
    wait_for("bravo to have some", || {
        (!b.inbox_all().is_empty()).then_some(())
    });
    b.kill9();
    c.kill9();
    c.start();
    b.start();
    b.ok(&["connect", &c.addr()]);
    let counts = wait_for("bravo to have every message", || {
        let counts = b.inbox_counts();
        (counts.len() == N).then_some(counts)
    });
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    // Bravo's receipts wait for alpha with charlie; the carrier dies
    // holding them, and bravo too.
    wait_for("charlie to hold bravo's receipts", || {
        (carrying(&c) == N as u64).then_some(())
    });
    c.kill9();
    b.kill9();
    c.start();
    a.start();
    a.ok(&["connect", &c.addr()]);
    for id in &ids {
        let m = a.reaches(id, "delivered");
        assert_eq!(states(&m), ["queued", "carried", "delivered"], "{m}");
    }
    wait_for("charlie to be empty", || (carrying(&c) == 0).then_some(()));
    b.start();
    let counts = b.inbox_counts();
    assert!(
        counts.len() == N && counts.values().all(|n| *n == 1),
        "{counts:?}"
    );
}

/// Who decided each state of a carried message: `by` in `states[]`.
fn deciders(m: &Value) -> Vec<(String, String)> {
    m["states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let by = s["by"].as_str().unwrap_or("(none)");
            (s["state"].as_str().unwrap().to_owned(), by.to_owned())
        })
        .collect()
}

#[test]
fn the_outbox_names_who_decided_each_state_and_never_the_carrier_for_the_recipient() {
    // Bravo is Bob's: Ada's mail is held there until Bob approves it.
    let [a, mut b, c] = agentmesh_tests::bench_carry::carrier_team_of(["Ada", "Bob", "Ada"], &[]);
    b.stop();
    let id = a.send("@bravo", "may I run the migration?");
    let m = a.reaches(&id, "carried");
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(s, b)| (s.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        deciders(&m),
        pairs(&[("queued", "alpha"), ("carried", "charlie")]),
        "{m}"
    );
    assert!(
        a.ok(&["outbox"]).contains("carried by charlie"),
        "{}",
        a.ok(&["outbox"])
    );
    b.start();
    b.ok(&["connect", &c.addr()]);
    let held = wait_for("bravo to hold the carried message", || {
        b.json(&["held"])
            .as_array()?
            .iter()
            .find(|h| h["id"] == id.as_str())
            .cloned()
    });
    // The held list says when Ada sent it, not when the carrier brought
    // it (issue 36, LOW).
    let sent = held["sent_at"].as_str().unwrap();
    let received = held["received_at"].as_str().unwrap();
    assert!(sent < received, "{held}");
    let carried_at = m["states"].as_array().unwrap()[1]["at"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        sent < carried_at.as_str(),
        "{held} vs carried at {carried_at}"
    );
    b.ok(&["approve", &id]);
    let m = a.reaches(&id, "approved");
    assert_eq!(
        deciders(&m),
        pairs(&[
            ("queued", "alpha"),
            ("carried", "charlie"),
            ("held", "bravo"),
            ("approved", "bravo"),
        ]),
        "{m}"
    );
    let table = a.ok(&["outbox"]);
    assert!(
        table.contains("approved by bravo (carried by charlie)"),
        "{table}"
    );
    assert!(!table.contains("by alpha"), "{table}");
    let one = a.ok(&["outbox", &id]);
    assert!(one.contains("by charlie"), "{one}");
    assert!(one.contains("by bravo"), "{one}");
}
