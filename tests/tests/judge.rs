//! `agentmesh judge`, the command scripts score the judge with: the real
//! binary, no daemon, on the labelled set's held-out part.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::Write;
use std::process::{Command, Stdio};

use agentmesh_judge::{self as judge, Input, tune};
use agentmesh_node::api::Preset;

fn run(args: &[&str], stdin: &str) -> (std::process::ExitStatus, String, String) {
    let home = tempfile::tempdir().unwrap();
    run_in(home.path(), args, stdin)
}

fn run_in(
    home: &std::path::Path,
    args: &[&str],
    stdin: &str,
) -> (std::process::ExitStatus, String, String) {
    let mut child = Command::new(agentmesh_tests::bin())
        .args(args)
        .env("AGENTMESH_HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_owned();
    let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    (
        out.status,
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn judge_answers_each_line_as_the_daemons_code_does_at_every_preset() {
    let (all, split) = tune::committed();
    let held = tune::part(&all, &split.held_out);
    let inputs: Vec<Input> = held.iter().map(|l| l.input()).collect();
    let stdin: String = inputs
        .iter()
        .map(|i| serde_json::to_string(i).unwrap() + "\n")
        .collect();
    for preset in Preset::ALL {
        let (status, out, err) = run(&["judge", "--preset", preset.as_str()], &stdin);
        assert!(status.success(), "{err}");
        let lines: Vec<judge::Judgment> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), inputs.len());
        let delivered = lines.iter().filter(|j| j.deliver).count();
        for (i, j) in inputs.iter().zip(&lines) {
            // JSON carries p to within its last bit.
            let want = judge::judge(i, preset);
            assert!(
                (j.p - want.p).abs() < 1e-12 && j.deliver == want.deliver,
                "{j:?} != {want:?}"
            );
        }
        println!("{preset}: {delivered} of {} delivered", lines.len());
    }
    // balanced is the default.
    let (_, default, _) = run(&["judge"], &stdin);
    let (_, balanced, _) = run(&["judge", "--preset", "balanced"], &stdin);
    assert_eq!(default, balanced);
}

#[test]
fn judge_refuses_a_bad_line_in_its_place_and_judges_the_rest() {
    let good = r#"{"broadcast": "tokio 1.54.1 reverts a timer change", "profile": "Rust service on tokio 1.54", "goal": "", "status": "idle"}"#;
    let stdin = format!(
        "{good}\nnot json\n\n{{\"broadcast\": \"x\", \"status\": \"asleep\"}}\n{{\"broadcast\": \"x\", \"status\": \"idle\", \"extra\": 1}}\n{good}\n"
    );
    let (status, out, err) = run(&["judge", "--json"], &stdin);
    assert!(!status.success());
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0]["p"].is_f64() && lines[4]["p"] == lines[0]["p"]);
    for (k, line_no) in [(1, 2), (2, 4), (3, 5)] {
        assert_eq!(lines[k]["code"], "bad_input", "{out}");
        assert_eq!(lines[k]["line"], line_no);
    }
    assert!(
        lines[2]["message"]
            .as_str()
            .unwrap()
            .contains("working|idle|offline")
    );
    let last: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "bad_input");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("3 of 5 input lines"),
        "{err}"
    );
}

#[test]
fn judge_uses_the_judge_command_config_sets_as_the_daemon_does() {
    let home = tempfile::tempdir().unwrap();
    let line = r#"{"broadcast": "tokio 1.54.1 reverts a timer change", "profile": "Ledger service on tokio 1.54", "status": "idle"}"#;
    let input: Input = serde_json::from_str(line).unwrap();
    let set = |command: &str| {
        let (status, _, err) = run_in(
            home.path(),
            &["config", "set", "bus.judge_command", command],
            "",
        );
        assert!(status.success(), "{err}");
    };
    set("cat >/dev/null; echo '{\"p\": 0.125}'");
    let (status, out, err) = run_in(home.path(), &["judge"], line);
    assert!(status.success(), "{err}");
    let j: judge::Judgment = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(j.p, 0.125);
    assert!(!j.deliver);
    // --builtin judges with the built-in judge all the same.
    let (_, out, _) = run_in(home.path(), &["judge", "--builtin"], line);
    let j: judge::Judgment = serde_json::from_str(out.trim()).unwrap();
    let want = judge::judge(&input, Preset::Balanced);
    // JSON carries p to within its last bit.
    assert!(
        (j.p - want.p).abs() < 1e-12 && j.deliver == want.deliver,
        "{j:?} != {want:?}"
    );
    // A command that fails drops, saying why, as the daemon does.
    set("exit 4");
    let (status, out, err) = run_in(home.path(), &["judge"], line);
    assert!(status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["p"].is_null(), "{v}");
    assert_eq!(v["deliver"], false);
    assert!(
        v["error"].as_str().unwrap().starts_with("judge_failed"),
        "{v}"
    );
}

