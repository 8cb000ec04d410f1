//! What a receiver refuses, and that the sender hears why: a tampered
//! envelope, a bad signature, a replay inside and after its window, and a
//! revoked sender's queued mail.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::Duration;

use agentmesh_node::store::{MailStore, OutboxRecord, SledStore, Store};
use agentmesh_tests::{Node, team, wait_for};

/// How many audit entries of `event` node `n` has for message `id`.
fn audited(n: &Node, event: &str, id: &str) -> usize {
    n.json(&["audit"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == event && e["id"] == id)
        .count()
}

/// Whether `n`'s outbox lists message `id` with `status`.
fn outbox_has(n: &Node, id: &str, status: &str) -> Option<serde_json::Value> {
    n.json(&["outbox"])
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id && m["status"] == status)
        .cloned()
}

/// Alpha's queued record for `id`, envelope and all, read from its disk
/// (alpha is stopped).
fn queued_record(a: &Node, id: &str) -> OutboxRecord {
    let store = SledStore::open(&a.home().join("data"), 1 << 20).unwrap();
    let mut r = store
        .outbox()
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .unwrap();
    r.envelope = store.outbox_envelope(id).unwrap().unwrap();
    r
}

/// Puts `record` back in stopped alpha's queue, as if alpha had never
/// heard the answer, then starts alpha and has bravo reach it.
fn requeue_and_restart(a: &mut Node, b: &Node, record: &OutboxRecord) {
    {
        let store = SledStore::open(&a.home().join("data"), 1 << 20).unwrap();
        store.put_outbox(std::slice::from_ref(record)).unwrap();
        store.flush().unwrap();
    }
    a.start();
    b.ok(&["connect", &a.addr()]);
}

#[test]
fn a_replay_is_acknowledged_inside_its_window_and_refused_as_expired_after_it() {
    let [mut a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    b.stop();
    let id = a.send("@bravo", "exactly once");
    a.stop();
    let record = queued_record(&a, &id);
    a.start();
    b.start();
    b.ok(&["connect", &a.addr()]);
    wait_for("the message to be delivered", || {
        outbox_has(&a, &id, "delivered")
    });
    let in_inbox = |b: &Node| {
        b.inbox_all()
            .iter()
            .filter(|m| m["id"] == id.as_str())
            .count()
    };
    assert_eq!(in_inbox(&b), 1);
    // Inside the window the same envelope again is acknowledged, and
    // dropped: alpha sees it delivered a second time, bravo has it once.
    a.stop();
    requeue_and_restart(&mut a, &b, &record);
    wait_for("the replay to be acknowledged", || {
        (audited(&a, "delivered", &id) == 2).then_some(())
    });
    assert_eq!(in_inbox(&b), 1);
    // Past its expiry and the allowed skew, bravo has forgotten the dedup
    // record (the message itself is still unread in the inbox): the same
    // envelope is refused as expired, and still lands only once.
    b.advance_clock(Duration::from_secs(7 * 24 * 3600 + 3600));
    a.stop();
    requeue_and_restart(&mut a, &b, &record);
    let m = wait_for("the late replay to be refused", || {
        outbox_has(&a, &id, "refused")
    });
    assert!(m["reason"].as_str().unwrap().contains("Expired"), "{m}");
    assert_eq!(in_inbox(&b), 1);
    assert!(
        b.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "refused"
                && e["id"] == id.as_str()
                && e["detail"].as_str().unwrap().starts_with("Expired")),
        "bravo's audit records the refusal"
    );
}

#[test]
fn a_bad_signature_is_refused_and_the_sender_is_told() {
    let [mut a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    b.stop();
    let id = a.send("@bravo", "signed by me");
    a.stop();
    // The signature is the envelope's last 64 bytes.
    let mut record = queued_record(&a, &id);
    let n = record.envelope.len();
    record.envelope[n - 1] ^= 0x01;
    b.start();
    requeue_and_restart(&mut a, &b, &record);
    let m = wait_for("alpha to hear that bravo refused the envelope", || {
        outbox_has(&a, &id, "refused")
    });
    assert!(
        m["reason"].as_str().unwrap().contains("BadSignature"),
        "{m}"
    );
    assert!(b.inbox_all().is_empty());
}

#[test]
fn a_tampered_envelope_is_refused_and_the_sender_is_told() {
    let [mut a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    b.stop();
    let id = a.send("@bravo", "original words");
    a.stop();
    // Corrupt the queued envelope's ciphertext on alpha's disk.
    {
        let store = SledStore::open(&a.home().join("data"), 1 << 20).unwrap();
        let mut r = store
            .outbox()
            .unwrap()
            .into_iter()
            .find(|r| r.id == id)
            .unwrap();
        r.envelope = store.outbox_envelope(&id).unwrap().unwrap();
        let n = r.envelope.len();
        r.envelope[n - 100] ^= 0x01;
        store.put_outbox(&[r]).unwrap();
        store.flush().unwrap();
    }
    // Both come back on new ports (port 0); bravo finds alpha by hand.
    a.start();
    b.start();
    b.ok(&["connect", &a.addr()]);
    let m = wait_for("alpha to hear that bravo refused the envelope", || {
        let m = a.outbox_entry(&id);
        (m["status"] == "refused").then_some(m)
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
    let [a, mut b, mut c] = team([("alpha", "Ada"), ("bravo", "Ada"), ("charlie", "Ada")]);
    // Bravo queues mail for charlie while charlie is away, then is revoked
    // and goes away too; charlie comes back and learns of the revocation
    // before bravo can reach it.
    c.stop();
    let id = b.send("@charlie", "before my revocation");
    a.ok(&["revoke", "bravo", "--yes"]);
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
        let m = b.outbox_entry(&id);
        (m["status"] == "refused").then_some(m)
    });
    assert!(m["reason"].as_str().unwrap().contains("revoked"), "{m}");
    assert!(c.inbox_all().is_empty());
}

#[test]
fn mail_queued_for_a_machine_revoked_meanwhile_fails_with_its_reason() {
    let [a, b, mut c] = team([("alpha", "Ada"), ("bravo", "Ada"), ("charlie", "Ada")]);
    // Bravo queues mail for charlie while charlie is away; then charlie is
    // revoked. Charlie never comes back: the mail fails on bravo, visibly,
    // instead of waiting out its week.
    c.stop();
    let id = b.send("@charlie", "for a machine about to go");
    a.ok(&["revoke", "charlie", "--yes"]);
    let m = wait_for("bravo to fail the mail queued for charlie", || {
        let m = b.outbox_entry(&id);
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
