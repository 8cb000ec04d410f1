//! The command line's contract: the commands and flags users' scripts rely
//! on. (This test also makes `cargo test --workspace` build the real
//! `agentmesh` binary, which the integration tests in `tests/` run.)

use std::process::Command;

fn agentmesh(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .args(args)
        .output()
        .expect("the agentmesh binary runs");
    assert!(
        out.status.success(),
        "agentmesh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn every_command_of_the_contract_exists() {
    let help = agentmesh(&["--help"]);
    for command in [
        "daemon", "up", "down", "init", "status", "peers", "doctor", "config", "team", "invite",
        "join", "admit", "revoke", "connect", "setup",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(command)),
            "`agentmesh --help` does not list {command}:\n{help}"
        );
    }
    let flags = [
        (
            vec!["daemon", "--help"],
            vec!["--listen", "--no-mdns", "--home", "--verbose"],
        ),
        (
            vec!["up", "--help"],
            vec!["--listen", "--no-mdns", "--save", "--verbose"],
        ),
        (vec!["daemon", "--help"], vec!["--save"]),
        (
            vec!["config", "set", "--help"],
            vec!["agents.max_hop", "--json"],
        ),
        (vec!["config", "unset", "--help"], vec!["--json"]),
        (vec!["init", "--help"], vec!["--name"]),
        (vec!["invite", "--help"], vec!["--ttl", "--json"]),
        (vec!["join", "--help"], vec!["--name", "--owner"]),
        (vec!["team", "create", "--help"], vec!["--owner", "--json"]),
        (vec!["team", "show", "--help"], vec!["--json"]),
        (vec!["peers", "--help"], vec!["--json"]),
        (vec!["status", "--help"], vec!["--json"]),
        (
            vec!["setup", "--help"],
            vec![
                "claude",
                "codex",
                "--scope",
                "--dry-run",
                "--uninstall",
                "--json",
            ],
        ),
    ];
    for (args, wanted) in flags {
        let text = agentmesh(&args);
        for flag in wanted {
            assert!(
                text.contains(flag),
                "`agentmesh {}` lacks {flag}:\n{text}",
                args.join(" ")
            );
        }
    }
    assert!(agentmesh(&["team", "--help"]).contains("leave"));
    let config = agentmesh(&["config", "--help"]);
    assert!(["show", "set", "unset"].iter().all(|c| config.contains(c)));
    // `-v` only where there is a daemon's log to make louder.
    for args in [
        ["status", "--help"],
        ["down", "--help"],
        ["config", "--help"],
    ] {
        assert!(!agentmesh(&args).contains("--verbose"), "{args:?}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
        .args(["status", "-v"])
        .output()
        .expect("the agentmesh binary runs");
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

#[test]
fn version() {
    // A test build (`cargo test --workspace` turns the test clock on) says
    // so; any other build is just its version.
    let v = agentmesh(&["--version"]);
    let plain = format!("agentmesh {}", env!("CARGO_PKG_VERSION"));
    assert!(
        v.trim() == plain || v.trim().starts_with(&format!("{plain} (test build:")),
        "{v}"
    );
}
