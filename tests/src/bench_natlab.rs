//! `agentmesh-bench natlab`: hole punching in the NAT lab, as figures.
//!
//! For each NAT pairing, `trials` times, in a fresh lab each time (fresh
//! NAT state): the real relay, alpha behind router A and bravo behind
//! router B (one team, made once; both hold reservations on the relay),
//! then bravo sends alpha a message, which dials alpha through the relay.
//! It reports, per pairing:
//! - `upgraded`: the share of trials whose relayed connection DCUtR turned
//!   into a direct one within [`UPGRADE_WAIT`] (as bravo's `peers` says);
//! - `upgrade_ms`: the time from that first send to the direct connection;
//! - `first_message_ms`: from the first send to alpha's daemon telling its
//!   client the message arrived (dial and circuit included);
//! - `latency_ms` of [`MESSAGES`] more messages, one at a time, once the
//!   connection settled, by its kind (`direct` or `relayed`);
//! - `delivered` / `sent`: every message must arrive in every trial.
//!
//! Needs root (network namespaces), like the lab's tests. Not a test: the
//! figures go in docs/benchmarks.md. With `AGENTMESH_BENCH_LOGS=DIR`, the
//! daemons' logs of each trial that stayed relayed are written there.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::natlab::{Host, Lab, Nat, RelayProc};
use crate::{ApiClient, Node, wait_for, who};

/// How long a trial waits for the direct connection behind
/// endpoint-independent NATs: DCUtR's punch takes well under a second when
/// it works (NATLAB.md); when its first three attempts fail (~15 s on
/// TCP), the daemon tries again on a new circuit, which this waits for.
pub const UPGRADE_WAIT: Duration = Duration::from_secs(45);

/// The same behind a symmetric NAT, where no punch can work: long enough
/// to show none happens in the time the others needed.
pub const UPGRADE_WAIT_SYMMETRIC: Duration = Duration::from_secs(20);

/// Messages timed in each trial after the first.
pub const MESSAGES: usize = 10;

/// One NAT pairing and transport.
#[derive(Debug, Clone, Copy)]
pub struct Pairing {
    /// As the figures name it.
    pub name: &'static str,
    /// Router A's NAT (alpha's).
    pub a: Nat,
    /// Router B's NAT (bravo's).
    pub b: Nat,
    /// QUIC rather than TCP.
    pub quic: bool,
}

/// The pairings measured.
pub const PAIRINGS: [Pairing; 4] = [
    Pairing {
        name: "endpoint-independent / endpoint-independent, TCP",
        a: Nat::EndpointIndependent,
        b: Nat::EndpointIndependent,
        quic: false,
    },
    Pairing {
        name: "endpoint-independent / endpoint-independent, QUIC",
        a: Nat::EndpointIndependent,
        b: Nat::EndpointIndependent,
        quic: true,
    },
    Pairing {
        name: "endpoint-independent / symmetric, TCP",
        a: Nat::EndpointIndependent,
        b: Nat::Symmetric,
        quic: false,
    },
    Pairing {
        name: "endpoint-independent / symmetric, QUIC",
        a: Nat::EndpointIndependent,
        b: Nat::Symmetric,
        quic: true,
    },
];

/// Percentiles of a sample, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Spread {
    /// How many values.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Largest.
    pub max: f64,
}

fn spread(mut v: Vec<f64>) -> Spread {
    if v.is_empty() {
        return Spread::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Spread {
        n: v.len(),
        p50: at(0.5),
        p90: at(0.9),
        max: v[v.len() - 1],
    }
}

/// One pairing's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PairingFigures {
    /// The pairing.
    pub pairing: String,
    /// Its transport: `tcp` or `quic`.
    pub transport: &'static str,
    /// Trials run.
    pub trials: usize,
    /// Trials whose connection became direct.
    pub upgraded: usize,
    /// `upgraded` / `trials`.
    pub upgraded_share: f64,
    /// From the first send to the direct connection, upgraded trials.
    pub upgrade_ms: Spread,
    /// From `join` finishing (fresh homes, in the trial's first lab) to
    /// the first message in the founder's inbox.
    pub join_first_message_ms: Spread,
    /// From the first send after both daemons restarted (in a fresh lab,
    /// each holding its reservation) to its arrival, every trial.
    pub first_message_ms: Spread,
    /// Later messages over a direct connection.
    pub direct_latency_ms: Spread,
    /// Later messages over a relayed connection.
    pub relayed_latency_ms: Spread,
    /// Messages sent, every trial.
    pub sent: usize,
    /// Messages that arrived.
    pub delivered: usize,
}

