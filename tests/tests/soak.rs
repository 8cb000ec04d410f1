//! The crash soak (`agentmesh-bench soak`): its schedule is the seed's,
//! its checker sees each kind of breach it guards against, and a short
//! soak of real daemons, a relay and MCP agents under kills, a relay
//! kill, a suspension and a revocation breaks none.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::Duration;

use agentmesh_node::api::{MessageKind, MessageState, MessageView, OutboxView};
use agentmesh_node::mail::broadcast_copy_id;
use agentmesh_tests::soak::check::{
    Accepted, Judgment, Kill, MachineEnd, Revocation, Run, UNRECORDED_WITHIN, check,
};
use agentmesh_tests::soak::{self, Fault, NAMES, SUSPEND_FOR, schedule};
use serde_json::json;

#[test]
fn a_seed_fixes_the_schedule_and_the_schedule_keeps_its_rules() {
    assert_eq!(schedule(42, 120), schedule(42, 120));
    assert_ne!(schedule(42, 120), schedule(43, 120));
    for seed in 0..200 {
        let s = schedule(seed, 120);
        let suspends: Vec<_> = s
            .iter()
            .filter_map(|(at, f)| match f {
                Fault::Suspend { node } => Some((*at, *node)),
                _ => None,
            })
            .collect();
        assert_eq!(suspends.len(), 1, "seed {seed}: {s:?}");
        let (asleep_at, asleep) = suspends[0];
        assert_ne!(asleep, 0, "the founder is never suspended (it revokes)");
        assert_eq!(
            s.iter().filter(|(_, f)| *f == Fault::Revoke).count(),
            1,
            "seed {seed}"
        );
        for (at, f) in &s {
            if let Fault::Kill { node, .. } = f {
                let during = *at >= asleep_at && *at < asleep_at + SUSPEND_FOR;
                assert!(
                    !(during && *node == asleep),
                    "seed {seed}: {f:?} at {at:?} hits the suspended daemon"
                );
            }
        }
        assert!(
            s.len() >= 15,
            "seed {seed}: a 2-minute soak has faults enough: {s:?}"
        );
        assert!(s.last().unwrap().0 < Duration::from_secs(120));
    }
}

fn message(id: &str, from: &str, read: bool) -> MessageView {
    serde_json::from_value(json!({
        "id": id, "seq": 1, "from": from, "who": {"kind": "agent", "name": "a"},
        "kind": "tell", "thread": id, "text": "t", "received_at": "2026-12-07T00:00:00Z",
        "read": read, "mailbox": "agent", "hop": 1, "taint": false,
    }))
    .unwrap()
}

fn sent(id: &str, to: &str, states: &[&str]) -> OutboxView {
    let states: Vec<_> = states
        .iter()
        .map(|s| json!({"state": s, "at": "2026-12-07T00:00:00Z"}))
        .collect();
    serde_json::from_value(json!({
        "id": id, "to": to, "kind": "tell", "status": states.last().unwrap()["state"],
        "states": states, "held": false, "attempts": 1, "created_at": "2026-12-07T00:00:00Z",
    }))
    .unwrap()
}

fn machine(name: &str, outbox: Vec<OutboxView>, inbox: Vec<MessageView>) -> MachineEnd {
    MachineEnd {
        name: name.into(),
        outbox,
        inbox,
        ..MachineEnd::default()
    }
}

/// Alpha sent m1 to bravo, delivered and read there: nothing wrong.
fn clean_run() -> Run {
    Run {
        machines: vec![
            machine(
                "alpha",
                vec![sent("m1", "agent@bravo", &["queued", "delivered", "read"])],
                vec![],
            ),
            machine("bravo", vec![], vec![message("m1", "agent@alpha", true)]),
        ],
        accepted: vec![Accepted {
            id: "m1".into(),
            from: 0,
            started: Duration::from_secs(1),
            broadcast: false,
        }],
        revocation: None,
        kills: vec![],
    }
}

