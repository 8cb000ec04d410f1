//! The bus: what lets agents find each other and speak to many at once:
//! the words the directory and the broadcast judge share; [`judge`], the
//! built-in relevance judge; and this machine's mailboxes as the mail
//! actor publishes them for the team's directory record
//! (`crate::team::records`).

pub mod agent;
pub mod command;

pub use agentmesh_judge as judge;
pub use agentmesh_judge::{Preset, Status};

use agentmesh_protocol::Timestamp;

/// How a machine judges its mailboxes' broadcasts.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum JudgeWith {
    /// The built-in judge.
    #[default]
    Builtin,
    /// `[bus] judge_command`: a command of the user's, run once per
    /// judgment.
    Command(String),
    /// `[bus] judge = "agent"`: the built-in judge, then the mailbox's
    /// agent for what it is not sure of.
    Agent(Box<AgentRules>),
}

/// `[bus] judge = "agent"`'s settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRules {
    /// `[bus] agent`: the CLI for mailboxes whose wake agent is not set.
    pub default_cli: Option<judge::agent::AgentCli>,
    /// Models and cost cap.
    pub settings: judge::agent::AgentSettings,
    /// Agent judgments a day, at most.
    pub calls_per_day: u32,
    /// One judgment's time.
    pub timeout: std::time::Duration,
    /// The programs: `[wake] claude` and `[wake] codex`.
    pub programs: (String, String),
}

impl AgentRules {
    /// The program that runs `cli`.
    pub fn program(&self, cli: judge::agent::AgentCli) -> &str {
        match cli {
            judge::agent::AgentCli::Claude => &self.programs.0,
            judge::agent::AgentCli::Codex => &self.programs.1,
        }
    }
}

impl JudgeWith {
    /// How the bus log names it.
    pub fn as_str(&self) -> &'static str {
        match self {
            JudgeWith::Builtin => "builtin",
            JudgeWith::Command(_) => "command",
            JudgeWith::Agent(_) => "agent",
        }
    }
}

/// A mailbox's `not_for_me` notes kept (the judge reads the last
/// [`judge::NOTES_READ`]).
pub const MAX_NOTES: usize = 20;

/// The longest `not_for_me` note, bytes.
pub const MAX_NOTE_BYTES: usize = 1024;

/// How much of a broadcast's text is kept with a note about it, bytes:
/// what the judge compares later broadcasts with.
pub const MAX_NOTED_TEXT: usize = 2048;

/// How long after a hook or tool call a mailbox with a session attached
/// counts as `working`.
pub const WORKING_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// One of this machine's mailboxes, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalMailbox {
    /// Its name; `None` for the owner's.
    pub mailbox: Option<String>,
    /// Its profile.
    pub profile: String,
    /// Its goal.
    pub goal: String,
    /// What its session is doing.
    pub status: Status,
    /// When a session of it was last active.
    pub last_active: Option<Timestamp>,
}

/// This machine's mailboxes, the owner's first, then by name; at most
/// [`MAX_DIRECTORY_MAILBOXES`](agentmesh_protocol::directory::MAX_DIRECTORY_MAILBOXES).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalDirectory {
    /// The mailboxes.
    pub mailboxes: Vec<LocalMailbox>,
}
