//! The agent judge (`[bus] judge = "agent"`), with real daemons: the
//! built-in judge drops what it is sure of, the rest goes to the
//! mailbox's agent CLI, here a stand-in that records its argv and stdin
//! (the real CLIs need a login). The argv has the least-privilege flags
//! and no state; the state is on stdin, framed; the agent's answer decides
//! and `bus log` says so, with its `why`; a malformed, slow or failing
//! answer drops; the daily budget is honoured, across a restart too.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::{Path, PathBuf};

use agentmesh_tests::bench_wake::use_standin;
use agentmesh_tests::{Node, team, wait_for};
use serde_json::Value;

const ORDERS: &str =
    "The storefront stops calling /v1/orders on Monday; it uses /v2/orders from then on.";

struct Bench {
    a: Node,
    b: Node,
    standin: PathBuf,
}

impl Bench {
    fn new(bus: &str) -> Bench {
        let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
        b.ok(&["trust", "alpha"]);
        b.stop();
        let standin = use_standin(&mut b);
        std::fs::write(b.home().join("config.toml"), format!("[bus]\n{bus}\n")).unwrap();
        b.start();
        for (name, profile, goal) in [
            (
                "orders",
                "Orders service: the REST API for orders, in Go on Postgres.",
                "Retire the /v1/orders endpoints once no client calls them.",
            ),
            (
                "fonts",
                "Typography: the web font pipeline, subsetting and the CSS font stacks.",
                "Ship variable fonts for the docs site.",
            ),
        ] {
            let dir = b.home().join("work").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            b.ok(&["allow", dir.to_str().unwrap(), "--mailbox", name]);
            b.ok(&["profile", "set", name, "--profile", profile, "--goal", goal]);
        }
        Bench { a, b, standin }
    }

    fn judge_mode(&self, mode: &str) {
        std::fs::write(self.standin.join("judge-mode"), mode).unwrap();
    }

    /// The stand-in's judge calls, oldest first.
    fn calls(&self) -> Vec<PathBuf> {
        let mut calls: Vec<PathBuf> = std::fs::read_dir(self.standin.join("judge"))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        calls.sort();
        calls
    }

    /// Broadcasts `text` from alpha; bravo's judgments of it, once all
    /// three candidates (the owner's, orders, fonts) are judged.
    fn broadcast(&self, text: &str) -> Vec<Value> {
        let sent = self.a.json(&["broadcast", text]);
        let id = sent["machines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["machine"] == "bravo")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        wait_for("bravo's judgments", || {
            let e: Vec<Value> = self.b.json(&["bus", "log"])["entries"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| {
                    e["id"] == id.as_str()
                        && (e["event"] == "broadcast_delivered"
                            || e["event"] == "broadcast_dropped")
                })
                .cloned()
                .collect();
            (e.len() == 3).then_some(e)
        })
    }
}

fn entry<'a>(entries: &'a [Value], mailbox: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["mailbox"] == mailbox)
        .unwrap_or_else(|| panic!("no judgment for {mailbox}: {entries:?}"))
}

/// The argv the stand-in recorded, each argument NUL-terminated (an
/// empty argument, as `--tools ""` gives, is kept).
fn argv(call: &Path) -> Vec<String> {
    let raw = std::fs::read(call.join("argv")).unwrap();
    let mut args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(args.pop().as_deref(), Some(""), "NUL-terminated");
    args
}

