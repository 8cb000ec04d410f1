//! `agentmesh wake set|test`: whether mail to a mailbox wakes an idle
//! session of an agent, within a daily budget the receiver sets, and the
//! exact command such a run starts.

use std::process::ExitCode;

use agentmesh_node::api::{self, WakeChoice, ops};

use crate::setup::shell_line;
use agentmesh_node::home::Home;

/// What `wake set` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WakeArg {
    /// Wake an idle Claude Code session (`claude -p`).
    Claude,
    /// Wake an idle Codex session (`codex exec`).
    Codex,
    /// Wake nothing.
    Off,
}

impl WakeArg {
    /// As the local API takes it.
    pub fn choice(self) -> WakeChoice {
        match self {
            WakeArg::Claude => WakeChoice::Claude,
            WakeArg::Codex => WakeChoice::Codex,
            WakeArg::Off => WakeChoice::Off,
        }
    }
}

/// The op `wake set` sends.
pub fn set_op(mailbox: &str, wake: WakeArg, budget: Option<u32>, usd: Option<f64>) -> ops::WakeSet {
    ops::WakeSet {
        mailbox: mailbox.to_owned(),
        wake: wake.choice(),
        budget,
        max_budget_usd: usd,
    }
}

/// `agentmesh wake set MAILBOX claude|codex|off [--budget N]
/// [--max-budget-usd X]`.
pub fn set(
    home: &Home,
    mailbox: &str,
    wake: WakeArg,
    (budget, usd): (Option<u32>, Option<f64>),
    json: bool,
) -> anyhow::Result<ExitCode> {
    crate::call::simple(home, set_op(mailbox, wake, budget, usd), json, show)
}

/// A mailbox's wake setting, for a person.
pub fn show(w: &api::WakeView) {
    match w.wake {
        Some(agent) => crate::say!(
            "Mail to {} wakes an idle {} session there: at most {} a day, each run at most ${:.2} (`agentmesh wake test {}` shows the command).",
            w.mailbox,
            agent.name(),
            agentmesh_protocol::time::count(u64::from(w.budget), "wake"),
            w.max_budget_usd,
            w.mailbox
        ),
        None => crate::say!(
            "Mail to {} wakes nothing: it waits for its person's own session (budget {} a day).",
            w.mailbox,
            w.budget
        ),
    }
    for s in &w.sessions {
        crate::say!(
            "  {} session {}: {} (last hook {})",
            s.agent.name(),
            s.id,
            if s.live {
                "live, never resumed by a run"
            } else if s.ended.is_some() {
                "ended"
            } else {
                "quiet for 12 hours"
            },
            s.seen
        );
    }
}

/// `agentmesh wake test MAILBOX`: the exact command, run nothing.
pub fn test(home: &Home, mailbox: &str, json: bool) -> anyhow::Result<ExitCode> {
    let op = ops::WakeTest {
        mailbox: mailbox.to_owned(),
    };
    crate::call::simple(home, op, json, |t| {
        if let Some(c) = &t.command {
            crate::say!("In {}, a run would start (nothing was run):", c.cwd);
            let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            crate::say!(
                "  {}",
                shell_line(
                    "env",
                    &[env, vec![c.program.clone()], c.args.clone()].concat()
                )
            );
            match &c.resume {
                Some(s) => {
                    crate::say!("It resumes session {s}, the newest its hooks reported.")
                }
                None => {
                    crate::say!("It starts a new session: no hook has reported one in this folder.")
                }
            }
        }
        if !t.messages.is_empty() {
            crate::say!(
                "Its prompt shows {}.",
                agentmesh_protocol::time::count(t.messages.len() as u64, "unread message")
            );
        }
        match &t.why_not {
            Some(why) => crate::say!("Mail arriving now would start no run: {why}."),
            None => crate::say!("Mail arriving now would start it."),
        }
    })
}

/// `agentmesh wake list`: recent runs, newest first.
pub fn list(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    crate::call::simple(home, ops::WakeList, json, |l| {
        if l.runs.is_empty() {
            crate::say!(
                "No wake run yet. Mail to a mailbox with wake on (`agentmesh wake set MAILBOX claude`) starts one when none of its sessions is open."
            );
        }
        let rows: Vec<Vec<String>> = l
            .runs
            .iter()
            .map(|r| {
                vec![
                    crate::term::ago(&r.started),
                    r.id.clone(),
                    r.mailbox.clone(),
                    r.agent.name().to_owned(),
                    r.status.as_str().to_owned(),
                    agentmesh_protocol::time::human_duration(std::time::Duration::from_millis(
                        r.duration_ms,
                    )),
                    r.messages.len().to_string(),
                    r.session.clone().unwrap_or_else(|| "unknown".into()),
                ]
            })
            .collect();
        if !rows.is_empty() {
            crate::term::table(
                &[
                    "STARTED", "RUN", "MAILBOX", "AGENT", "STATUS", "TOOK", "SHOWN", "SESSION",
                ],
                &rows,
            );
        }
        for r in l.runs.iter().filter(|r| r.status.failed()).take(3) {
            crate::say!(
                "Run {} {}: {} (its log: {})",
                r.id,
                r.status.as_str(),
                crate::term::clean(r.exit.as_deref().unwrap_or("unknown")),
                r.log
            );
        }
        if !l.queued.is_empty() {
            crate::say!(
                "Waiting for a free run slot (at most {} at once): {}",
                l.max_runs,
                l.queued.join(", ")
            );
        }
    })
}

/// `agentmesh wake stop RUN`.
pub fn stop(home: &Home, run: &str, json: bool) -> anyhow::Result<ExitCode> {
    let op = ops::WakeStop {
        run: run.to_owned(),
    };
    crate::call::simple(home, op, json, |r| {
        if r.status == api::RunStatus::Running {
            crate::say!(
                "Stopping run {} of {}: SIGTERM to its process group now, SIGKILL in 10 s; its messages stay unread. `agentmesh wake list` shows when it ended.",
                r.id,
                r.mailbox
            );
        } else {
            crate::say!(
                "Run {} of {} is not running: it ended {} ({}).",
                r.id,
                r.mailbox,
                r.status.as_str(),
                crate::term::clean(r.exit.as_deref().unwrap_or("unknown"))
            );
        }
    })
}
