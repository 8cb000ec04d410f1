//! `agentmesh-bench soak`: a crash soak. Five daemons (`echo` a carrier)
//! and a relay, an agent (an MCP session) on each sending tells, asks,
//! replies and broadcasts, while a seeded schedule kills daemons and the
//! relay with SIGKILL and starts them again, suspends one daemon for
//! longer than the request timeout, and has the founder revoke `delta`.
//! Then every daemon runs again until nothing is on its way, and the
//! invariant checker ([`check`]) reads what each machine holds.
//!
//! ```text
//!  agents (MCP) ── send / ask / reply / broadcast / check_inbox ──> daemons
//!  faults      ── kill -9 + start, relay kill -9 + start, SIGSTOP 20 s, revoke
//!  checker     ── outboxes, inboxes, bus logs, takes ──> exactly once,
//!                 durable, no false receipts, revocation refused
//! ```
//!
//! The seed fixes the schedule of faults and every agent's choices (whom,
//! what, when); the processes' timing is the machine's, so a failing
//! seed replays the same faults and traffic, not the same interleaving.
//! Daemons listen on fixed loopback ports, as a configured machine does,
//! so a restarted one is found where it was.

#![allow(
    clippy::disallowed_methods,
    reason = "the agents run as tasks of the bench's own runtime; they end with it"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentmesh_node::api::{
    Connection, Membership, MessageState, MessageView, OutboxView, Standing, WhoKind, ops,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::mcp::Session;
use crate::relay::Relay;
mod agents;
pub mod check;

use crate::{ApiClient, Node, join, wait_for, who};
pub use agents::Traffic;
use agents::{AgentLog, agent};
use check::{Judgment, MachineEnd, Revocation, Run, Verdict};

/// The machines, by index.
pub const NAMES: [&str; 5] = ["alpha", "bravo", "charlie", "delta", "echo"];
const FOUNDER: usize = 0;
/// The machine the founder revokes.
const REVOKED: usize = 3;
/// The carrier.
const CARRIER: usize = 4;
const OWNER: &str = "Ada";
/// Every machine's agent's mailbox.
const MAILBOX: &str = "agent";
/// How long the suspended daemon stays stopped: longer than the request
/// timeout (15 s), so its peers' requests to it fail.
pub const SUSPEND_FOR: Duration = Duration::from_secs(20);
/// How often each person speaks to their agent (resetting its hop).
const PERSON_SPEAKS: Duration = Duration::from_secs(1);
/// How often the soak reads every outbox and bus log (see `Seen`).
const READ_EVERY: Duration = Duration::from_secs(10);
/// How long the end may wait for every message to arrive.
const SETTLE_WITHIN: Duration = Duration::from_secs(240);
const PROFILE: &str =
    "Runs the soak test of the shared build cache: cache keys, the cache server and its eviction.";

/// One fault of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a daemon, and start it again after `down`.
    Kill {
        /// The machine, by index.
        node: usize,
        /// How long it stays down.
        down: Duration,
    },
    /// SIGKILL the relay, and start it again (same port, same key).
    KillRelay {
        /// How long it stays down.
        down: Duration,
    },
    /// SIGSTOP a daemon for [`SUSPEND_FOR`], then SIGCONT.
    Suspend {
        /// The machine, by index.
        node: usize,
    },
    /// The founder revokes `delta`.
    Revoke,
}

