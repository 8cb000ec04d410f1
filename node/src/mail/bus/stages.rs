//! Judging one broadcast for its candidate mailboxes, off the actor, as
//! `[bus] judge` says: the built-in judge; a command of the user's; or
//! the built-in judge first and the mailbox's own agent for what it is
//! not sure of (`agent`), within a daily budget of agent calls that the
//! receiving machine pays for.

use std::path::PathBuf;

use agentmesh_judge::agent::AgentCli;

use crate::api::Preset;
use crate::codes::ErrorCode;
use crate::judge::{JudgeWith, agent, command};
use agentmesh_judge::{self as judge, Broadcast, Input};

/// Which stage decided a judgment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// The built-in judge.
    Builtin,
    /// The judge command.
    Command,
    /// The mailbox's agent.
    Agent(AgentCli),
}

impl Stage {
    /// How the bus log names it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Stage::Builtin => "builtin",
            Stage::Command => "command",
            Stage::Agent(_) => "agent",
        }
    }
}

/// One candidate mailbox of a broadcast, and what the judge is given.
#[derive(Debug)]
pub(super) struct Candidate {
    pub mailbox: Option<String>,
    pub preset: Preset,
    pub input: Input,
    /// Its wake agent (`wake set NAME claude|codex`), if set.
    pub agent: Option<AgentCli>,
}

/// A candidate's judgment: a probability and the threshold it is held
/// to, or why no judge gave one.
#[derive(Debug)]
pub(super) struct Outcome {
    pub mailbox: Option<String>,
    pub preset: Preset,
    pub p: Result<f64, (ErrorCode, String)>,
    /// The score the decision needed.
    pub threshold: f64,
    /// The stage that decided.
    pub stage: Stage,
    /// The agent's reason, when it decided.
    pub why: Option<String>,
    /// Why the agent was not asked, when the agent judge was configured
    /// and the built-in judge decided.
    pub note: Option<&'static str>,
}

/// Mailboxes a broadcast is not judged for, by why: consent would hold
/// the sender's mail there, or the mailbox's wake budget is spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::mail) struct Skips {
    /// Mail from the sender is held here (another person's machine,
    /// not trusted).
    pub held_sender: u32,
    /// Inbound mail is paused here.
    pub paused: u32,
    /// The mailbox's wake budget for today is spent.
    pub busy: u32,
}

impl Skips {
    /// How many in all, and the reason the sender is told: the one its
    /// person can act on first (trust before resume before a budget).
    pub(in crate::mail) fn total(self) -> (u32, Option<crate::api::SkipReason>) {
        use crate::api::SkipReason as R;
        let reason = [
            (self.held_sender, R::HeldSender),
            (self.paused, R::Paused),
            (self.busy, R::Busy),
        ]
        .into_iter()
        .find(|(n, _)| *n > 0)
        .map(|(_, r)| r);
        (self.held_sender + self.paused + self.busy, reason)
    }
}

/// What judging needs besides the candidates.
#[derive(Debug)]
pub(super) struct Judging {
    pub with: JudgeWith,
    /// Agent calls left today on this machine.
    pub calls_left: u32,
    /// Where agent calls run: an empty folder of the daemon's.
    pub cwd: PathBuf,
}

/// Judges `text` for each candidate, in order (so one agent call at a
/// time on this machine: one broadcast is judged at a time). Returns the
/// outcomes and how many agent calls were made.
pub(super) async fn judge_all(
    j: Judging,
    text: &str,
    candidates: Vec<Candidate>,
) -> (Vec<Outcome>, u32) {
    let analysed = Broadcast::analyse(text);
    let mut left = j.calls_left;
    let mut outcomes = Vec::with_capacity(candidates.len());
    for c in candidates {
        let p = judge::probability_of(&analysed, &c.input);
        let builtin = |note| Outcome {
            mailbox: c.mailbox.clone(),
            preset: c.preset,
            p: Ok(p),
            threshold: c.preset.threshold(),
            stage: Stage::Builtin,
            why: None,
            note,
        };
        let o = match &j.with {
            JudgeWith::Builtin => builtin(None),
            JudgeWith::Command(cmd) => Outcome {
                p: command::ask(cmd, &c.input, c.preset)
                    .await
                    .map_err(|e| (e.code(), e.to_string())),
                stage: Stage::Command,
                ..builtin(None)
            },
            JudgeWith::Agent(rules) => {
                let first = builtin(None);
                let cli = c.agent.or(rules.default_cli);
                match agent::staged(rules, cli, (p, c.preset), &mut left, &j.cwd, &c.input).await {
                    agent::Staged::Builtin {
                        threshold, note, ..
                    } => Outcome {
                        threshold,
                        note: Some(note),
                        ..first
                    },
                    agent::Staged::Agent { cli, answer } => Outcome {
                        threshold: c.preset.agent_threshold(),
                        stage: Stage::Agent(cli),
                        why: answer.as_ref().ok().map(|a| a.why.clone()),
                        p: answer.map(|a| a.p).map_err(|e| (e.code(), e.to_string())),
                        ..first
                    },
                }
            }
        };
        outcomes.push(o);
    }
    (outcomes, j.calls_left - left)
}

/// Agent calls spent on this machine today (the local calendar day).
#[derive(Debug, Default)]
pub(in crate::mail) struct AgentCalls {
    /// The day counted, `YYYY-MM-DD`; `None` until counted once.
    day: Option<String>,
    used: u32,
}

impl AgentCalls {
    /// Calls left today of `limit`. The first count of a run of the
    /// daemon reads today's agent judgments from the audit log, so a
    /// restart does not refill the budget.
    pub(in crate::mail) fn left(
        &mut self,
        store: &dyn crate::store::Store,
        now: agentmesh_protocol::Timestamp,
        limit: u32,
    ) -> u32 {
        let (day, next_midnight) = crate::mail::wake::wakes::local_day(now);
        if self.day.as_deref() != Some(day.as_str()) {
            let first = self.day.is_none();
            self.day = Some(day);
            self.used = 0;
            if first {
                let start = next_midnight.saturating_sub(std::time::Duration::from_secs(86_400));
                self.used = store
                    .audit_since(start, MAX_AUDIT_SCAN)
                    .map(|entries| {
                        entries
                            .iter()
                            .filter(|e| {
                                e.judged
                                    .as_ref()
                                    .is_some_and(|j| j.stage.as_deref() == Some("agent"))
                            })
                            .count() as u32
                    })
                    .unwrap_or(0);
            }
        }
        limit.saturating_sub(self.used)
    }

    /// `n` more calls made.
    pub(in crate::mail) fn spend(&mut self, n: u32) {
        self.used = self.used.saturating_add(n);
    }
}

/// The most audit entries read to count today's agent calls at start.
const MAX_AUDIT_SCAN: usize = 500_000;
