//! `agentmesh-bench convergence`: how long a change of the team takes to
//! reach every member. N daemons run as processes on loopback in one team
//! (each admitted by the real join, both people's typing done by
//! pseudo-terminals); once every member is connected to every other:
//!
//! - **revocation**: the founder revokes one member; each other member is
//!   watched until it counts that machine revoked and the connection it
//!   had to it is closed (closed, or a newer one: a revoked machine that
//!   dials again is answered with refusals for a short grace, then cut).
//!   From the `revoke` request to each member's first such answer.
//! - **admission**: a new machine joins; each member is watched until it
//!   counts it a member. From the joiner's confirmation (when the founder
//!   signs the admission) to each member's first such answer.
//!
//! Each figure is from the daemons' own clocks (one machine, one clock):
//! when a member refused the machine is when its audit log says it learned
//! the revocation (`at_ms`), and when its connection closed is what its
//! `peers` row says (`disconnected_for_ms`); a member's figure is the later
//! of the two. Admission: the member's audit entry for the admission.
//!
//! "Watched": each member's own `peers` answer for the one row, asked as
//! a page of one row after a cursor just before it, by four (`WATCHERS`)
//! threads in turn, until each answers as wanted; the `*_seen_*` figures
//! are those answers' times, late by at most one round of theirs
//! (`poll_round_ms`). The watchers connect before the change is made, and
//! pause between rounds, so they load the daemons as little as they can.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper threads freely; they end with the run"
)]

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentmesh_node::api::{Connection, Membership, PeerCursor, PeerRow, WhoKind, ops};

use crate::bench_mcp::percentile;
use crate::bench_messaging::rss_mib;
use crate::{ApiClient, Node, join_confirmed_at, wait_for_within, who};

/// Threads asking the members' daemons, in turn.
const WATCHERS: usize = 4;
/// A watcher's pause between rounds: it asks each of its members once a
/// round, so the daemons are not kept from their work (the figures come
/// from the daemons' clocks; the watchers only confirm).
const ROUND_PAUSE: Duration = Duration::from_millis(100);
/// A change not seen everywhere by then has failed to converge.
const CONVERGED_WITHIN: Duration = Duration::from_secs(60);
/// Every member connected to every other, by then.
const MESHED_WITHIN: Duration = Duration::from_secs(600);
/// What one daemon of a large team is allowed for the memory check, MiB:
/// about twice what one holds in a team of 100.
const MIB_PER_DAEMON: u64 = 80;
/// The owner every machine is admitted for (one person: nothing is held).
const OWNER: &str = "Ada";

/// The figures.
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    /// Daemons in the team when the revocation was made.
    pub nodes: usize,
    /// Daemons asked for (more than `nodes` when memory forbade them).
    pub nodes_asked: usize,
    /// Why fewer ran, if they did.
    pub reduced: Option<String>,
    /// Seconds from the first daemon's start to every member connected
    /// to every other.
    pub setup_s: f64,
    /// A watcher's round, ms (median): about how late a `*_seen_*`
    /// figure is.
    pub poll_round_ms: f64,
    /// The longest round, ms: how late a `*_seen_*` figure can be.
    pub poll_round_max_ms: f64,
    /// From `revoke` to a member refusing the machine with its connection
    /// to it closed, by the daemons' clocks: median, 99th percentile,
    /// slowest; s.
    pub revocation_p50_s: f64,
    /// ... 99th percentile.
    pub revocation_p99_s: f64,
    /// ... the slowest member.
    pub revocation_max_s: f64,
    /// The same, as the watchers saw it (their answers' times: later by up
    /// to a round): 99th percentile and slowest; s.
    pub revocation_seen_p99_s: f64,
    /// ... the slowest member.
    pub revocation_seen_max_s: f64,
    /// Members whose audit had no entry for the revocation, counted from
    /// a watcher's answer instead (0 when every daemon's log says).
    pub revocation_from_watch: usize,
    /// From the joiner's confirmation to a member counting it a member, by
    /// the daemons' clocks: median, 99th percentile, slowest; s.
    pub admission_p50_s: f64,
    /// ... 99th percentile.
    pub admission_p99_s: f64,
    /// ... the slowest member.
    pub admission_max_s: f64,
    /// The same, as the watchers saw it: 99th percentile; s.
    pub admission_seen_p99_s: f64,
    /// Members whose audit had no entry for the admission, counted from
    /// a watcher's answer instead.
    pub admission_from_watch: usize,
    /// The members' daemons after the run: median and largest VmRSS, MiB.
    pub rss_mib: [f64; 2],
}

