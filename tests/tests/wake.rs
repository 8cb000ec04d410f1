//! Waking idle sessions (issue 20, points 1 and 2), with real daemons:
//! `allow PATH --wake claude` and `wake set` turn it on for a folder's
//! mailbox, `wake test` prints the exact least-privilege command a run
//! would start (and runs nothing), and custody follows the hooks: a
//! session is live from its SessionStart to its SessionEnd, no run would
//! resume a live one, and a run's own hooks report no session and take
//! no mail.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::PathBuf;

use agentmesh_node::api::WhoKind;
use agentmesh_tests::{ApiClient, Node, team, wait_for, who};
use serde_json::{Value, json};

/// A session id in the agents' own shape (a UUID), as their hooks report.
const SESS_1: &str = "5e55a000-0000-4000-8000-000000000001";

fn folder(node: &Node, name: &str) -> PathBuf {
    let dir = node.home().join("work").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// The value after `flag` in `args`.
fn after<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

fn sessions(node: &Node, mailbox: &str, agent: &str) -> Vec<Value> {
    // `wake set` to what it is answers the setting with its sessions.
    node.json(&["wake", "set", mailbox, agent])["sessions"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn wake_test_prints_the_least_privilege_command_and_custody_follows_the_hooks() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    a.ok(&["trust", "bravo"]);
    b.ok(&["trust", "alpha"]);
    let dir = folder(&b, "api");
    let allowed = b.json(&[
        "allow",
        dir.to_str().unwrap(),
        "--mailbox",
        "api",
        "--wake",
        "claude",
    ]);
    assert_eq!(allowed["mailbox"], "api", "{allowed}");
    assert_eq!(allowed["wake"]["wake"], "claude", "{allowed}");
    assert_eq!(allowed["wake"]["budget"], 20, "{allowed}");

    // No mail yet, no session reported: the command a run would start
    // is a new session's, and nothing would run.
    let t = b.json(&["wake", "test", "api"]);
    assert_eq!(t["would_run"], false, "{t}");
    assert!(
        t["why_not"].as_str().unwrap().contains("no unread mail"),
        "{t}"
    );
    let c = &t["command"];
    assert_eq!(c["program"], "claude", "{t}");
    assert_eq!(c["cwd"], dir.to_str().unwrap(), "{t}");
    assert!(c["resume"].is_null(), "{t}");
    let args = strings(&c["args"]);
    assert_eq!(args[0], "-p", "{args:?}");
    assert!(!args.iter().any(|a| a.starts_with("--resume")), "{args:?}");
    assert_eq!(after(&args, "--output-format"), Some("json"));
    assert!(args.contains(&"--restricted".to_owned()), "{args:?}");
    assert_eq!(after(&args, "--tools"), Some("Read,Grep,Glob"));
    assert_eq!(
        after(&args, "--allowedTools"),
        Some(
            "Read,Grep,Glob,mcp__agentmesh__reply,mcp__agentmesh__check_inbox,mcp__agentmesh__list_team"
        )
    );
    assert_eq!(after(&args, "--permission-prompts"), Some("none"));
    assert_eq!(after(&args, "--max-budget-usd"), Some("0.50"));
    for a in &args {
        assert!(!a.starts_with("--dangerously"), "{args:?}");
        assert!(!a.contains("bypassPermissions"), "{args:?}");
    }
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_owned(),
                p[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        env.contains(&("AGENTMESH_HOME".into(), b.home().display().to_string())),
        "{env:?}"
    );
    assert!(
        env.iter().any(|(k, _)| k == "AGENTMESH_WAKE_RUN"),
        "{env:?}"
    );
    // The text form names the command and says nothing ran.
    let text = b.ok(&["wake", "test", "api"]);
    assert!(text.contains("nothing was run"), "{text}");
    assert!(text.contains("--restricted"), "{text}");

    // Its person opens a session there: live, so mail is the hooks' to
    // deliver and no run would resume it.
    b.hook(("claude", "SessionStart"), &dir, SESS_1, None);
    let s = sessions(&b, "api", "claude");
    assert_eq!(
        (s.len(), &s[0]["id"], &s[0]["live"]),
        (1, &json!(SESS_1), &json!(true)),
        "{s:?}"
    );
    let id = a.send("api@bravo", "which port does the API listen on?");
    wait_for("the question in api's inbox", || {
        b.json(&["inbox", "--mailbox", "api"])
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id.as_str())
            .cloned()
    });
    let t = b.json(&["wake", "test", "api"]);
    assert_eq!(t["would_run"], false, "{t}");
    assert!(t["why_not"].as_str().unwrap().contains("live"), "{t}");
    assert_eq!(t["command"]["resume"], SESS_1, "{t}");
    assert!(
        strings(&t["command"]["args"]).contains(&format!("--resume={SESS_1}")),
        "{t}"
    );

    // A run agentmesh started reports no session and takes no mail (its
    // prompt shows it, marked read only when the run exits 0).
    let out = b.hook(("claude", "SessionStart"), &dir, "run-sess", Some("run-1"));
    assert_eq!(out.trim(), "", "a run's hook injects nothing");
    let s = sessions(&b, "api", "claude");
    assert_eq!(s.len(), 1, "a run's session is not its person's: {s:?}");

    // Its person closes it: ended at once, and the mail waiting would
    // wake it, resuming that session, with the framed question.
    let out = b.hook(("claude", "SessionEnd"), &dir, SESS_1, None);
    assert_eq!(out.trim(), "", "nothing reaches a session that ended");
    let s = sessions(&b, "api", "claude");
    assert_eq!(
        (&s[0]["live"], s[0]["ended"].is_string()),
        (&json!(false), true),
        "{s:?}"
    );
    let t = b.json(&["wake", "test", "api"]);
    assert_eq!(t["would_run"], true, "{t}");
    assert!(t["why_not"].is_null(), "{t}");
    assert_eq!(strings(&t["messages"]), vec![id.clone()], "{t}");
    let args = strings(&t["command"]["args"]);
    assert!(args.contains(&format!("--resume={SESS_1}")), "{args:?}");
    let prompt = args.last().unwrap();
    assert!(
        prompt.contains("which port does the API listen on?"),
        "{prompt}"
    );
    assert!(prompt.contains("reply"), "{prompt}");
    // `wake test` marked nothing read.
    let unread = b.json(&["inbox", "--mailbox", "api", "--unread"]);
    assert_eq!(unread.as_array().unwrap().len(), 1, "{unread}");

    // A session's MCP server attached to the mailbox: push delivers, and
    // nothing would run until it leaves.
    let mcp = ApiClient::attach(&b, who(WhoKind::Agent, "claude-code"), Some("api"));
    let t = wait_for("wake test to see the attached session", || {
        let t = b.json(&["wake", "test", "api"]);
        (t["would_run"] == false).then_some(t)
    });
    assert!(t["why_not"].as_str().unwrap().contains("attached"), "{t}");
    drop(mcp);
    wait_for("wake test to see it left", || {
        (b.json(&["wake", "test", "api"])["would_run"] == true).then_some(())
    });

    // Codex: the flags of `exec` come before `resume`; no session of its
    // own was reported, so a new one.
    b.ok(&["wake", "set", "api", "codex"]);
    let t = b.json(&["wake", "test", "api"]);
    assert_eq!(t["command"]["program"], "codex", "{t}");
    let args = strings(&t["command"]["args"]);
    assert_eq!(
        &args[..5],
        [
            "exec",
            "--sandbox",
            "read-only",
            "--skip-git-repo-check",
            args[4].as_str()
        ],
        "{args:?}"
    );
    assert!(!args.contains(&"resume".to_owned()), "{args:?}");
    const CX_7: &str = "c0de0000-0000-4000-8000-000000000007";
    b.hook(("codex", "SessionStart"), &dir, CX_7, None);
    b.hook(("codex", "UserPromptSubmit"), &dir, CX_7, None);
    let t = b.json(&["wake", "test", "api"]);
    assert!(t["why_not"].as_str().unwrap().contains("live"), "{t}");
    let args = strings(&t["command"]["args"]);
    assert_eq!(
        &args[..8],
        [
            "exec",
            "--sandbox",
            "read-only",
            "--skip-git-repo-check",
            "--json",
            "resume",
            "--",
            CX_7
        ]
    );
    // A session a hook reported in another shape is live all the same
    // (custody), but never resumed: it could be read as a flag.
    b.hook(("codex", "SessionStart"), &dir, "--last", None);
    let t = b.json(&["wake", "test", "api"]);
    assert!(t["why_not"].as_str().unwrap().contains("live"), "{t}");
    let args = strings(&t["command"]["args"]);
    assert!(!args.contains(&"resume".to_owned()), "{args:?}");
    assert!(!args.contains(&"--last".to_owned()), "{args:?}");

    // Off: nothing would run, and the setting says so across a restart.
    b.ok(&["wake", "set", "api", "off", "--budget", "3"]);
    let mut b = b;
    b.stop();
    b.start();
    let t = b.json(&["wake", "test", "api"]);
    assert_eq!(
        (t["wake"].is_null(), &t["would_run"]),
        (true, &json!(false)),
        "{t}"
    );
    assert!(
        t["why_not"].as_str().unwrap().contains("wake is off"),
        "{t}"
    );
    let w = b.json(&["wake", "set", "api", "off"]);
    assert_eq!(w["budget"], 3, "a budget a person gave sticks: {w}");
}

#[test]
fn wake_refuses_what_it_cannot_do_saying_what_to_do() {
    let [n] = team([("solo", "Sol")]);
    let err = n.fails(&["wake", "set", "@", "claude", "--json"]);
    assert!(err.contains("bad_mailbox"), "{err}");
    let err = n.fails(&["wake", "set", "nosuch", "claude", "--json"]);
    assert!(err.contains("no_mailbox"), "{err}");
    let dir = folder(&n, "m");
    n.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "m"]);
    let err = n.fails(&[
        "wake",
        "set",
        "m",
        "claude",
        "--max-budget-usd",
        "0",
        "--json",
    ]);
    assert!(
        err.contains("bad_input") && err.contains("--max-budget-usd"),
        "{err}"
    );
    let err = n.fails(&["wake", "set", "m", "claude", "--budget", "99999", "--json"]);
    assert!(err.contains("--budget"), "{err}");
    // Nothing was set by the refusals.
    let t = n.json(&["wake", "test", "m"]);
    assert!(t["wake"].is_null(), "{t}");
}
