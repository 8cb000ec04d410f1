//! agentmesh's broadcast judge: would this mailbox's session want this
//! broadcast? Text in, score out: this crate reads nothing but its own
//! data (`data/`, compiled in), starts no process and opens no socket.
//! The daemon runs it, and runs the command and agent judges whose
//! protocol and prompt are here.
//!
//! The built-in judge: One probability per (broadcast, mailbox) pair, computed
//! here, in microseconds, with no network, no model fetched and no
//! process started; the same inputs always give the same answer.
//!
//! ```text
//!  broadcast, sender ─┐
//!  profile, goal ─────┼─ Features::measure ── logistic model ── p ── − notes ── p ≥ preset?
//!  notes (not_for_me) ┘   (words, packages,      (weights.rs,           (likeness to
//!                          deps, versions,        tuned on the           what it said
//!                          scope, carve-outs)     tuning part)           was not for it)
//! ```
//!
//! `status` is an input and is never used to lower the probability: an
//! idle session is exactly the one a relevant broadcast should reach.
//! The weights and the presets' thresholds are in `weights.rs`, written by
//! [`tune`] from the tuning part of the labelled set
//! (`judge/labelled/`); a test checks they are what [`tune`] computes.
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

pub mod agent;
pub mod command;
pub mod eval;
pub mod features;
mod scope;
pub mod text;
#[cfg(feature = "tuning")]
pub mod tune;
#[rustfmt::skip] // written by `agentmesh-bench bus --tune`, compared byte for byte
mod weights;

use serde::{Deserialize, Serialize};

pub use features::{Broadcast, Features};

/// How eager a mailbox is to receive broadcasts: each preset is a
/// threshold on the judge's probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Only what is clearly about this mailbox's work.
    Strict,
    /// The default: what is likely to matter.
    #[default]
    Balanced,
    /// Anything that might matter.
    Loose,
}

impl Preset {
    /// Every preset, strictest first.
    pub const ALL: [Preset; 3] = [Preset::Strict, Preset::Balanced, Preset::Loose];

