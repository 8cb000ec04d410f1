//! Laptops that sleep and move, behind the NAT lab's real NATs: a host
//! renumbered under its running daemon, and a daemon suspended (SIGSTOP)
//! for longer than the idle and keep-alive timeouts, while its teammate
//! keeps sending. Every message arrives, once.
//!
//! Alpha is behind an endpoint-independent NAT, bravo behind a symmetric
//! one, so the relay is the only way between them: what is measured is
//! the daemon finding its way back, not a direct connection that happened
//! to survive.
//!
//! Needs root, `ip` and `iptables`; skipped, saying why, where namespaces
//! can't be made (a failure under CI).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use agentmesh_tests::natlab::team::{
    DumpOnPanic, Transport, delivered, inbox_texts, joined, relay_row,
};
use agentmesh_tests::natlab::{HOST_A_IP, Host, Nat, RelayProc, lab_or_skip};
use agentmesh_tests::{Node, wait_for_within};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Host A's address after it moves.
const MOVED_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 3);

/// Waits (at most 30 s from `since`) until every message in `ids` that
/// `from` sent is delivered; how long after `since` the last was.
fn all_delivered(from: &Node, ids: &[String], since: Instant) -> Duration {
    for id in ids {
        let left = Duration::from_secs(30).saturating_sub(since.elapsed());
        wait_for_within(
            &format!("{}'s message {id} to be delivered", from.name),
            left,
            || {
                let e = from.outbox_entry(id);
                assert!(e["status"] != "failed" && e["status"] != "refused", "{e}");
                (e["status"] == "delivered").then_some(())
            },
        );
    }
    since.elapsed()
}

/// Each of `texts` is in `node`'s inbox exactly once.
fn each_once(node: &Node, texts: &[String]) {
    let inbox = inbox_texts(node);
    for t in texts {
        let n = inbox.iter().filter(|i| *i == t).count();
        assert_eq!(n, 1, "{t:?} arrived {n} times: {inbox:?}");
    }
}

#[test]
fn a_host_renumbered_under_its_daemon_is_reachable_again_and_every_message_arrives_once() {
    let test =
        "a_host_renumbered_under_its_daemon_is_reachable_again_and_every_message_arrives_once";
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    let relay = RelayProc::start_on(&lab, true, false, &[]);
    let (a, b) = joined(&lab, &[&relay], Transport::Tcp);
    let dump = DumpOnPanic(vec![&a, &b]);
    let mut texts = vec![];
    let mut ids = vec![];
    for i in 1..=2 {
        let t = format!("before the move {i}");
        delivered(&b, "alpha", &t, Duration::from_secs(60));
        texts.push(t);
    }
    // A laptop that moves has been on its network a while: its
    // connections are older than two dials crossing each other.
    std::thread::sleep(Duration::from_secs(6));
    let held = relay_row(&a, &relay)["reserved_since"].clone();
    assert!(held.is_string(), "alpha holds a reservation: {held}");
    // Alpha's laptop wakes on another network: its address changes under
    // the running daemon, and bravo goes on sending.
    let moved = Instant::now();
    lab.renumber(Host::A, HOST_A_IP, MOVED_IP).unwrap();
    for i in 1..=3 {
        let t = format!("while it moves {i}");
        ids.push(b.send("@alpha", &t));
        texts.push(t);
    }
    // Within 10 s it holds a new reservation, and (having dropped every
    // connection when its address went) it has dialled bravo again.
    let renewed = wait_for_within(
        "alpha to reserve again after the move",
        Duration::from_secs(10),
        || {
            let row = relay_row(&a, &relay);
            (row["state"] == "reserved" && row["reserved_since"] != held).then(|| moved.elapsed())
        },
    );
    let redialled = wait_for_within(
        "alpha to be connected to bravo again",
        Duration::from_secs(10).saturating_sub(moved.elapsed()),
        || {
            let row = a.peer_row(&b.peer_id())?;
            (row["connection"] != "none").then(|| moved.elapsed())
        },
    );
    let took = all_delivered(&b, &ids, moved);
    eprintln!(
        "after the move: alpha reserved again {:.1} s, connected to bravo again {:.1} s, the mail sent meanwhile delivered {:.1} s after it",
        renewed.as_secs_f64(),
        redialled.as_secs_f64(),
        took.as_secs_f64()
    );
    // It listens on the new address only.
    let status = a.status();
    let listening = status["listen_addrs"].to_string();
    assert!(listening.contains(&MOVED_IP.to_string()), "{status}");
    assert!(!listening.contains(&HOST_A_IP.to_string()), "{status}");
    let t = "after the move".to_owned();
    delivered(&b, "alpha", &t, Duration::from_secs(30));
    texts.push(t);
    each_once(&a, &texts);
    drop(dump);
}

#[test]
fn a_daemon_suspended_for_70_s_gets_what_was_sent_meanwhile_within_30_s_of_sigcont() {
    let test = "a_daemon_suspended_for_70_s_gets_what_was_sent_meanwhile_within_30_s_of_sigcont";
    let Some(lab) = lab_or_skip(test, Nat::EndpointIndependent, Nat::Symmetric) else {
        return;
    };
    let relay = RelayProc::start_on(&lab, true, false, &[]);
    let (a, b) = joined(&lab, &[&relay], Transport::Tcp);
    let dump = DumpOnPanic(vec![&a, &b]);
    let mut texts = vec!["before the sleep".to_owned()];
    delivered(&b, "alpha", &texts[0], Duration::from_secs(60));
    let pid = Pid::from_raw(a.pid());
    // The lid closes: longer than the idle (60 s) and ping (15 s every,
    // 20 s to answer) timeouts, so every connection to it is given up.
    kill(pid, Signal::SIGSTOP).unwrap();
    let asleep = Instant::now();
    let mut ids = vec![];
    for i in 1..=3 {
        let t = format!("while it sleeps {i}");
        ids.push(b.send("@alpha", &t));
        texts.push(t);
    }
    // What is under test is 70 s of sleep, not a wait for something.
    std::thread::sleep(Duration::from_secs(70).saturating_sub(asleep.elapsed()));
    for id in &ids {
        let e = b.outbox_entry(id);
        assert_ne!(e["status"], "delivered", "alpha sleeps: {e}");
    }
    kill(pid, Signal::SIGCONT).unwrap();
    let woke = Instant::now();
    let took = all_delivered(&b, &ids, woke);
    eprintln!(
        "the mail sent during 70 s of sleep delivered {:.1} s after SIGCONT",
        took.as_secs_f64()
    );
    let t = "after the sleep".to_owned();
    delivered(&b, "alpha", &t, Duration::from_secs(30));
    texts.push(t);
    each_once(&a, &texts);
    drop(dump);
}
