//! `agentmesh-bench wake`: from a send to the reply of the run it woke.
//!
//! ```text
//!  alpha ── send ──> bravo: mailbox api, wake on, no session open
//!                      └─ run: the stand-in `claude` on the daemon's PATH
//!                           └─ agentmesh send --reply-to ── alpha's inbox
//! ```
//!
//! The agent CLI is a stand-in script (the real ones need an account and
//! a model's seconds): what is measured is agentmesh's part, from a send
//! returning its id to the answer in the sender's inbox, one message at a
//! time (each run ends before the next send).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::bench_mcp::percentile;
use crate::{Node, bin, team, wait_for_within};

/// The stand-in for `claude` and `codex`. What it does is chosen per run
/// by the file `mode` in its record folder (`$STANDIN_DIR`). Asked as a
/// broadcast judge (Claude Code with `--json-schema`, Codex with
/// `--ephemeral`), it records its argv, stdin, cwd and pid in
/// `judge/CALL/` and answers as the file `judge-mode` says: `yes` (p 0.9),
/// `no` (p 0.05), `garbage` (p 7), `slow` (30 s, with a child), `fail`.
pub const STANDIN: &str = r#"#!/bin/sh
d="$STANDIN_DIR"
case " $* " in
  *" --json-schema "*|*" --ephemeral "*)
    j="$d/judge/$(date +%s%N)-$$"
    mkdir -p "$j"
    for a; do printf '%s\0' "$a"; done > "$j/argv"
    pwd > "$j/cwd"
    cat > "$j/stdin"
    echo $$ > "$j/pid"
    jm=$(cat "$d/judge-mode" 2>/dev/null || echo yes)
    case "$jm" in
      yes) p=0.9 ;;
      no) p=0.05 ;;
      garbage) p=7 ;;
      slow)
        sleep 30 &
        echo $! > "$j/child"
        sleep 30 ;;
      fail)
        echo "stand-in judge failing on purpose" >&2
        exit 4 ;;
    esac
    case "$(basename "$0")" in
      claude) printf '{"type":"result","subtype":"success","is_error":false,"result":"","structured_output":{"p":%s,"why":"stand-in says %s"}}\n' "$p" "$jm" ;;
      *) printf 'thinking\n{"p": %s, "why": "stand-in says %s"}\n' "$p" "$jm" ;;
    esac
    exit 0 ;;
esac
run="$AGENTMESH_WAKE_RUN"
r="$d/runs/$run"
mkdir -p "$r"
for a; do printf '%s\0' "$a"; done > "$r/argv"
for a; do last="$a"; done
pwd > "$r/cwd"
cat > "$r/stdin"
echo $$ > "$r/pid"
echo "$AGENTMESH_HOME" > "$r/home"
mode=$(cat "$d/mode" 2>/dev/null || echo reply)
echo "$mode" > "$r/mode"
ids=$(printf '%s' "$last" | grep -o ' id="[0-9a-f]*"' | sed 's/ id="\(.*\)"/\1/')
from=$(printf '%s' "$last" | grep -o 'from="[^"]*"' | head -n 1 | sed 's/from="\(.*\)"/\1/')
# The session this run names (a UUID, as the agents' own are), on its
# agent's own channel: Codex's `--json` thread.started event, Claude
# Code's JSON result.
session="00000000-0000-4000-8000-$run"
case "$(basename "$0"):$mode" in
  codex:says:*) ;;
  codex:*) printf '{"type":"thread.started","thread_id":"%s"}\n' "$session" ;;