#[test]
fn the_checker_passes_a_clean_run_and_names_each_kind_of_breach() {
    let v = check(&clean_run());
    assert!(v.clean(), "{v:?}");
    assert_eq!((v.messages, v.delivered_once), (1, 1));

    // Held twice by the recipient.
    let mut r = clean_run();
    r.machines[1].inbox.push(message("m1", "agent@alpha", true));
    let v = check(&r);
    assert_eq!(v.duplicates, 1, "{v:?}");
    assert!(v.violations[0].contains("held 2 times"), "{v:?}");

    // Taken twice by the agent.
    let mut r = clean_run();
    r.machines[1].taken = vec!["m1".into(), "m1".into()];
    assert_eq!(check(&r).duplicates, 1);

    // Never arrived, and the outbox still says queued.
    let mut r = clean_run();
    r.machines[1].inbox.clear();
    r.machines[0].outbox = vec![sent("m1", "agent@bravo", &["queued"])];
    let v = check(&r);
    assert_eq!((v.lost, v.false_receipts), (1, 0), "{v:?}");

    // Delivered and read were shown, but bravo holds nothing.
    let mut r = clean_run();
    r.machines[1].inbox.clear();
    let v = check(&r);
    assert_eq!(v.false_receipts, 2, "{v:?}");

    // Read was shown for a message bravo holds unread.
    let mut r = clean_run();
    r.machines[1].inbox = vec![message("m1", "agent@alpha", false)];
    let v = check(&r);
    assert_eq!((v.false_receipts, v.lost), (1, 0), "{v:?}");

    // The agent was told read (by message_status, say) for a message
    // bravo holds unread, though the outbox history never said read.
    let mut r = clean_run();
    r.machines[0].outbox = vec![sent("m1", "agent@bravo", &["queued", "delivered"])];
    r.machines[1].inbox = vec![message("m1", "agent@alpha", false)];
    assert!(check(&r).clean());
    r.machines[0].shown = vec![("m1".into(), MessageState::Read)];
    let v = check(&r);
    assert_eq!(v.false_receipts, 1, "{v:?}");
    assert!(v.violations[0].contains("the agent was told read"), "{v:?}");

    // A tool said accepted, and the sender's outbox lost it.
    let mut r = clean_run();
    r.machines[0].outbox.clear();
    r.machines[1].inbox.clear();
    let v = check(&r);
    assert_eq!(v.lost, 1, "{v:?}");
    assert!(v.violations[0].contains("not in its outbox"), "{v:?}");

    // Bravo holds a message alpha's outbox has no record of.
    let mut r = clean_run();
    r.machines[0].outbox.clear();
    r.accepted.clear();
    let v = check(&r);
    assert_eq!(v.lost, 1, "{v:?}");
    assert!(
        v.violations[0].contains("whose outbox does not have it"),
        "{v:?}"
    );
}

