//! Accepted means durable: kill -9 either side during a burst of 1,000
//! messages; after restarts every message whose `send` returned an id is in
//! the receiver's inbox exactly once.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentmesh_node::api::WhoKind;
use agentmesh_tests::{ApiClient, Node, team, wait_for, who};

const BURST: usize = 1000;

fn pair() -> (Node, Node) {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    (a, b)
}

/// Sends BURST messages from `a` to bravo on another thread, counting
/// them; returns the ids whose send answered, once the thread ends.
fn burst(a: &Node, sent: Arc<AtomicUsize>) -> std::thread::JoinHandle<Vec<String>> {
    let mut c = ApiClient::attach(a, who(WhoKind::Agent, "burst"), None);
    std::thread::spawn(move || {
        let mut ids = vec![];
        for i in 0..BURST {
            match c.send("@bravo", &format!("message {i}")) {
                Ok(id) => ids.push(id),
                // The sender was killed: what did not answer was not accepted.
                Err(_) => break,
            }
            sent.fetch_add(1, Ordering::SeqCst);
        }
        ids
    })
}

fn all_exactly_once(b: &Node, ids: &[String]) {
    let counts = wait_for(&format!("bravo to hold all {} messages", ids.len()), || {
        let counts = b.inbox_counts();
        ids.iter()
            .all(|id| counts.contains_key(id))
            .then_some(counts)
    });
    for id in ids {
        assert_eq!(
            counts[id], 1,
            "message {id} is in the inbox {} times",
            counts[id]
        );
    }
    assert_eq!(
        counts.values().filter(|n| **n > 1).count(),
        0,
        "duplicates in the inbox"
    );
}

#[test]
fn kill_9_the_receiver_during_a_burst() {
    let (a, mut b) = pair();
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = burst(&a, sent.clone());
    wait_for("a third of the burst to be sent", || {
        (sent.load(Ordering::SeqCst) >= BURST / 3).then_some(())
    });
    b.kill9();
    b.start();
    let ids = sender.join().unwrap();
    assert_eq!(
        ids.len(),
        BURST,
        "every send answered while the sender lived"
    );
    all_exactly_once(&b, &ids);
    wait_for("alpha's outbox to say every message was delivered", || {
        let out = a.json(&["outbox"]);
        out.as_array()
            .unwrap()
            .iter()
            .all(|m| m["status"] == "delivered")
            .then_some(())
    });
}

#[test]
fn kill_9_the_sender_during_a_burst() {
    let (mut a, b) = pair();
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = burst(&a, sent.clone());
    wait_for("a third of the burst to be sent", || {
        (sent.load(Ordering::SeqCst) >= BURST / 3).then_some(())
    });
    a.kill9();
    let ids = sender.join().unwrap();
    assert!(
        ids.len() >= BURST / 3 && ids.len() < BURST,
        "{} sends answered",
        ids.len()
    );
    a.start();
    all_exactly_once(&b, &ids);
    // And the sender knows it: every answered send ends delivered in its
    // outbox (those whose answer the kill lost are re-sent, and the
    // receiver acknowledges the duplicates).
    wait_for(
        "the sender's outbox to show every message delivered",
        || {
            let out = a.json(&["outbox"]);
            let delivered: std::collections::HashSet<&str> = out
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["status"] == "delivered")
                .filter_map(|m| m["id"].as_str())
                .collect();
            ids.iter()
                .all(|id| delivered.contains(id.as_str()))
                .then_some(())
        },
    );
}
