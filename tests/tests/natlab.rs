//! The NAT lab harness itself (`agentmesh_tests::natlab`): the real relay
//! runs in it and is reachable from behind both kinds of NAT, over TCP and
//! QUIC; hosts behind the NATs are not reachable from outside, because the
//! routers drop unsolicited inbound (their DROP counters say so); and a
//! lab leaves no namespace or process behind, also when its test panics.
//!
//! Needs root, `ip` and `iptables`; skipped, saying why, where namespaces
//! can't be made (a failure under CI). Run alone with
//! `cargo test -p agentmesh-tests --test natlab`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use agentmesh_tests::natlab::{
    HOST_A_IP, Host, Lab, Nat, Netns, RELAY_IP, RELAY_PORT, ROUTER_A_WAN_IP, RelayProc,
    lab_or_skip, netns_list,
};
use agentmesh_tests::{Node, wait_for};

/// A daemon on `host`, listening on TCP and QUIC port 4001 of every
/// interface there.
fn daemon(lab: &Lab, host: Host, name: &str) -> Node {
    let mut n = Node::new(name);
    n.listen = vec![
        "/ip4/0.0.0.0/tcp/4001".into(),
        "/ip4/0.0.0.0/udp/4001/quic-v1".into(),
    ];
    n.wrapper = lab.wrapper(host);
    n.start();
    n
}

/// `from` connects to `addr`: the relay answers, recognised as a relay.
fn connects_to_relay(from: &Node, relay: &RelayProc, addr: &str) {
    // `connect` waits for identify from a machine that is not a member,
    // so a first connection already says it is a relay.
    let c = from.json(&["connect", addr]);
    assert_eq!(c["peer_id"], relay.peer_id(), "{c}");
    assert_eq!(c["membership"], "relay", "{} via {addr}: {c}", from.name);
}

