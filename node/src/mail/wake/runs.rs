//! Wake runs: the headless agent processes the daemon starts for a
//! mailbox whose mail arrived while no session of it was open, one at a
//! time per mailbox and at most `wake.max_runs` at once.
//!
//! ```text
//!  start ── RunRecord (running), durable ── spawn (own process group,
//!           stdin closed, stdout+stderr ── HOME/wake/RUN.log, capped)
//!    exits ─────────────────────┐
//!    wake.run_limit ── SIGTERM ─┤ (the group; SIGKILL 10 s later)
//!    wake stop ─────── SIGTERM ─┤
//!                               └─ the rest of its group killed ── RunEnded
//!                                  ──> the mail actor: done (exit 0 and
//!                                  its own session named: its messages
//!                                  read) or failed (unread)
//!  daemon restarted while one ran ── interrupted (its messages unread)
//! ```
//!
//! The supervisor task owns the process; the actor owns the records and
//! learns of an end over a channel, so no run's state is reached from
//! outside the actor.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentmesh_protocol::Timestamp;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::agents::run::SessionId;
use crate::api::{self, ApiError, RunStatus, RunView, WakeAgent, WakeCommandView, WakeListView};
use crate::codes::ErrorCode;
use crate::store::{RunRecord, Store, StoreError};

/// Runs kept for `wake list` (their logs with them); a running one is
/// never forgotten.
pub(in crate::mail) const MAX_RUNS_KEPT: usize = 100;

/// A run's log holds at most this much of its output; the rest is
/// counted, not kept.
pub(in crate::mail) const MAX_LOG: usize = 256 * 1024;

/// After SIGTERM, how long a run's group has before SIGKILL.
pub(in crate::mail) const KILL_GRACE: Duration = Duration::from_secs(10);

/// The most of a run's stdout kept to read its session from: Claude
/// Code's JSON result (the model's answer inside it) must be read whole,
/// and is a few kilobytes; Codex's `thread.started` is its first line.
/// A run whose stdout is longer names no session.
const MAX_RESULT: usize = 1024 * 1024;

/// How long the end of a run's output is waited for once its process
/// exited (a descendant that left its process group may hold the pipe).
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// A run ended: what its supervisor reports to the actor.
#[derive(Debug)]
pub(in crate::mail) struct RunEnded {
    /// The run.
    pub id: String,
    /// How it ended.
    pub status: RunStatus,
    /// In words.
    pub exit: String,
    /// The session its agent named on the agent's own channel, if any.
    pub session: Option<SessionId>,
}

/// A run to start.
#[derive(Debug)]
pub(in crate::mail) struct Start {
    /// Its id.
    pub id: String,
    /// The mailbox.
    pub mailbox: String,
    /// The agent.
    pub agent: WakeAgent,
    /// The exact command.
    pub command: WakeCommandView,
    /// The messages its prompt shows: (seq, id).
    pub shown: Vec<(u64, String)>,
    /// A broadcast is among them.
    pub broadcast: bool,
}

/// The runs: their records, the running ones' stop switches, and the
/// mailboxes waiting for a free slot.
#[derive(Debug)]
pub(in crate::mail) struct Runs {
    max_runs: usize,
    run_limit: Duration,
    /// Where logs go: HOME/wake.
    dir: PathBuf,
    /// Oldest first.
    records: VecDeque<RunRecord>,
    stops: BTreeMap<String, CancellationToken>,
    queued: VecDeque<String>,
    /// Per mailbox, the id of the newest tainted message logged as
    /// waiting (`taint` is logged once per message that arrived, not per
    /// look, nor again at each start: seeded from the audit log).
    taint_logged: BTreeMap<String, String>,
}

/// Audit entries read at start for the taint notes already written, at
/// most (the newest), and how far back.
const TAINT_SCAN: usize = 20_000;
const TAINT_SCAN_AGE: Duration = Duration::from_secs(8 * 24 * 3600);