/// A send leaves while its outbox write is flushed and is answered once
/// the flush ends: a SIGKILL of its sender in between leaves a copy at
/// the recipient, no record at the sender, and no tool result with its
/// id. The checker allows exactly that and nothing near it.
#[test]
fn the_checker_allows_a_copy_with_no_record_only_from_a_sender_killed_as_it_sent() {
    let sent_at = "2026-12-07T10:00:00Z";
    let t = humantime::parse_rfc3339(sent_at).unwrap();
    // Bravo holds m1 from alpha, sent at `sent_at`; alpha's outbox has no
    // record of it; `killed`: (machine, seconds after sent_at).
    let run = |killed: Option<(usize, u64)>, accepted: bool| {
        let mut r = clean_run();
        r.machines[0].outbox.clear();
        r.machines[1].inbox[0].sent_at = Some(sent_at.into());
        if !accepted {
            r.accepted.clear();
        }
        r.kills = killed
            .map(|(node, after)| Kill {
                node,
                at: t + Duration::from_secs(after),
            })
            .into_iter()
            .collect();
        r
    };
    let v = check(&run(Some((0, 1)), false));
    assert!(v.clean(), "{v:?}");
    assert_eq!((v.unrecorded, v.lost), (1, 0), "{v:?}");
    // The margin's edge: killed within the second sent_at names, plus
    // the margin.
    let edge = 1 + UNRECORDED_WITHIN.as_secs();
    assert!(check(&run(Some((0, edge)), false)).clean());
    // Killed long after: the record was durable by then, so it was lost.
    let v = check(&run(Some((0, edge + 1)), false));
    assert_eq!((v.unrecorded, v.lost), (0, 1), "{v:?}");
    // Killed before it was sent (the second before sent_at names).
    let mut r = run(None, false);
    r.kills = vec![Kill {
        node: 0,
        at: t - Duration::from_millis(500),
    }];
    assert_eq!(check(&r).lost, 1);
    // A broadcast copy leaves only once durable: no window for it.
    let mut r = run(Some((0, 1)), false);
    r.machines[1].inbox[0].kind = MessageKind::Broadcast;
    let v = check(&r);
    assert_eq!((v.unrecorded, v.lost), (0, 1), "{v:?}");
    assert!(v.violations[0].contains("only once durable"), "{v:?}");
    // Not killed at all, or only the recipient was.
    assert_eq!(check(&run(None, false)).lost, 1);
    let v = check(&run(Some((1, 1)), false));
    assert_eq!((v.unrecorded, v.lost), (0, 1), "{v:?}");
    assert!(
        v.violations[0].contains("no SIGKILL of its sender"),
        "{v:?}"
    );
    // A tool said accepted: durable, kill or not (and counted twice: the
    // accepted id and the copy with no record).
    let v = check(&run(Some((0, 1)), true));
    assert_eq!((v.unrecorded, v.lost), (0, 2), "{v:?}");
    assert!(
        v.violations
            .iter()
            .any(|b| b.contains("a tool result gave its id")),
        "{v:?}"
    );
    // No time of sending: nothing to hold a kill to.
    let mut r = run(Some((0, 1)), false);
    r.machines[1].inbox[0].sent_at = None;
    assert_eq!(check(&r).lost, 1);
}

#[test]
fn the_checker_finds_a_broadcast_copy_under_its_mailboxs_id_once() {
    // Alpha's broadcast copy b1 went to bravo, whose judge delivered it
    // to agent@bravo (under the copy's id for that mailbox) and dropped
    // it for the owner's mailbox.
    let mut copy = sent("b1", "@bravo", &["queued", "delivered"]);
    copy.kind = MessageKind::Broadcast;
    let judged = |mailbox: &str, delivered| Judgment {
        at: "2026-12-07T00:00:00Z".into(),
        id: "b1".into(),
        mailbox: mailbox.into(),
        delivered,
    };
    let held_as = broadcast_copy_id("b1", Some("agent"));
    let run = |inbox: Vec<MessageView>, judgments: Vec<Judgment>| Run {
        machines: vec![
            machine("alpha", vec![copy.clone()], vec![]),
            MachineEnd {
                judgments,
                ..machine("bravo", vec![], inbox)
            },
        ],
        ..Run::default()
    };
    let once = vec![judged("agent@bravo", true), judged("@bravo", false)];
    let v = check(&run(
        vec![message(&held_as, "agent@alpha", false)],
        once.clone(),
    ));
    assert!(v.clean(), "{v:?}");
    assert_eq!(v.delivered_once, 1);
    // Judged delivered, and the inbox does not have it.
    assert_eq!(check(&run(vec![], once.clone())).lost, 1);
    // Judged twice for one mailbox.
    let mut twice = once.clone();
    twice.push(judged("agent@bravo", true));
    let v = check(&run(vec![message(&held_as, "agent@alpha", false)], twice));
    assert_eq!(v.duplicates, 1, "{v:?}");
    // Never judged there, though delivered was shown: a false receipt
    // (and a loss).
    let v = check(&run(vec![], vec![]));
    assert_eq!((v.false_receipts, v.lost), (1, 1), "{v:?}");
}