/// `agentmesh judge --eval FILE --json` scores a file of labelled pairs
/// with the daemon's judge: the same figures as the judge's own code
/// gives for those pairs, keys other than the pair's ignored.
#[test]
fn eval_scores_a_file_of_labelled_pairs_as_the_judge_does() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../judge/labelled/teams/t1.jsonl"
    );
    let (status, out, err) = run(&["judge", "--builtin", "--eval", file, "--json"], "");
    assert!(status.success(), "{err}");
    let got: judge::eval::Evaluation = serde_json::from_str(out.trim()).unwrap();
    let pairs = judge::eval::parse_pairs(&std::fs::read_to_string(file).unwrap()).unwrap();
    let scored: Vec<(f64, bool)> = pairs
        .iter()
        .map(|(p, r)| (judge::probability(&p.input()), *r))
        .collect();
    let want = judge::eval::evaluate(&scored, judge::eval::builtin_thresholds());
    assert_eq!(got.pairs, pairs.len());
    assert_eq!(got.relevant, pairs.iter().filter(|(_, r)| *r).count());
    assert!((got.auc.unwrap() - want.auc.unwrap()).abs() < 1e-12);
    assert_eq!(
        got.presets.balanced.delivered,
        want.presets.balanced.delivered
    );
    assert_eq!(got.presets.strict.delivered, want.presets.strict.delivered);
    assert_eq!(got.presets.loose.delivered, want.presets.loose.delivered);
    assert!((got.presets.balanced.threshold - Preset::Balanced.threshold()).abs() < 1e-12);
    // The keys scripts read are all there.
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in ["pairs", "relevant", "auc", "precision_at_90_recall"] {
        assert!(v.get(key).is_some(), "{key}: {v}");
    }
    for p in ["strict", "balanced", "loose"] {
        for key in ["threshold", "precision", "recall", "delivered"] {
            assert!(v["presets"][p].get(key).is_some(), "{p}.{key}: {v}");
        }
    }
    // Without --json: a table with the same figures.
    let (status, out, _) = run(&["judge", "--builtin", "--eval", file], "");
    assert!(status.success());
    assert!(
        out.contains(&format!("{} pairs, {} relevant", got.pairs, got.relevant)),
        "{out}"
    );
    assert!(out.contains("balanced"), "{out}");
}

/// A row without its label is an error that names its line, as JSON with
/// `--json`; nothing is scored.
#[test]
fn eval_refuses_a_row_without_relevant_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pairs.jsonl");
    std::fs::write(
        &file,
        "{\"broadcast\":\"b\",\"profile\":\"p\",\"goal\":\"\",\"status\":\"idle\",\"relevant\":true,\"id\":\"x\"}\n\
         {\"broadcast\":\"b\",\"profile\":\"p\",\"goal\":\"\",\"status\":\"idle\"}\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (status, out, err) = run(&["judge", "--eval", path, "--json"], "");
    assert!(!status.success());
    assert!(out.is_empty(), "nothing is scored: {out}");
    let e: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(e["code"], "bad_input", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("line 2: no \"relevant\""),
        "{e}"
    );
    let (status, _, err) = run(&["judge", "--eval", path], "");
    assert!(!status.success());
    assert!(err.contains("line 2"), "{err}");
}
