//! A judge of the user's own: `[bus] judge_command` in config.toml, run
//! once per judgment with the pair on stdin as one JSON object, expected
//! to print `{"p": 0.0–1.0}` on stdout and exit 0 within
//! [`COMMAND_TIMEOUT`].
//!
//! Anything else (it can't be started, it takes longer, it exits non-zero
//! or is killed, it prints something that is not such an object) is a
//! [`CommandError`], and the broadcast is **dropped** for that mailbox:
//! fail closed, because a wrong delivery can wake an expensive session for
//! nothing. The error says why, in words fit for the bus log.

use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Input;
use crate::bus::Preset;

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

/// Why a judge command gave no probability.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// It could not be started.
    #[error("the judge command could not be started: {0}")]
    Spawn(String),
    /// It did not answer in time, and was killed.
    #[error("the judge command did not answer within {}s and was killed", COMMAND_TIMEOUT.as_secs())]
    Timeout,
    /// It exited non-zero or was killed by a signal.
    #[error("the judge command failed ({status}){}", stderr_tail(.stderr))]
    Failed {
        /// Its exit status, in words.
        status: String,
        /// The end of what it wrote on stderr.
        stderr: String,
    },
    /// It exited 0 but its stdout was not `{"p": 0.0–1.0}`.
    #[error("the judge command's answer is not {{\"p\": 0.0-1.0}}: {0}")]
    BadAnswer(String),
}

fn stderr_tail(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", stderr.trim())
    }
}

impl CommandError {
    /// The reason's code in the bus log.
    pub fn code(&self) -> &'static str {
        match self {
            CommandError::Spawn(_) => "judge_unavailable",
            CommandError::Timeout => "judge_timeout",
            CommandError::Failed { .. } => "judge_failed",
            CommandError::BadAnswer(_) => "judge_bad_answer",
        }
    }
}

/// Text cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Runs `command` (with `sh -c`, in its own process group, which is killed
/// whole on a timeout) for one judgment.
pub async fn ask(command: &str, input: &Input, preset: Preset) -> Result<f64, CommandError> {
    ask_within(command, input, preset, COMMAND_TIMEOUT).await
}

async fn ask_within(
    command: &str,
    input: &Input,
    preset: Preset,
    timeout: Duration,
) -> Result<f64, CommandError> {
    let payload = serde_json::to_vec(&CommandInput { input, preset })
        .map_err(|e| CommandError::Spawn(e.to_string()))?;
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CommandError::Spawn(e.to_string()))?;
    let group = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        // A command that does not read its input may close stdin first:
        // its answer counts all the same.
        if let Some(mut s) = stdin.take() {
            let _ = s.write_all(&payload).await;
            let _ = s.write_all(b"\n").await;
        }
        let mut out = Vec::new();
        let mut err = Vec::new();
        let read_out = async {
            if let Some(s) = stdout.as_mut() {
                let _ = s
                    .take(COMMAND_OUTPUT_MAX as u64)
                    .read_to_end(&mut out)
                    .await;
            }
        };
        let read_err = async {
            if let Some(s) = stderr.as_mut() {
                let _ = s
                    .take(COMMAND_OUTPUT_MAX as u64)
                    .read_to_end(&mut err)
                    .await;
            }
        };
        tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, out, err)
    };
    let (status, out, err) = match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            if let Some(g) = group {
                let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGKILL);
            }
            return Err(CommandError::Timeout);
        }
    };
    let status = status.map_err(|e| CommandError::Spawn(e.to_string()))?;
    if !status.success() {
        return Err(CommandError::Failed {
            status: status.to_string(),
            stderr: cut(&String::from_utf8_lossy(&err), 512),
        });
    }
    let text = String::from_utf8_lossy(&out);
    let answer: Answer = serde_json::from_str(text.trim()).map_err(|e| {
        CommandError::BadAnswer(format!("{e} (it printed {:?})", cut(text.trim(), 120)))
    })?;
    if !(0.0..=1.0).contains(&answer.p) {
        return Err(CommandError::BadAnswer(format!(
            "p is {}, outside 0.0-1.0",
            answer.p
        )));
    }
    Ok(answer.p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Status;

    fn input() -> Input {
        Input {
            broadcast: "mio 1.2.4 fixes named pipes on Windows".into(),
            sender: Some("platform@ops".into()),
            profile: "ships for Windows".into(),
            goal: String::new(),
            status: Status::Idle,
            notes: vec![],
        }
    }

    #[tokio::test]
    async fn a_command_that_answers_gives_its_p_and_reads_the_pair() {
        let cmd = r#"grep -q '"profile":"ships for Windows"' && echo '{"p": 0.25}'"#;
        assert_eq!(ask(cmd, &input(), Preset::Strict).await, Ok(0.25));
        // It is given the pair and the preset as one JSON line.
        let cmd = r#"read line; case "$line" in *'"preset":"loose"'*) echo '{"p":1}';; *) echo '{"p":0}';; esac"#;
        assert_eq!(ask(cmd, &input(), Preset::Loose).await, Ok(1.0));
        assert_eq!(ask(cmd, &input(), Preset::Balanced).await, Ok(0.0));
    }

    #[tokio::test]
    async fn hanging_crashing_and_garbage_are_errors_that_say_why() {
        // Hangs, with a child of its own holding stdout: the whole group goes.
        let e = ask_within(
            "sleep 30 & sleep 30",
            &input(),
            Preset::Balanced,
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
        assert_eq!(e, CommandError::Timeout);
        assert_eq!(e.code(), "judge_timeout");
        let e = ask("echo oops >&2; exit 3", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "judge_failed");
        assert!(
            e.to_string().contains("exit status: 3") && e.to_string().contains("oops"),
            "{e}"
        );
        let e = ask("kill -9 $$", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "judge_failed");
        for garbage in [
            "echo yes",
            r#"echo '{"p": 1.5}'"#,
            r#"echo '{"p": "high"}'"#,
            "true",
            r#"echo '{"p":0.5,"x":1}'"#,
        ] {
            let e = ask(garbage, &input(), Preset::Balanced).await.unwrap_err();
            assert_eq!(e.code(), "judge_bad_answer", "{garbage}: {e}");
        }
        let e = ask("/nonexistent/judge", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            "judge_failed",
            "sh reports a missing command as exit 127: {e}"
        );
    }

    #[tokio::test]
    async fn a_flood_of_output_is_read_no_further_than_the_bound() {
        let e = ask("yes '{\"p\": 0.5}'", &input(), Preset::Balanced).await;
        // It never ends, so either its answer is garbage past the bound or
        // it is killed at the timeout; never a probability, never unbounded.
        assert!(e.is_err(), "{e:?}");
    }
}