/// Per mailbox, the message the last `taint` note named, from the audit
/// log: a restart does not write the same note again.
fn taint_logged(store: &dyn Store, now: Timestamp) -> BTreeMap<String, String> {
    let since = now.saturating_sub(TAINT_SCAN_AGE);
    let event = crate::audit::AuditEvent::TaintWaits.as_str();
    let mut out = BTreeMap::new();
    for e in store.audit_since(since, TAINT_SCAN).unwrap_or_default() {
        if e.event != event {
            continue;
        }
        if let (Some(r), Some(id)) = (e.recipient, e.message_id)
            && let Some((mailbox, _)) = r.split_once('@')
        {
            // Oldest first: the last one wins.
            out.insert(mailbox.to_owned(), id);
        }
    }
    out
}

impl Runs {
    /// The stored runs; one that was running when the daemon stopped is
    /// `interrupted` now (durably), its messages unread.
    pub(in crate::mail) fn load(
        store: &dyn Store,
        (max_runs, run_limit): (u32, Duration),
        home: &Path,
        now: Timestamp,
    ) -> Result<Runs, StoreError> {
        let mut records: Vec<RunRecord> = store.runs()?;
        records.sort_by(|a, b| (a.started, &a.id).cmp(&(b.started, &b.id)));
        let orphans: Vec<String> = records
            .iter()
            .filter(|r| r.status == RunStatus::Running)
            .map(|r| r.id.clone())
            .collect();
        kill_orphans(&orphans);
        for r in records
            .iter_mut()
            .filter(|r| r.status == RunStatus::Running)
        {
            r.status = RunStatus::Interrupted;
            r.ended = Some(now.as_unix_millis());
            r.exit = Some(
                "the daemon stopped while it ran (what it left running was ended at the next start); what it did is unknown"
                    .into(),
            );
            store.put_run(r, false)?;
        }
        Ok(Runs {
            max_runs: max_runs as usize,
            run_limit,
            dir: home.join("wake"),
            records: records.into(),
            stops: BTreeMap::new(),
            queued: VecDeque::new(),
            taint_logged: taint_logged(store, now),
        })
    }

    /// Whether a run of `mailbox` is running.
    pub(in crate::mail) fn busy(&self, mailbox: &str) -> bool {
        self.running_of(mailbox).is_some()
    }

    fn running(&self) -> impl Iterator<Item = &RunRecord> {
        self.records
            .iter()
            .filter(|r| r.status == RunStatus::Running)
    }

    /// Whether another run may start now.
    pub(in crate::mail) fn has_slot(&self) -> bool {
        self.running().count() < self.max_runs
    }

    /// `mailbox` waits for a free slot (once).
    pub(in crate::mail) fn queue(&mut self, mailbox: &str) {
        if !self.queued.iter().any(|m| m == mailbox) {
            self.queued.push_back(mailbox.to_owned());
        }
    }

    /// The mailboxes waiting for a slot, oldest first, taken.
    pub(in crate::mail) fn take_queued(&mut self) -> Vec<String> {
        self.queued.drain(..).collect()
    }

    /// Whether tainted mail up to `seq` waiting in `mailbox` is news for
    /// the log.
    pub(in crate::mail) fn taint_to_log(&mut self, mailbox: &str, id: &str) -> bool {
        if self.taint_logged.get(mailbox).is_some_and(|s| s == id) {
            return false;
        }
        if self.taint_logged.len() >= 4096 {
            self.taint_logged.clear();
        }
        self.taint_logged.insert(mailbox.to_owned(), id.to_owned());
        true
    }

    /// The newest run of `mailbox` that ended without its messages read.
    pub(in crate::mail) fn last_failure(&self, mailbox: &str) -> Option<&RunRecord> {
        self.records
            .iter()
            .rev()
            .filter(|r| r.mailbox == mailbox && r.status != RunStatus::Running)
            .take(1)
            .find(|r| r.status.failed())
    }

    /// The session run `id` resumed, if it resumed one.
    pub(in crate::mail) fn resumed(&self, id: &str) -> Option<String> {
        let r = self.records.iter().find(|r| r.id == id)?;
        r.resumed.then(|| r.session.clone()).flatten()
    }

    /// A running run's session did something through agentmesh: the run
    /// named by its id (a wake run's own commands carry it), else the
    /// running run of the mailbox the client is attached to (its MCP
    /// server). Counted with the run, written when it ends.
    pub(in crate::mail) fn acted(&mut self, run: Option<&str>, mailbox: Option<&str>) {
        if let Some(r) = self.records.iter_mut().find(|r| {
            r.status == RunStatus::Running
                && (run.is_some_and(|id| r.id == id)
                    || (run.is_none() && mailbox.is_some_and(|m| r.mailbox == m)))
        }) {
            r.acted = r.acted.saturating_add(1);
        }
    }

