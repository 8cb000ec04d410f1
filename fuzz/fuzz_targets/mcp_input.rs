//! The MCP server's input: an agent's lines through the line filter,
//! rmcp's JSON-RPC and the tools' typed arguments, with no daemon
//! running (tools get as far as the daemon). Whatever came in, every line
//! the server writes is a JSON-RPC message.
#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use agentmesh_node::home::Home;
use libfuzzer_sys::fuzz_target;

/// An empty home: no configuration, no daemon, no mailboxes.
static HOME: LazyLock<PathBuf> = LazyLock::new(|| {
    // One folder for every run: nothing is written in it (no daemon).
    let dir = std::env::temp_dir().join("agentmesh-fuzz-mcp");
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
});

fuzz_target!(|data: &[u8]| {
    let home = Home::at(HOME.join("home"));
    let out = agentmesh::mcp_transcript(&home, HOME.clone(), data).expect("the server runs");
    assert!(out.is_empty() || out.ends_with(b"\n"), "a line cut short");
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let message: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "the server wrote a line that is not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {message}");
    }
});
