//! The broadcast judge as this daemon runs it: the built-in judge (the
//! `agentmesh-judge` crate: text in, score out), `[bus] judge_command` (a
//! command of the user's, [`command`]), or the built-in judge and then
//! the mailbox's agent for what it is not sure of ([`agent`]). The mail
//! actor's `bus` wing decides what is judged and when; this says how.

pub mod agent;
pub mod command;

use agentmesh_judge as judge;

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
