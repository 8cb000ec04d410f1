//! The command judge's protocol: `[bus] judge_command` in config.toml is
//! run once per judgment with the pair on stdin as one JSON object
//! ([`payload`]) and must print `{"p": 0.0–1.0}` on stdout
//! ([`parse_answer`]) within [`COMMAND_TIMEOUT`]. The daemon runs it
//! (`agentmesh_node::judge::command`); anything but such an answer drops the
//! broadcast for that mailbox.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Input, Preset, notes_read};

/// How long a judge command has for one judgment.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a judge command's stdout that is read (an answer is a few
/// bytes), and of its stderr kept for the log.
pub const COMMAND_OUTPUT_MAX: usize = 4096;

/// What a judge command is given on stdin.
#[derive(Debug, Clone, Serialize)]
pub struct CommandInput<'a> {
    /// The pair.
    #[serde(flatten)]
    pub input: &'a Input,
    /// The mailbox's preset (the command may use it or not; its `p` is
    /// compared with the preset's threshold all the same).
    pub preset: Preset,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    p: f64,
}

/// The line a judge command reads: the pair, with only the notes the
/// judge reads, and the preset.
pub fn payload(input: &Input, preset: Preset) -> Vec<u8> {
    let read = Input {
        notes: notes_read(&input.notes).to_vec(),
        ..input.clone()
    };
    let mut line = serde_json::to_vec(&CommandInput {
        input: &read,
        preset,
    })
    .unwrap_or_default();
    line.push(b'\n');
    line
}

pub use crate::features::bounded as cut;

/// A command's stdout read as its answer: `p`, or why it is not one (in
/// words fit for the bus log).
pub fn parse_answer(stdout: &str) -> Result<f64, String> {
    let answer: Answer = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("{e} (it printed {:?})", cut(stdout.trim(), 120)))?;
    if !(0.0..=1.0).contains(&answer.p) {
        return Err(format!("p is {}, outside 0.0-1.0", answer.p));
    }
    Ok(answer.p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn the_payload_is_one_line_with_the_last_five_notes_and_the_preset() {
        let input = Input {
            broadcast: "b".into(),
            sender: None,
            profile: "p".into(),
            goal: String::new(),
            status: Status::Idle,
            notes: (0..8).map(|n| format!("n{n}")).collect(),
            mailbox: None,
        };
        let line = payload(&input, Preset::Strict);
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v["notes"],
            serde_json::json!(["n3", "n4", "n5", "n6", "n7"])
        );
        assert_eq!(v["preset"], "strict");
    }

    #[test]
    fn answers_outside_the_shape_are_refused_saying_why() {
        assert_eq!(parse_answer(" {\"p\": 0.25}\n"), Ok(0.25));
        assert!(
            parse_answer("{\"p\": 1.5}")
                .unwrap_err()
                .contains("outside")
        );
        assert!(parse_answer("{\"p\": 0.5, \"x\": 1}").is_err());
        assert!(parse_answer("yes").unwrap_err().contains("\"yes\""));
    }
}
