//! Across networks, behind real NATs (the lab in `agentmesh_tests::natlab`:
//! network namespaces, iptables routers that drop unsolicited inbound, the
//! real relay on a "public" segment). Each scenario is its own test:
//!
//! - both sides behind endpoint-independent NATs, over TCP and over QUIC:
//!   the founder behind NAT invites, the joiner on the other network joins
//!   with the ticket alone through the relay, a message goes each way, and
//!   the connection becomes direct by DCUtR;
//! - one side behind a symmetric NAT: messages up to the largest body
//!   arrive through the relay, also after a circuit hits its limit and is
//!   replaced, and `peers` says `relayed`.
//!
//! Needs root, `ip` and `iptables`; skipped, saying why, where namespaces
//! can't be made (a failure under CI).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::{Duration, Instant};

use agentmesh_tests::natlab::team::{
    DumpOnPanic, Transport, connection, delivered, inbox_texts, joined, relay_row, relay_state,
};
use agentmesh_tests::natlab::{Nat, RelayProc, lab_or_skip};
use agentmesh_tests::{wait_for, wait_for_within};
use serde_json::Value;

fn both_behind_endpoint_independent_nats(test: &str, transport: Transport) {
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::EndpointIndependent) else {
        return;
    };
    let relay = match transport {
        Transport::Tcp => RelayProc::start_on(&lab, true, false, &[]),
        Transport::Quic => RelayProc::start_on(&lab, false, true, &[]),
    };
    let (a, b) = joined(&lab, &[&relay], transport);
    let joined_at = Instant::now();
    delivered(
        &b,
        "alpha",
        "hello from the other network",
        Duration::from_secs(30),
    );
    eprintln!(
        "{transport:?}: the first message delivered {:.0} ms after join",
        joined_at.elapsed().as_secs_f64() * 1000.0
    );
    // Both restart: each dials the other at once, before its relay is
    // connected, and that dial waits on the other's LAN address, whose
    // packets go nowhere (a QUIC handshake gives up after 5 s, then the
    // courier retries 1 s later: 6.4 s here before the fix). The dial
    // through the relay made when its reservation is granted does not
    // wait for it: the first message beats that handshake timeout.
    let (mut a, mut b) = (a, b);
    a.stop();
    b.stop();
    a.start();
    b.start();
    let restarted = Instant::now();
    delivered(&b, "alpha", "after a restart", Duration::from_secs(30));
    let took = restarted.elapsed();
    eprintln!(
        "{transport:?}: after both restarted, the first message delivered {:.0} ms after",
        took.as_secs_f64() * 1000.0
    );
    assert!(
        took < Duration::from_secs(5),
        "the first message after a restart waited {took:?}: for the stuck direct dial"
    );
    delivered(
        &a,
        "bravo",
        "and back, through the NATs",
        Duration::from_secs(30),
    );
    assert!(
        inbox_texts(&a).contains(&"hello from the other network".to_owned()),
        "{}",
        a.json(&["inbox"])
    );
    assert!(inbox_texts(&b).contains(&"and back, through the NATs".to_owned()));
    // DCUtR punched a direct connection, and both sides say so.
    let (a_id, b_id) = (a.peer_id(), b.peer_id());
    let dump = DumpOnPanic(vec![&a, &b]);
    let row = connection(&a, &b_id, "hole-punched", Duration::from_secs(120));
    drop(dump);
    let want = match transport {
        Transport::Tcp => "tcp",
        Transport::Quic => "quic",
    };
    assert_eq!(row["transport"], want, "{row}");
    assert!(row["relay"].is_null(), "{row}");
    connection(&b, &a_id, "hole-punched", Duration::from_secs(30));
    // The relayed connection was closed: mail now takes the direct one.
    delivered(&a, "bravo", "direct now", Duration::from_secs(30));
    assert!(inbox_texts(&b).contains(&"direct now".to_owned()));
    // AutoNAT found both behind NAT.
    for n in [&a, &b] {
        wait_for_within(
            &format!("AutoNAT to find {} private", n.name),
            Duration::from_secs(90),
            || (n.status()["reachability"] == "private").then_some(()),
        );
    }
}

