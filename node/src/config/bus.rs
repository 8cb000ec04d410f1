//! `[bus]`: the directory and broadcasts, and how this machine judges
//! them (docs/agents.md, "The broadcast judge").

use std::time::Duration;

use agentmesh_judge::agent::{AgentCli, AgentSettings};
use serde::{Deserialize, Serialize};

use super::{ConfigError, duration, invalid};
use crate::judge::{AgentRules, JudgeWith};

/// `[bus]` in config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusConfig {
    /// The preset a mailbox's broadcasts are judged with unless it chose
    /// its own (`agentmesh profile set MAILBOX --preset`).
    pub preset: agentmesh_judge::Preset,
    /// How broadcasts are judged: "builtin", "agent" (the built-in judge,
    /// then the mailbox's agent for what it is not sure of) or "command"
    /// (`judge_command`). Empty, the default: "command" when
    /// `judge_command` is set, else "builtin".
    pub judge: String,
    /// A command that judges each (broadcast, mailbox) pair instead of the
    /// built-in judge: run with `sh -c`, the pair as JSON on stdin, it
    /// prints `{"p": 0.0-1.0}` within 2 s; anything else drops the
    /// broadcast for that mailbox.
    pub judge_command: String,
    /// With `judge = "agent"`: the agent CLI for mailboxes whose wake agent
    /// is not set (`wake set NAME claude|codex`): "claude", "codex", or
    /// empty (the built-in judge decides alone for them).
    pub agent: String,
    /// Claude Code's model for judging. Default "haiku".
    pub agent_model: String,
    /// Codex's model for judging. Default "gpt-5.4-mini".
    pub agent_codex_model: String,
    /// Claude Code's `--max-budget-usd` per judgment. Default 0.02.
    pub agent_max_usd: f64,
    /// Agent judgments a day on this machine, at most (the receiver
    /// pays); past it, the built-in judge decides alone. Default 200.
    pub agent_calls_per_day: u32,
    /// How long one agent judgment may take; a late answer drops. Default
    /// "30s".
    pub agent_timeout: String,
}

impl Default for BusConfig {
    fn default() -> Self {
        let s = AgentSettings::default();
        BusConfig {
            preset: agentmesh_judge::Preset::default(),
            judge: String::new(),
            judge_command: String::new(),
            agent: String::new(),
            agent_model: s.model,
            agent_codex_model: s.codex_model,
            agent_max_usd: s.max_usd,
            agent_calls_per_day: 200,
            agent_timeout: "30s".into(),
        }
    }
}

impl BusConfig {
    /// How this machine judges, checked.
    pub fn judge_with(&self) -> Result<JudgeWith, ConfigError> {
        let command = self.judge_command.trim();
        match self.judge.trim() {
            "" if command.is_empty() => Ok(JudgeWith::Builtin),
            "" | "command" if !command.is_empty() => Ok(JudgeWith::Command(command.to_owned())),
            "command" => Err(invalid(
                "bus.judge",
                "is \"command\" but bus.judge_command is empty: set the command, or bus.judge = \"builtin\"",
            )),
            "builtin" => Ok(JudgeWith::Builtin),
            "agent" => self.agent_rules().map(|r| JudgeWith::Agent(Box::new(r))),
            other => Err(invalid(
                "bus.judge",
                format!("is {other:?}; it must be \"builtin\", \"agent\" or \"command\""),
            )),
        }
    }

    fn agent_rules(&self) -> Result<AgentRules, ConfigError> {
        let default_cli = match self.agent.trim() {
            "" => None,
            a => Some(AgentCli::parse(a).ok_or_else(|| {
                invalid(
                    "bus.agent",
                    format!("is {a:?}; it must be \"claude\", \"codex\" or empty"),
                )
            })?),
        };
        for (field, model) in [
            ("bus.agent_model", &self.agent_model),
            ("bus.agent_codex_model", &self.agent_codex_model),
        ] {
            let ok = !model.is_empty()
                && model.len() <= 64
                && model
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._:/[]".contains(c))
                && !model.starts_with('-');
            if !ok {
                return Err(invalid(
                    field,
                    "must be a model name (letters, digits, - . _ : / [ ]; at most 64; not starting with -)",
                ));
            }
        }
        if !(self.agent_max_usd > 0.0 && self.agent_max_usd <= 1.0) {
            return Err(invalid(
                "bus.agent_max_usd",
                "must be more than 0 and at most 1.0 (dollars per judgment)",
            ));
        }
        if self.agent_calls_per_day > 100_000 {
            return Err(invalid(
                "bus.agent_calls_per_day",
                "must be from 0 to 100000 (0: the built-in judge decides alone)",
            ));
        }
        let timeout = duration("bus.agent_timeout", &self.agent_timeout)?;
        if timeout < Duration::from_secs(1) || timeout > Duration::from_secs(600) {
            return Err(invalid("bus.agent_timeout", "must be from 1s to 10m"));
        }
        Ok(AgentRules {
            default_cli,
            settings: AgentSettings {
                model: self.agent_model.clone(),
                codex_model: self.agent_codex_model.clone(),
                max_usd: self.agent_max_usd,
            },
            calls_per_day: self.agent_calls_per_day,
            timeout,
            // Set from `[wake]` once it is read.
            programs: ("claude".into(), "codex".into()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judge_is_builtin_command_or_agent_and_bad_settings_say_what_to_do() {
        let mut c = BusConfig::default();
        assert_eq!(c.judge_with().unwrap(), JudgeWith::Builtin);
        c.judge_command = "my-judge".into();
        assert_eq!(
            c.judge_with().unwrap(),
            JudgeWith::Command("my-judge".into())
        );
        c.judge = "builtin".into();
        assert_eq!(c.judge_with().unwrap(), JudgeWith::Builtin);
        c.judge = "agent".into();
        let JudgeWith::Agent(r) = c.judge_with().unwrap() else {
            panic!("agent")
        };
        assert_eq!(r.default_cli, None);
        assert_eq!(r.calls_per_day, 200);
        assert_eq!(r.timeout, Duration::from_secs(30));
        assert_eq!(r.settings, AgentSettings::default());
        let bad = |f: fn(&mut BusConfig)| {
            let mut c = BusConfig {
                judge: "agent".into(),
                ..BusConfig::default()
            };
            f(&mut c);
            c.judge_with().unwrap_err().to_string()
        };
        type Case = (&'static str, fn(&mut BusConfig));
        let cases: [Case; 5] = [
            ("bus.judge", |c| c.judge = "gpt".into()),
            ("bus.agent", |c| c.agent = "gemini".into()),
            ("bus.agent_model", |c| c.agent_model = "--help".into()),
            ("bus.agent_max_usd", |c| c.agent_max_usd = 0.0),
            ("bus.agent_timeout", |c| c.agent_timeout = "0s".into()),
        ];
        for (field, f) in cases {
            let e = bad(f);
            assert!(e.contains(field), "{field}: {e}");
        }
        let mut c = BusConfig {
            judge: "command".into(),
            ..BusConfig::default()
        };
        assert!(
            c.judge_with()
                .unwrap_err()
                .to_string()
                .contains("judge_command")
        );
        c.agent = "codex".into();
        c.judge = "agent".into();
        let JudgeWith::Agent(r) = c.judge_with().unwrap() else {
            panic!("agent")
        };
        assert_eq!(r.default_cli, Some(AgentCli::Codex));
    }
}