/// The faults of a soak of `seconds` with `seed`: one every 2.5–6 s, a
/// suspension at 30 % of the run and the revocation at 60 %. The founder
/// is never suspended (it revokes); nothing else befalls a suspended
/// daemon.
pub fn schedule(seed: u64, seconds: u64) -> Vec<(Duration, Fault)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let total = Duration::from_secs(seconds);
    let (suspend_at, revoke_at) = (total * 3 / 10, total * 6 / 10);
    let mut suspended: Option<(usize, Duration)> = None;
    let mut revoked = false;
    let mut out = vec![];
    let mut at = Duration::from_secs(3);
    while at + Duration::from_secs(2) < total {
        let asleep = suspended.filter(|(_, until)| at < *until).map(|(n, _)| n);
        let fault = if suspended.is_none() && at >= suspend_at {
            let node = rng.random_range(1..NAMES.len());
            suspended = Some((node, at + SUSPEND_FOR));
            Fault::Suspend { node }
        } else if !revoked && at >= revoke_at {
            revoked = true;
            Fault::Revoke
        } else if rng.random_bool(0.2) {
            Fault::KillRelay {
                down: Duration::from_millis(rng.random_range(300..3000)),
            }
        } else {
            let mut node = rng.random_range(0..NAMES.len());
            if Some(node) == asleep {
                node = (node + 1) % NAMES.len();
            }
            Fault::Kill {
                node,
                down: Duration::from_millis(rng.random_range(100..3000)),
            }
        };
        out.push((at, fault));
        at += Duration::from_millis(rng.random_range(2500..6000));
    }
    out
}

/// How many of each fault happened.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FaultCounts {
    /// Daemons killed with SIGKILL and started again.
    pub kills: usize,
    /// Times the relay was.
    pub relay_kills: usize,
    /// Daemons suspended for [`SUSPEND_FOR`].
    pub suspends: usize,
    /// Revocations.
    pub revocations: usize,
}

/// The soak's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SoakFigures {
    /// The seed: `agentmesh-bench soak --seconds N --seed S` replays it.
    pub seed: u64,
    /// The soak's length (faults and traffic), seconds.
    pub seconds: u64,
    /// The faults injected.
    pub faults: FaultCounts,
    /// The agents' traffic.
    pub traffic: Traffic,
    /// From the end of the traffic to nothing left on its way, seconds.
    pub settle_s: f64,
    /// When each machine was first seen counting delta revoked, seconds
    /// into the soak (the revocation's own time is under `revoked_at_s`);
    /// `null` for delta itself.
    pub revocation_seen_s: Vec<Option<f64>>,
    /// When the founder revoked delta, seconds into the soak.
    pub revoked_at_s: Option<f64>,
    /// What the checker found.
    pub verdict: Verdict,
}

/// Runs a soak of `seconds` with `seed`.
pub fn run(seconds: u64, seed: u64) -> SoakFigures {
    let began = Instant::now();
    let mut relay = Relay::start();
    let mut nodes = setup(&relay);
    eprintln!(
        "(soak: 5 daemons and a relay ready after {:.0} s; seed {seed})",
        began.elapsed().as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sessions: Vec<Session> = rt.block_on(async {
        let mut out = vec![];
        for n in &nodes {
            let dir = n.home().join("work").join(MAILBOX);
            let name = format!("agent-{}", n.name);
            out.push(Session::spawn(n, &dir, "soak", &["--name", &name]).await);
        }
        out
    });
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(i, s)| rt.spawn(agent(i, s, seed, t0, stop.clone())))
        .collect();
    let mut faults = Faults::new(t0);
    for (at, fault) in schedule(seed, seconds) {
        faults.until(t0 + at, &nodes);
        faults.apply(fault, &mut nodes, &mut relay);
    }
    faults.until(t0 + Duration::from_secs(seconds), &nodes);
    // First, so that no agent waits on a stopped daemon.
    faults.resume();
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<AgentLog> = rt.block_on(async {
        let mut out = vec![];
        for a in agents {
            out.push(a.await.expect("an agent"));
        }
        out
    });
    let settling = Instant::now();
    faults.until_known(&nodes);
    settle(&nodes);
    let settle_s = settling.elapsed().as_secs_f64();
    let mut traffic = Traffic::default();
    let mut accepted = vec![];
    let mut machines = vec![];
    for (i, (n, mut log)) in nodes.iter().zip(logs).enumerate() {
        traffic.add(&log.traffic);
        accepted.append(&mut log.accepted);
        faults.seen.read(i, n);
        let seen = faults.seen.take(i);
        machines.push(read_end(n, log, seen, faults.revocation.is_some()));
    }
    let revocation_seen_s = faults.revocation.as_ref().map_or_else(Vec::new, |r| {
        r.known_at
            .iter()
            .map(|k| k.map(|d| d.as_secs_f64()))
            .collect()
    });
    let verdict = check::check(&Run {
        machines,
        accepted,
        revocation: faults.revocation.clone(),
        kills: std::mem::take(&mut faults.kills),
    });
    drop(rt);
    SoakFigures {
        seed,
        seconds,
        faults: faults.counts,
        traffic,
        settle_s,
        revocation_seen_s,
        revoked_at_s: faults.revoked_at.map(|d| d.as_secs_f64()),
        verdict,
    }
}

