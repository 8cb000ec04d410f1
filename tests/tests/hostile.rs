//! The hostile-input table: every way found to push at a daemon, run
//! against a real one while an honest member keeps sending it mail. Each
//! row asserts the exact refusal; at the end the daemon's memory and store
//! must be under stated bounds, the audit log short, and every honest
//! message delivered exactly once.
//!
//! The hostile parties are small libp2p programs in this process
//! (`agentmesh_tests::hostile`): a stranger with its own identity, a member
//! (a real member's key, its daemon stopped), a revoked member, floods of
//! fresh identities, and raw streams that send bytes no codec would.
//!
//! The second round of hostile findings has rows here (replies that
//! escaped loop safety, addresses carrying escape sequences, names that
//! are not one line) and, where a row needs parts this table doesn't
//! run, tests of their own beside the honest traffic that must still
//! flow: a stranger aiming hole punching (`relayed.rs`, through a real
//! relay), a folder reading another's mailbox (`hooks.rs`, `agents.rs`),
//! 300 MCP sessions beside commands and hooks (`sessions.rs`, `socket.rs`),
//! setup touching a person's own entries (`setup.rs`), and the relay's own
//! (`relay/tests/`).
//!
//! The third round's findings are rows of the suites of their parts, each
//! with the honest use beside it: a wake run's output choosing the next
//! run's flags (`wake_runs.rs`: stand-ins print `session id: --last` and
//! `--help`), another user taking the web page's sign-in or replaying its
//! cookie, and a csrf value made from the cookie (`ui.rs`, as `nobody`
//! under root), taint washed through the owner's mailbox (`taint.rs`),
//! one member's broadcasts holding back another's (`broadcast.rs`), a
//! recipient's reason reaching an agent unframed (`agents.rs`), and idle
//! request-only clients keeping commands out (`socket.rs`).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::codes::ErrorCode;
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use agentmesh_node::api::{WhoKind, ops};
use agentmesh_node::net::{JOIN_PROTOCOL, MAIL_PROTOCOL, SYNC_PROTOCOL};
use agentmesh_node::wire::{JoinMsg, JoinReply, MailOutcome, SyncReply, SyncRequest};
use agentmesh_protocol::join::JoinRequest;
use agentmesh_protocol::team::TeamId;
use agentmesh_protocol::{Identity, Name, Owner, PeerId, Timestamp, Wire};
use agentmesh_tests::hostile::{
    Flood, Peer, SyncAnswer, dir_bytes, envelope, identity_of, peak_rss_mib, raw_request,
    with_version,
};
use agentmesh_tests::{ApiClient, Node, team, wait_for, who};

/// The daemon's peak memory may not pass this during the table (a debug
/// build idles at about 60 MiB; one oversized reply used to take it to
/// 300).
const MAX_PEAK_MIB: f64 = 200.0;
/// Its store may not grow by more than this.
const MAX_STORE_GROWTH: u64 = 2 * 1024 * 1024;
/// Audit entries the whole table's rows may cause, besides the honest
/// mail's own: a handful per row, and the agents' rows' own folders and
/// local mail (about 50: an `allow` per folder, `accepted` and `received`
/// per message).
const MAX_AUDIT_ENTRIES: usize = 180;

struct Ctx {
    alpha: Node,
    alpha_id: Identity,
    alpha_peer: PeerId,
    addr: libp2p::Multiaddr,
    team: TeamId,
    mallory: Identity,
    rex: Identity,
    bravo_id: Identity,
}

fn now() -> Timestamp {
    agentmesh_node::clock::now()
}

fn outcome(reply: Result<agentmesh_node::wire::MailReply, String>) -> Vec<MailOutcome> {
    reply.expect("an answer").outcomes
}

fn refused_code(o: &MailOutcome) -> &str {
    match o {
        MailOutcome::Refused { code, .. } => code,
        other => panic!("not refused: {other:?}"),
    }
}

fn forged_join(stranger: &Identity, ticket_nonce: [u8; 16]) -> JoinMsg {
    JoinMsg::Request(
        JoinRequest {
            ticket_nonce,
            joiner: stranger.peer_id(),
            x25519: stranger.x25519_public(),
            name: Name::parse("machine name", "mallet").unwrap(),
            owner: Owner::parse("Mallet").unwrap(),
            nonce: [2; 16],
        }
        .to_bytes(),
    )
}

