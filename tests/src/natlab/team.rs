//! A team of two across the lab's NATs, and what the tests of it share:
//! the founder on host A holding reservations on the relays, a joiner on
//! host B given nothing but the ticket.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Host, Lab, RelayProc};
use crate::{Node, join_ticket, wait_for, wait_for_within};

/// Over which transport a scenario runs.
#[derive(Debug, Clone, Copy)]
pub enum Transport {
    /// TCP (Noise, Yamux).
    Tcp,
    /// QUIC.
    Quic,
}

impl Transport {
    /// Where a daemon listens over it: port 4001 on every interface.
    pub fn listen(self) -> &'static str {
        match self {
            Transport::Tcp => "/ip4/0.0.0.0/tcp/4001",
            Transport::Quic => "/ip4/0.0.0.0/udp/4001/quic-v1",
        }
    }

    /// The relay's address over it.
    pub fn relay(self, relay: &RelayProc) -> String {
        match self {
            Transport::Tcp => relay.tcp_addr(),
            Transport::Quic => relay.quic_addr(),
        }
    }
}

/// A daemon on `host` listening on `transport`'s port 4001, with
/// `daemon_args`.
pub fn daemon(lab: &Lab, host: Host, name: &str, transport: Transport, args: &[String]) -> Node {
    let mut n = Node::new(name);
    n.listen = vec![transport.listen().into()];
    n.wrapper = lab.wrapper(host);
    n.daemon_args = args.to_vec();
    n.start();
    n
}

/// The founder (alpha, on host A, holding a reservation on each relay)
/// and a joiner (bravo, on host B, given nothing but the ticket), joined.
pub fn joined(lab: &Lab, relays: &[&RelayProc], transport: Transport) -> (Node, Node) {
    let args: Vec<String> = relays
        .iter()
        .flat_map(|r| ["--relay".into(), transport.relay(r)])
        .collect();
    let a = daemon(lab, Host::A, "alpha", transport, &args);
    let a_id = a.peer_id();
    let circuits: Vec<String> = relays
        .iter()
        .map(|r| format!("{}/p2p-circuit/p2p/{a_id}", transport.relay(r)))
        .collect();
    wait_for("alpha's reservations and circuit addresses", || {
        let s = a.status();
        let have = s["circuit_addrs"].as_array().unwrap();
        circuits
            .iter()
            .all(|c| have.iter().any(|h| h == c.as_str()))
            .then_some(())
    });
    let circuit = &circuits[0];
    a.ok(&["team", "create", "far", "--owner", "Ada"]);
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let t = agentmesh_protocol::ticket::Ticket::decode(&ticket).unwrap();
    assert!(
        t.addrs.iter().any(|x| x.to_string() == *circuit),
        "the ticket carries the circuit: {:?}",
        t.addrs
    );
    // Bravo gets no --relay and no address: the ticket alone (whose
    // direct address, alpha's LAN one, bravo can't reach: its packets are
    // silently dropped, which must not hold up the circuit).
    let b = daemon(lab, Host::B, "bravo", transport, &[]);
    // One person's two machines: mail between them is not held.
    join_ticket(&a, &b, &ticket, &["--name", "bravo", "--owner", "Ada"]);
    assert_eq!(b.json(&["team", "show"])["name"], "far");
    // Bravo adopted the ticket's relays.
    wait_for("bravo's reservations on the adopted relays", || {
        let adopted = b.status()["reservations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["state"] == "reserved" && r["adopted"] == true)
            .count();
        (adopted == relays.len()).then_some(())
    });
    (a, b)
}

/// `from` sends `text` to `to`'s owner mailbox; waits until it is
/// delivered (the receiver's receipt came back).
pub fn delivered(from: &Node, to: &str, text: &str, within: Duration) {
    let id = from.send(&format!("@{to}"), text);
    wait_for_within(
        &format!("{}'s message to {to} to be delivered", from.name),
        within,
        || {
            let e = from.outbox_entry(&id);
            assert!(e["status"] != "failed" && e["status"] != "refused", "{e}");
            (e["status"] == "delivered").then_some(())
        },
    );
}

/// The texts in `node`'s inbox.
pub fn inbox_texts(node: &Node) -> Vec<String> {
    node.json(&["inbox"])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["text"].as_str().map(str::to_owned))
        .collect()
}

/// `node`'s `peers` row of `peer` once `connection` is what it says.
pub fn connection(node: &Node, peer: &str, want: &str, within: Duration) -> Value {
    wait_for_within(
        &format!("{}'s connection to {peer} to be {want}", node.name),
        within,
        || node.peer_row(peer).filter(|r| r["connection"] == want),
    )
}

/// `node`'s `relays --json` row of `relay`.
pub fn relay_row(node: &Node, relay: &RelayProc) -> Value {
    let view = node.json(&["relays"]);
    view["relays"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["peer_id"] == relay.peer_id())
        .cloned()
        .unwrap_or_else(|| panic!("{} does not list the relay: {view}", node.name))
}

/// Waits (at most `within`) until `node` shows `relay` in `state`; how
/// long that took.
pub fn relay_state(node: &Node, relay: &RelayProc, state: &str, within: Duration) -> Duration {
    let t = Instant::now();
    wait_for_within(
        &format!("{} to show the relay {state}", node.name),
        within,
        || (relay_row(node, relay)["state"] == state).then_some(()),
    );
    t.elapsed()
}

/// Prints the nodes' daemon logs to stderr when the test panics, so a
/// failure in the lab shows what each daemon saw (nextest keeps a failed
/// test's output).
#[derive(Debug)]
pub struct DumpOnPanic<'a>(pub Vec<&'a Node>);

impl Drop for DumpOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in &self.0 {
                eprintln!("----- {}'s daemon log -----\n{}", n.name, n.log());
            }
        }
    }
}