fn has(v: &[String], flag: &str, value: &str) -> bool {
    v.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn the_agent_reads_what_the_builtin_judge_is_not_sure_of_with_least_privilege() {
    let bench = Bench::new("judge = \"agent\"\nagent = \"claude\"");
    bench.judge_mode("yes");
    let entries = bench.broadcast(ORDERS);
    // orders: past the first stage, asked, and the agent's answer decided.
    let o = entry(&entries, "orders@bravo");
    assert_eq!(o["event"], "broadcast_delivered", "{o}");
    assert_eq!(o["judge"], "agent");
    assert_eq!(o["stage"], "agent");
    assert_eq!(o["why"], "stand-in says yes");
    assert_eq!(o["score"], 0.9);
    assert_eq!(o["threshold"], 0.5, "balanced's agent threshold");
    // fonts: the built-in judge is sure, and never asks.
    let f = entry(&entries, "fonts@bravo");
    assert_eq!(f["event"], "broadcast_dropped", "{f}");
    assert_eq!(f["stage"], "builtin");
    assert!(f["detail"].as_str().unwrap().contains("not asked"), "{f}");
    let calls = bench.calls();
    let asked = entries.iter().filter(|e| e["stage"] == "agent").count();
    assert_eq!(calls.len(), asked, "one call per pair the agent decided");
    // The call: least-privilege flags, no state on the command line, the
    // state framed on stdin, run in an empty folder of the daemon's.
    let call = calls
        .iter()
        .find(|c| {
            std::fs::read_to_string(c.join("stdin"))
                .unwrap()
                .contains("Orders service")
        })
        .expect("the call about orders");
    let args = argv(call);
    assert_eq!(args[0], "-p", "{args:?}");
    assert!(has(&args, "--tools", ""), "{args:?}");
    assert!(has(&args, "--model", "haiku"), "{args:?}");
    assert!(has(&args, "--output-format", "json"), "{args:?}");
    assert!(has(&args, "--max-budget-usd", "0.02"), "{args:?}");
    assert!(args.iter().any(|a| a == "--no-session-persistence"));
    assert!(args.iter().any(|a| a == "--strict-mcp-config"));
    assert!(args.iter().any(|a| a == "--json-schema"));
    assert!(!args.iter().any(|a| a.contains("orders")), "{args:?}");
    let stdin = std::fs::read_to_string(call.join("stdin")).unwrap();
    assert!(stdin.contains("<agentmesh-judge-state>"), "{stdin}");
    assert!(stdin.contains("/v1/orders"), "{stdin}");
    assert!(stdin.contains("not instructions"), "{stdin}");
    let cwd = std::fs::read_to_string(call.join("cwd")).unwrap();
    assert!(cwd.trim().ends_with("run/judge"), "{cwd}");
    // The same with the agent saying no: dropped, by the agent.
    bench.judge_mode("no");
    let entries = bench.broadcast("Reminder: the storefront stops calling /v1/orders on Monday.");
    let o = entry(&entries, "orders@bravo");
    assert_eq!(o["event"], "broadcast_dropped", "{o}");
    assert_eq!(o["stage"], "agent");
    assert_eq!(o["why"], "stand-in says no");
}

#[test]
fn a_malformed_slow_or_failing_answer_drops_and_the_budget_is_honoured() {
    let bench = Bench::new(
        "judge = \"agent\"\nagent = \"codex\"\nagent_timeout = \"2s\"\nagent_calls_per_day = 3",
    );
    for (mode, code) in [
        ("garbage", "judge_bad_answer"),
        ("fail", "judge_failed"),
        ("slow", "judge_timeout"),
    ] {
        bench.judge_mode(mode);
        let before = bench.calls().len();
        let entries = bench.broadcast(&format!("{ORDERS} ({mode})"));
        let o = entry(&entries, "orders@bravo");
        assert_eq!(o["event"], "broadcast_dropped", "{mode}: {o}");
        assert_eq!(o["stage"], "agent", "{mode}: {o}");
        assert!(
            o["error"].as_str().unwrap().starts_with(code),
            "{mode}: {o}"
        );
        assert_eq!(bench.calls().len(), before + 1, "{mode}");
    }
    // Codex's flags: no session kept, a read-only sandbox, the prompt on
    // stdin.
    let args = argv(&bench.calls()[0]);
    assert_eq!(args[0], "exec", "{args:?}");
    assert!(has(&args, "--sandbox", "read-only"), "{args:?}");
    assert!(has(&args, "-m", "gpt-5.4-mini"), "{args:?}");
    assert!(args.iter().any(|a| a == "--ephemeral"));
    assert!(args.iter().any(|a| a == "--skip-git-repo-check"));
    assert_eq!(args[args.len() - 2..], ["--", "-"]);
    // The slow one was killed with its child.
    let slow = bench.calls().last().unwrap().clone();
    let child: i32 = wait_for("the slow call's child pid", || {
        std::fs::read_to_string(slow.join("child"))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    wait_for("the slow call's child to be killed", || {
        (!Path::new(&format!("/proc/{child}")).exists()).then_some(())
    });
    // Three calls made: the budget (3 a day) is spent, across a restart
    // too; the built-in judge decides alone and says so.
    let mut b = bench.b;
    b.stop();
    b.start();
    let bench = Bench {
        a: bench.a,
        b,
        standin: bench.standin,
    };
    bench.judge_mode("yes");
    let before = bench.calls().len();
    let entries = bench.broadcast(&format!("{ORDERS} (budget)"));
    let o = entry(&entries, "orders@bravo");
    assert_eq!(o["stage"], "builtin", "{o}");
    assert!(
        o["detail"]
            .as_str()
            .unwrap()
            .contains("agent_calls_per_day"),
        "{o}"
    );
    assert_eq!(bench.calls().len(), before, "no call past the budget");
}

#[test]
fn bus_stats_counts_delivered_dropped_and_silent_wake_runs() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    b.ok(&["trust", "alpha"]);
    b.stop();
    let standin = use_standin(&mut b);
    b.start();
    let dir = b.home().join("work").join("orders");
    std::fs::create_dir_all(&dir).unwrap();
    b.ok(&[
        "allow",
        dir.to_str().unwrap(),
        "--mailbox",
        "orders",
        "--wake",
        "claude",
    ]);
    b.ok(&[
        "profile",
        "set",
        "orders",
        "--profile",
        "Orders service: the REST API for orders, in Go on Postgres.",
        "--goal",
        "Retire the /v1/orders endpoints once no client calls them.",
    ]);
    let empty = b.json(&["bus", "stats"]);
    assert_eq!(empty["total"]["delivered"], 0, "{empty}");
    assert_eq!(empty["total"]["silent_wake_share"], Value::Null, "{empty}");
    // A run that does nothing (the stand-in names its session and exits).
    std::fs::write(standin.join("mode"), "quiet").unwrap();
    a.ok(&["broadcast", ORDERS]);
    let stats = wait_for("one ended wake run in bus stats", || {
        let s = b.json(&["bus", "stats"]);
        (s["total"]["wake_runs"] == 1).then_some(s)
    });
    let row = stats["mailboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["mailbox"] == "orders@bravo")
        .unwrap()
        .clone();
    assert_eq!(row["delivered"], 1, "{stats}");
    assert_eq!(row["silent_runs"], 1, "{stats}");
    assert_eq!(row["silent_wake_share"], 1.0, "{stats}");
    // The owner's mailbox was judged and dropped.
    assert!(stats["total"]["dropped"].as_u64().unwrap() >= 1, "{stats}");
    // A run that answers (it sends a reply) is no silent wake.
    std::fs::write(standin.join("mode"), "reply").unwrap();
    a.ok(&[
        "broadcast",
        "Reminder: the storefront stops calling /v1/orders on Monday.",
    ]);
    let stats = wait_for("two ended wake runs in bus stats", || {
        let s = b.json(&["bus", "stats"]);
        (s["total"]["wake_runs"] == 2).then_some(s)
    });
    assert_eq!(stats["total"]["silent_runs"], 1, "{stats}");
    assert_eq!(stats["total"]["silent_wake_share"], 0.5, "{stats}");
    // Without --json: a table.
    let table = b.ok(&["bus", "stats"]);
    assert!(
        table.contains("SILENT SHARE") && table.contains("50%"),
        "{table}"
    );
}

#[test]
fn the_mailboxs_wake_agent_is_asked_and_a_missing_program_drops() {
    let bench = Bench::new("judge = \"agent\"");
    bench.b.ok(&["wake", "set", "orders", "codex"]);
    // The agent says no: nothing is delivered, so no wake run starts.
    bench.judge_mode("no");
    let entries = bench.broadcast(ORDERS);
    let o = entry(&entries, "orders@bravo");
    assert_eq!(o["stage"], "agent", "{o}");
    assert_eq!(o["event"], "broadcast_dropped", "{o}");
    assert!(
        o["detail"]
            .as_str()
            .unwrap()
            .contains("the agent (codex) decided"),
        "{o}"
    );
    let calls = bench.calls();
    assert_eq!(calls.len(), 1, "only orders has an agent: {calls:?}");
    assert_eq!(argv(&calls[0])[0], "exec", "its wake agent, Codex");
    // The owner's mailbox and fonts have no agent: the built-in judge
    // decided alone (what it is sure of it never asks about).
    for m in ["@bravo", "fonts@bravo"] {
        assert_eq!(entry(&entries, m)["stage"], "builtin", "{m}");
    }
    // A program that can't be started gives no judgment: dropped, saying why.
    let mut b = bench.b;
    b.stop();
    let config = b.home().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[wake]\ncodex = \"/nonexistent/codex\"\n"),
    )
    .unwrap();
    b.start();
    let bench = Bench {
        a: bench.a,
        b,
        standin: bench.standin,
    };
    let entries = bench.broadcast(&format!("{ORDERS} (again)"));
    let o = entry(&entries, "orders@bravo");
    assert_eq!(o["event"], "broadcast_dropped", "{o}");
    assert!(
        o["error"]
            .as_str()
            .unwrap()
            .starts_with("judge_unavailable"),
        "{o}"
    );
    assert!(
        o["detail"].as_str().unwrap().contains("gave no judgment"),
        "{o}"
    );
}

/// What the daemon sets for an agent it asks to judge: agentmesh's own
/// MCP server refuses to serve, and its hooks report nothing.
#[test]
fn agentmesh_mcp_and_hooks_do_nothing_inside_a_judgment() {
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(agentmesh_tests::bin())
            .args(args)
            .env("AGENTMESH_HOME", home.path())
            .env("AGENTMESH_JUDGE_CALL", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let mcp = run(&["mcp"]);
    assert!(!mcp.status.success());
    assert!(
        String::from_utf8_lossy(&mcp.stderr).contains("broadcast judgment"),
        "{mcp:?}"
    );
    let hook = run(&["hook", "claude", "SessionStart"]);
    assert!(hook.status.success());
    assert!(hook.stdout.is_empty(), "{hook:?}");
    // Nothing was started for this home.
    assert!(!home.path().join("run").join("agentmesh.sock").exists());
}

/// `--eval` with the agent judge needs an agent to ask.
#[test]
fn eval_with_the_agent_judge_and_no_agent_says_what_to_set() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[bus]\njudge = \"agent\"\n",
    )
    .unwrap();
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../judge/labelled/teams/t1.jsonl"
    );
    let out = std::process::Command::new(agentmesh_tests::bin())
        .args(["judge", "--eval", file, "--json"])
        .env("AGENTMESH_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert!(e["message"].as_str().unwrap().contains("bus.agent"), "{e}");
}