/// The relay, then the team: alpha founds it, the others join; `echo`
/// carries; every machine has the agent's mailbox with a profile, listens
/// on a fixed port, reserves on the relay and knows who carries.
fn setup(relay: &Relay) -> Vec<Node> {
    let mut nodes: Vec<Node> = NAMES.iter().map(|n| Node::new(n)).collect();
    for n in &mut nodes {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        n.listen = vec![format!("/ip4/127.0.0.1/tcp/{port}")];
        n.daemon_args = vec!["--relay".into(), relay.addr()];
        n.start();
    }
    nodes[FOUNDER].ok(&["team", "create", "core", "--owner", OWNER]);
    for n in &nodes[1..] {
        join(&nodes[FOUNDER], n, OWNER);
    }
    nodes[CARRIER].ok(&["config", "set", "carry", "true"]);
    for n in &mut nodes {
        n.ok(&["config", "set", "carrier.handoff_after", "1s"]);
        // Every delivery to a mailbox spends its day's budget; the soak's
        // agents get far more mail than a day's default.
        n.ok(&["config", "set", "wake.budget", "10000"]);
        let dir = n.home().join("work").join(MAILBOX);
        std::fs::create_dir_all(&dir).unwrap();
        n.ok(&["allow", dir.to_str().unwrap(), "--mailbox", MAILBOX]);
        n.ok(&["profile", "set", MAILBOX, "--profile", PROFILE]);
        n.ok(&["profile", "set", MAILBOX, "--preset", "loose"]);
        n.stop();
        n.start();
    }
    let founder = nodes[FOUNDER].addr();
    for n in &nodes[1..] {
        n.ok(&["connect", &founder]);
    }
    for n in &nodes {
        wait_for(&format!("{} to know echo carries", n.name), || {
            let mut c = ApiClient::connect_at(&n.home(), who(WhoKind::Human, "soak"));
            let t = c.ask(ops::TeamShow).ok()?;
            t.members
                .iter()
                .any(|m| m.name == NAMES[CARRIER] && m.always_on)
                .then_some(())
        });
    }
    crate::bench_convergence::wait_meshed(&nodes);
    nodes
}

/// The fault side of a soak: applies the schedule, and watches the
/// revocation reach each member.
struct Faults {
    t0: Instant,
    /// The suspended daemon's pid, and when it resumes.
    suspended: Option<(u32, Instant)>,
    counts: FaultCounts,
    revocation: Option<Revocation>,
    /// Every SIGKILL of a daemon, by the machine's clock.
    kills: Vec<check::Kill>,
    /// When the people last spoke to their agents.
    spoke: Instant,
    /// When the founder's revoke returned, from the start.
    revoked_at: Option<Duration>,
    seen: Seen,
}

/// Every outbox entry and judgment the soak has read of each machine:
/// `outbox` lists the live messages and only the newest 1,000 finished
/// ones, so the soak reads it every [`READ_EVERY`] and keeps each entry
/// it saw (its latest view); the bus log likewise.
#[derive(Debug, Default)]
struct Seen {
    outboxes: Vec<BTreeMap<String, OutboxView>>,
    judgments: Vec<BTreeSet<Judgment>>,
    at: Option<Instant>,
}

