//! Carriers: a member its person marks as always on (`carry = true`)
//! says so in its signed directory record, and every member's
//! `directory` and `team show` show it.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_tests::{Node, states, team, wait_for};

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
fn shown_member(n: &Node, name: &str) -> serde_json::Value {
    n.json(&["team", "show"])["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap()
}

/// Alpha, bravo and charlie, one person's three machines; charlie is a
/// carrier, and every machine hands mail over after 1 s without a
/// connection (60 s by default). Each has restarted with its settings,
/// and alpha and bravo know charlie's new address.
fn carrier_team() -> [Node; 3] {
    let [mut a, mut b, mut c] = team([("alpha", "Ada"), ("bravo", "Ada"), ("charlie", "Ada")]);
    c.ok(&["config", "set", "carry", "true"]);
    for n in [&mut a, &mut b, &mut c] {
        n.ok(&["config", "set", "carrier.handoff_after", "1s"]);
        n.stop();
    }
    c.start();
    for n in [&mut a, &mut b] {
        n.start();
        n.ok(&["connect", &c.addr()]);
    }
    // Alpha learns bravo's new address (for direct delivery) and both
    // learn that charlie carries.
    b.ok(&["connect", &a.addr()]);
    for n in [&a, &b] {
        wait_for(&format!("{} to know charlie carries", n.name), || {
            (shown_member(n, "charlie")["always_on"] == true).then_some(())
        });
    }
    [a, b, c]
}

/// How many envelopes `n` carries for others (`status --json`).
fn carrying(n: &Node) -> u64 {
    n.status()["carrying"].as_u64().unwrap()
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
    let audit = c.ok(&["audit"]);
    assert!(audit.contains("carried"), "{audit}");
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