    /// The kept runs (the last [`MAX_RUNS_KEPT`]), oldest first.
    pub(in crate::mail) fn records(&self) -> impl Iterator<Item = &RunRecord> {
        self.records.iter()
    }

    /// The running run of `mailbox`.
    pub(in crate::mail) fn running_of(&self, mailbox: &str) -> Option<&RunRecord> {
        self.running().find(|r| r.mailbox == mailbox)
    }

    /// Starts `start`: its record written durably first (a crash from
    /// here on leaves it `interrupted`, never unknown); then the caller
    /// runs the process, under the supervisor returned, in a task it owns.
    pub(in crate::mail) fn start(
        &mut self,
        store: &dyn Store,
        start: Start,
        now: Timestamp,
    ) -> Result<(RunRecord, impl Future<Output = RunEnded> + Send + use<>), StoreError> {
        if let Err(e) = std::fs::create_dir_all(&self.dir) {
            tracing::warn!(error = %e, dir = %self.dir.display(), "cannot make the wake log folder");
        }
        let log = self.dir.join(format!("{}.log", start.id));
        let record = RunRecord {
            id: start.id.clone(),
            mailbox: start.mailbox,
            agent: start.agent,
            session: start.command.resume.clone(),
            resumed: start.command.resume.is_some(),
            status: RunStatus::Running,
            exit: None,
            started: now.as_unix_millis(),
            ended: None,
            shown: start.shown.iter().map(|(s, _)| *s).collect(),
            messages: start.shown.into_iter().map(|(_, id)| id).collect(),
            log: log.display().to_string(),
            broadcast: start.broadcast,
            acted: 0,
        };
        store.put_run(&record, false)?;
        let stop = CancellationToken::new();
        self.stops.insert(record.id.clone(), stop.clone());
        self.records.push_back(record.clone());
        let job = Supervised {
            id: start.id,
            agent: start.agent,
            command: start.command,
            log,
            limit: self.run_limit,
            stop,
        };
        // It runs: a record not pruned now is pruned after the next run.
        if let Err(e) = self.prune(store) {
            tracing::warn!(error = %e, "cannot prune old wake runs");
        }
        Ok((record, supervise(job)))
    }

    /// A run ended: its record, final (and durable, unless the store
    /// failed: then the error is logged, and a restart shows the run
    /// `interrupted`).
    pub(in crate::mail) fn ended(
        &mut self,
        store: &dyn Store,
        end: &RunEnded,
        now: Timestamp,
    ) -> Option<RunRecord> {
        self.stops.remove(&end.id);
        let r = self.records.iter_mut().find(|r| r.id == end.id)?;
        r.status = end.status;
        r.exit = Some(end.exit.clone());
        r.ended = Some(now.as_unix_millis());
        if let Some(s) = &end.session {
            r.session = Some(s.to_string());
        }
        if let Err(e) = store.put_run(r, false) {
            tracing::error!(error = %e, run = %r.id, "cannot record a wake run's end");
        }
        Some(r.clone())
    }

    /// `wake stop`: the run `prefix` names is ended (SIGTERM, then
    /// SIGKILL); answered with its record as it stands.
    pub(in crate::mail) fn stop(&self, prefix: &str) -> Result<&RunRecord, ApiError> {
        let p = prefix.trim();
        let found: Vec<&RunRecord> = if p.is_empty() {
            vec![]
        } else {
            self.records
                .iter()
                .filter(|r| r.id.starts_with(p))
                .collect()
        };
        let r = match found.as_slice() {
            [r] => *r,
            [] => {
                return Err(ApiError::new(
                    ErrorCode::UnknownRun,
                    format!("no wake run has id {p:?}; `agentmesh wake list` shows the runs"),
                ));
            }
            _ => {
                return Err(ApiError::new(
                    ErrorCode::BadInput,
                    format!("{p:?} names more than one run; give more of its id"),
                ));
            }
        };
        if let Some(stop) = self.stops.get(&r.id) {
            stop.cancel();
        }
        Ok(r)
    }