impl Seen {
    fn read(&mut self, i: usize, n: &Node) {
        if self.outboxes.len() <= i {
            self.outboxes.resize_with(i + 1, BTreeMap::new);
            self.judgments.resize_with(i + 1, BTreeSet::new);
        }
        for mut e in outbox(n) {
            // Every state any read showed is kept: what the outbox ever
            // said is what the checker holds it to.
            if let Some(old) = self.outboxes[i].remove(&e.id) {
                let mut states = old.states;
                for st in e.states {
                    if !states.iter().any(|o| o.state == st.state) {
                        states.push(st);
                    }
                }
                e.states = states;
            }
            self.outboxes[i].insert(e.id.clone(), e);
        }
        self.judgments[i].extend(judgments(n));
    }

    /// What machine `i` has shown, emptied out.
    fn take(&mut self, i: usize) -> (Vec<OutboxView>, Vec<Judgment>) {
        let outbox = self
            .outboxes
            .get_mut(i)
            .map(std::mem::take)
            .unwrap_or_default();
        let judged = self
            .judgments
            .get_mut(i)
            .map(std::mem::take)
            .unwrap_or_default();
        (outbox.into_values().collect(), judged.into_iter().collect())
    }
}

impl Faults {
    fn new(t0: Instant) -> Faults {
        Faults {
            t0,
            suspended: None,
            counts: FaultCounts::default(),
            revocation: None,
            kills: vec![],
            spoke: t0,
            revoked_at: None,
            seen: Seen::default(),
        }
    }

    /// Until `until`: resumes the suspended daemon when its time is up,
    /// and notes when each member is first seen counting the revoked
    /// machine revoked.
    fn until(&mut self, until: Instant, nodes: &[Node]) {
        while Instant::now() < until {
            if let Some((_, at)) = self.suspended
                && Instant::now() >= at
            {
                self.resume();
            }
            self.watch_revocation(nodes);
            if self.seen.at.is_none_or(|t| t.elapsed() > READ_EVERY) {
                let stopped = self.suspended.map(|(pid, _)| pid);
                for (i, n) in nodes.iter().enumerate() {
                    if n.daemon_pid() != stopped {
                        self.seen.read(i, n);
                    }
                }
                self.seen.at = Some(Instant::now());
            }
            if self.spoke.elapsed() > PERSON_SPEAKS {
                self.person_speaks(nodes);
            }
            std::thread::sleep(Duration::from_millis(100)); // pacing the questions
        }
    }

    /// After the traffic: watches the revocation until every member
    /// was seen counting it (a daemon resumed or started late learns it
    /// from the others), for up to a minute; the checker names one that
    /// never did.
    fn until_known(&mut self, nodes: &[Node]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(rv) = &self.revocation
            && rv
                .known_at
                .iter()
                .enumerate()
                .any(|(i, k)| i != REVOKED && k.is_none())
            && Instant::now() < deadline
        {
            self.watch_revocation(nodes);
            std::thread::sleep(Duration::from_millis(100)); // polling, with a deadline
        }
    }

    /// Each machine's person speaks to its agent (what a prompt's hook
    /// says): what the agent sends next is hop 0 again. Without it the
    /// loop guard soon stops agents that only answer one another.
    fn person_speaks(&mut self, nodes: &[Node]) {
        let stopped = self.suspended.map(|(pid, _)| pid);
        for n in nodes.iter().filter(|n| n.daemon_pid() != stopped) {
            let _ = client(n).ask(ops::HopReset {
                mailbox: Some(MAILBOX.into()),
            });
        }
        self.spoke = Instant::now();
    }

