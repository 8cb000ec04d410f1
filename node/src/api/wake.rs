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