    /// `wake list`.
    pub(in crate::mail) fn list(&self, now: Timestamp) -> WakeListView {
        WakeListView {
            runs: self.records.iter().rev().map(|r| view(r, now)).collect(),
            max_runs: self.max_runs as u32,
            queued: self.queued.iter().cloned().collect(),
        }
    }

    /// Forgets the oldest ended runs past [`MAX_RUNS_KEPT`], logs too.
    fn prune(&mut self, store: &dyn Store) -> Result<(), StoreError> {
        while self.records.len() > MAX_RUNS_KEPT {
            let Some(at) = self
                .records
                .iter()
                .position(|r| r.status != RunStatus::Running)
            else {
                return Ok(());
            };
            if let Some(old) = self.records.remove(at) {
                store.put_run(&old, true)?;
                let _ = std::fs::remove_file(&old.log);
            }
        }
        Ok(())
    }
}

/// Ends the processes of runs a daemon killed with SIGKILL left behind:
/// each process (of this user) whose environment has
/// `AGENTMESH_WAKE_RUN=ID` for one of `ids`, with its process group. The
/// environment is checked, not a stored pid, so a recycled pid is never
/// signalled.
fn kill_orphans(ids: &[String]) {
    use nix::sys::signal::{Signal, killpg};
    if ids.is_empty() {
        return;
    }
    let wanted: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| format!("{}={id}", crate::agents::run::RUN_MARKER).into_bytes())
        .collect();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(p.path().join("environ")) else {
            continue;
        };
        if env
            .split(|b| *b == 0)
            .any(|kv| wanted.iter().any(|w| w == kv))
        {
            let pid = nix::unistd::Pid::from_raw(pid);
            if let Ok(group) = nix::unistd::getpgid(Some(pid)) {
                tracing::warn!(pid = %pid, "ending a wake run's process left by a daemon that was killed");
                let _ = killpg(group, Signal::SIGKILL);
            }
        }
    }
}

/// A run as clients see it.
pub(in crate::mail) fn view(r: &RunRecord, now: Timestamp) -> RunView {
    let end = r.ended.unwrap_or(now.as_unix_millis());
    RunView {
        id: r.id.clone(),
        mailbox: r.mailbox.clone(),
        agent: r.agent,
        session: r.session.clone(),
        resumed: r.resumed,
        status: r.status,
        exit: r.exit.clone(),
        started: api::rfc3339_ms(r.started),
        ended: r.ended.map(api::rfc3339_ms),
        duration_ms: end.saturating_sub(r.started),
        messages: r.messages.clone(),
        log: r.log.clone(),
    }
}

/// What a supervisor runs.
#[derive(Debug)]
struct Supervised {
    id: String,
    agent: WakeAgent,
    command: WakeCommandView,
    log: PathBuf,
    limit: Duration,
    stop: CancellationToken,
}

/// A run's log file: what fits of its output, then a line saying how much
/// did not.
#[derive(Debug)]
struct Log {
    file: Option<std::fs::File>,
    written: usize,
    dropped: usize,
}

impl Log {
    fn create(path: &Path) -> Log {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| tracing::warn!(error = %e, log = %path.display(), "cannot write a wake run's log"))
            .ok();
        Log {
            file,
            written: 0,
            dropped: 0,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let room = MAX_LOG.saturating_sub(self.written);
        let n = bytes.len().min(room);
        if let Some(f) = &mut self.file
            && n > 0
        {
            let _ = f.write_all(&bytes[..n]);
        }
        self.written += n;
        self.dropped += bytes.len() - n;
    }

    fn finish(&mut self, how: &str) {
        let dropped = self.dropped;
        if let Some(f) = &mut self.file {
            if dropped > 0 {
                let _ = writeln!(f, "\n[agentmesh: {dropped} more bytes of output not kept]");
            }
            let _ = writeln!(f, "\n[agentmesh: {how}]");
        }
    }
}

/// What a run's output stream left: its first `keep` bytes, and whether
/// there was more.
#[derive(Debug, Default)]
struct Kept {
    head: Vec<u8>,
    cut: bool,
}

/// Copies `r` into `log` to its end; keeps its first `keep` bytes.
async fn drain(
    r: Option<impl tokio::io::AsyncRead + Unpin>,
    log: Arc<Mutex<Log>>,
    keep: usize,
) -> Kept {
    let mut kept = Kept::default();
    let Some(mut r) = r else {
        return kept;
    };
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = keep.saturating_sub(kept.head.len());
                kept.head.extend_from_slice(&buf[..n.min(room)]);
                kept.cut |= n > room;
                if let Ok(mut l) = log.lock() {
                    l.write(&buf[..n]);
                }
            }
        }
    }
}