/// Join requests the founder's desk took (audited as `join_requested`).
fn joins_filed(n: &Node) -> usize {
    n.json(&["audit"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "join_requested")
        .count()
}

type Row = (&'static str, fn(&Ctx));

/// A folder under alpha's home, opted in as mailbox `name`; a client
/// attached to it, as an agent.
fn agent_mailbox(c: &Ctx, name: &str) -> ApiClient {
    let dir = c.alpha.home().join("work").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    c.alpha
        .ok(&["allow", dir.to_str().unwrap(), "--mailbox", name]);
    ApiClient::attach(&c.alpha, who(WhoKind::Agent, name), Some(name))
}

/// The id of the newest message in alpha's `mailbox`.
fn newest_id(c: &Ctx, mailbox: &str) -> String {
    let inbox = c.alpha.json(&["inbox", "--mailbox", mailbox]);
    inbox.as_array().unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Whether alpha's audit log has an entry of `event` from `sender`.
fn audited(c: &Ctx, event: &str, sender: &str) -> bool {
    c.alpha
        .json(&["audit"])
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["event"] == event && e["sender"] == sender)
}

fn rows() -> Vec<Row> {
    vec![
        (
            "agents: two mailboxes replying to each other stop at the turn limit",
            |c| {
                let mut ping = agent_mailbox(c, "ping");
                let mut pong = agent_mailbox(c, "pong");
                ping.send("pong@", "shall we talk for ever?").unwrap();
                // Ten rounds asked for; the seventh reply of either is refused
                // (each may reply 6 times in a thread until its person speaks).
                let mut refused = None;
                for round in 0..10 {
                    let to_pong = newest_id(c, "pong");
                    if let Err(e) = pong.reply(&to_pong, &format!("pong {round}")) {
                        refused = Some((round, "pong", e));
                        break;
                    }
                    let to_ping = newest_id(c, "ping");
                    if let Err(e) = ping.reply(&to_ping, &format!("ping {round}")) {
                        refused = Some((round, "ping", e));
                        break;
                    }
                }
                let (round, who, e) = refused.expect("a 10-round ping-pong was stopped");
                assert_eq!((round, who), (6, "pong"), "{e}");
                assert_eq!(e.code(), Some(ErrorCode::TurnLimit), "{e}");
                assert!(
                    e.to_string().contains("replied 6 times in this thread"),
                    "{e}"
                );
                assert!(audited(c, "turn_limit", "pong@alpha"));
                // Its person speaks (the prompt hook's reset): it may answer again.
                pong.call(ops::HopReset { mailbox: None }).unwrap();
                pong.reply(&newest_id(c, "pong"), "my person says: enough")
                    .unwrap();
            },
        ),
        (
            "agents: a reply answers only its own mailbox's mail, only to its sender",
            |c| {
                let mut asker = agent_mailbox(c, "asker");
                let mut held = agent_mailbox(c, "holder");
                let mut xray = agent_mailbox(c, "xray");
                agent_mailbox(c, "third");
                asker.send("holder@", "a hop-0 question").unwrap();
                let theirs = newest_id(c, "holder");
                // Another mailbox's message can't be answered from xray (once,
                // a mailbox at its hop limit wrote hop-0 mail this way)...
                let e = xray.reply(&theirs, "laundered to the asker").unwrap_err();
                assert_eq!(e.code(), Some(ErrorCode::UnknownMessage), "{e}");
                // ...and aiming it elsewhere tells xray nothing of it (its
                // sender included): the answer is that of no such message.
                let e = xray
                    .call(ops::Send {
                        to: "third@".into(),
                        text: "who wrote it?".into(),
                        ask: false,
                        reply_to: Some(theirs.clone()),
                        from_mailbox: None,
                        wait_first_answer_ms: None,
                    })
                    .unwrap_err();
                assert_eq!(e.code(), Some(ErrorCode::UnknownMessage), "{e}");
                assert!(!e.to_string().contains("asker"), "{e}");
                // ...nor can a reply be aimed at anyone but the sender.
                let e = held
                    .call(ops::Send {
                        to: "third@".into(),
                        text: "a reply that goes elsewhere".into(),
                        ask: false,
                        reply_to: Some(theirs.clone()),
                        from_mailbox: None,
                        wait_first_answer_ms: None,
                    })
                    .unwrap_err();
                assert_eq!(e.code(), Some(ErrorCode::NotTheSender), "{e}");
                assert!(
                    c.alpha
                        .json(&["inbox", "--mailbox", "third"])
                        .as_array()
                        .unwrap()
                        .is_empty()
                );
                // The honest reply goes.
                held.reply(&theirs, "the answer").unwrap();
                assert_eq!(
                    c.alpha
                        .json(&["inbox", "--mailbox", "asker"])
                        .as_array()
                        .unwrap()
                        .len(),
                    1
                );
            },
        ),
        (
            "stranger: addresses with escape sequences and bad DNS names",
            |c| {
                use libp2p::multiaddr::Protocol;
                let p = Peer::new(&Identity::generate(&mut rand::rng()), SyncAnswer::InSync);
                let dns = |name: &str| {
                    libp2p::Multiaddr::empty()
                        .with(Protocol::Dns4(name.to_owned().into()))
                        .with(Protocol::Tcp(4001))
                };
                // Retitle, clear, write the clipboard (OSC 52); reverse a line.
                p.announce(dns("a\x1b]0;pwned\x07\x1b[2J\x1b]52;c;aGk=\x07.example"));
                p.announce(dns("evil\u{202E}moc.example"));
                p.announce(dns("under_score.example"));
                p.announce(dns("fine.example"));
                p.dial(&c.addr).unwrap();
                let me = p.peer_id.to_string();
                let row = wait_for("alpha to list the stranger's clean address", || {
                    let peers = c.alpha.json(&["peers"]);
                    peers
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| {
                            r["peer_id"] == me.as_str()
                                && r["addresses"].to_string().contains("fine.example")
                        })
                        .cloned()
                });
                let addresses = row["addresses"].to_string();
                for bad in [r"\u001b", "pwned", "\u{202e}", "under_score"] {
                    assert!(
                        !addresses.to_lowercase().contains(bad),
                        "{bad} in {addresses}"
                    );
                }
                let text = c.alpha.ok(&["peers"]);
                assert!(
                    !text.contains('\x1b') && !text.contains('\u{202E}'),
                    "{text:?}"
                );
                p.disconnect(c.alpha_peer);
            },
        ),
        ("stranger: sync digest naming the team", |c| {
            let p = Peer::new(
                &Identity::generate(&mut rand::rng()),
                SyncAnswer::Huge(8 << 20),
            );
            p.dial(&c.addr).unwrap();
            let r = p
                .sync(
                    c.alpha_peer,
                    SyncRequest::Digest {
                        team: c.team.0.to_vec(),
                        digest: vec![0; 32],
                        contacts: vec![],
                        directory: vec![],
                    },
                )
                .unwrap();
            assert!(
                matches!(&r, SyncReply::Refused(w) if w.contains("not a member")),
                "{r:?}"
            );
            let r = p
                .sync(
                    c.alpha_peer,
                    SyncRequest::Fetch {
                        team: c.team.0.to_vec(),
                        hashes: vec![serde_bytes::ByteBuf::from(vec![1; 32])],
                    },
                )
                .unwrap();
            assert!(
                matches!(&r, SyncReply::Refused(w) if w.contains("not a member")),
                "{r:?}"
            );
            // Its mail is answered busy, never opened, and sends alpha to
            // ask a member about it, never the stranger.
            let r = outcome(p.mail(c.alpha_peer, vec![vec![0xa1; 300]; 3]));
            assert_eq!(r, vec![MailOutcome::Busy; 3]);
            let r = outcome(p.mail(c.alpha_peer, vec![vec![1; 8]; 257]));
            assert!(r.is_empty(), "an oversized batch gets an empty answer");
            c.alpha.ok(&["status"]);
            assert!(
                p.received().is_empty(),
                "alpha sent the stranger {:?}",
                p.received()
            );
        }),
        ("stranger: join poll and forged ticket", |c| {
            let me = Identity::generate(&mut rand::rng());
            let p = Peer::new(&me, SyncAnswer::InSync);
            p.dial(&c.addr).unwrap();
            let r = p.join(c.alpha_peer, JoinMsg::Poll(vec![9; 16])).unwrap();
            assert!(
                matches!(&r, JoinReply::Refused(w) if w.contains("no such join request")),
                "{r:?}"
            );
            let r = p.join(c.alpha_peer, forged_join(&me, [1; 16])).unwrap();
            assert!(
                matches!(&r, JoinReply::Refused(w) if w.contains("unknown or was already used")),
                "{r:?}"
            );
        }),
        ("stranger: truncated and oversized raw requests", |c| {
            for (proto, bytes) in [
                (MAIL_PROTOCOL, vec![0x81, 0x58]), // a list, then a cut byte string
                (SYNC_PROTOCOL, vec![0xa1, 0x66, 0x44]), // a map, then a cut key
                (JOIN_PROTOCOL, vec![0xff]),
                (MAIL_PROTOCOL, vec![0x40; 2 << 20]), // 2 MiB, over the 1 MiB limit
                (SYNC_PROTOCOL, vec![0x40; 2 << 20]),
                (JOIN_PROTOCOL, vec![0x40; 64 << 10]), // over the 8 KiB limit
            ] {
                // Refused unread: the stream ends (or is reset) without a
                // byte of answer.
                let r = raw_request(&c.addr, proto.clone(), bytes.clone());
                assert!(
                    r.as_ref().map_or(true, Vec::is_empty),
                    "{proto} {} bytes were answered: {r:?}",
                    bytes.len()
                );
            }
        }),
        (
            "member: malformed, wrong version, forged signature, wrong sender",
            |c| {
                let p = Peer::new(&c.mallory, SyncAnswer::InSync);
                p.dial(&c.addr).unwrap();
                let good = |text: &str| {
                    envelope(
                        &c.mallory,
                        &c.alpha_id,
                        c.team,
                        text,
                        now(),
                        Duration::from_secs(3600),
                    )
                    .to_wire()
                };
                let mut forged = good("forged");
                let n = forged.len();
                forged[n - 1] ^= 1;
                let someone_else = envelope(
                    &c.bravo_id,
                    &c.alpha_id,
                    c.team,
                    "not mine",
                    now(),
                    Duration::from_secs(3600),
                )
                .to_wire();
                let r = outcome(p.mail(
                    c.alpha_peer,
                    vec![
                        vec![0xa1; 50],
                        with_version(&good("v2"), 2),
                        forged,
                        someone_else,
                    ],
                ));
                let codes: Vec<&str> = r.iter().map(refused_code).collect();
                assert_eq!(
                    codes,
                    [
                        "Malformed",
                        "UnsupportedVersion",
                        "BadSignature",
                        "sender_mismatch"
                    ]
                );
            },
        ),
        (
            "member: a replay is a duplicate, an expired envelope is refused",
            |c| {
                let p = Peer::new(&c.mallory, SyncAnswer::InSync);
                p.dial(&c.addr).unwrap();
                let e = envelope(
                    &c.mallory,
                    &c.alpha_id,
                    c.team,
                    "once",
                    now(),
                    Duration::from_secs(3600),
                )
                .to_wire();
                let r = outcome(p.mail(c.alpha_peer, vec![e.clone()]));
                assert_eq!(r, vec![MailOutcome::accepted(false)]);
                let r = outcome(p.mail(c.alpha_peer, vec![e]));
                assert_eq!(r, vec![MailOutcome::Duplicate]);
                let old = now().saturating_sub(Duration::from_secs(3 * 86_400));
                let e = envelope(
                    &c.mallory,
                    &c.alpha_id,
                    c.team,
                    "late",
                    old,
                    Duration::from_secs(86_400),
                )
                .to_wire();
                let r = outcome(p.mail(c.alpha_peer, vec![e]));
                assert_eq!(refused_code(&r[0]), "Expired");
            },
        ),
        ("member: 5,120 garbage envelopes", |c| {
            let p = Peer::new(&c.mallory, SyncAnswer::InSync);
            p.dial(&c.addr).unwrap();
            for _ in 0..20 {
                let r = outcome(p.mail(c.alpha_peer, vec![vec![0xa1; 100]; 256]));
                assert!(r.iter().all(|o| refused_code(o) == "Malformed"));
            }
        }),
        ("member: sync replies of 8 MiB", |c| {
            for _ in 0..4 {
                let p = Peer::new(&c.mallory, SyncAnswer::Huge(8 << 20));
                p.dial(&c.addr).unwrap();
                wait_for("alpha to sync with mallory and drop it", || {
                    p.received()
                        .iter()
                        .any(|r| matches!(r, agentmesh_tests::hostile::Received::Disconnected))
                        .then_some(())
                });
            }
        }),
        (
            "revoked member: mail refused with the reason, once per grace",
            |c| {
                let p = Peer::new(&c.rex, SyncAnswer::InSync);
                p.dial(&c.addr).unwrap();
                let e = envelope(
                    &c.rex,
                    &c.alpha_id,
                    c.team,
                    "still here",
                    now(),
                    Duration::from_secs(3600),
                )
                .to_wire();
                let r = outcome(p.mail(c.alpha_peer, vec![e]));
                assert_eq!(refused_code(&r[0]), "revoked");
                let r = p.sync(
                    c.alpha_peer,
                    SyncRequest::Digest {
                        team: c.team.0.to_vec(),
                        digest: vec![0; 32],
                        contacts: vec![],
                        directory: vec![],
                    },
                );
                assert!(
                    matches!(&r, Ok(SyncReply::Refused(w)) if w.contains("revoked")),
                    "{r:?}"
                );
            },
        ),
        (
            "join flood: 60 fresh identities with forged tickets, one asking 6 times",
            |c| {
                for _ in 0..60 {
                    let me = Identity::generate(&mut rand::rng());
                    let p = Peer::new(&me, SyncAnswer::InSync);
                    p.dial(&c.addr).unwrap();
                    let r = p
                        .join(c.alpha_peer, forged_join(&me, rand::random()))
                        .unwrap();
                    assert!(
                        matches!(&r, JoinReply::Refused(w) if w.contains("unknown or was already used")),
                        "{r:?}"
                    );
                }
                let me = Identity::generate(&mut rand::rng());
                let p = Peer::new(&me, SyncAnswer::InSync);
                p.dial(&c.addr).unwrap();
                let answers: Vec<JoinReply> = (0..6)
                    .map(|_| {
                        p.join(c.alpha_peer, forged_join(&me, rand::random()))
                            .unwrap()
                    })
                    .collect();
                assert!(
                    matches!(&answers[5], JoinReply::Refused(w) if w.contains("too many join requests")),
                    "{answers:?}"
                );
            },
        ),
        ("connection flood: 300 strangers", |c| {
            let flood = Flood::connect(&c.addr, 300);
            wait_for("the flood to be held to the strangers' limit", || {
                (flood.established() <= agentmesh_node::net::MAX_CONNECTIONS as usize).then_some(())
            });
            // It filled the strangers' share, no more; the rest were
            // turned away at the handshake or right after it.
            assert!(flood.established() >= 200, "{flood:?}");
        }),
        ("relay claims: 150 strangers saying they are relays", |c| {
            let flood = Flood::claiming_relay(&c.addr, 150);
            wait_for("them to be listed", || {
                (c.alpha.count_peers("relay") >= 100).then_some(())
            });
            drop(flood);
        }),
        (
            "a hostile founder: a ticket to a peer answering joins with 8 MiB",
            |_| {
                let founder = Identity::generate(&mut rand::rng());
                let p = Peer::new(&founder, SyncAnswer::Huge(8 << 20));
                let at = p.listen().unwrap();
                let ticket = agentmesh_protocol::ticket::Ticket {
                    founder: founder.peer_id(),
                    addrs: vec![at],
                    nonce: [5; 16],
                    expires_at: now().saturating_add(Duration::from_secs(600)),
                }
                .to_string();
                let mut joiner = Node::new("hopeful");
                joiner.start();
                let pid = joiner.pid();
                let mut j = joiner.pty(&["join", &ticket]);
                j.exp_string("could not reach the founder").unwrap();
                j.exp_eof().unwrap();
                assert_ne!(agentmesh_tests::exit_code(&j), Some(0));
                let peak = peak_rss_mib(pid);
                assert!(peak < 120.0, "the joiner's memory peaked at {peak:.1} MiB");
                joiner.ok(&["status"]);
                joiner.stop();
            },
        ),
        (
            "local socket: oversized, not UTF-8, duplicate keys, wrong version",
            |c| {
                let mut s = std::os::unix::net::UnixStream::connect(
                    c.alpha.home().join("run/agentmesh.sock"),
                )
                .unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut ask = |bytes: &[u8]| -> serde_json::Value {
                    s.write_all(bytes).unwrap();
                    s.write_all(b"\n").unwrap();
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    serde_json::from_str(&line).unwrap()
                };
                assert_eq!(
                    ask(br#"{"type":"attach","version":9,"who":{"kind":"human","name":"t"}}"#)["code"],
                    "version_mismatch"
                );
                // A name that would act on a terminal, or read as two lines.
                assert_eq!(
                    ask(br#"{"type":"attach","version":1,"who":{"kind":"agent","name":"a\u001b]0;retitled\u0007"}}"#)["code"],
                    "bad_who"
                );
                assert_eq!(
                    ask(br#"{"type":"attach","version":1,"who":{"kind":"agent","name":"x","session_id":"a\nb"}}"#)["code"],
                    "bad_who"
                );
                assert_eq!(ask(&vec![b'x'; 2 << 20])["code"], "frame_too_large");
                assert_eq!(ask(b"\xff\xfe")["code"], "malformed_frame");
                assert_eq!(ask(br#"{"type":"attach","type":"request","version":1,"who":{"kind":"human","name":"t"}}"#)["code"], "malformed_frame");
                assert_eq!(
                    ask(br#"{"type":"attach","version":1,"who":{"kind":"human","name":"t"}}"#)["type"],
                    "attached"
                );
                assert_eq!(
                    ask(br#"{"type":"request","id":1,"op":"status"}"#)["ok"],
                    true
                );
            },
        ),
    ]
}

#[test]
fn the_hostile_input_table() {
    let [alpha, bravo, mut mallory, mut rex] = team([
        ("alpha", "Ada"),
        ("bravo", "Ada"),
        ("mallory", "Ada"),
        ("rex", "Ada"),
    ]);
    mallory.stop();
    rex.stop();
    alpha.ok(&["revoke", "rex", "--yes"]);
    let ctx = Ctx {
        alpha_id: identity_of(&alpha.home()),
        alpha_peer: alpha.peer_id().parse().unwrap(),
        addr: alpha.addr().parse().unwrap(),
        team: TeamId::parse(alpha.json(&["team", "show"])["team_id"].as_str().unwrap()).unwrap(),
        mallory: identity_of(&mallory.home()),
        rex: identity_of(&rex.home()),
        bravo_id: identity_of(&bravo.home()),
        alpha,
    };
    let pid = ctx.alpha.pid();
    let store_before = dir_bytes(&ctx.alpha.home().join("data"));
    let audit_before = ctx.alpha.json(&["audit"]).as_array().unwrap().len();
    let joins_before = joins_filed(&ctx.alpha);
    let mut failures = vec![];
    // Honest mail all along, while the rows run.
    let done = std::sync::atomic::AtomicBool::new(false);
    let honest = std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            let mut ids = vec![];
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                ids.push(bravo.send("@alpha", &format!("honest {}", ids.len())));
                std::thread::sleep(Duration::from_millis(200));
            }
            ids
        });
        for (name, row) in rows() {
            let started = std::time::Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| row(&ctx)));
            let peak = peak_rss_mib(pid);
            eprintln!(
                "{:<72} {:>6} ms  peak {peak:>6.1} MiB  {}",
                name,
                started.elapsed().as_millis(),
                if result.is_ok() { "ok" } else { "FAILED" }
            );
            if let Err(e) = result {
                let why = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failures.push(format!("{name}: {why}"));
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        sender.join().unwrap()
    });
    assert!(honest.len() > 20, "{} honest messages", honest.len());
    assert!(failures.is_empty(), "rows failed:\n{}", failures.join("\n"));
    // Every honest message arrived, once.
    let a = &ctx.alpha;
    wait_for("every honest message to arrive", || {
        let counts = a.inbox_counts();
        honest
            .iter()
            .all(|id| counts.get(id) == Some(&1))
            .then_some(())
    });
    for id in &honest {
        let m = bravo.outbox_entry(id);
        assert_eq!(m["status"], "delivered", "{m}");
    }
    let peak = peak_rss_mib(pid);
    let store = dir_bytes(&a.home().join("data"));
    let entries = a.json(&["audit"]).as_array().unwrap().clone();
    let audit = entries.len() - audit_before;
    // What they were, by event, for the message if there are too many.
    let mut by_event = std::collections::BTreeMap::<String, usize>::new();
    for e in &entries[audit_before..] {
        *by_event
            .entry(e["event"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    eprintln!(
        "bounds: peak memory {peak:.1} MiB (limit {MAX_PEAK_MIB}), store {store_before} -> {store} bytes, {audit} audit entries"
    );
    assert!(peak < MAX_PEAK_MIB, "peak memory {peak:.1} MiB");
    assert!(
        store < store_before + MAX_STORE_GROWTH,
        "the store grew {store_before} -> {store}"
    );
    // The honest mail's own `received` entries (one per message, five a
    // second for as long as the table runs, which is longer on a loaded
    // machine) are not the rows' doing.
    let caused = audit.saturating_sub(honest.len());
    assert!(
        caused < MAX_AUDIT_ENTRIES,
        "{audit} audit entries, {} of them the honest messages': {by_event:?}",
        honest.len()
    );
    // No forged join request was filed (the three before are the team's).
    assert_eq!(
        joins_filed(a),
        joins_before,
        "a forged join reached the desk"
    );
}
