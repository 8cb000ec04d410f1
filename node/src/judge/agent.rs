//! The agent judge's process: the mailbox's agent CLI asked headless
//! (argv, prompt and answer shape in `agentmesh_judge::agent`), in its own
//! process group, killed whole once it has answered or run out of time.
//! Anything but a `{p, why}` answer within the time is an [`AgentError`],
//! and the broadcast is **dropped** for that mailbox: a wrong delivery
//! can wake an expensive session for nothing.

use std::path::Path;
use std::time::Duration;

use agentmesh_judge::agent::{self, AgentAnswer, AgentCli, AgentSettings};
use agentmesh_judge::{Preset, first_stage_threshold};

use super::AgentRules;
use super::command::{RunFailure, run};
use crate::codes::ErrorCode;
use agentmesh_judge::Input;

/// Set in a judgment's environment: `agentmesh mcp` and `agentmesh hook`
/// started inside one do nothing (a broadcast being judged must not reach
/// a tool, nor pass for a session).
pub const JUDGE_CALL_MARKER: &str = "AGENTMESH_JUDGE_CALL";

/// Why an agent gave no judgment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// Its process could not be started.
    #[error("{0} could not be started: {1}")]
    Spawn(&'static str, String),
    /// It did not answer in time, and was killed.
    #[error("{0} did not answer within {1}s and was killed")]
    Timeout(&'static str, u64),
    /// It exited non-zero or was killed by a signal.
    #[error("{cli} failed ({status}){}", if .stderr.is_empty() { String::new() } else { format!(": {}", .stderr) })]
    Failed {
        /// Which CLI.
        cli: &'static str,
        /// Its exit status, in words.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// Its answer is not `{p: 0–1, why}`.
    #[error("{0}'s answer is not {{\"p\": 0-1, \"why\"}}: {1}")]
    BadAnswer(&'static str, String),
}

impl AgentError {
    /// The reason's code in the bus log.
    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::Spawn(..) => ErrorCode::JudgeUnavailable,
            AgentError::Timeout(..) => ErrorCode::JudgeTimeout,
            AgentError::Failed { .. } => ErrorCode::JudgeFailed,
            AgentError::BadAnswer(..) => ErrorCode::JudgeBadAnswer,
        }
    }
}

/// One agent judgment.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The program that runs `cli` (`[wake] claude` or `codex`).
    pub program: &'a str,
    /// Which CLI it is.
    pub cli: AgentCli,
    /// Its model and cost cap.
    pub settings: &'a AgentSettings,
    /// How long it has.
    pub timeout: Duration,
    /// Where it runs: an empty folder of the daemon's (no project files,
    /// no CLAUDE.md or AGENTS.md of anyone's).
    pub cwd: &'a Path,
}

/// Asks the agent about one pair.
pub async fn ask(a: Ask<'_>, input: &Input) -> Result<AgentAnswer, AgentError> {
    let name = a.cli.as_str();
    let argv = agent::argv(a.cli, a.settings);
    let mut cmd = tokio::process::Command::new(a.program);
    // agentmesh's own MCP server and hooks refuse to run inside a
    // judgment, whatever the agent's configuration says.
    cmd.args(&argv[1..])
        .current_dir(a.cwd)
        .env(JUDGE_CALL_MARKER, "1");
    let out = run(
        cmd,
        agent::prompt(input).into_bytes(),
        a.timeout,
        agent::MAX_OUTPUT,
    )
    .await
    .map_err(|f| match f {
        RunFailure::Spawn(e) => AgentError::Spawn(name, e),
        RunFailure::Timeout => AgentError::Timeout(name, a.timeout.as_secs()),
        RunFailure::Failed { status, stderr } => AgentError::Failed {
            cli: name,
            status,
            stderr,
        },
        RunFailure::TooLong => AgentError::BadAnswer(
            name,
            format!("it printed more than {} bytes", agent::MAX_OUTPUT),
        ),
    })?;
    agent::parse_answer(a.cli, &out).map_err(|e| AgentError::BadAnswer(name, e))
}

/// How `[bus] judge = "agent"` decided one pair.
#[derive(Debug)]
pub enum Staged {
    /// The built-in judge decided: its `p`, the threshold it is held to,
    /// and why the agent was not asked.
    Builtin {
        /// The built-in judge's probability.
        p: f64,
        /// The threshold: the first stage's when the built-in judge was
        /// sure, else the preset's.
        threshold: f64,
        /// Why the agent was not asked.
        note: &'static str,
    },
    /// The agent was asked; its answer, or why it gave none.
    Agent {
        /// Which CLI.
        cli: AgentCli,
        /// Its answer.
        answer: Result<AgentAnswer, AgentError>,
    },
}

/// The agent judge's two stages for one pair: the built-in judge's `p`
/// first; below the first stage, or with no agent for the mailbox
/// (`cli`), or with no call left today (`calls_left`, spent here), the
/// built-in judge decides; else the agent is asked, in `cwd`. The daemon
/// and `agentmesh judge` both judge this way.
pub async fn staged(
    rules: &AgentRules,
    cli: Option<AgentCli>,
    (p, preset): (f64, Preset),
    calls_left: &mut u32,
    cwd: &Path,
    input: &Input,
) -> Staged {
    let builtin = |threshold, note| Staged::Builtin { p, threshold, note };
    if p < first_stage_threshold() {
        return builtin(
            first_stage_threshold(),
            "the built-in judge is sure: not asked",
        );
    }
    let Some(cli) = cli else {
        return builtin(
            preset.threshold(),
            "no agent for this mailbox (wake set NAME claude|codex, or [bus] agent): the built-in judge decided alone",
        );
    };
    if *calls_left == 0 {
        return builtin(
            preset.threshold(),
            "today's agent judgments are spent ([bus] agent_calls_per_day): the built-in judge decided alone",
        );
    }
    *calls_left -= 1;
    if let Err(e) = std::fs::create_dir_all(cwd) {
        tracing::warn!(error = %e, dir = %cwd.display(), "cannot make the agent judge's folder");
    }
    let a = Ask {
        program: rules.program(cli),
        cli,
        settings: &rules.settings,
        timeout: rules.timeout,
        cwd,
    };
    Staged::Agent {
        cli,
        answer: ask(a, input).await,
    }
}
