//! What a receiver refuses, and that the sender hears why: a tampered
//! envelope, and a revoked sender's queued mail.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::store::{SledStore, Store};
use agentmesh_tests::{Node, join, wait_for};

fn outbox_entry(n: &Node, id: &str) -> serde_json::Value {
    n.json(&["outbox"])
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .cloned()
        .unwrap_or_default()
}

#[test]
fn a_tampered_envelope_is_refused_and_the_sender_is_told() {
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    a.start();
    b.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    join(&a, &b, "Ada");
    b.stop();
    let id = a.json(&["send", "@bravo", "original words"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.stop();
    // Corrupt the queued envelope's ciphertext on alpha's disk.
    {
        let store = SledStore::open(&a.home().join("data"), 1 << 20).unwrap();
        let mut records = store.outbox().unwrap();
        let r = records.iter_mut().find(|r| r.id == id).unwrap();
        let n = r.envelope.len();
        r.envelope[n - 100] ^= 0x01;
        store.put_outbox(&records).unwrap();
        store.flush().unwrap();
    }
    // Both come back on new ports (port 0); bravo finds alpha by hand.
    a.start();
    b.start();
    b.ok(&["connect", &a.addr()]);
    let m = wait_for("alpha to hear that bravo refused the envelope", || {
        let m = outbox_entry(&a, &id);
        (m["status"] == "failed").then_some(m)
    });
    assert!(
        m["reason"].as_str().unwrap().contains("TamperedCiphertext"),
        "{m}"
    );
    assert!(b.inbox_all().is_empty());
    let audit = b.json(&["audit"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "refused"
                && e["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("TamperedCiphertext")),
        "{audit}"
    );
}

#[test]
fn a_revoked_senders_queued_mail_is_refused_with_its_reason() {
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    let mut c = Node::new("charlie");
    for n in [&mut a, &mut b, &mut c] {
        n.start();
    }
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    join(&a, &b, "Ada");
    join(&a, &c, "Ada");
    // Bravo queues mail for charlie while charlie is away, then is revoked
    // and goes away too; charlie comes back and learns of the revocation
    // before bravo can reach it.
    c.stop();
    let id = b.json(&["send", "@charlie", "before my revocation"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.ok(&["revoke", "bravo"]);
    b.stop();
    c.start();
    wait_for("charlie to learn that bravo was revoked", || {
        (c.member("bravo").unwrap()["revoked"] == true).then_some(())
    });
    // Bravo comes back and reaches charlie: its queued mail is refused.
    b.start();
    let e = b.fails(&["connect", &c.addr()]);
    assert!(e.contains("revoked"), "{e}");
    let m = wait_for("bravo to hear that its mail was refused", || {
        let m = outbox_entry(&b, &id);
        (m["status"] == "failed").then_some(m)
    });
    assert!(m["reason"].as_str().unwrap().contains("revoked"), "{m}");
    assert!(c.inbox_all().is_empty());
}

#[test]
fn mail_queued_for_a_machine_revoked_meanwhile_fails_with_its_reason() {
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    let mut c = Node::new("charlie");
    for n in [&mut a, &mut b, &mut c] {
        n.start();
    }
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    join(&a, &b, "Ada");
    join(&a, &c, "Ada");
    // Bravo queues mail for charlie while charlie is away; then charlie is
    // revoked. Charlie never comes back: the mail fails on bravo, visibly,
    // instead of waiting out its week.
    c.stop();
    let id = b.json(&["send", "@charlie", "for a machine about to go"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.ok(&["revoke", "charlie"]);
    let m = wait_for("bravo to fail the mail queued for charlie", || {
        let m = outbox_entry(&b, &id);
        (m["status"] == "failed").then_some(m)
    });
    assert!(m["reason"].as_str().unwrap().contains("revoked"), "{m}");
    let audit = b.json(&["audit"]);
    assert!(
        audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "failed" && e["id"] == id.as_str()),
        "{audit}"
    );
}
