//! `agentmesh-bench mcp`: agent to agent through `agentmesh mcp`, as the
//! agents' MCP clients see it.
//!
//! ```text
//!  two daemons (the cross-machine path), one owner, on loopback:
//!    bench ── rmcp client ── agentmesh mcp ── daemon "sender"
//!                                                 │ libp2p, loopback
//!    bench <── channel notification ── agentmesh mcp ── daemon "receiver"
//!  one daemon (the same-machine path): both `agentmesh mcp` on one daemon
//! ```
//!
//! One session calls `send_message` (1 KiB texts) to the other's mailbox
//! again and again, each call awaited before the next; the other session
//! only receives (so the sender stays at hop 0, which no pair limit
//! touches). Throughput: calls answered per second. End to end: from the
//! start of a call to the receiving client getting the
//! `notifications/claude/channel` that carries the message (matched by
//! `meta.id`). Memory: the receiving daemon and its MCP server, after the
//! run.
//!
//! With `AGENTMESH_BENCH_RESTART` set, the receiving daemon is also
//! restarted after the run and its memory measured again (a diagnostic:
//! how much of its memory is state that survives a restart).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bench_messaging::{proc_status_mib, rss_mib};
use crate::mcp::Session;
use crate::{Node, team, wait_for};

/// Sends before the measured ones, each awaited until it is notified:
/// connections dialled, caches and allocators warm.
const WARMUP: usize = 20;
/// How long a probe waits for its notification.
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// Probes before the bench gives up on the receiving session.
const MAX_PROBES: usize = 20;
/// How long the last notifications may take after the last send.
const NOTIFY_DEADLINE: Duration = Duration::from_secs(60);
/// The receiving session's mailbox.
const RECEIVER: &str = "receiver-box";
/// The sending session's mailbox.
const SENDER: &str = "sender-box";

/// One path's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PathFigures {
    /// Measured sends (warm-up not counted).
    pub sends: usize,
    /// Of them, those whose result said where the message stood past
    /// `queued` (the recipient's first answer was in the result).
    pub first_answers: usize,
    /// Sequential `send_message` calls answered per second.
    pub sends_per_s: f64,
    /// From a call's start to the recipient's channel notification: median.
    pub e2e_p50_ms: f64,
    /// ... 99th percentile.
    pub e2e_p99_ms: f64,
    /// ... the slowest.
    pub e2e_max_ms: f64,
    /// How long a `send_message` call took (start to result): median.
    pub call_p50_ms: f64,
    /// ... 99th percentile.
    pub call_p99_ms: f64,
    /// The receiving daemon and its MCP server together, after the run, MiB.
    pub rss_mib: f64,
    /// The receiving daemon alone (VmRSS), MiB.
    pub daemon_rss_mib: f64,
    /// The receiving MCP server alone (VmRSS), MiB.
    pub mcp_rss_mib: f64,
    /// The largest the receiving daemon and MCP server were (VmHWM each,
    /// summed), MiB.
    pub peak_rss_mib: f64,
    /// The sending MCP server (VmRSS), MiB.
    pub sender_mcp_rss_mib: f64,
    /// The sending daemon (VmRSS), MiB: the two-daemon path only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_daemon_rss_mib: Option<f64>,
}

/// The figures: the two-daemon path at the top level, the one-daemon path
/// under `local`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figures {
    /// Two daemons on loopback: the cross-machine path.
    #[serde(flatten)]
    pub remote: PathFigures,
    /// Both sessions on one daemon: the same-machine path.
    pub local: PathFigures,
}

/// A 1 KiB text, numbered.
fn text_1k(i: usize) -> String {
    let mut t = format!("message {i}: ");
    while t.len() < 1024 {
        t.push('x');
    }
    t
}

/// What one path's run gave, before memory is read.
struct Timings {
    sends_per_s: f64,
    e2e_ms: Vec<f64>,
    call_ms: Vec<f64>,
    first_answers: usize,
}

/// The `p` quantile (0–1) of sorted figures, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Calls `send_message` to `to` and checks its result; the message id and
/// its `status` (past `queued` once the recipient first answered).
async fn send(sender: &Session, to: &str, i: usize, local: bool) -> (String, String) {
    let r = sender
        .ok("send_message", json!({ "to": to, "text": text_1k(i) }))
        .await;
    assert_eq!(
        r["local"].as_bool(),
        Some(local),
        "send_message to {to} went the wrong way: {r}"
    );
    let id = r["id"]
        .as_str()
        .unwrap_or_else(|| panic!("send_message gave no id: {r}"))
        .to_owned();
    (id, r["status"].as_str().unwrap_or_default().to_owned())
}

