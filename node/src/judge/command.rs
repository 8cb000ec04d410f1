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

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::codes::ErrorCode;
use agentmesh_judge::Input;
use agentmesh_judge::Preset;
use agentmesh_judge::command::{COMMAND_OUTPUT_MAX, COMMAND_TIMEOUT, parse_answer, payload};

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
        /// The end of what it wrote on stderr (at most 512 bytes, control
        /// characters as spaces).
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
    pub fn code(&self) -> ErrorCode {
        match self {
            CommandError::Spawn(_) => ErrorCode::JudgeUnavailable,
            CommandError::Timeout => ErrorCode::JudgeTimeout,
            CommandError::Failed { .. } => ErrorCode::JudgeFailed,
            CommandError::BadAnswer(_) => ErrorCode::JudgeBadAnswer,
        }
    }
}

/// Runs `command` (with `sh -c`, in its own process group, which is killed
/// whole once it has answered or run out of time) for one judgment.
pub async fn ask(command: &str, input: &Input, preset: Preset) -> Result<f64, CommandError> {
    ask_within(command, input, preset, COMMAND_TIMEOUT).await
}

/// Reads `r` to its end, keeping its first `max` bytes, or its last with
/// `keep_end` (`true`: there were more), so a chatty command never blocks
/// on a full pipe.
async fn drain(
    r: Option<impl tokio::io::AsyncRead + Unpin>,
    max: usize,
    keep_end: bool,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut more = false;
    let Some(mut r) = r else {
        return (kept, more);
    };
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, more),
            Ok(n) if keep_end => {
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > max {
                    kept.drain(..kept.len() - max);
                    more = true;
                }
            }
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more |= n > room;
            }
        }
    }
}

/// The last `max` bytes of what a command wrote on stderr, with control
/// characters shown as spaces: it goes into the bus log.
fn tail(err: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(err);
    let text = text.trim();
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

async fn ask_within(
    command: &str,
    input: &Input,
    preset: Preset,
    timeout: Duration,
) -> Result<f64, CommandError> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c").arg(command);
    let out = run(cmd, payload(input, preset), timeout, COMMAND_OUTPUT_MAX)
        .await
        .map_err(|f| match f {
            RunFailure::Spawn(e) => CommandError::Spawn(e),
            RunFailure::Timeout => CommandError::Timeout,
            RunFailure::Failed { status, stderr } => CommandError::Failed { status, stderr },
            RunFailure::TooLong => {
                CommandError::BadAnswer(format!("it printed more than {COMMAND_OUTPUT_MAX} bytes"))
            }
        })?;
    parse_answer(&out).map_err(CommandError::BadAnswer)
}

/// Why a judging process gave no output to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunFailure {
    /// It could not be started.
    Spawn(String),
    /// It did not finish in time, and was killed.
    Timeout,
    /// It exited non-zero or was killed by a signal.
    Failed {
        /// Its exit status, in words.
        status: String,
        /// The end of its stderr (at most 512 bytes, control characters
        /// as spaces).
        stderr: String,
    },
    /// It printed more than it may.
    TooLong,
}