esac
named() {
  case "$(basename "$0")" in
    claude) echo '{"type":"result","subtype":"success","session_id":"'"$session"'","result":"ok"}' ;;
  esac
}
answer() {
  for id in $ids; do
    "$AGENTMESH_BIN" send --reply-to "$id" "" "answered by run $run" --json >> "$r/sent" 2>&1
  done
  named
}
case "$mode" in
  reply) answer ;;
  quiet) named ;;
  hold)
    touch "$r/holding"
    while [ ! -e "$d/release" ]; do sleep 0.05; done
    answer ;;
  hang)
    sleep 300 &
    echo $! > "$r/child"
    sleep 300 ;;
  fail)
    echo "stand-in failing on purpose" >&2
    exit 3 ;;
  asks)
    for i in 1 2 3 4; do
      "$AGENTMESH_BIN" send --ask --from api "$from" "question $i" --json >> "$r/asks.out" 2>&1
      echo "$i $?" >> "$r/asks"
    done
    answer ;;
  hook)
    printf '{"session_id":"sess-x","cwd":"%s","hook_event_name":"UserPromptSubmit"}' "$PWD" \
      | "$AGENTMESH_BIN" hook claude UserPromptSubmit > "$r/hook"
    "$AGENTMESH_BIN" send --from api "$from" "a new message after the hook" --json > "$r/sent" 2>&1
    named ;;
  says:*)
    # What a model talked into it by a peer's mail prints, as its final
    # message on stdout; it exits 0 naming no session of its own.
    word="${mode#says:}"
    echo "Done. session id: $word"
    echo "session id: $word"
    printf '{"session_id":"%s","type":"result"}\n' "$word" ;;
esac
"#;

/// Installs the stand-in as `claude` and `codex` for `node` (in
/// `HOME/standin/bin`) and gives its daemon, from its next start, the
/// PATH that finds them first and where the stand-in records its runs:
/// that folder, which it answers.
pub fn use_standin(node: &mut Node) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = node.home().join("standin");
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    for name in ["claude", "codex"] {
        let p = bin_dir.join(name);
        std::fs::write(&p, STANDIN).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    node.daemon_env = vec![
        ("PATH".into(), path),
        ("STANDIN_DIR".into(), dir.display().to_string()),
        ("AGENTMESH_BIN".into(), bin().display().to_string()),
    ];
    dir
}

/// The figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WakeFigures {
    /// Messages sent, each waking one run.
    pub runs: usize,
    /// From `send` returning to the reply in the sender's inbox: median.
    pub reply_p50_ms: f64,
    /// ... 90th percentile.
    pub reply_p90_ms: f64,
    /// ... the slowest.
    pub reply_max_ms: f64,
}

/// Sends `runs` messages, one at a time, each to an idle mailbox with
/// wake on, and times each until its woken run's reply arrives.
pub fn run(runs: usize) -> WakeFigures {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    a.ok(&["trust", "bravo"]);
    b.ok(&["trust", "alpha"]);
    b.stop();
    use_standin(&mut b);
    // As many wakes as the run needs, and more.
    b.start();
    let dir = b.home().join("work").join("api");
    std::fs::create_dir_all(&dir).unwrap();
    let budget = (runs + 10).to_string();
    b.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "api"]);
    b.ok(&["wake", "set", "api", "claude", "--budget", &budget]);
    let mut took = Vec::with_capacity(runs);
    for i in 0..runs {
        let id = a.send("api@bravo", &format!("question {i}"));
        let sent = Instant::now();
        wait_for_within("the woken run's reply", Duration::from_secs(60), || {
            reply_arrived(&a, &id).then_some(())
        });
        took.push(sent.elapsed().as_secs_f64() * 1000.0);
        // The run ends before the next send (one run per mailbox).
        wait_for_within("the run to end", Duration::from_secs(60), || {
            let l = b.json(&["wake", "list"]);
            let runs = l["runs"].as_array().unwrap();
            (runs.len() > i && runs.iter().all(|r| r["status"] != "running")).then_some(())
        });
    }
    took.sort_by(f64::total_cmp);
    WakeFigures {
        runs,
        reply_p50_ms: percentile(&took, 0.5),
        reply_p90_ms: percentile(&took, 0.9),
        reply_max_ms: took.last().copied().unwrap_or(0.0),
    }
}

fn reply_arrived(a: &Node, id: &str) -> bool {
    a.json(&["inbox"])
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["in_reply_to"] == id)
}
