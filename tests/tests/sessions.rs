//! Many agent sessions on one machine (issue 17, point 8): 300 real
//! `agentmesh mcp` processes, each driven by rmcp's MCP client as an agent
//! would, all attached to the daemon at once, each with one connection;
//! beside them `status`, `send` and a hook still work, and every session
//! is pushed the message sent to their mailbox.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::Path;
use std::time::Instant;

use agentmesh_tests::mcp::Session;
use agentmesh_tests::{DEADLINE, Node};
use serde_json::json;

/// The sessions attached at once: more than the daemon's client slots
/// before issue 17 (256, two per session) held.
const SESSIONS: usize = 300;

/// Sessions started at once (each is a process and a handshake; the
/// machines these run on have two cores).
const BATCH: usize = 20;

/// The inodes of the sockets process `pid` holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect()
}

/// The client connections the daemon of `node` holds on its local socket
/// (its own ends, which carry the socket's path; the listener not
/// counted).
fn daemon_clients(node: &Node) -> usize {
    let path = node.home().join("run/agentmesh.sock");
    let path = path.to_string_lossy();
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let on_path: std::collections::HashSet<&str> = table
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(7) == Some(&path.as_ref())).then(|| cols[6])
        })
        .collect();
    let held = socket_inodes(node.pid() as u32)
        .iter()
        .filter(|i| on_path.contains(i.as_str()))
        .count();
    held.saturating_sub(1)
}

/// Process `pid`'s proportional set size, in KiB.
fn pss_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn hook(node: &Node, cwd: &Path) -> String {
    node.hook(("claude", "PostToolUse"), cwd, "s", None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_agent_sessions_leave_room_for_commands_and_hooks() {
    let mut solo = Node::new("solo");
    solo.start();
    let dir = solo.home().join("work").join("crowd");
    std::fs::create_dir_all(&dir).unwrap();
    solo.ok(&["allow", dir.to_str().unwrap()]);

    let started = Instant::now();
    let mut sessions: Vec<Session> = Vec::with_capacity(SESSIONS);
    while sessions.len() < SESSIONS {
        let batch = (sessions.len()..SESSIONS.min(sessions.len() + BATCH)).map(|i| {
            let session = format!("s{i}");
            let dir = dir.clone();
            let solo = &solo;
            async move { Session::spawn(solo, &dir, "claude-code", &["--session", &session]).await }
        });
        sessions.extend(futures::future::join_all(batch).await);
    }
    eprintln!("{SESSIONS} MCP sessions started in {:?}", started.elapsed());

    // Beside them: a command, a send, a hook.
    let t = Instant::now();
    assert_eq!(solo.status()["name"], "solo");
    let id = solo.send("crowd@", "to every session at once");
    eprintln!(
        "status and send beside {SESSIONS} sessions: {:?}",
        t.elapsed()
    );
    // Every session is attached for events: each is pushed it.
    let t = Instant::now();
    for s in &mut sessions {
        let p = s
            .next_push(DEADLINE)
            .await
            .unwrap_or_else(|| panic!("session {} was pushed nothing", s.pid));
        assert_eq!(p.params["meta"]["id"], id.as_str());
    }
    eprintln!("pushed to all {SESSIONS}: {:?}", t.elapsed());
    let out = tokio::task::block_in_place(|| hook(&solo, &dir));
    assert!(out.contains(&id), "{out}");
    // A tool call works in each, on the connection its pushes came on:
    // one connection per session (two before issue 17).
    for s in &sessions {
        let r = s.ok("check_inbox", json!({"peek": true})).await;
        assert_eq!(r["unread"], 0, "{r}");
    }
    let clients = daemon_clients(&solo);
    assert_eq!(clients, SESSIONS, "the daemon's client connections");
    let pids: Vec<u32> = sessions.iter().map(|s| s.pid).collect();
    let pss: u64 = pids.iter().map(|&p| pss_kib(p)).sum();
    eprintln!(
        "{SESSIONS} sessions: {clients} connections to the daemon; {} MiB PSS in all, {} KiB each",
        pss / 1024,
        pss / SESSIONS as u64,
    );
    assert_eq!(solo.status()["name"], "solo");
    for s in sessions {
        s.close().await;
    }
    solo.stop();
}