/// A run's process group, killed whole when this goes (the supervisor
/// dropped at shutdown included).
struct Group(Option<nix::unistd::Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        signal_group(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

fn signal_group(group: Option<nix::unistd::Pid>, signal: nix::sys::signal::Signal) {
    if let Some(g) = group {
        let _ = nix::sys::signal::killpg(g, signal);
    }
}

/// Runs one wake run to its end, and says how it ended.
async fn supervise(job: Supervised) -> RunEnded {
    use nix::sys::signal::Signal;
    let log = Arc::new(Mutex::new(Log::create(&job.log)));
    let c = &job.command;
    let spawned = tokio::process::Command::new(&c.program)
        .args(&c.args)
        .current_dir(&c.cwd)
        .envs(c.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let exit = if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{} was not found on the daemon's PATH (or the folder {} is gone); install it, or name its path in config.toml's [wake]",
                    c.program, c.cwd
                )
            } else {
                format!("{} could not be started: {e}", c.program)
            };
            if let Ok(mut l) = log.lock() {
                l.finish(&exit);
            }
            return RunEnded {
                id: job.id,
                status: RunStatus::NotStarted,
                exit,
                session: None,
            };
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(nix::unistd::Pid::from_raw);
    // Whatever the run left running in its group ends with it, however
    // this task ends.
    let _group = Group(group);
    // Its two pipes drained in tasks of this one's own: dropping the set
    // ends them. Its stderr is logged, never read: the session comes from
    // the agent's own channel on stdout only.
    let mut drains = tokio::task::JoinSet::new();
    let (stdout, stderr, l) = (child.stdout.take(), child.stderr.take(), log.clone());
    drains.spawn(async move { Some(drain(stdout, l, MAX_RESULT).await) });
    let l = log.clone();
    drains.spawn(async move {
        drain(stderr, l, 0).await;
        None
    });
    let mut ended_by = None;
    let status = {
        let wait = child.wait();
        tokio::pin!(wait);
        tokio::select! {
            s = &mut wait => s,
            () = tokio::time::sleep(job.limit) => {
                ended_by = Some(RunStatus::TimedOut);
                stop_group(group, &mut wait).await
            }
            () = job.stop.cancelled() => {
                ended_by = Some(RunStatus::Stopped);
                stop_group(group, &mut wait).await
            }
        }
    };
    signal_group(group, Signal::SIGKILL);
    // A descendant that left the group may hold a pipe: its output is
    // not waited for past DRAIN_AFTER_EXIT, nor kept.
    let mut out = Kept::default();
    let until = tokio::time::Instant::now() + DRAIN_AFTER_EXIT;
    while let Ok(Some(drained)) = tokio::time::timeout_at(until, drains.join_next()).await {
        if let Ok(Some(kept)) = drained {
            out = kept;
        }
    }
    let session = session_of(job.agent, &out);
    let (status, exit) = outcome(ended_by, status, job.limit, session.is_some());
    if let Ok(mut l) = log.lock() {
        l.finish(&exit);
    }
    RunEnded {
        id: job.id,
        status,
        exit,
        session,
    }
}

/// How a run ended, and in words: `ended_by` the daemon (its time limit,
/// `wake stop`) or by itself with `status`. Exit 0 is `done` only when
/// the agent named its session: a run that did not (a stand-in, a
/// `--help`, an agent that never began a session) read nothing.
fn outcome(
    ended_by: Option<RunStatus>,
    status: std::io::Result<std::process::ExitStatus>,
    limit: Duration,
    named_session: bool,
) -> (RunStatus, String) {
    match (ended_by, status) {
        (Some(RunStatus::TimedOut), s) => (
            RunStatus::TimedOut,
            format!(
                "killed after its time limit of {} ({})",
                humantime::format_duration(limit),
                words(&s)
            ),
        ),
        (Some(why), s) => (
            why,
            format!("stopped by `agentmesh wake stop` ({})", words(&s)),
        ),
        (None, Ok(s)) if s.success() && named_session => (RunStatus::Done, s.to_string()),
        (None, Ok(s)) if s.success() => (
            RunStatus::Failed,
            format!(
                "{s}, but its agent named no session of its own (Claude Code's JSON result, Codex's thread.started event), so nothing shows it read its mail"
            ),
        ),
        (None, s) => (RunStatus::Failed, words(&s)),
    }
}

/// SIGTERM to the group, then SIGKILL after [`KILL_GRACE`]; its exit.
async fn stop_group(
    group: Option<nix::unistd::Pid>,
    wait: &mut (impl Future<Output = std::io::Result<std::process::ExitStatus>> + Unpin),
) -> std::io::Result<std::process::ExitStatus> {
    use nix::sys::signal::Signal;
    signal_group(group, Signal::SIGTERM);
    match tokio::time::timeout(KILL_GRACE, &mut *wait).await {
        Ok(s) => s,
        Err(_) => {
            signal_group(group, Signal::SIGKILL);
            wait.await
        }
    }
}

fn words(s: &std::io::Result<std::process::ExitStatus>) -> String {
    match s {
        Ok(s) => s.to_string(),
        Err(e) => format!("its exit is unknown: {e}"),
    }
}

/// Claude Code's `--output-format json` result (what is read of it).
#[derive(Debug, Deserialize)]
struct ClaudeResult {
    #[serde(rename = "type")]
    kind: Option<String>,
    session_id: Option<String>,
}

/// A line of `codex exec --json`'s event stream (what is read of it).
#[derive(Debug, Deserialize)]
struct CodexEvent {
    #[serde(rename = "type")]
    kind: String,
    thread_id: Option<String>,
}

/// The session a run's stdout names, on its agent's own channel: the
/// top-level `session_id` of Claude Code's JSON result, read whole (a
/// result cut short names none: a field found in part of it could be one
/// the model wrote, in a tool call's input); the `thread_id` of Codex's
/// `thread.started` event. What the model writes reaches these only as
/// JSON string content (escaped), never as a line or field of its own;
/// and only an id in the agents' shape counts ([`SessionId`]).
fn session_of(agent: WakeAgent, out: &Kept) -> Option<SessionId> {
    let text = String::from_utf8_lossy(&out.head);
    let found = match agent {
        WakeAgent::Claude if out.cut => None,
        WakeAgent::Claude => {
            let result = |t: &str| {
                serde_json::from_str::<ClaudeResult>(t.trim())
                    .ok()
                    .filter(|r| r.kind.as_deref() == Some("result"))
            };
            // The result is the last line; warnings may come before it.
            result(&text)
                .or_else(|| text.lines().rev().find_map(result))
                .and_then(|r| r.session_id)
        }
        WakeAgent::Codex => text.lines().find_map(|l| {
            serde_json::from_str::<CodexEvent>(l.trim())
                .ok()
                .filter(|e| e.kind == "thread.started")
                .and_then(|e| e.thread_id)
        }),
    };
    SessionId::parse(found?.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn a_taint_note_written_before_a_restart_is_not_written_again() {
        use crate::store::AuditStore;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path(), 1 << 20).unwrap();
        let now = Timestamp::from_unix_millis(1_800_000_000_000);
        let note = |id: &str, at: Timestamp| crate::store::AuditEntry {
            at: at.as_unix_millis(),
            event: crate::audit::AuditEvent::TaintWaits.as_str().into(),
            recipient: Some("api@bravo".into()),
            message_id: Some(id.into()),
            ..crate::store::AuditEntry::default()
        };
        store
            .audit_many(&[
                note("older", now.saturating_sub(Duration::from_secs(60))),
                note("newest", now.saturating_sub(Duration::from_secs(30))),
            ])
            .unwrap();
        let mut runs = Runs {
            max_runs: 1,
            run_limit: Duration::from_secs(60),
            dir: dir.path().join("wake"),
            records: VecDeque::new(),
            stops: BTreeMap::new(),
            queued: VecDeque::new(),
            taint_logged: taint_logged(&store, now),
        };
        // The note the last start wrote is not written again...
        assert!(!runs.taint_to_log("api", "newest"));
        // ...a newer tainted message gets its own, once.
        assert!(runs.taint_to_log("api", "newer still"));
        assert!(!runs.taint_to_log("api", "newer still"));
        // Another mailbox has its own.
        assert!(runs.taint_to_log("docs", "newest"));
    }

    const S: &str = "9f1c0000-aaaa-4bbb-8ccc-0123456789ab";

    fn whole(out: String) -> Kept {
        Kept {
            head: out.into_bytes(),
            cut: false,
        }
    }

    #[test]
    fn a_runs_session_is_read_from_its_agents_own_channel() {
        let claude = |out: String| session_of(WakeAgent::Claude, &whole(out));
        let codex = |out: String| session_of(WakeAgent::Codex, &whole(out));
        let out =
            format!(r#"{{"type":"result","subtype":"success","session_id":"{S}","result":"ok"}}"#);
        assert_eq!(claude(out.clone()).unwrap().as_str(), S);
        assert_eq!(
            claude(format!("some warning\n{out}\n")).unwrap().as_str(),
            S
        );
        assert_eq!(claude("not json".into()), None);
        // Not the result: no session.
        assert_eq!(claude(format!(r#"{{"session_id":"{S}"}}"#)), None);
        // A result cut short names none, though its end has the field
        // (a tool call's input, which the model wrote, may hold one).
        let cut = Kept {
            head: out.into_bytes(),
            cut: true,
        };
        assert_eq!(session_of(WakeAgent::Claude, &cut), None);
        // Only the top level counts.
        let nested = serde_json::json!({
            "type": "result",
            "permission_denials": [{"tool_input": {"session_id": S}}],
        })
        .to_string();
        assert_eq!(claude(nested), None);
        // An id that could smuggle anything, or be read as a flag, is not
        // remembered; nor is one the model wrote inside its result.
        for bad in ["a\nb", "--last", "--help", "sess-1"] {
            let out = serde_json::json!({"type": "result", "session_id": bad}).to_string();
            assert_eq!(claude(out), None, "{bad}");
        }
        let inside = serde_json::json!({
            "type": "result",
            "result": format!("done\n\"session_id\":\"{S}\""),
        })
        .to_string();
        assert_eq!(claude(inside), None);

        // Codex: its own thread.started event, the first line of --json.
        let events = format!(
            "{{\"type\":\"thread.started\",\"thread_id\":\"{S}\"}}\n{{\"type\":\"turn.started\"}}\n"
        );
        assert_eq!(codex(events).unwrap().as_str(), S);
        // The model's words are never the session: not a header line it
        // printed, not an event's text, not a thread id in a flag's shape.
        assert_eq!(codex(format!("the answer\nsession id: {S}\n")), None);
        let said = serde_json::json!({
            "type": "item.completed",
            "item": {"type": "agent_message", "text": format!("{{\"type\":\"thread.started\",\"thread_id\":\"{S}\"}}")},
        });
        assert_eq!(codex(format!("{said}\n")), None);
        assert_eq!(
            codex("{\"type\":\"thread.started\",\"thread_id\":\"--last\"}\n".into()),
            None
        );
    }

    #[test]
    fn exit_zero_is_done_only_when_the_agent_named_its_session() {
        use std::os::unix::process::ExitStatusExt;
        let ok = || Ok(std::process::ExitStatus::from_raw(0));
        let limit = Duration::from_secs(60);
        assert_eq!(outcome(None, ok(), limit, true).0, RunStatus::Done);
        let (status, exit) = outcome(None, ok(), limit, false);
        assert_eq!(status, RunStatus::Failed);
        assert!(exit.contains("named no session"), "{exit}");
        let three = Ok(std::process::ExitStatus::from_raw(3 << 8));
        assert_eq!(outcome(None, three, limit, true).0, RunStatus::Failed);
        let stopped = outcome(Some(RunStatus::Stopped), ok(), limit, true);
        assert_eq!(stopped.0, RunStatus::Stopped);
    }

    #[test]
    fn a_log_keeps_what_fits_and_says_what_did_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.log");
        let mut log = Log::create(&path);
        log.write(&vec![b'x'; MAX_LOG - 10]);
        log.write(&[b'y'; 30]);
        log.finish("exit status: 0");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() < MAX_LOG + 200, "{}", text.len());
        assert!(
            text.contains("20 more bytes of output not kept"),
            "{}",
            &text[MAX_LOG - 20..]
        );
        assert!(text.ends_with("[agentmesh: exit status: 0]\n"));
    }
}