    fn watch_revocation(&mut self, nodes: &[Node]) {
        let Some(rv) = self.revocation.as_mut() else {
            return;
        };
        let stopped = self.suspended.map(|(pid, _)| pid);
        for (i, n) in nodes.iter().enumerate() {
            if i == REVOKED || rv.known_at[i].is_some() || n.daemon_pid() == stopped {
                continue;
            }
            let mut c = ApiClient::connect_at(&n.home(), who(WhoKind::Human, "soak"));
            let seen = c.ask(ops::TeamShow).is_ok_and(|t| {
                t.members
                    .iter()
                    .any(|m| m.name == NAMES[REVOKED] && m.standing == Standing::Revoked)
            });
            if seen {
                rv.known_at[i] = Some(self.t0.elapsed());
            }
        }
    }

    fn apply(&mut self, fault: Fault, nodes: &mut [Node], relay: &mut Relay) {
        eprintln!("({:5.1} s: {fault:?})", self.t0.elapsed().as_secs_f64());
        match fault {
            Fault::Kill { node, down } => {
                // Its suspension ends first, if it is the suspended one
                // (the schedule's window and the real one differ by the
                // time a fault takes).
                if self.suspended.map(|(pid, _)| pid) == nodes[node].daemon_pid() {
                    self.resume();
                }
                nodes[node].kill9();
                // After the kill: whatever it sent came before this.
                self.kills.push(check::Kill {
                    node,
                    at: std::time::SystemTime::now(),
                });
                std::thread::sleep(down); // the fault's length, as scheduled
                nodes[node].start();
                self.counts.kills += 1;
            }
            Fault::KillRelay { down } => {
                relay.stop();
                std::thread::sleep(down); // the fault's length, as scheduled
                relay.run();
                self.counts.relay_kills += 1;
            }
            Fault::Suspend { node } => {
                let pid = nodes[node].daemon_pid().expect("a running daemon");
                kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
                self.suspended = Some((pid, Instant::now() + SUSPEND_FOR));
                self.counts.suspends += 1;
            }
            Fault::Revoke => {
                let mut c =
                    ApiClient::connect_at(&nodes[FOUNDER].home(), who(WhoKind::Human, "soak"));
                c.ask(ops::Revoke {
                    name: NAMES[REVOKED].into(),
                })
                .expect("the founder revokes");
                self.revoked_at = Some(self.t0.elapsed());
                self.revocation = Some(Revocation {
                    node: REVOKED,
                    known_at: vec![None; NAMES.len()],
                });
                self.counts.revocations += 1;
            }
        }
    }

    /// SIGCONT for the suspended daemon, if any.
    fn resume(&mut self) {
        if let Some((pid, _)) = self.suspended.take() {
            // Gone already (killed since) is as good as resumed.
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
    }
}

/// Whether `e`, from `from`, is still on its way to a member in good
/// standing (a broadcast copy: or not yet judged there).
fn on_its_way(from: usize, e: &OutboxView, judged: &[Vec<String>]) -> bool {
    let to = e.to.rsplit('@').next().unwrap_or_default();
    let Some(r) = NAMES.iter().position(|n| *n == to) else {
        return false;
    };
    if from == REVOKED || r == REVOKED || e.kind == agentmesh_node::api::MessageKind::Counts {
        return false;
    }
    // A broadcast copy stored there waits for its judgment too.
    let stored = matches!(e.status, MessageState::Delivered | MessageState::Read);
    matches!(e.status, MessageState::Queued | MessageState::Carried)
        || (e.kind == agentmesh_node::api::MessageKind::Broadcast
            && stored
            && !judged[r].contains(&e.id))
}

/// Waits, up to [`SETTLE_WITHIN`], until no message to a member in good
/// standing is on its way; says how many are, as it waits.
fn settle(nodes: &[Node]) {
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let judged: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| judgments(n).into_iter().map(|j| j.id).collect())
            .collect();
        let pending: usize = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                outbox(n)
                    .iter()
                    .filter(|e| on_its_way(i, e, &judged))
                    .count()
            })
            .sum();
        if pending == 0 {
            return;
        }
        if start.elapsed() > SETTLE_WITHIN {
            eprintln!(
                "(soak: {pending} messages still on their way after {SETTLE_WITHIN:?}; the checker counts them)"
            );
            return;
        }
        if said.elapsed() > Duration::from_secs(5) {
            eprintln!("(soak: settling, {pending} messages on their way)");
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500)); // pacing the questions
    }
}