    /// Its name, as in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Strict => "strict",
            Preset::Balanced => "balanced",
            Preset::Loose => "loose",
        }
    }

    /// The preset a name means, if any.
    pub fn parse(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The agent's `p` a broadcast must reach at this preset. Chosen, not
    /// calibrated (no agent runs here): the agent is asked for a
    /// probability, and these read it as one.
    pub fn agent_threshold(self) -> f64 {
        match self {
            Preset::Strict => 0.7,
            Preset::Balanced => 0.5,
            Preset::Loose => 0.3,
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a mailbox's session is doing, as the directory shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A session is attached and a hook or tool call was seen in the last
    /// two minutes.
    Working,
    /// A session is attached and quiet.
    Idle,
    /// Nothing is attached.
    Offline,
}

impl Status {
    /// Its name, as shown and as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::Idle => "idle",
            Status::Offline => "offline",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The last notes the judge reads of a mailbox's `not_for_me`s.
pub const NOTES_READ: usize = 5;

/// How much a note's likeness (0–1) to the broadcast lowers its logit:
/// a broadcast nearly identical to one the session said was not for it
/// (likeness about 0.9) loses about 11, enough to drop even a broadcast
/// the model is sure of (a logit near 10) at every preset; a note merely
/// on the same topic lowers it a little. Not tuned (the labelled set has
/// no notes): chosen, see docs/agents.md.
pub const NOTE_WEIGHT: f64 = 12.0;

/// What the judge is given about one pair: the `agentmesh judge` input
/// line, and what the daemon passes for each candidate mailbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The broadcast's text.
    pub broadcast: String,
    /// Who sent it (`mailbox@machine`), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// The candidate mailbox's profile (may be empty).
    #[serde(default)]
    pub profile: String,
    /// Its goal (may be empty).
    #[serde(default)]
    pub goal: String,
    /// Its status; never lowers the probability.
    pub status: Status,
    /// Its last `not_for_me` notes, oldest first (the judge reads the last
    /// [`NOTES_READ`]; `null` is none).
    #[serde(default, deserialize_with = "null_is_none")]
    pub notes: Vec<String>,
    /// The mailbox's name, if known: with no profile, it is judged on its
    /// goal and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
}

fn null_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// The judge's answer for one pair: the `agentmesh judge` output line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    /// The probability that the mailbox's session wants the broadcast.
    pub p: f64,
    /// Whether `p` reaches the preset's threshold.
    pub deliver: bool,
}

impl Preset {
    /// The probability a broadcast must reach to be delivered.
    pub fn threshold(self) -> f64 {
        match self {
            Preset::Strict => weights::THRESHOLDS[0],
            Preset::Balanced => weights::THRESHOLDS[1],
            Preset::Loose => weights::THRESHOLDS[2],
        }
    }
}

/// The probability below which the built-in judge drops a pair without
/// asking the agent (`[bus] judge = "agent"`): out of fold on the tuning
/// part, it keeps 98% of the relevant pairs.
pub fn first_stage_threshold() -> f64 {
    weights::FIRST_STAGE
}

/// The model's logit for measured features, before notes.
pub fn logit(f: &Features) -> f64 {
    let x = f.to_array();
    weights::BIAS
        + x.iter()
            .zip(weights::WEIGHTS)
            .map(|(x, w)| x * w)
            .sum::<f64>()
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// The notes the judge reads: the last [`NOTES_READ`].
pub fn notes_read(notes: &[String]) -> &[String] {
    &notes[notes.len().saturating_sub(NOTES_READ)..]
}

/// The probability that the mailbox wants the broadcast, `b` being
/// `input.broadcast` analysed (once for all the mailboxes it is judged for).
pub fn probability_of(b: &Broadcast, input: &Input) -> f64 {
    let goal = match &input.mailbox {
        Some(name) if input.profile.trim().is_empty() => format!("{} {name}", input.goal),
        _ => input.goal.clone(),
    };
    let f = Features::measure(b, &input.profile, &goal);
    let like = notes_read(&input.notes)
        .iter()
        .map(|n| features::likeness(b, n))
        .fold(0.0, f64::max);
    sigmoid(logit(&f) - NOTE_WEIGHT * like)
}

/// The probability that the mailbox wants the broadcast.
pub fn probability(input: &Input) -> f64 {
    probability_of(&Broadcast::analyse(&input.broadcast), input)
}

/// Judges one pair at a preset.
pub fn judge(input: &Input, preset: Preset) -> Judgment {
    verdict(probability(input), preset)
}

/// A probability judged at a preset.
pub fn verdict(p: f64, preset: Preset) -> Judgment {
    Judgment {
        p,
        deliver: p >= preset.threshold(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(broadcast: &str, profile: &str, status: Status) -> Input {
        Input {
            broadcast: broadcast.into(),
            sender: None,
            profile: profile.into(),
            goal: String::new(),
            status,
            notes: vec![],
            mailbox: None,
        }
    }

    const B: &str =
        "mio 1.2.4 fixes a use-after-free in Windows named pipes; Linux builds are untouched.";
    const P: &str = "Client: Acme. CLI in Rust on tokio; ships for Windows and talks to the agent over a named pipe.";

    #[test]
    fn status_never_changes_the_probability() {
        let p: Vec<f64> = [Status::Working, Status::Idle, Status::Offline]
            .into_iter()
            .map(|s| probability(&input(B, P, s)))
            .collect();
        assert_eq!(p[0], p[1]);
        assert_eq!(p[1], p[2]);
    }

    #[test]
    fn the_same_inputs_give_the_same_answer() {
        let i = input(B, P, Status::Idle);
        assert_eq!(probability(&i), probability(&i));
        assert!((0.0..=1.0).contains(&probability(&i)));
    }

    #[test]
    fn a_note_against_a_near_identical_broadcast_lowers_it_below_every_preset() {
        let mut i = input(B, P, Status::Idle);
        let before = probability(&i);
        i.notes = vec![format!("not for me: we ship no Windows build — about: {B}")];
        let after = probability(&i);
        assert!(after < before, "{after} !< {before}");
        assert!(!judge(&i, Preset::Loose).deliver, "p = {after}");
        // Only the last five notes are read.
        let mut old = i.clone();
        old.notes
            .extend((0..NOTES_READ).map(|n| format!("unrelated note {n}")));
        assert_eq!(probability(&old), before);
    }

    #[test]
    fn presets_are_ordered() {
        assert!(Preset::Strict.threshold() > Preset::Balanced.threshold());
        assert!(Preset::Balanced.threshold() > Preset::Loose.threshold());
    }
}