/// How many of `asked` daemons this machine's memory holds, and why fewer
/// if fewer: 50 when `asked` would take more than half of what is
/// available.
pub fn fit(asked: usize) -> (usize, Option<String>) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available_mib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(u64::MAX, |kib| kib / 1024);
    let want = asked as u64 * MIB_PER_DAEMON;
    if asked > 50 && want > available_mib / 2 {
        let why = format!(
            "{asked} daemons at {MIB_PER_DAEMON} MiB each want {want} MiB, more than half of the {available_mib} MiB available; ran 50"
        );
        (50, Some(why))
    } else {
        (asked, None)
    }
}

/// `n` daemons (TCP on loopback only) in one team: the first founds it,
/// the rest join it one after another. Progress goes to stderr.
pub fn team_of(n: usize) -> Vec<Node> {
    let mut nodes: Vec<Node> = (0..n).map(|i| Node::new(&format!("n{i:03}"))).collect();
    for node in &mut nodes {
        node.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
    }
    // Started a few at a time: each start waits for its socket.
    std::thread::scope(|s| {
        for chunk in nodes.chunks_mut(8) {
            s.spawn(move || chunk.iter_mut().for_each(Node::start));
        }
    });
    let (founder, rest) = nodes.split_first().expect("a team has a founder");
    founder.ok(&["team", "create", "convergence", "--owner", OWNER]);
    let began = Instant::now();
    for (i, n) in rest.iter().enumerate() {
        join_confirmed_at(founder, n, OWNER);
        if (i + 1) % 10 == 0 || i + 1 == rest.len() {
            eprintln!(
                "(joined {} of {}, {:.0} s)",
                i + 1,
                rest.len(),
                began.elapsed().as_secs_f64()
            );
        }
    }
    nodes
}

/// How many members the daemon `c` asks is connected to.
pub fn connected_members(c: &mut ApiClient) -> usize {
    let mut count = 0;
    let mut after = None;
    loop {
        let page = c
            .ask(ops::Peers {
                after: after.take(),
                limit: None,
            })
            .expect("peers answers");
        count += page
            .peers
            .iter()
            .filter(|r| r.membership == Membership::Member && r.connection != Connection::None)
            .count();
        match page.next_after {
            Some(a) => after = Some(a),
            None => return count,
        }
    }
}

/// Waits until every daemon of `nodes` is connected to every other.
pub fn wait_meshed(nodes: &[Node]) {
    let mut clients: Vec<ApiClient> = nodes.iter().map(asker).collect();
    let want = nodes.len() - 1;
    let began = Instant::now();
    let mut said = Instant::now();
    wait_for_within(
        "every member to be connected to every other",
        MESHED_WITHIN,
        || {
            let counts: Vec<usize> = clients.iter_mut().map(connected_members).collect();
            let meshed = counts.iter().filter(|c| **c == want).count();
            if said.elapsed() >= Duration::from_secs(5) {
                said = Instant::now();
                eprintln!(
                    "({meshed} of {} daemons connected to all {want} others, {:.0} s)",
                    nodes.len(),
                    began.elapsed().as_secs_f64()
                );
            }
            (meshed == nodes.len()).then_some(())
        },
    );
}

fn asker(node: &Node) -> ApiClient {
    asker_at(&node.home())
}

fn asker_at(home: &std::path::Path) -> ApiClient {
    ApiClient::connect_at(home, who(WhoKind::Human, "bench"))
}

/// The machine a watch is about: its name and PeerId.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    peer_id: String,
}

impl Target {
    fn of(node: &Node) -> Target {
        Target {
            name: node.name.clone(),
            peer_id: node.peer_id(),
        }
    }

