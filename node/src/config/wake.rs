//! `[wake]`: how the daemon wakes an idle session when mail arrives
//! (docs/agents.md, "Waking idle sessions"). A person widens what a run
//! may do here; nothing a peer sends can.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, duration, invalid};

/// `[wake]` in config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WakeConfig {
    /// The Claude Code program a run starts: a name the daemon's PATH
    /// finds, or a path. Default "claude".
    pub claude: String,
    /// The Codex program. Default "codex".
    pub codex: String,
    /// The tools a Claude Code run has (`--tools`, and allowed without a
    /// prompt), comma-separated. Default "Read,Grep,Glob": it can read the
    /// mailbox's folder and answer, nothing more.
    pub claude_tools: String,
    /// A Codex run's sandbox (`--sandbox`): "read-only" (the default) or
    /// "workspace-write".
    pub codex_sandbox: String,
    /// Runs at once on this machine, at most. Default 2.
    pub max_runs: u32,
    /// A run's time limit: then SIGTERM to its process group, SIGKILL
    /// 10 s later. Default "10m".
    pub run_limit: String,
    /// Wakes a day a mailbox may cost, unless `wake set --budget` chose
    /// its own. Default 20; 0: only its person's own session reads its
    /// mail.
    pub budget: u32,
    /// A Claude Code run's `--max-budget-usd`, unless `wake set
    /// --max-budget-usd` chose its own. Default 0.50.
    pub max_budget_usd: f64,
}

impl Default for WakeConfig {
    fn default() -> Self {
        WakeConfig {
            claude: "claude".into(),
            codex: "codex".into(),
            claude_tools: "Read,Grep,Glob".into(),
            codex_sandbox: "read-only".into(),
            max_runs: 2,
            run_limit: "10m".into(),
            budget: 20,
            max_budget_usd: 0.5,
        }
    }
}

/// `[wake]`, checked and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct WakeRules {
    /// The Claude Code program.
    pub claude: String,
    /// The Codex program.
    pub codex: String,
    /// A Claude Code run's tools.
    pub claude_tools: Vec<String>,
    /// A Codex run's sandbox.
    pub codex_sandbox: String,
    /// Runs at once, at most.
    pub max_runs: u32,
    /// A run's time limit.
    pub run_limit: Duration,
    /// Wakes a day per mailbox, by default.
    pub budget: u32,
    /// A Claude Code run's spending cap, by default.
    pub max_budget_usd: f64,
}

impl Default for WakeRules {
    fn default() -> Self {
        WakeConfig::default()
            .rules()
            .expect("the default [wake] is valid")
    }
}

/// The sandboxes a Codex run may have: never `danger-full-access`.
const SANDBOXES: [&str; 2] = ["read-only", "workspace-write"];

impl WakeConfig {
    /// Checks `[wake]`; the error names the key and what to write.
    pub fn rules(&self) -> Result<WakeRules, ConfigError> {
        for (key, program) in [("wake.claude", &self.claude), ("wake.codex", &self.codex)] {
            if program.trim().is_empty() || program.starts_with('-') {
                return Err(invalid(
                    key,
                    "must name a program (a name PATH finds, or a path)",
                ));
            }
        }
        let tools: Vec<String> = self
            .claude_tools
            .split(',')
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        if let Some(bad) = tools.iter().find(|t| !tool_name(t)) {
            return Err(invalid(
                "wake.claude_tools",
                format!(
                    "{bad:?} is not a tool name; write tool names separated by commas, like \"Read,Grep,Glob\""
                ),
            ));
        }
        if !SANDBOXES.contains(&self.codex_sandbox.as_str()) {
            return Err(invalid(
                "wake.codex_sandbox",
                "must be \"read-only\" or \"workspace-write\" (agentmesh never starts a run with full access)",
            ));
        }
        if !(1..=16).contains(&self.max_runs) {
            return Err(invalid("wake.max_runs", "must be from 1 to 16"));
        }
        let run_limit = duration("wake.run_limit", &self.run_limit)?;
        if run_limit < Duration::from_secs(10) || run_limit > Duration::from_secs(24 * 3600) {
            return Err(invalid("wake.run_limit", "must be from 10s to 24h"));
        }
        if self.budget > 10_000 {
            return Err(invalid(
                "wake.budget",
                "must be from 0 to 10000 wakes a day",
            ));
        }
        if !(self.max_budget_usd > 0.0 && self.max_budget_usd <= 1000.0) {
            return Err(invalid(
                "wake.max_budget_usd",
                "must be more than 0 and at most 1000 (US dollars a run)",
            ));
        }
        Ok(WakeRules {
            claude: self.claude.clone(),
            codex: self.codex.clone(),
            claude_tools: tools,
            codex_sandbox: self.codex_sandbox.clone(),
            max_runs: self.max_runs,
            run_limit,
            budget: self.budget,
            max_budget_usd: self.max_budget_usd,
        })
    }
}

/// A tool name as Claude Code's `--tools` takes it: `Read`, `Bash(git
/// log:*)`, `mcp__server__tool`; never a flag, never `bypassPermissions`.
fn tool_name(t: &str) -> bool {
    !t.starts_with('-')
        && t != "bypassPermissions"
        && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_()*: .-/".contains(c))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn a_person_may_widen_a_run_but_not_past_a_sandbox() {
        let d = WakeRules::default();
        assert_eq!(d.claude_tools, ["Read", "Grep", "Glob"]);
        assert_eq!(d.run_limit, Duration::from_secs(600));
        let wider = WakeConfig {
            claude_tools: "Read, Grep,Glob,Bash(git log:*)".into(),
            codex_sandbox: "workspace-write".into(),
            ..WakeConfig::default()
        };
        let r = wider.rules().unwrap();
        assert_eq!(r.claude_tools.len(), 4);
        for (bad, key) in [
            (
                WakeConfig {
                    codex_sandbox: "danger-full-access".into(),
                    ..WakeConfig::default()
                },
                "wake.codex_sandbox",
            ),
            (
                WakeConfig {
                    claude_tools: "Read,--dangerously-skip-permissions".into(),
                    ..WakeConfig::default()
                },
                "wake.claude_tools",
            ),
            (
                WakeConfig {
                    claude_tools: "bypassPermissions".into(),
                    ..WakeConfig::default()
                },
                "wake.claude_tools",
            ),
            (
                WakeConfig {
                    max_budget_usd: 0.0,
                    ..WakeConfig::default()
                },
                "wake.max_budget_usd",
            ),
        ] {
            let e = bad.rules().unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