#[test]
fn the_checker_holds_a_revoked_machine_to_the_moment_each_member_knew() {
    // Bravo is revoked; alpha counted it revoked from 10 s in.
    let run = |started: u64, refuses: Option<bool>| Run {
        machines: vec![
            MachineEnd {
                refuses_revoked: refuses,
                ..machine("alpha", vec![], vec![message("r1", "agent@bravo", false)])
            },
            machine(
                "bravo",
                vec![sent("r1", "agent@alpha", &["queued", "delivered"])],
                vec![],
            ),
        ],
        accepted: vec![Accepted {
            id: "r1".into(),
            from: 1,
            started: Duration::from_secs(started),
            broadcast: false,
        }],
        revocation: Some(Revocation {
            node: 1,
            known_at: vec![Some(Duration::from_secs(10)), None],
        }),
        kills: vec![],
    };
    // Sent before alpha knew: allowed.
    let v = check(&run(9, Some(true)));
    assert!(v.clean(), "{v:?}");
    assert_eq!(v.involving_revoked, 1);
    // Sent after: a breach.
    let v = check(&run(11, Some(true)));
    assert_eq!(v.revocation_breaches, 1, "{v:?}");
    // At the end alpha is still connected to it (or does not count it
    // revoked): a breach.
    let v = check(&run(9, Some(false)));
    assert_eq!(v.revocation_breaches, 1, "{v:?}");

    // A broadcast of bravo's, its copy judged at alpha: held to the time
    // its broadcast (the copy's thread) began.
    let broadcast = |started: u64| {
        let mut r = run(started, Some(true));
        let mut copy = sent("c1", "@alpha", &["queued", "delivered"]);
        copy.kind = MessageKind::Broadcast;
        copy.thread = Some("r1".into());
        r.machines[1].outbox = vec![copy];
        r.machines[0].inbox.clear();
        r.machines[0].judgments = vec![Judgment {
            at: "2026-12-07T00:00:00Z".into(),
            id: "c1".into(),
            mailbox: "agent@alpha".into(),
            delivered: false,
        }];
        r.accepted[0].broadcast = true;
        check(&r)
    };
    assert!(broadcast(9).clean(), "{:?}", broadcast(9));
    assert_eq!(broadcast(11).revocation_breaches, 1, "{:?}", broadcast(11));

    // Alpha accepted a message to bravo after it counted bravo revoked.
    let to_revoked = |started: u64| {
        let mut r = run(started, Some(true));
        r.machines[0].inbox.clear();
        r.machines[1].outbox.clear();
        r.machines[0].outbox = vec![sent("t1", "agent@bravo", &["queued"])];
        r.accepted = vec![Accepted {
            id: "t1".into(),
            from: 0,
            started: Duration::from_secs(started),
            broadcast: false,
        }];
        check(&r)
    };
    assert!(to_revoked(9).clean(), "{:?}", to_revoked(9));
    assert_eq!(to_revoked(11).revocation_breaches, 1);
}

/// The short soak: 40 s of agents' traffic under the seed's faults, with
/// real daemons, a relay and `agentmesh mcp` sessions; the 2-minute form
/// runs in `.ci/run` on a release build.
#[test]
fn a_short_soak_of_kills_a_suspension_and_a_revocation_breaks_no_invariant() {
    let f = soak::run(40, 7);
    let v = &f.verdict;
    assert!(v.clean(), "seed 7 broke an invariant: {v:#?}");
    let (c, t) = (&f.faults, &f.traffic);
    assert!(c.kills >= 3 && c.relay_kills >= 1, "{c:?}");
    assert_eq!((c.suspends, c.revocations), (1, 1), "{c:?}");
    assert!(
        t.tells > 0 && t.asks > 0 && t.replies > 0 && t.broadcasts > 0,
        "{t:?}"
    );
    assert!(t.taken > 0, "{t:?}");
    assert!(v.messages >= 50 && v.delivered_once >= 40, "{v:?}");
    assert!(v.involving_revoked > 0, "{v:?}");
    // Every member was seen counting delta revoked; delta is the one
    // without a time.
    for (name, seen) in NAMES.iter().zip(&f.revocation_seen_s) {
        assert_eq!(
            seen.is_none(),
            *name == "delta",
            "{name}: {:?}",
            f.revocation_seen_s
        );
    }
}