/// Runs `cmd` in its own process group with `payload` on stdin, and
/// returns its stdout once it exits 0 within `timeout` having printed at
/// most `max_out` bytes. The whole group is killed once it has answered
/// or run out of time (whatever it left running ends with the judgment).
pub(crate) async fn run(
    mut cmd: tokio::process::Command,
    payload: Vec<u8>,
    timeout: Duration,
    max_out: usize,
) -> Result<String, RunFailure> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RunFailure::Spawn(e.to_string()))?;
    let group = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let kill_group = || {
        if let Some(g) = group {
            let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGKILL);
        }
    };
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let write = async move {
        // A process that does not read its input may close stdin first:
        // its answer counts all the same.
        if let Some(mut s) = stdin {
            let _ = s.write_all(&payload).await;
        }
    };
    let work = async {
        let ((), (out, out_more), (err, _)) = tokio::join!(
            write,
            drain(stdout, max_out, false),
            drain(stderr, COMMAND_OUTPUT_MAX, true)
        );
        (out, out_more, err)
    };
    let done = tokio::time::timeout(timeout, work).await;
    kill_group();
    let status = child.wait().await;
    let Ok((out, out_more, err)) = done else {
        return Err(RunFailure::Timeout);
    };
    let status = status.map_err(|e| RunFailure::Spawn(e.to_string()))?;
    if !status.success() {
        return Err(RunFailure::Failed {
            status: status.to_string(),
            stderr: tail(&err, 512),
        });
    }
    if out_more {
        return Err(RunFailure::TooLong);
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentmesh_judge::Status;

    fn input() -> Input {
        Input {
            broadcast: "mio 1.2.4 fixes named pipes on Windows".into(),
            sender: Some("platform@ops".into()),
            profile: "ships for Windows".into(),
            goal: String::new(),
            status: Status::Idle,
            notes: vec![],
            mailbox: None,
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
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let cmd = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let e = ask_within(&cmd, &input(), Preset::Balanced, Duration::from_millis(500))
            .await
            .unwrap_err();
        assert_eq!(e, CommandError::Timeout);
        assert_eq!(e.code().as_str(), "judge_timeout");
        let pid = pid_in(&pid_file);
        assert!(
            gone(pid),
            "the command's background child {pid} outlived it"
        );
        // And what an answered command left running ends with it too.
        let cmd = format!(
            "(sleep 30 >/dev/null 2>&1 & echo $! > {}); echo '{{\"p\": 0.5}}'",
            pid_file.display()
        );
        assert_eq!(ask(&cmd, &input(), Preset::Balanced).await, Ok(0.5));
        let pid = pid_in(&pid_file);
        assert!(
            gone(pid),
            "the answered command's background child {pid} outlived it"
        );
        let e = ask("echo oops >&2; exit 3", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(e.code().as_str(), "judge_failed");
        assert!(
            e.to_string().contains("exit status: 3") && e.to_string().contains("oops"),
            "{e}"
        );
        let e = ask("kill -9 $$", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(e.code().as_str(), "judge_failed");
        for garbage in [
            "echo yes",
            r#"echo '{"p": 1.5}'"#,
            r#"echo '{"p": "high"}'"#,
            "true",
            r#"echo '{"p":0.5,"x":1}'"#,
        ] {
            let e = ask(garbage, &input(), Preset::Balanced).await.unwrap_err();
            assert_eq!(e.code().as_str(), "judge_bad_answer", "{garbage}: {e}");
        }
        let e = ask("/nonexistent/judge", &input(), Preset::Balanced)
            .await
            .unwrap_err();
        assert_eq!(
            e.code().as_str(),
            "judge_failed",
            "sh reports a missing command as exit 127: {e}"
        );
    }

    /// The process id a command wrote to `file`.
    fn pid_in(file: &std::path::Path) -> i32 {
        std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Whether a process is gone (or a zombie nobody waits for: its
    /// parent, the killed shell, is gone too, so init reaps it).
    fn gone(pid: i32) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
            match stat {
                Err(_) => return true,
                Ok(s)
                    if s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z')) =>
                {
                    return true;
                }
                Ok(_) if std::time::Instant::now() > deadline => return false,
                Ok(_) => std::thread::yield_now(),
            }
        }
    }

    #[tokio::test]
    async fn a_flood_of_output_is_an_answer_too_long_and_stderr_keeps_its_end() {
        let t = std::time::Instant::now();
        let e = ask(
            "head -c 100000 /dev/zero | tr '\\0' x",
            &input(),
            Preset::Balanced,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code().as_str(), "judge_bad_answer", "{e}");
        assert!(e.to_string().contains("more than 4096 bytes"), "{e}");
        assert!(
            t.elapsed() < COMMAND_TIMEOUT,
            "a flood is answered when it ends, not at the timeout"
        );
        // 200 KiB on stderr, more than a pipe holds, and then an answer.
        let cmd = r#"head -c 200000 /dev/zero | tr '\0' y >&2; printf 'last\033[31m words' >&2; echo '{"p": 0.5}'"#;
        assert_eq!(ask(cmd, &input(), Preset::Balanced).await, Ok(0.5));
        let e = ask(
            &format!("{}; exit 1", &cmd[..cmd.find("; echo").unwrap()]),
            &input(),
            Preset::Balanced,
        )
        .await
        .unwrap_err();
        let CommandError::Failed { stderr, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(stderr.ends_with("last [31m words"), "{stderr:?}");
        assert!(stderr.len() <= 512);
    }

    #[tokio::test]
    async fn the_command_is_given_the_last_five_notes() {
        let mut i = input();
        i.notes = (0..8).map(|n| format!("note-{n}")).collect();
        let cmd = r#"read line; case "$line" in *note-2*) echo '{"p":0}';; *note-3*note-7*) echo '{"p":1}';; *) echo '{"p":0.5}';; esac"#;
        assert_eq!(ask(cmd, &i, Preset::Balanced).await, Ok(1.0));
    }
}
