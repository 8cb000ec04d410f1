//! Connection limits never freeze delivery. They come first in the
//! daemon's behaviour, so a connection they deny is never half-known to
//! request-response (rust-libp2p #4870), and members don't count against
//! the limit on strangers' connections.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::net::MAX_CONNECTIONS;
use agentmesh_tests::hostile::Flood;
use agentmesh_tests::{Node, team, wait_for};

fn delivered(n: &Node, id: &str) -> Option<serde_json::Value> {
    let m = n.outbox_entry(id);
    (m["status"] == "delivered").then_some(m)
}

/// Seven `connect`s from one member to another open more connections than
/// the four kept per peer. Before the fix, the connections denied past the
/// fourth were still known to request-response, which routed mail into
/// them: two of four messages stayed `sent` for ever.
#[test]
fn connections_past_the_per_peer_limit_do_not_swallow_mail() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let addr = a.addr();
    for _ in 0..7 {
        b.ok(&["connect", &addr]);
    }
    // Both ways: each side denied some of those connections.
    for (from, to) in [(&b, "@alpha"), (&a, "@bravo")] {
        let ids: Vec<String> = (0..8)
            .map(|i| from.send(to, &format!("message {i}")))
            .collect();
        for id in &ids {
            let m = wait_for(&format!("{id} to be delivered"), || delivered(from, id));
            // At the first attempt: no attempt vanished into a dead
            // connection to be retried after its deadline.
            assert_eq!(m["attempts"], 1, "{m}");
        }
    }
    assert_eq!(a.inbox_all().len(), 8);
    assert_eq!(b.inbox_all().len(), 8);
}

/// A flood of strangers fills the connections strangers may have; a member
/// that restarts meanwhile still connects and gets its mail. Before the
/// fix, the member's connection was denied after request-response had seen
/// it, and its mail stayed queued until the daemon restarted.
#[test]
fn a_stranger_flood_does_not_keep_a_member_out() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    b.stop();
    let id = a.send("@bravo", "for after your restart");
    let flood = Flood::connect(&a.addr().parse().unwrap(), 530);
    b.start();
    wait_for("alpha's mail to reach bravo", || delivered(&a, &id));
    assert_eq!(b.inbox_all().len(), 1);
    // The flood filled the strangers' share, and no more.
    wait_for("alpha to hold no more strangers than its limit", || {
        (flood.established() <= MAX_CONNECTIONS as usize).then_some(())
    });
    assert!(
        flood.established() >= MAX_CONNECTIONS as usize / 2,
        "the flood got {} connections; it should fill the strangers' share",
        flood.established()
    );
    drop(flood);
}
