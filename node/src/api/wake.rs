//! The local API's views of waking idle sessions (`wake set`, `wake
//! test`, the sessions hooks report).

use serde::{Deserialize, Serialize};

/// The agents whose idle sessions the daemon can wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeAgent {
    /// Claude Code (`claude -p`).
    Claude,
    /// OpenAI Codex (`codex exec`).
    Codex,
}

impl WakeAgent {
    /// Its name, as `wake set` takes it.
    pub fn name(self) -> &'static str {
        match self {
            WakeAgent::Claude => "claude",
            WakeAgent::Codex => "codex",
        }
    }
}

/// What `wake set` chooses for a mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeChoice {
    /// Wake an idle Claude Code session.
    Claude,
    /// Wake an idle Codex session.
    Codex,
    /// Wake nothing.
    Off,
}

impl WakeChoice {
    /// The agent it wakes, if any.
    pub fn agent(self) -> Option<WakeAgent> {
        match self {
            WakeChoice::Claude => Some(WakeAgent::Claude),
            WakeChoice::Codex => Some(WakeAgent::Codex),
            WakeChoice::Off => None,
        }
    }
}

/// What an agent's hook reports of its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEvent {
    /// Its SessionStart hook: it is live.
    Start,
    /// Any other hook: it is still live.
    Seen,
    /// Its SessionEnd hook: it ended.
    End,
}

/// A session an agent's hooks reported in a mailbox's folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// Its agent.
    pub agent: WakeAgent,
    /// The agent's session id.
    pub id: String,
    /// When its first hook came, RFC 3339.
    pub started: String,
    /// When its newest hook came, RFC 3339.
    pub seen: String,
    /// When its SessionEnd hook came, if it did.
    pub ended: Option<String>,
    /// Whether it counts as live: started, not ended, and a hook from it
    /// in the last 12 hours. A live session is never resumed by a run.
    pub live: bool,
}

/// `wake set`: a mailbox's wake setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeView {
    /// The mailbox.
    pub mailbox: String,
    /// The agent a run starts; `None`: wake is off.
    pub wake: Option<WakeAgent>,
    /// Wakes a day it may cost (its own, or `wake.budget`).
    pub budget: u32,
    /// A Claude Code run's `--max-budget-usd`.
    pub max_budget_usd: f64,
    /// The sessions its hooks reported, newest first.
    pub sessions: Vec<SessionView>,
}

/// The command a wake run starts, exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeCommandView {
    /// The program (as PATH finds it, or a path).
    pub program: String,
    /// Its arguments, the prompt last.
    pub args: Vec<String>,
    /// The folder it runs in: the mailbox's.
    pub cwd: String,
    /// What it gets on top of the daemon's environment.
    pub env: Vec<(String, String)>,
    /// The session it resumes, if any (none: a new session).
    pub resume: Option<String>,
}

/// `wake test`: what would run for a mailbox now, run nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeTestView {
    /// The mailbox.
    pub mailbox: String,
    /// The agent a run starts; `None`: wake is off.
    pub wake: Option<WakeAgent>,
    /// The command, when wake is on and the mailbox has a folder.
    pub command: Option<WakeCommandView>,
    /// The unread messages its prompt shows (tainted mail is never shown
    /// to a run: it waits for its person's own session).
    pub messages: Vec<String>,
    /// Whether mail arriving now would start it.
    pub would_run: bool,
    /// Why not, if not.
    pub why_not: Option<String>,
}

/// Where a wake run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// It is running.
    Running,
    /// It exited 0: the messages it showed are read.
    Done,
    /// It exited non-zero, or a signal ended it: its messages stay unread.
    Failed,
    /// It ran past `wake.run_limit` and was killed, its process group
    /// with it: its messages stay unread.
    TimedOut,
    /// `agentmesh wake stop` ended it: its messages stay unread.
    Stopped,
    /// Its program could not be started (not on the daemon's PATH, not
    /// executable): its messages stay unread.
    NotStarted,
    /// The daemon stopped while it ran: what it did is unknown, and its
    /// messages stay unread.
    Interrupted,
}

impl RunStatus {
    /// Its word, as `wake list` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Stopped => "stopped",
            RunStatus::NotStarted => "not_started",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// Whether it ended without its messages being read.
    pub fn failed(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::Done)
    }
}

/// One wake run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunView {
    /// Its id (`wake stop` takes it; the run's `AGENTMESH_WAKE_RUN`).
    pub id: String,
    /// The mailbox whose mail started it.
    pub mailbox: String,
    /// The agent it ran.
    pub agent: WakeAgent,
    /// The session it resumed, or the new one it started (Claude Code's
    /// JSON output names it); `None`: unknown.
    pub session: Option<String>,
    /// Whether it resumed `session` (rather than starting a new one).
    pub resumed: bool,
    /// Where it stands.
    pub status: RunStatus,
    /// How it exited, in words (`exit status: 1`, `signal: 15 (SIGTERM)`),
    /// or why it did not start; `None` while it runs.
    pub exit: Option<String>,
    /// When it started, RFC 3339.
    pub started: String,
    /// When it ended, RFC 3339.
    pub ended: Option<String>,
    /// How long it ran (so far), milliseconds.
    pub duration_ms: u64,
    /// The ids of the messages its prompt showed.
    pub messages: Vec<String>,
    /// Its output (stdout and stderr), capped: a file under the home.
    pub log: String,
}

/// `wake list`: recent runs, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeListView {
    /// The runs (the newest 100 are kept).
    pub runs: Vec<RunView>,
    /// Runs at once on this machine, at most (`wake.max_runs`).
    pub max_runs: u32,
    /// Mailboxes with mail waiting for a free run slot.
    pub queued: Vec<String>,
}

/// A mailbox's wake budget today, and its runs, as `status` and `profile
/// show` show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeStatusView {
    /// The mailbox.
    pub mailbox: String,
    /// The agent its mail wakes; `None`: wake is off.
    pub wake: Option<WakeAgent>,
    /// Wakes a day it may cost.
    pub budget: u32,
    /// What it spent today (runs, broadcasts delivered, Stop-hook
    /// blocks).
    pub spent: u32,
    /// What is left today.
    pub left: u32,
    /// When the budget resets: the next local midnight, RFC 3339.
    pub resets_at: String,
    /// Its run now, if one runs.
    pub running: Option<String>,
    /// Its newest run, if that one failed (its messages are unread).
    pub failed: Option<RunView>,
}