/// The message id a channel notification carries.
fn pushed_id(params: &Value) -> String {
    params["meta"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a channel notification without meta.id: {params}"))
        .to_owned()
}

/// Warm-up, then `sends` sequential sends from `sender` to `to`, each
/// matched to the notification `receiver` gets for it.
async fn drive(
    sender: &mut Session,
    receiver: &mut Session,
    to: &str,
    sends: usize,
    local: bool,
) -> Timings {
    // The receiving server pushes what arrives once its pump has attached
    // to the daemon, which it does after the handshake, on its own time; a
    // message that arrives sooner is not pushed (it stays unread, for
    // `check_inbox`). Probe until one is pushed.
    let mut probes = 0;
    loop {
        probes += 1;
        let (id, _) = send(sender, to, 0, local).await;
        match receiver.next_push(PROBE_WAIT).await {
            Some(p) if pushed_id(&p.params) == id => break,
            _ => assert!(
                probes < MAX_PROBES,
                "none of {probes} probes to {to} was notified to the receiving session"
            ),
        }
    }
    if probes > 1 {
        eprintln!(
            "({to}: {} probe(s) went before the receiving server's pump had attached)",
            probes - 1
        );
    }
    for i in 0..WARMUP {
        let (id, _) = send(sender, to, i, local).await;
        loop {
            let p = receiver
                .next_push(NOTIFY_DEADLINE)
                .await
                .unwrap_or_else(|| panic!("warm-up send {i} ({id}) to {to} was never notified"));
            if pushed_id(&p.params) == id {
                break;
            }
        }
    }

    let mut sent = Vec::with_capacity(sends);
    let mut first_answers = 0;
    let start = Instant::now();
    for i in 0..sends {
        let at = Instant::now();
        let (id, status) = send(sender, to, WARMUP + i, local).await;
        sent.push((id, at, at.elapsed()));
        first_answers += usize::from(status != "queued");
    }
    let elapsed = start.elapsed();

    // Each notification's arrival was stamped by the client as it came;
    // reading them now changes nothing.
    let mut arrived: HashMap<String, Instant> = HashMap::with_capacity(sends);
    let deadline = Instant::now() + NOTIFY_DEADLINE;
    while sent.iter().any(|(id, ..)| !arrived.contains_key(id)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match receiver.next_push(left).await {
            Some(p) => {
                arrived.entry(pushed_id(&p.params)).or_insert(p.at);
            }
            None => {
                let missing: Vec<&str> = sent
                    .iter()
                    .filter(|(id, ..)| !arrived.contains_key(id))
                    .map(|(id, ..)| id.as_str())
                    .collect();
                panic!(
                    "{} of {sends} sends were never notified to the receiving session within {NOTIFY_DEADLINE:?} of the last send (first: {:?})",
                    missing.len(),
                    &missing[..missing.len().min(5)]
                );
            }
        }
    }
    // The sender only sends: nothing should have been pushed to it.
    let stray = std::iter::from_fn(|| sender.pushed.try_recv().ok()).count();
    assert_eq!(stray, 0, "the sending session was notified {stray} times");

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Timings {
        sends_per_s: sends as f64 / elapsed.as_secs_f64(),
        e2e_ms: sent
            .iter()
            .map(|(id, at, _)| ms(arrived[id].saturating_duration_since(*at)))
            .collect(),
        call_ms: sent.iter().map(|(.., call)| ms(*call)).collect(),
        first_answers,
    }
}

/// Figures from timings and the processes whose memory counts.
fn figures(
    t: Timings,
    daemon: &Node,
    receiver: &Session,
    sender: &Session,
    sender_daemon: Option<&Node>,
) -> PathFigures {
    let Timings {
        sends_per_s,
        mut e2e_ms,
        mut call_ms,
        first_answers,
    } = t;
    e2e_ms.sort_by(f64::total_cmp);
    call_ms.sort_by(f64::total_cmp);
    let daemon_pid = daemon.pid();
    let mcp_pid = receiver.pid as i32;
    let daemon_rss_mib = rss_mib(daemon_pid);
    let mcp_rss_mib = rss_mib(mcp_pid);
    assert!(
        daemon_rss_mib > 0.0 && mcp_rss_mib > 0.0,
        "cannot read the receiving processes' memory (pids {daemon_pid}, {mcp_pid})"
    );
    PathFigures {
        sends: e2e_ms.len(),
        first_answers,
        sends_per_s,
        e2e_p50_ms: percentile(&e2e_ms, 0.50),
        e2e_p99_ms: percentile(&e2e_ms, 0.99),
        e2e_max_ms: percentile(&e2e_ms, 1.0),
        call_p50_ms: percentile(&call_ms, 0.50),
        call_p99_ms: percentile(&call_ms, 0.99),
        rss_mib: daemon_rss_mib + mcp_rss_mib,
        daemon_rss_mib,
        mcp_rss_mib,
        peak_rss_mib: proc_status_mib(daemon_pid, "VmHWM") + proc_status_mib(mcp_pid, "VmHWM"),
        sender_mcp_rss_mib: rss_mib(sender.pid as i32),
        sender_daemon_rss_mib: sender_daemon.map(|n| rss_mib(n.pid())),
    }
}

/// A folder for an agent's session, opted in on `node` as `mailbox`.
fn folder(node: &Node, mailbox: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("am-agent-")
        .tempdir_in("/tmp")
        .unwrap();
    node.ok(&[
        "allow",
        &dir.path().display().to_string(),
        "--mailbox",
        mailbox,
    ]);
    dir
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Spawns the two sessions, each in its own opted-in folder.
async fn sessions(
    sender_node: &Node,
    sender_dir: &Path,
    receiver_node: &Node,
    receiver_dir: &Path,
) -> (Session, Session) {
    let sender = Session::spawn(sender_node, sender_dir, "bench-sender", &[]).await;
    let receiver = Session::spawn(receiver_node, receiver_dir, "bench-receiver", &[]).await;
    (sender, receiver)
}

/// The diagnostic restart of the receiving daemon, if asked for.
fn restart_diagnostic(node: &mut Node, rss_after_run: f64) {
    if std::env::var_os("AGENTMESH_BENCH_RESTART").is_some() {
        node.stop();
        node.start();
        eprintln!(
            "(receiving daemon {}: {rss_after_run:.1} MiB after the run, {:.1} MiB after a restart)",
            node.name,
            rss_mib(node.pid())
        );
    }
}

/// The cross-machine path: two daemons of one owner, on loopback.
pub fn two_daemons(sends: usize) -> PathFigures {
    // One owner: nothing is held for approval.
    let [a, mut b] = team([("sender", "Ada"), ("receiver", "Ada")]);
    wait_for("the sender to be connected to the receiver", || {
        a.peer_row(&b.peer_id())
            .filter(|r| r["connection"] == "direct")
    });
    let a_dir = folder(&a, SENDER);
    let b_dir = folder(&b, RECEIVER);
    let to = format!("{RECEIVER}@{}", b.name);
    let rt = runtime();
    let f = rt.block_on(async {
        let (mut sender, mut receiver) = sessions(&a, a_dir.path(), &b, b_dir.path()).await;
        let t = drive(&mut sender, &mut receiver, &to, sends, false).await;
        let f = figures(t, &b, &receiver, &sender, Some(&a));
        sender.close().await;
        receiver.close().await;
        f
    });
    restart_diagnostic(&mut b, f.daemon_rss_mib);
    f
}

/// The same-machine path: both sessions on one daemon.
fn one_daemon(sends: usize) -> PathFigures {
    let mut node = Node::new("solo");
    node.start();
    let a_dir = folder(&node, SENDER);
    let b_dir = folder(&node, RECEIVER);
    let to = format!("{RECEIVER}@");
    let rt = runtime();
    let f = rt.block_on(async {
        let (mut sender, mut receiver) = sessions(&node, a_dir.path(), &node, b_dir.path()).await;
        let t = drive(&mut sender, &mut receiver, &to, sends, true).await;
        let f = figures(t, &node, &receiver, &sender, None);
        sender.close().await;
        receiver.close().await;
        f
    });
    restart_diagnostic(&mut node, f.daemon_rss_mib);
    f
}

/// Runs both paths with `sends` measured sends each.
pub fn run(sends: usize) -> Figures {
    assert!(sends > 0, "at least one send");
    let remote = two_daemons(sends);
    let local = one_daemon(sends);
    Figures { remote, local }
}