fn client(n: &Node) -> ApiClient {
    ApiClient::connect_at(&n.home(), who(WhoKind::Human, "soak"))
}

fn outbox(n: &Node) -> Vec<OutboxView> {
    client(n).ask(ops::Outbox).expect("outbox answers")
}

/// The bus log's broadcast judgments.
fn judgments(n: &Node) -> Vec<Judgment> {
    use agentmesh_node::api::BusEvent;
    let log = client(n)
        .ask(ops::BusLog {
            since_secs: None,
            mailbox: None,
        })
        .expect("bus log answers");
    log.entries
        .into_iter()
        .filter_map(|e| {
            let delivered = match e.event {
                BusEvent::BroadcastDelivered => true,
                BusEvent::BroadcastDropped => false,
                _ => return None,
            };
            Some(Judgment {
                at: e.at,
                id: e.id?,
                mailbox: e.mailbox?,
                delivered,
            })
        })
        .collect()
}

/// What machine `n` holds at the end.
fn read_end(
    n: &Node,
    log: AgentLog,
    seen: (Vec<OutboxView>, Vec<Judgment>),
    revocation: bool,
) -> MachineEnd {
    let inbox: Vec<MessageView> =
        serde_json::from_value(n.json(&["inbox"])).expect("inbox --json is a list of messages");
    let refuses_revoked = (revocation && n.name != NAMES[REVOKED]).then(|| refuses_revoked(n));
    let (outbox, judgments) = seen;
    MachineEnd {
        name: n.name.clone(),
        outbox,
        inbox,
        judgments,
        taken: log.taken,
        shown: log.shown,
        refuses_revoked,
    }
}

/// Whether `n` counts delta revoked and, within 10 s, is seen with no
/// connection to it (a revoked machine may dial again; each is closed).
fn refuses_revoked(n: &Node) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = client(n);
    loop {
        let page = c
            .ask(ops::Peers {
                after: None,
                limit: None,
            })
            .expect("peers answers");
        let row = page
            .peers
            .iter()
            .find(|r| r.name.as_deref() == Some(NAMES[REVOKED]));
        let revoked = row.is_some_and(|r| r.membership == Membership::Revoked);
        if revoked && row.is_some_and(|r| r.connection == Connection::None) {
            return true;
        }
        if !revoked || Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100)); // polling, with a deadline
    }
}

/// Prints the figures for a person.
pub fn print(f: &SoakFigures) {
    let (t, c, v) = (&f.traffic, &f.faults, &f.verdict);
    println!(
        "soak: {} s, seed {}: {} kills, {} relay kills, {} suspension, {} revocation; agents sent {} tells, {} asks, {} replies, {} broadcasts, took {}; calls that failed, by code: {:?}; settled in {:.1} s",
        f.seconds,
        f.seed,
        c.kills,
        c.relay_kills,
        c.suspends,
        c.revocations,
        t.tells,
        t.asks,
        t.replies,
        t.broadcasts,
        t.taken,
        t.failed_calls,
        f.settle_s
    );
    println!(
        "checked {} messages: {} delivered exactly once, {} involving the revoked machine, {} held with no record at a sender killed as it sent them; {} duplicates, {} lost, {} false receipts, {} revocation breaches",
        v.messages,
        v.delivered_once,
        v.involving_revoked,
        v.unrecorded,
        v.duplicates,
        v.lost,
        v.false_receipts,
        v.revocation_breaches
    );
    for breach in &v.violations {
        println!("  {breach}");
    }
}