/// Every pairing's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Per pairing.
    pub pairings: Vec<PairingFigures>,
}

fn daemon(lab: &Lab, home: Option<Node>, host: Host, name: &str, p: Pairing, relay: &str) -> Node {
    let mut n = home.unwrap_or_else(|| Node::new(name));
    n.listen = vec![if p.quic {
        "/ip4/0.0.0.0/udp/4001/quic-v1".into()
    } else {
        "/ip4/0.0.0.0/tcp/4001".into()
    }];
    n.wrapper = lab.wrapper(host);
    n.daemon_args = vec!["--relay".into(), relay.into()];
    n.start();
    wait_for(&format!("{name}'s reservation"), || {
        (!n.status()["circuit_addrs"].as_array().unwrap().is_empty()).then_some(())
    });
    n
}

fn relay(lab: &Lab, key: &Path, p: Pairing) -> (RelayProc, String) {
    let r = RelayProc::start_keyed(lab, Some(key), !p.quic, p.quic, &[]);
    let addr = if p.quic { r.quic_addr() } else { r.tcp_addr() };
    (r, addr)
}

/// Alpha and bravo joined in one team (one person's two machines), the
/// time from `join` finishing to bravo's first message in alpha's inbox,
/// then both stopped: the trial starts them again in a fresh lab.
fn team(p: Pairing, key: &Path) -> (Node, Node, Option<Duration>) {
    let lab = Lab::new(p.a, p.b).expect("network namespaces (run as root)");
    let (_relay, addr) = relay(&lab, key, p);
    let mut a = daemon(&lab, None, Host::A, "alpha", p, &addr);
    let mut b = daemon(&lab, None, Host::B, "bravo", p, &addr);
    a.ok(&["team", "create", "lab", "--owner", "Ada"]);
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut inbox = ApiClient::attach(&a, who(agentmesh_node::api::WhoKind::Human, "bench"), None);
    crate::join_ticket(&a, &b, &ticket, &["--name", "bravo", "--owner", "Ada"]);
    let joined = Instant::now();
    let mut out = ApiClient::attach(&b, who(agentmesh_node::api::WhoKind::Human, "bench"), None);
    let first = out
        .send("@alpha", "the first, right after join")
        .ok()
        .and_then(|id| arrival(&mut inbox, &id, joined));
    drop((inbox, out));
    a.stop();
    b.stop();
    (a, b, first)
}

/// Waits for the message `id` in `to`'s events; the time since `since`,
/// or `None` after 60 s.
fn arrival(to: &mut ApiClient, id: &str, since: Instant) -> Option<Duration> {
    let deadline = since + Duration::from_secs(60);
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        match to.event_within(left)? {
            agentmesh_node::api::Event::Message { message } if message.id == id => {
                return Some(since.elapsed());
            }
            _ => {}
        }
    }
}

struct Trial {
    upgrade: Option<Duration>,
    first: Option<Duration>,
    later: Vec<(bool, Duration)>,
    sent: usize,
    delivered: usize,
}