    /// The cursor just before its row among the rows of `rank` (members
    /// 0, revoked 1).
    fn cursor(&self, rank: u8) -> PeerCursor {
        PeerCursor {
            rank,
            name: Some(self.name.clone()),
            peer_id: String::new(),
        }
    }
}

/// A daemon's first answer as wanted: its index, when it came (the
/// watcher's clock, and the wall clock in Unix ms), and the row it gave.
struct Sighting {
    index: usize,
    at: Instant,
    wall_ms: u64,
    row: PeerRow,
}

/// What one watcher saw, and how long its rounds took.
type Seen = (Vec<Sighting>, Vec<Duration>);

/// Watchers under way, each connected to its daemons.
struct Watch {
    threads: Vec<JoinHandle<Seen>>,
}

impl Watch {
    /// Connects to `homes` (here, so that a daemon that can't be reached
    /// fails the run at once), then starts the watchers, which ask until
    /// each daemon answers `target`'s row of `rank` as `wanted` says
    /// (given the time since the watch began).
    fn start(
        homes: &[PathBuf],
        target: &Target,
        rank: u8,
        wanted: fn(&PeerRow, Duration) -> bool,
    ) -> Watch {
        let mut shares: Vec<Vec<(usize, ApiClient)>> = (0..WATCHERS).map(|_| vec![]).collect();
        for (i, h) in homes.iter().enumerate() {
            shares[i % WATCHERS].push((i, ApiClient::connect_at(h, who(WhoKind::Human, "watch"))));
        }
        let since = Instant::now();
        let threads = shares
            .into_iter()
            .map(|share| {
                let target = target.clone();
                std::thread::spawn(move || watch(share, &target, rank, wanted, since))
            })
            .collect();
        Watch { threads }
    }

    /// Each daemon's first answer as wanted, by index; panics on one that
    /// did not answer so within [`CONVERGED_WITHIN`]. And the rounds'
    /// lengths.
    fn finish(self, count: usize) -> (Vec<Sighting>, Vec<Duration>) {
        let mut seen: Vec<Option<Sighting>> = (0..count).map(|_| None).collect();
        let mut rounds = vec![];
        for t in self.threads {
            let (got, r) = t.join().expect("a watcher");
            for s in got {
                let i = s.index;
                seen[i] = Some(s);
            }
            rounds.extend(r);
        }
        let missing: Vec<usize> = (0..count).filter(|i| seen[*i].is_none()).collect();
        assert!(
            missing.is_empty(),
            "{} of {count} daemons did not converge within {CONVERGED_WITHIN:?} (by index: {missing:?})",
            missing.len()
        );
        (seen.into_iter().flatten().collect(), rounds)
    }
}

/// Now on the wall clock, Unix ms (the daemons' clock; nothing moves it
/// in this process).
fn wall_ms() -> u64 {
    agentmesh_node::clock::now().as_unix_millis()
}

/// `at` (on this process's clock) on the wall clock, Unix ms.
fn wall_ms_of(at: Instant) -> u64 {
    wall_ms().saturating_sub(at.elapsed().as_millis() as u64)
}

/// One watcher: asks each of its daemons in turn, pausing between
/// rounds, until all answered as wanted or the time is up.
fn watch(
    mut pending: Vec<(usize, ApiClient)>,
    target: &Target,
    rank: u8,
    wanted: fn(&PeerRow, Duration) -> bool,
    since: Instant,
) -> Seen {
    let mut seen = vec![];
    let mut rounds = vec![];
    let deadline = since + CONVERGED_WITHIN;
    while !pending.is_empty() && Instant::now() < deadline {
        let round = Instant::now();
        pending.retain_mut(|(i, c)| {
            let page = c
                .ask(ops::Peers {
                    after: Some(target.cursor(rank)),
                    limit: Some(1),
                })
                .expect("peers answers");
            let at = Instant::now();
            let row = page.peers.into_iter().next().filter(|r| {
                r.peer_id == target.peer_id && wanted(r, at.saturating_duration_since(since))
            });
            match row {
                Some(row) => {
                    seen.push(Sighting {
                        index: *i,
                        at,
                        wall_ms: wall_ms(),
                        row,
                    });
                    false
                }
                None => true,
            }
        });
        rounds.push(round.elapsed());
        std::thread::sleep(ROUND_PAUSE); // pacing the questions, not synchronisation
    }
    (seen, rounds)
}