/// `agentmesh connect addr` on `from` fails; its error.
fn cannot_connect(from: &Node, addr: &str) -> String {
    let out = from.run(&["connect", addr, "--json"]);
    assert!(
        !out.status.success(),
        "{} reached {addr}, which it must not: {}",
        from.name,
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether a failed dial's error says nothing ever answered (as opposed
/// to a refusal, which a router without the DROP rules would send).
/// libp2p's transport timeout and the daemon's own connect deadline race
/// (both 10 s); either will do.
fn timed_out(e: &str) -> bool {
    let e = e.to_lowercase();
    e.contains("timeout has been reached")
        || e.contains("timed out")
        || e.contains("no answer within")
        || e.contains("did not answer in time")
}

#[test]
fn the_relay_is_reachable_through_both_nats_and_the_hosts_are_not() {
    let test = "the_relay_is_reachable_through_both_nats_and_the_hosts_are_not";
    let started = Instant::now();
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    eprintln!("natlab: lab set up in {:?}", started.elapsed());
    let names = lab.namespaces();
    assert_eq!(names.len(), 6);
    let listed = netns_list().unwrap();
    assert!(names.iter().all(|n| listed.contains(n)), "{listed:?}");

    let relay = RelayProc::start(&lab, &["--max-circuits", "8"]);
    let a = daemon(&lab, Host::A, "alpha");
    let b = daemon(&lab, Host::B, "bravo");
    // Someone on the public network, with no NAT in front of it.
    let mut outsider = Node::new("outsider");
    outsider.listen = vec!["/ip4/0.0.0.0/tcp/0".into()];
    outsider.wrapper = lab.wrapper(Host::Relay);
    outsider.start();

    // Out through either NAT, over either transport: the relay answers.
    // Alpha's first connection is TCP, bravo's QUIC, so each transport is
    // shown working on its own.
    for (n, first, transport) in [
        (&a, relay.tcp_addr(), "tcp"),
        (&b, relay.quic_addr(), "quic"),
    ] {
        let c = n.json(&["connect", &first]);
        assert_eq!(c["peer_id"], relay.peer_id(), "{c}");
        let row = n.peer_row(relay.peer_id()).unwrap();
        assert_eq!(row["connection"], "direct", "{row}");
        assert_eq!(row["transport"], transport, "{row}");
        connects_to_relay(n, &relay, &relay.tcp_addr());
        connects_to_relay(n, &relay, &relay.quic_addr());
    }

    // The routers are the NATs they should be: alpha's (endpoint
    // independent) kept its port 4001 for the relay, over TCP and UDP;
    // bravo's (symmetric) chose other ports. This is also the regression
    // test of libp2p's port reuse: alpha's outgoing TCP dial leaves from
    // its listen port 4001 (`private.port() == 4001`), so what the relay
    // observes is a port someone listens on; with port reuse off it would
    // leave from an ephemeral port and DCUtR could never punch over TCP.
    let a_maps = lab.mappings(Host::A);
    let relay_ends = [
        ("tcp", SocketAddrV4::new(RELAY_IP, RELAY_PORT)),
        ("udp", SocketAddrV4::new(RELAY_IP, RELAY_PORT)),
    ];
    for (protocol, remote) in relay_ends {
        let m = a_maps
            .iter()
            .find(|m| m.protocol == protocol && m.remote == remote && m.private.port() == 4001)
            .unwrap_or_else(|| panic!("no {protocol} mapping from port 4001 in {a_maps:#?}"));
        assert_eq!(m.public, SocketAddrV4::new(ROUTER_A_WAN_IP, 4001), "{m:?}");
    }
    assert!(
        a_maps.iter().all(|m| m.public.port() == m.private.port()),
        "{a_maps:#?}"
    );
    let b_maps = lab.mappings(Host::B);
    for (protocol, remote) in relay_ends {
        assert!(
            b_maps
                .iter()
                .any(|m| m.protocol == protocol && m.remote == remote),
            "no {protocol} mapping to the relay in {b_maps:#?}"
        );
    }
    // (Each port is random: the TCP and the UDP mapping both keeping
    // theirs by chance is about one in four billion.)
    assert!(
        b_maps.iter().any(|m| m.public.port() != m.private.port()),
        "{b_maps:#?}"
    );

    // In: nobody reaches alpha. Its private address is not routable from
    // bravo's side, and its router's public address answers nothing: the
    // dials are dropped (not refused), and the router's DROP counters grow.
    let a_peer = a.peer_id();
    let dropped_before = lab.dropped_inbound(Host::A);
    let wan_tcp = format!("/ip4/{ROUTER_A_WAN_IP}/tcp/4001/p2p/{a_peer}");
    let wan_quic = format!("/ip4/{ROUTER_A_WAN_IP}/udp/4001/quic-v1/p2p/{a_peer}");
    let lan_tcp = format!("/ip4/{HOST_A_IP}/tcp/4001/p2p/{a_peer}");
    let took = Instant::now();
    std::thread::scope(|s| {
        let attempts = [
            (&b, lan_tcp.clone()),
            (&b, wan_tcp.clone()),
            (&b, wan_quic.clone()),
            (&outsider, wan_tcp.clone()),
            (&outsider, wan_quic.clone()),
        ];
        let handles: Vec<_> = attempts
            .into_iter()
            .map(|(from, addr)| {
                s.spawn(move || (from.name.clone(), addr.clone(), cannot_connect(from, &addr)))
            })
            .collect();
        for h in handles {
            let (from, addr, e) = h.join().unwrap();
            eprintln!("natlab: {from} -> {addr}: {}", e.trim());
            if addr.contains(&HOST_A_IP.to_string()) {
                // Nothing on bravo's side routes to another private network.
                assert!(
                    e.contains("cannot be reached from here"),
                    "{from} -> {addr}: {e}"
                );
            } else {
                assert!(timed_out(&e), "{from} -> {addr} was not dropped: {e}");
            }
        }
    });
    eprintln!("natlab: the five failing dials took {:?}", took.elapsed());
    let dropped = lab.dropped_inbound(Host::A) - dropped_before;
    // At least one packet per dial to the WAN address (SYN retries and
    // QUIC's handshake retransmissions add more).
    assert!(dropped >= 4, "router A dropped {dropped} packets");
    // Nobody got through to alpha at all.
    for other in [&b, &outsider] {
        let row = a.peer_row(&other.peer_id());
        assert!(
            row.as_ref().is_none_or(|r| r["connection"] == "none"),
            "alpha has a connection from {}: {row:?}",
            other.name
        );
    }
    // Meanwhile alpha's own connection to the relay is unharmed.
    let row = a.peer_row(relay.peer_id()).unwrap();
    assert_eq!(row["connection"], "direct", "{row}");

    drop((a, b, outsider, relay));
    let started = Instant::now();
    drop(lab);
    eprintln!("natlab: lab torn down in {:?}", started.elapsed());
    let listed = netns_list().unwrap();
    let left: Vec<_> = names.iter().filter(|n| listed.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

#[test]
fn a_panicking_test_leaves_no_namespace_or_process_behind() {
    let test = "a_panicking_test_leaves_no_namespace_or_process_behind";
    let Some(probe) = lab_or_skip(test, Nat::Symmetric, Nat::Symmetric) else {
        return;
    };
    drop(probe);
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let lab = Lab::new(Nat::Symmetric, Nat::EndpointIndependent).unwrap();
        // A process in every namespace, that would run for a long time.
        let mut pids = Vec::new();
        for ns in Netns::ALL {
            let child = lab
                .command(ns, "sleep")
                .arg("1000")
                .stdin(std::process::Stdio::null())
                .spawn()
                .unwrap();
            pids.push(child.id());
            // Never waited for: the lab must kill it anyway.
            std::mem::forget(child);
        }
        wait_for("the sleeps to be in their namespaces", || {
            Netns::ALL
                .iter()
                .all(|ns| {
                    let out = std::process::Command::new("ip")
                        .args(["netns", "pids", lab.netns(*ns)])
                        .output()
                        .unwrap();
                    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
                })
                .then_some(())
        });
        tx.send((lab.namespaces(), pids, Instant::now())).unwrap();
        panic!("the test fails here, with its lab up");
    }));
    assert!(result.is_err());
    let (names, pids, panicked) = rx.recv().unwrap();
    eprintln!(
        "natlab: a lab with a process in each namespace torn down in {:?}",
        panicked.elapsed()
    );
    let listed = netns_list().unwrap();
    let left: Vec<_> = names.iter().filter(|n| listed.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    for pid in pids {
        // Killed: a zombie (this process never reaps it) or gone.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = state.rsplit(") ").next().unwrap_or("").chars().next();
        assert!(
            matches!(state, None | Some('Z') | Some('X')),
            "process {pid} still runs: {state:?}"
        );
    }
}

#[test]
fn labs_made_at_once_in_parallel_threads_do_not_collide() {
    let test = "labs_made_at_once_in_parallel_threads_do_not_collide";
    let Some(probe) = lab_or_skip(test, Nat::EndpointIndependent, Nat::EndpointIndependent) else {
        return;
    };
    drop(probe);
    let started = Instant::now();
    let labs: Vec<Lab> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|_| s.spawn(|| Lab::new(Nat::EndpointIndependent, Nat::Symmetric).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "natlab: three labs set up at once in {:?}",
        started.elapsed()
    );
    let mut all: Vec<String> = labs.iter().flat_map(Lab::namespaces).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "{all:?}");
    assert_eq!(n, 18);
    let started = Instant::now();
    drop(labs);
    let took = started.elapsed();
    eprintln!("natlab: three empty labs torn down in {took:?}");
    assert!(took < Duration::from_secs(30));
    let listed = netns_list().unwrap();
    assert!(all.iter().all(|n| !listed.contains(n)), "{listed:?}");
}

#[test]
fn a_lab_a_killed_test_left_behind_is_removed_by_the_next() {
    let test = "a_lab_a_killed_test_left_behind_is_removed_by_the_next";
    let Some(probe) = lab_or_skip(test, Nat::EndpointIndependent, Nat::EndpointIndependent) else {
        return;
    };
    drop(probe);
    // As a process that no longer runs would have named it: pid 1 (init)
    // started at a time it didn't, and a pid past any pid_max.
    let stale = ["amnat1.1-0-pub", "amnat4294967295.7-3-ha"];
    for ns in stale {
        // Any other lab being made meanwhile (another test here, another
        // test process) sweeps too, and may remove the file `ip netns add`
        // has just made before it is bound: make it again then.
        wait_for(&format!("ip netns add {ns}"), || {
            let out = std::process::Command::new("ip")
                .args(["netns", "add", ns])
                .output()
                .unwrap();
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() || e.contains("No such file"),
                "ip netns add {ns}: {e}"
            );
            out.status.success().then_some(())
        });
    }
    let lab = Lab::new(Nat::EndpointIndependent, Nat::EndpointIndependent).unwrap();
    let listed = netns_list().unwrap();
    assert!(
        stale.iter().all(|n| !listed.contains(&n.to_string())),
        "{listed:?}"
    );
    // This process's own labs are left alone, of course.
    assert!(
        lab.namespaces().iter().all(|n| listed.contains(n)),
        "{listed:?}"
    );
}
