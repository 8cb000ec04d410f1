//! `agentmesh-bench carry`: a carrier holding mail for a recipient that
//! reconnects, and the time from a send to the sender's `delivered`.
//!
//! ```text
//!  receipts:  alpha ── send ──> bravo (both online)   send returned → outbox `delivered`
//!  carrying:  bravo down; alpha sends N ── handed over ──> charlie (carry = true)
//!             alpha down; charlie restarts (its memory is measured holding them)
//!             charlie ── connect bravo ── Deliver ──> bravo's inbox   connect → each arrival
//! ```
//!
//! Both daemons restart before the drain so neither knows the other's new
//! address: the clock starts with the `connect` that joins them, and
//! nothing else can deliver (the sender is down).

use std::time::{Duration, Instant};

use agentmesh_node::api::{WhoKind, ops};

use crate::bench_mcp::percentile;
use crate::bench_messaging::{Observer, rss_mib, text_1k};
use crate::{ApiClient, Node, team, wait_for, wait_for_within, who};

/// The figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CarryFigures {
    /// Messages the carrier held and carried on.
    pub carried: usize,
    /// From the connect that joined carrier and recipient to the last
    /// message in the recipient's inbox, seconds.
    pub drain_s: f64,
    /// From that connect to each message's arrival: median, ms.
    pub drain_p50_ms: f64,
    /// ... 99th percentile, ms.
    pub drain_p99_ms: f64,
    /// The carrier's resident memory holding them all, after the
    /// handoffs, MiB.
    pub carrier_rss_mib: f64,
    /// ... and after a restart, still holding them (before the drain).
    pub carrier_restarted_rss_mib: f64,
    /// The carrier's resident memory before it held anything, MiB.
    pub carrier_idle_rss_mib: f64,
    /// Sends timed for the receipt figures (both machines online).
    pub receipts: usize,
    /// From `send` returning to the sender's outbox showing `delivered`:
    /// median, ms.
    pub receipt_p50_ms: f64,
    /// ... 99th percentile, ms.
    pub receipt_p99_ms: f64,
}

/// Alpha, bravo and charlie, one person's three machines; charlie is a
/// carrier (with `settings` too), and every machine hands mail over
/// after 1 s without a connection (60 s by default). Each has restarted
/// with its settings, alpha and bravo know charlie's new address, and
/// both know charlie carries.
pub fn carrier_team_with(settings: &[(&str, &str)]) -> [Node; 3] {
    carrier_team_of(["Ada", "Ada", "Ada"], settings)
}

/// [`carrier_team_with`], the three machines owned by `owners`.
pub fn carrier_team_of(owners: [&str; 3], settings: &[(&str, &str)]) -> [Node; 3] {
    let [mut a, mut b, mut c] = team([
        ("alpha", owners[0]),
        ("bravo", owners[1]),
        ("charlie", owners[2]),
    ]);
    c.ok(&["config", "set", "carry", "true"]);
    for (key, value) in settings {
        c.ok(&["config", "set", key, value]);
    }
    for n in [&mut a, &mut b, &mut c] {
        n.ok(&["config", "set", "carrier.handoff_after", "1s"]);
        n.stop();
    }
    c.start();
    for n in [&mut a, &mut b] {
        n.start();
        n.ok(&["connect", &c.addr()]);
    }
    // Alpha learns bravo's new address (for direct delivery).
    b.ok(&["connect", &a.addr()]);
    for n in [&a, &b] {
        wait_for(&format!("{} to know charlie carries", n.name), || {
            let show = n.json(&["team", "show"]);
            let members = show["members"].as_array()?;
            members
                .iter()
                .any(|m| m["name"] == "charlie" && m["always_on"] == true)
                .then_some(())
        });
    }
    [a, b, c]
}

/// How many envelopes `n` carries for others (`status --json`).
pub fn carrying(n: &Node) -> u64 {
    n.status()["carrying"]
        .as_u64()
        .expect("status --json has carrying")
}