/// When the daemon at `home` audited `event` about `peer` at `not_before`
/// (Unix ms) or later: its first such entry, Unix ms.
fn audited_at_ms(home: &std::path::Path, event: &str, peer: &str, not_before: u64) -> Option<u64> {
    let mut c = asker_at(home);
    c.ask(ops::Audit {
        since_secs: Some(3600),
    })
    .expect("audit answers")
    .into_iter()
    .filter(|e| e.event == event && e.peer.as_deref() == Some(peer) && e.at_ms >= not_before)
    .map(|e| e.at_ms)
    .min()
}

/// When the member seen in `s` audited `event` about `peer` at
/// `not_before` or later (Unix ms); without such an entry, when it was
/// seen, and `fallbacks` counts it.
fn audited_or_seen(
    homes: &[PathBuf],
    s: &Sighting,
    (event, peer, not_before): (&str, &str, u64),
    fallbacks: &mut usize,
) -> u64 {
    audited_at_ms(&homes[s.index], event, peer, not_before).unwrap_or_else(|| {
        *fallbacks += 1;
        s.wall_ms
    })
}

/// Revoked, and the connection this member had to it closed: none now, or
/// one younger than the revocation (the revoked machine dialled again).
fn refused_and_closed(r: &PeerRow, since_revoke: Duration) -> bool {
    r.membership == Membership::Revoked
        && (r.connection == Connection::None
            || r.connected_for_ms
                .is_some_and(|ms| Duration::from_millis(ms) < since_revoke))
}

fn counted_member(r: &PeerRow, _: Duration) -> bool {
    r.membership == Membership::Member
}

/// Seconds from `t0` to each instant: (p50, p99, max).
fn spread(t0: Instant, at: &[Instant]) -> (f64, f64, f64) {
    percentiles(
        at.iter()
            .map(|t| t.saturating_duration_since(t0).as_secs_f64())
            .collect(),
    )
}

/// (p50, p99, max) of `s`.
fn percentiles(mut s: Vec<f64>) -> (f64, f64, f64) {
    s.sort_by(f64::total_cmp);
    let pct = |p: f64| percentile(&s, p);
    (pct(0.5), pct(0.99), pct(1.0))
}

