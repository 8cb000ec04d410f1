//! `agentmesh judge`: the broadcast judge on JSON lines, with no daemon:
//! the same code the daemon judges each candidate mailbox with (the
//! built-in judge, or `[bus] judge_command` when config.toml sets one,
//! unless `--builtin`).
//!
//! Each input line is `{"broadcast", "profile", "goal", "status",
//! "notes"?}` (and `sender`, optional); each output line is `{"p",
//! "deliver"}`, in order. A line that is not such an object gets
//! `{"line", "code": "bad_input", "message"}` in its place, so outputs stay
//! one per input, and the command exits 1 once all are read.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use agentmesh_judge::eval::{self, Evaluation, PresetFigures};
use agentmesh_judge::{self as judge, Input, Judgment};
use agentmesh_node::api::Preset;
use agentmesh_node::codes::ErrorCode;
use serde::Serialize;

use crate::term::{self, cli_error};

/// The longest input line read whole: a broadcast is at most 64 KiB, a
/// profile 1 KiB, a goal 256 bytes, notes five of 1 KiB; JSON escaping can
/// grow text sixfold. A longer line is refused, not read into memory.
pub const MAX_LINE: usize = 1024 * 1024;

/// One output line.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Line {
    Judged(Judgment),
    /// A judge command gave no probability: dropped, as the daemon would.
    Dropped {
        p: Option<f64>,
        deliver: bool,
        error: String,
    },
    Refused {
        line: usize,
        code: &'static str,
        message: String,
    },
    /// `[bus] judge = "agent"`: which stage decided, and the agent's why.
    Staged {
        p: Option<f64>,
        deliver: bool,
        stage: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        why: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl Line {
    /// The score `--eval` ranks by: the judge's p; a drop for want of a
    /// judgment is 0; with the agent judge, what the built-in judge
    /// dropped is 0 and the rest the agent's p.
    fn score(&self) -> f64 {
        match self {
            Line::Judged(j) => j.p,
            Line::Staged {
                p: Some(p),
                stage: "agent",
                ..
            } => *p,
            _ => 0.0,
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes; `Ok(None)` at the end.
/// A longer line is skipped to its end and answered `Err(len)`.
fn read_line(input: &mut impl BufRead) -> std::io::Result<Option<Result<Vec<u8>, usize>>> {
    let mut buf = Vec::new();
    let mut total = 0usize;
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            if total == 0 {
                return Ok(None);
            }
            return Ok(Some(if total > MAX_LINE {
                Err(total)
            } else {
                Ok(buf)
            }));
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if total + take <= MAX_LINE + 1 {
            buf.extend_from_slice(&chunk[..take]);
        }
        total += take;
        input.consume(take);
        if done {
            return Ok(Some(if total > MAX_LINE + 1 {
                Err(total)
            } else {
                Ok(buf)
            }));
        }
    }
}

/// How this run judges: as the daemon of `home` would, unless `builtin`.
pub fn judge_with(
    home: &agentmesh_node::home::Home,
    builtin: bool,
) -> anyhow::Result<agentmesh_node::judge::JudgeWith> {
    if builtin {
        return Ok(agentmesh_node::judge::JudgeWith::Builtin);
    }
    let path = home.config_file();
    if !path.exists() {
        return Ok(agentmesh_node::judge::JudgeWith::Builtin);
    }
    Ok(agentmesh_node::config::Config::load_settings(&path)?.judge)
}

/// How this run judges, and what it needs to.
#[derive(Debug)]
struct Judging {
    with: agentmesh_node::judge::JudgeWith,
    rt: tokio::runtime::Runtime,
    /// Where agent judgments run: the home's `run/judge`.
    folder: std::path::PathBuf,
}

impl Judging {
    fn new(
        home: &agentmesh_node::home::Home,
        with: agentmesh_node::judge::JudgeWith,
    ) -> anyhow::Result<Judging> {
        Ok(Judging {
            with,
            rt: term::runtime()?,
            folder: home.root().join("run").join("judge"),
        })
    }
}

/// The agent judge's two stages for one pair, as the daemon runs them
/// (without its daily budget: a person running this pays each call), in
/// the home's `run/judge` as the daemon's (never a guessable folder of
/// /tmp that another user could fill with a CLAUDE.md).
fn staged(
    rules: &agentmesh_node::judge::AgentRules,
    j: &Judging,
    input: &Input,
    preset: Preset,
) -> Line {
    use agentmesh_node::judge::agent::{self, Staged};
    let first = judge::probability(input);
    let mut unbounded = u32::MAX;
    let staged = agent::staged(
        rules,
        rules.default_cli,
        (first, preset),
        &mut unbounded,
        &j.folder,
        input,
    );
    match j.rt.block_on(staged) {
        Staged::Builtin { p, threshold, .. } => Line::Staged {
            p: Some(p),
            deliver: p >= threshold,
            stage: "builtin",
            why: None,
            error: None,
        },
        Staged::Agent { answer: Ok(a), .. } => Line::Staged {
            p: Some(a.p),
            deliver: a.p >= preset.agent_threshold(),
            stage: "agent",
            why: Some(a.why),
            error: None,
        },
        Staged::Agent { answer: Err(e), .. } => Line::Staged {
            p: None,
            deliver: false,
            stage: "agent",
            why: None,
            error: Some(format!("{}: {e}", e.code())),
        },
    }
}

/// One judgment, as the daemon makes it: a judge command's failure is a
/// drop (`p` null, `deliver` false, and why).
fn judged(j: &Judging, input: &Input, preset: Preset) -> Line {
    let rt = &j.rt;
    match &j.with {
        agentmesh_node::judge::JudgeWith::Agent(rules) => staged(rules, j, input, preset),
        agentmesh_node::judge::JudgeWith::Builtin => Line::Judged(judge::judge(input, preset)),
        agentmesh_node::judge::JudgeWith::Command(cmd) => {
            let asked = rt
                .block_on(agentmesh_node::judge::command::ask(cmd, input, preset))
                .map_err(|e| format!("{}: {e}", e.code()));
            match asked {
                Ok(p) => Line::Judged(judge::verdict(p, preset)),
                Err(error) => Line::Dropped {
                    p: None,
                    deliver: false,
                    error,
                },
            }
        }
    }
}

pub fn run(
    home: &agentmesh_node::home::Home,
    preset: Preset,
    with: agentmesh_node::judge::JudgeWith,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let judging = Judging::new(home, with)?;
    let mut bad = 0usize;
    let mut n = 0usize;
    let mut inputs = 0usize;
    while let Some(line) = read_line(&mut input)? {
        n += 1;
        let parsed = match line {
            Err(len) => Err({
                inputs += 1;
                format!(
                    "line {n} is {len} bytes; at most {MAX_LINE} are read (a broadcast is at most 64 KiB)"
                )
            }),
            Ok(bytes) => {
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                inputs += 1;
                serde_json::from_slice::<Input>(&bytes).map_err(|e| {
                    format!(
                        "line {n}: {e}; each line is one JSON object: {{\"broadcast\": TEXT, \"profile\": TEXT, \"goal\": TEXT, \"status\": \"working|idle|offline\", \"notes\": [TEXT, …]}}"
                    )
                })
            }
        };
        let answer = match parsed {
            Ok(i) => judged(&judging, &i, preset),
            Err(message) => {
                bad += 1;
                if !json {
                    eprintln!("error: {message}");
                }
                Line::Refused {
                    line: n,
                    code: ErrorCode::BadInput.as_str(),
                    message,
                }
            }
        };
        serde_json::to_writer(&mut out, &answer)?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    if bad > 0 {
        return Err(cli_error(
            ErrorCode::BadInput.as_str(),
            format!("{bad} of {inputs} input lines were not judged (their output lines say why)"),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The most bytes of an `--eval` file (a pair is a few KiB).
pub const MAX_EVAL_FILE: u64 = 64 * 1024 * 1024;

/// `agentmesh judge --eval FILE`: every pair judged as the daemon would
/// (a judge command's failure scores 0: the daemon drops it), then the
/// figures at the presets' thresholds.
pub fn eval(
    home: &agentmesh_node::home::Home,
    file: &std::path::Path,
    with: agentmesh_node::judge::JudgeWith,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if let agentmesh_node::judge::JudgeWith::Agent(r) = &with
        && r.default_cli.is_none()
    {
        return Err(cli_error(
            "bad_config",
            "bus.judge is \"agent\" but bus.agent is empty: --eval has no mailbox whose wake agent it could ask; set `agentmesh config set bus.agent claude` (or codex), or score the built-in judge with --builtin",
        ));
    }
    let size = std::fs::metadata(file)
        .map_err(|e| cli_error("bad_input", format!("can't read {}: {e}", file.display())))?
        .len();
    if size > MAX_EVAL_FILE {
        return Err(cli_error(
            "too_large",
            format!(
                "{} is {size} bytes; --eval reads at most {MAX_EVAL_FILE}: split it",
                file.display()
            ),
        ));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| cli_error("bad_input", format!("can't read {}: {e}", file.display())))?;
    let pairs = eval::parse_pairs(&text).map_err(|e| {
        cli_error(
            "bad_input",
            format!(
                "{}: {e} (each line: {{\"broadcast\", \"profile\", \"goal\", \"status\", \"relevant\"}})",
                file.display()
            ),
        )
    })?;
    let judging = Judging::new(home, with)?;
    let progress = (!json && pairs.len() > 200).then(|| term::progress(pairs.len() as u64));
    let mut scored = Vec::with_capacity(pairs.len());
    for (pair, relevant) in &pairs {
        let p = judged(&judging, &pair.input(), Preset::Balanced).score();
        scored.push((p, *relevant));
        if let Some(bar) = &progress {
            bar.inc(1);
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let thresholds = match &judging.with {
        agentmesh_node::judge::JudgeWith::Agent(_) => Preset::ALL.map(Preset::agent_threshold),
        _ => eval::builtin_thresholds(),
    };
    let e = eval::evaluate(&scored, thresholds);
    if json {
        crate::outln!("{}", serde_json::to_string(&e)?);
    } else {
        term::out_raw(&table(&e, judging.with.as_str()));
    }
    Ok(ExitCode::SUCCESS)
}

fn percent(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.1}%", 100.0 * x))
}

/// The `--eval` figures as a person reads them.
fn table(e: &Evaluation, with: &str) -> String {
    let mut s = format!(
        "{} pairs, {} relevant; judge: {with}\nAUC {}   precision at 90% recall {}\n\n",
        e.pairs,
        e.relevant,
        e.auc.map_or("-".into(), |a| format!("{a:.3}")),
        percent(e.precision_at_90_recall),
    );
    s += "preset     threshold  precision  recall  delivered\n";
    let row = |name: &str, f: &PresetFigures| {
        format!(
            "{name:<10} {:>9.3}  {:>9}  {:>6}  {:>9}\n",
            f.threshold,
            percent(f.precision),
            percent(f.recall),
            f.delivered
        )
    };
    s += &row("strict", &e.presets.strict);
    s += &row("balanced", &e.presets.balanced);
    s += &row("loose", &e.presets.loose);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_whole_and_long_ones_refused_without_keeping_them() {
        let long = "x".repeat(MAX_LINE + 10);
        let text = format!("a\n{long}\nb");
        let mut r = std::io::BufReader::with_capacity(7, text.as_bytes());
        assert_eq!(read_line(&mut r).unwrap(), Some(Ok(b"a\n".to_vec())));
        assert_eq!(read_line(&mut r).unwrap(), Some(Err(MAX_LINE + 11)));
        assert_eq!(read_line(&mut r).unwrap(), Some(Ok(b"b".to_vec())));
        assert_eq!(read_line(&mut r).unwrap(), None);
    }
}