#[test]
fn behind_endpoint_independent_nats_over_tcp_a_ticket_joins_and_dcutr_goes_direct() {
    both_behind_endpoint_independent_nats(
        "behind_endpoint_independent_nats_over_tcp_a_ticket_joins_and_dcutr_goes_direct",
        Transport::Tcp,
    );
}

#[test]
fn behind_endpoint_independent_nats_over_quic_a_ticket_joins_and_dcutr_goes_direct() {
    both_behind_endpoint_independent_nats(
        "behind_endpoint_independent_nats_over_quic_a_ticket_joins_and_dcutr_goes_direct",
        Transport::Quic,
    );
}

#[test]
fn behind_a_symmetric_nat_the_largest_messages_arrive_through_replaced_circuits() {
    let test = "behind_a_symmetric_nat_the_largest_messages_arrive_through_replaced_circuits";
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    // Circuits of 128 KiB (libp2p's default; agentmesh-relay's is 1 MiB),
    // so two of the largest messages never fit one circuit.
    let relay = RelayProc::start_on(&lab, true, false, &["--max-circuit-bytes", "131072"]);
    let (a, b) = joined(&lab, &[&relay], Transport::Tcp);
    // The largest text a message takes: the body's limit less its
    // encoding (13 bytes and the sender's name, the login name here;
    // `send` refuses one byte more, saying so).
    let name = agentmesh_node::home::login_name();
    assert!(name.len() < 24, "a name of one CBOR head byte: {name}");
    let max = agentmesh_protocol::cbor::MAX_BODY_BYTES - 13 - name.len();
    let big = |tag: char| -> String {
        let mut s = String::with_capacity(max);
        s.push(tag);
        s.extend(std::iter::repeat_n('x', max - 1));
        s
    };
    let over = big('0') + "x";
    let refused = b.run(&["send", "@alpha", &over, "--json"]);
    assert!(!refused.status.success(), "one byte more is over the limit");
    // Each way, three messages of the largest body: 192 KiB each way.
    for tag in ['1', '2', '3'] {
        delivered(&b, "alpha", &big(tag), Duration::from_secs(60));
        delivered(&a, "bravo", &big(tag), Duration::from_secs(60));
    }
    for (n, who) in [(&a, "alpha"), (&b, "bravo")] {
        let texts = inbox_texts(n);
        for tag in ['1', '2', '3'] {
            assert!(
                texts.iter().any(|t| t.len() == max && t.starts_with(tag)),
                "{who} got message {tag} whole"
            );
        }
    }
    // More than one circuit carried them: each hit its limit and was
    // replaced (the relay accepted several circuits between the two).
    let circuits = relay.log().matches("CircuitReqAccepted").count();
    assert!(circuits >= 2, "{circuits} circuits:\n{}", relay.log());
    // No hole punching through a symmetric NAT: still relayed, via the
    // relay, after DCUtR has given up.
    let b_id = b.peer_id();
    let row = connection(&a, &b_id, "relayed", Duration::from_secs(30));
    assert_eq!(row["relay"], relay.peer_id(), "{row}");
    assert_eq!(row["transport"], "tcp", "{row}");
    let never_direct = a.log().contains("hole punched: a direct connection");
    assert!(!never_direct, "a symmetric NAT can't be punched through");
}

#[test]
fn a_relay_killed_and_restarted_is_reserved_on_again_and_the_mail_queued_meanwhile_arrives() {
    let test =
        "a_relay_killed_and_restarted_is_reserved_on_again_and_the_mail_queued_meanwhile_arrives";
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    // Bravo is behind a symmetric NAT: the relay is its only way to alpha.
    let mut relay = RelayProc::start_on(&lab, true, false, &[]);
    let (a, b) = joined(&lab, &[&relay], Transport::Tcp);
    let dump = DumpOnPanic(vec![&a, &b]);
    delivered(&b, "alpha", "before the restart", Duration::from_secs(60));
    relay.kill9();
    for n in [&a, &b] {
        relay_state(n, &relay, "failing", Duration::from_secs(30));
    }
    let ids: Vec<String> = (1..=3)
        .map(|i| b.send("@alpha", &format!("queued {i}")))
        .collect();
    for id in &ids {
        let e = b.outbox_entry(id);
        assert_ne!(e["status"], "delivered", "no way to alpha: {e}");
    }
    // The relay comes back with its key (an upgrade, a reboot).
    let restarted = Instant::now();
    relay.restart(&lab);
    for n in [&a, &b] {
        relay_state(n, &relay, "reserved", Duration::from_secs(30));
        eprintln!(
            "{} reserved on the restarted relay {:.1} s after it started",
            n.name,
            restarted.elapsed().as_secs_f64()
        );
    }
    for id in &ids {
        wait_for_within(
            "the mail queued while the relay was down to be delivered",
            Duration::from_secs(30),
            || (b.outbox_entry(id)["status"] == "delivered").then_some(()),
        );
    }
    eprintln!(
        "the queued mail delivered {:.1} s after the relay started again",
        restarted.elapsed().as_secs_f64()
    );
    let texts = inbox_texts(&a);
    for i in 1..=3 {
        let n = texts
            .iter()
            .filter(|t| **t == format!("queued {i}"))
            .count();
        assert_eq!(n, 1, "queued {i} arrived once: {texts:?}");
    }
    drop(dump);
}