/// Runs the benchmark with `asked` daemons (fewer if memory forbids).
pub fn run(asked: usize) -> Figures {
    assert!(asked >= 3, "a convergence run needs at least 3 daemons");
    let (n, reduced) = fit(asked);
    if let Some(why) = &reduced {
        eprintln!("({why})");
    }
    let began = Instant::now();
    let mut nodes = team_of(n);
    wait_meshed(&nodes);
    let setup_s = began.elapsed().as_secs_f64();
    eprintln!("(team of {n} meshed after {setup_s:.0} s)");

    // Revocation: the last machine admitted.
    let revoked = nodes.pop().expect("a member to revoke");
    let target = Target::of(&revoked);
    let homes: Vec<PathBuf> = nodes.iter().map(Node::home).collect();
    let mut founder = asker(&nodes[0]);
    let watch = Watch::start(&homes, &target, 1, refused_and_closed);
    let t0 = Instant::now();
    let t0_ms = wall_ms();
    founder
        .ask(ops::Revoke {
            name: target.name.clone(),
        })
        .expect("the founder revokes");
    let (seen, mut rounds) = watch.finish(homes.len());
    let seen_at: Vec<Instant> = seen.iter().map(|s| s.at).collect();
    let (_, revocation_seen_p99_s, revocation_seen_max_s) = spread(t0, &seen_at);
    // By the daemons' clocks: the later of when each learned it (its
    // audit) and when its connection closed (its row); a member that was
    // seen with a newer connection counts from when it was seen, and one
    // whose audit has no entry (counted) from when it was seen revoked.
    let mut revocation_from_watch = 0;
    let by_clock: Vec<f64> = seen
        .iter()
        .map(|s| {
            let about = ("revoked", target.peer_id.as_str(), t0_ms);
            let refused = audited_or_seen(&homes, s, about, &mut revocation_from_watch);
            let closed = match (s.row.connection, s.row.disconnected_for_ms) {
                (Connection::None, Some(ago)) => s.wall_ms.saturating_sub(ago),
                _ => s.wall_ms,
            };
            refused.max(closed).saturating_sub(t0_ms) as f64 / 1000.0
        })
        .collect();
    let (revocation_p50_s, revocation_p99_s, revocation_max_s) = percentiles(by_clock);

    // Admission: a new machine joins.
    let mut late = Node::new(&format!("n{n:03}"));
    late.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
    late.start();
    let late_target = Target::of(&late);
    let watch = Watch::start(&homes, &late_target, 0, counted_member);
    let confirmed = join_confirmed_at(&nodes[0], &late, OWNER);
    let confirmed_ms = wall_ms_of(confirmed);
    let (seen, more) = watch.finish(homes.len());
    rounds.extend(more);
    let seen_at: Vec<Instant> = seen.iter().map(|s| s.at).collect();
    let (_, admission_seen_p99_s, _) = spread(confirmed, &seen_at);
    // Any entry for the new machine is this admission's (its PeerId is
    // new); one whose audit has none counts from when it was seen.
    let mut admission_from_watch = 0;
    let by_clock: Vec<f64> = seen
        .iter()
        .map(|s| {
            let about = ("admitted", late_target.peer_id.as_str(), 1);
            let counted = audited_or_seen(&homes, s, about, &mut admission_from_watch);
            counted.saturating_sub(confirmed_ms) as f64 / 1000.0
        })
        .collect();
    let (admission_p50_s, admission_p99_s, admission_max_s) = percentiles(by_clock);

    let mut rss: Vec<f64> = nodes.iter().map(|n| rss_mib(n.pid())).collect();
    rss.sort_by(f64::total_cmp);
    rounds.sort();
    drop((revoked, late));
    Figures {
        nodes: n,
        nodes_asked: asked,
        reduced,
        setup_s,
        poll_round_ms: rounds[rounds.len() / 2].as_secs_f64() * 1000.0,
        poll_round_max_ms: rounds[rounds.len() - 1].as_secs_f64() * 1000.0,
        revocation_p50_s,
        revocation_p99_s,
        revocation_max_s,
        revocation_seen_p99_s,
        revocation_seen_max_s,
        revocation_from_watch,
        admission_p50_s,
        admission_p99_s,
        admission_max_s,
        admission_seen_p99_s,
        admission_from_watch,
        rss_mib: [rss[rss.len() / 2], rss[rss.len() - 1]],
    }
}

/// The figures as lines, each beside its target.
pub fn print(f: &Figures) {
    println!(
        "convergence: {} daemons on loopback in one team (asked for {}; meshed after {:.0} s; figures by the daemons' clocks; a watcher's round, median {:.1} ms, longest {:.1} ms)",
        f.nodes, f.nodes_asked, f.setup_s, f.poll_round_ms, f.poll_round_max_ms
    );
    if let Some(why) = &f.reduced {
        println!("  {why}");
    }
    println!(
        "  revocation, until each member refuses it with its connection closed: p50 {:.3} s, p99 {:.3} s (target <= 1), max {:.3} s; as the watchers saw it: p99 {:.3} s, max {:.3} s",
        f.revocation_p50_s,
        f.revocation_p99_s,
        f.revocation_max_s,
        f.revocation_seen_p99_s,
        f.revocation_seen_max_s
    );
    println!(
        "  admission, until each member counts the new machine a member: p50 {:.3} s, p99 {:.3} s, max {:.3} s; as the watchers saw it: p99 {:.3} s",
        f.admission_p50_s, f.admission_p99_s, f.admission_max_s, f.admission_seen_p99_s
    );
    if f.revocation_from_watch + f.admission_from_watch > 0 {
        println!(
            "  members whose audit log had no entry, counted from a watcher's answer: {} for the revocation, {} for the admission",
            f.revocation_from_watch, f.admission_from_watch
        );
    }
    println!(
        "  members' daemons after the run: median {:.1} MiB, largest {:.1} MiB",
        f.rss_mib[0], f.rss_mib[1]
    );
}