/// Times `receipts` sends to `delivered`, then has a carrier hold
/// `messages` for a reconnecting recipient.
pub fn run(messages: usize, receipts: usize) -> CarryFigures {
    // The carrier's bounds, raised to hold them all from the one sender
    // (1,000 envelopes and 16 MiB by default): 2 KiB an envelope is more
    // than a 1 KiB message's takes.
    let per_sender = messages.max(1000).to_string();
    let mib = (messages * 2048).div_ceil(1024 * 1024).max(16);
    let (per_sender_mib, total_mib) = (mib.to_string(), mib.max(256).to_string());
    let [mut a, mut b, mut c] = carrier_team_with(&[
        ("carrier.per_sender", &per_sender),
        ("carrier.total_mib", &total_mib),
        ("carrier.per_sender_mib", &per_sender_mib),
    ]);
    let mut sender = ApiClient::attach(&a, who(WhoKind::Agent, "bench"), None);
    let mut receipt_ms = Vec::with_capacity(receipts);
    for i in 0..receipts {
        let id = sender.send("@bravo", &text_1k(i)).expect("a send");
        // Polled every millisecond (`wait_for`'s 50 ms would be the
        // figure): the status op is a local socket round trip.
        let start = Instant::now();
        loop {
            let m = sender.call(ops::MessageStatus { id: id.clone() });
            if m.is_ok_and(|m| m["status"] == "delivered") {
                break;
            }
            assert!(
                start.elapsed() < crate::DEADLINE,
                "message {id} never showed delivered"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        receipt_ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let carrier_idle_rss_mib = rss_mib(c.pid());

    // Bravo's receipts for what it is carried wait in its own outbox for
    // alpha (stopped by then) rather than being handed to charlie: the
    // carrier is then seen to forget everything it carried, where
    // otherwise it would take bravo's receipts for alpha as it drains
    // (with 1,000 messages the check could pass between the two).
    b.ok(&["config", "set", "carrier.handoff_after", "24h"]);
    b.stop();
    let ids: Vec<String> = (0..messages)
        .map(|i| sender.send("@bravo", &text_1k(i)).expect("a send"))
        .collect();
    let deadline = Duration::from_secs(60 + messages as u64 / 10);
    wait_for_within("the carrier to hold every message", deadline, || {
        (carrying(&c) == messages as u64).then_some(())
    });
    let carrier_rss_mib = rss_mib(c.pid());
    drop(sender);
    a.stop();
    c.stop();
    b.start();
    c.start();
    let carrier_restarted_rss_mib = rss_mib(c.pid());
    let observer = Observer::start(&b);
    let start = Instant::now();
    c.ok(&["connect", &b.addr()]);
    wait_for_within("bravo to have every message", deadline, || {
        (observer.count() >= messages).then_some(())
    });
    let mut drain_ms: Vec<f64> = ids
        .iter()
        .map(|id| {
            let at = observer.at(id).expect("every message arrived");
            at.saturating_duration_since(start).as_secs_f64() * 1e3
        })
        .collect();
    drain_ms.sort_by(f64::total_cmp);
    receipt_ms.sort_by(f64::total_cmp);
    // Every message once (with the receipt phase's, delivered directly).
    let counts = b.inbox_counts();
    assert!(
        counts.len() == messages + receipts && counts.values().all(|n| *n == 1),
        "bravo's inbox has every message once"
    );
    wait_for("the carrier to forget what it carried", || {
        (carrying(&c) == 0).then_some(())
    });
    let pick = |v: &[f64], p: f64| if v.is_empty() { 0.0 } else { percentile(v, p) };
    CarryFigures {
        carried: messages,
        drain_s: drain_ms.last().copied().unwrap_or(0.0) / 1e3,
        drain_p50_ms: pick(&drain_ms, 0.5),
        drain_p99_ms: pick(&drain_ms, 0.99),
        carrier_rss_mib,
        carrier_restarted_rss_mib,
        carrier_idle_rss_mib,
        receipts,
        receipt_p50_ms: pick(&receipt_ms, 0.5),
        receipt_p99_ms: pick(&receipt_ms, 0.99),
    }
}