#[test]
fn with_two_relays_one_killed_for_good_the_other_carries_circuits_and_the_contact_record() {
    let test =
        "with_two_relays_one_killed_for_good_the_other_carries_circuits_and_the_contact_record";
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    let mut first = RelayProc::start_at(&lab, None, 4001, (true, false), &[]);
    let mut second = RelayProc::start_at(&lab, None, 4002, (true, false), &[]);
    // Alpha is given both; bravo adopts both from the ticket. Both hold
    // reservations on both (`relays.reservations` is 2 by default).
    let (a, b) = joined(&lab, &[&first, &second], Transport::Tcp);
    let dump = DumpOnPanic(vec![&a, &b]);
    let a_id = a.peer_id();
    for n in [&a, &b] {
        for r in [&first, &second] {
            relay_state(n, r, "reserved", Duration::from_secs(30));
        }
    }
    let view = a.json(&["relays"]);
    assert_eq!(view["reservations"], 2, "{view}");
    let names_only = |want: &[&RelayProc]| {
        let want: Vec<String> = want.iter().map(|r| r.tcp_addr()).collect();
        move |row: Value| -> Option<()> {
            let have: Vec<String> = row["contact_relays"]
                .as_array()?
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            (have.len() == want.len() && want.iter().all(|w| have.contains(w))).then_some(())
        }
    };
    let both = names_only(&[&first, &second]);
    wait_for(
        "bravo to hold alpha's contact record naming both relays",
        || b.peer_row(&a_id).and_then(&both),
    );
    delivered(&b, "alpha", "through either", Duration::from_secs(60));
    // One relay dies for good.
    let killed = Instant::now();
    first.kill9();
    relay_state(&a, &first, "failing", Duration::from_secs(30));
    relay_state(&a, &second, "reserved", Duration::from_secs(1));
    eprintln!(
        "alpha: the dead relay failing and the other reserved {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    let row = relay_row(&a, &first);
    assert!(row["failing_since"].is_string(), "{row}");
    assert!(row["last_error"].is_string(), "{row}");
    assert!(row["reserved_since"].is_null(), "{row}");
    let s = a.status();
    for c in s["circuit_addrs"].as_array().unwrap() {
        assert!(
            c.as_str().unwrap().starts_with(&second.tcp_addr()),
            "circuits only through the live relay: {s}"
        );
    }
    // Alpha's members learn it: its new contact record names only the
    // live relay.
    let only_second = names_only(&[&second]);
    wait_for_within(
        "bravo to hold alpha's contact record naming only the live relay",
        Duration::from_secs(30),
        || b.peer_row(&a_id).and_then(&only_second),
    );
    eprintln!(
        "bravo holds alpha's new contact record {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    // Mail goes through the other.
    delivered(
        &b,
        "alpha",
        "through the live relay",
        Duration::from_secs(30),
    );
    let row = connection(&b, &a_id, "relayed", Duration::from_secs(30));
    assert_eq!(row["relay"], second.peer_id(), "{row}");
    // With both gone, `doctor` says no relay holds a reservation.
    second.kill9();
    relay_state(&a, &second, "failing", Duration::from_secs(30));
    let out = a.run(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doctor["ok"], false, "{doctor}");
    assert!(
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["status"] == "fail"
                && c["what"]
                    .as_str()
                    .unwrap()
                    .starts_with("no relay holds a reservation")),
        "{doctor}"
    );
    drop(dump);
}