fn trial(p: Pairing, key: &Path, homes: (Node, Node)) -> (Trial, (Node, Node)) {
    let lab = Lab::new(p.a, p.b).expect("network namespaces (run as root)");
    let (_relay, addr) = relay(&lab, key, p);
    let mut a = daemon(&lab, Some(homes.0), Host::A, "alpha", p, &addr);
    let mut b = daemon(&lab, Some(homes.1), Host::B, "bravo", p, &addr);
    let a_id = a.peer_id();
    let mut inbox = ApiClient::attach(&a, who(agentmesh_node::api::WhoKind::Human, "bench"), None);
    let mut out = ApiClient::attach(&b, who(agentmesh_node::api::WhoKind::Human, "bench"), None);
    let mut t = Trial {
        upgrade: None,
        first: None,
        later: vec![],
        sent: 0,
        delivered: 0,
    };
    let start = Instant::now();
    let id = out.send("@alpha", "the first, through the relay").unwrap();
    t.sent += 1;
    t.first = arrival(&mut inbox, &id, start);
    t.delivered += usize::from(t.first.is_some());
    // Bravo's view of the connection, until direct or the wait is over.
    let kind = |b: &Node| {
        b.peer_row(&a_id)
            .and_then(|r| r["connection"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let wait = if matches!(p.b, Nat::Symmetric) || matches!(p.a, Nat::Symmetric) {
        UPGRADE_WAIT_SYMMETRIC
    } else {
        UPGRADE_WAIT
    };
    while start.elapsed() < wait {
        if matches!(kind(&b).as_str(), "hole-punched" | "direct") {
            t.upgrade = Some(start.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Settled: wait out the relayed connection's closing once direct.
    if t.upgrade.is_some() {
        std::thread::sleep(Duration::from_secs(4));
    } else if let Some(dir) = std::env::var_os("AGENTMESH_BENCH_LOGS") {
        // Why it stayed relayed: both daemons' logs, to read later.
        let dir = std::path::PathBuf::from(dir);
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(format!("{n}-alpha.log")), a.log());
        let _ = std::fs::write(dir.join(format!("{n}-bravo.log")), b.log());
    }
    for i in 0..MESSAGES {
        let direct = matches!(kind(&b).as_str(), "hole-punched" | "direct");
        let sent = Instant::now();
        let id = out.send("@alpha", &format!("message {i}")).unwrap();
        t.sent += 1;
        if let Some(d) = arrival(&mut inbox, &id, sent) {
            t.delivered += 1;
            t.later.push((direct, d));
        }
    }
    drop((inbox, out));
    a.stop();
    b.stop();
    drop(lab);
    (t, (a, b))
}

/// Runs `trials` trials of every pairing whose name contains `only`.
pub fn run(trials: usize, only: Option<&str>) -> Figures {
    let mut pairings = vec![];
    for p in PAIRINGS
        .into_iter()
        .filter(|p| only.is_none_or(|o| p.name.contains(o)))
    {
        let keys = tempfile::tempdir().unwrap();
        let key = keys.path().join("relay.key");
        let mut all = vec![];
        let mut after_join = vec![];
        for n in 0..trials {
            let (a, b, first) = team(p, &key);
            after_join.push(first);
            let (t, _) = trial(p, &key, (a, b));
            eprintln!(
                "{}: trial {}/{trials}: first message {} after join; {} ({} of {} delivered)",
                p.name,
                n + 1,
                first.map_or("never".to_owned(), |d| format!("{} ms", d.as_millis())),
                t.upgrade.map_or("stayed relayed".to_owned(), |d| format!(
                    "direct after {} ms",
                    d.as_millis()
                )),
                t.delivered,
                t.sent
            );
            all.push(t);
        }
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        let upgraded = all.iter().filter(|t| t.upgrade.is_some()).count();
        pairings.push(PairingFigures {
            pairing: p.name.into(),
            transport: if p.quic { "quic" } else { "tcp" },
            trials,
            upgraded,
            upgraded_share: upgraded as f64 / trials.max(1) as f64,
            upgrade_ms: spread(
                all.iter()
                    .filter_map(|t| t.upgrade.as_ref().map(ms))
                    .collect(),
            ),
            join_first_message_ms: spread(after_join.iter().flatten().map(ms).collect()),
            first_message_ms: spread(
                all.iter()
                    .filter_map(|t| t.first.as_ref().map(ms))
                    .collect(),
            ),
            direct_latency_ms: spread(
                all.iter()
                    .flat_map(|t| t.later.iter().filter(|(d, _)| *d).map(|(_, l)| ms(l)))
                    .collect(),
            ),
            relayed_latency_ms: spread(
                all.iter()
                    .flat_map(|t| t.later.iter().filter(|(d, _)| !*d).map(|(_, l)| ms(l)))
                    .collect(),
            ),
            sent: all.iter().map(|t| t.sent).sum(),
            delivered: all.iter().map(|t| t.delivered).sum(),
        });
    }
    Figures { pairings }
}
