//! `agentmesh service`, `completions` and `man` (issue 38, points 1 and
//! 4), the real binary. Each node's commands run with its own
//! XDG_CONFIG_HOME and an empty XDG_RUNTIME_DIR (`Node::command`), so no
//! user service manager answers them, as on a CI machine or in a
//! container: `install` writes the unit, exits 0, and says how to enable
//! it. The unit is checked by systemd's own parser (`systemd-analyze
//! verify`), the launchd agent by Python's plistlib, the bash completion
//! by bash.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::{Path, PathBuf};
use std::process::Command;

use agentmesh_tests::{Node, bin};
use serde_json::{Value, json};

fn unit_path(n: &Node) -> PathBuf {
    n.xdg_config().join("systemd/user/agentmesh.service")
}

fn wants_link(n: &Node) -> PathBuf {
    n.xdg_config()
        .join("systemd/user/default.target.wants/agentmesh.service")
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(program))
            .find(|p| p.is_file())
    })
}

/// `program`, or `None` when it is missing here (CI must have it).
fn tool(program: &str, package: &str) -> Option<PathBuf> {
    let found = which(program);
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and no {program}: .ci/run installs Debian's {package}"
        );
        eprintln!("skipping the {program} check: no {program} here (Debian's {package})");
    }
    found
}

/// What the unit runs: this build's binary, the node's home, `daemon`.
fn expected_command(n: &Node) -> Value {
    json!([
        bin().canonicalize().unwrap().to_str().unwrap(),
        "--home",
        n.home().to_str().unwrap(),
        "daemon"
    ])
}

#[test]
fn install_writes_a_unit_systemd_reads_and_says_how_to_enable_it_without_a_manager() {
    let mut n = Node::new("alpha");
    let v = n.json(&["service", "install"]);
    let unit = unit_path(&n);
    assert_eq!(v["manager"], "systemd", "{v}");
    assert_eq!(v["path"], unit.to_str().unwrap(), "{v}");
    assert_eq!(v["installed"], true, "{v}");
    assert_eq!(v["manager_answers"], false, "{v}");
    assert_eq!(v["enabled"], false, "{v}");
    assert_eq!(v["active"], Value::Null, "unknown without a manager: {v}");
    assert_eq!(v["done"], json!(["written"]), "{v}");
    assert_eq!(v["command"], expected_command(&n), "{v}");
    let next = v["next"].as_str().unwrap();
    assert!(
        next.contains("systemctl --user daemon-reload && systemctl --user enable --now agentmesh"),
        "{next}"
    );
    let text = std::fs::read_to_string(&unit).unwrap();
    for line in [
        "Restart=on-failure",
        "RestartPreventExitStatus=3",
        "WantedBy=default.target",
        "ExecStart=\"",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }

    // systemd's own reading of it: no warning, no error.
    if let Some(analyze) = tool("systemd-analyze", "systemd") {
        let runtime = tempfile::tempdir().unwrap();
        let out = Command::new(analyze)
            .args(["verify", "--user"])
            .arg(&unit)
            .env("XDG_RUNTIME_DIR", runtime.path())
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "systemd-analyze verify: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Again, in words: the same file, and what to run.
    let said = n.ok(&["service", "install"]);
    assert!(said.contains("Wrote the systemd user unit"), "{said}");
    assert!(
        said.contains("systemctl --user enable --now agentmesh"),
        "{said}"
    );
    assert!(said.contains("whether it runs now is unknown"), "{said}");

    let s = n.json(&["service", "status"]);
    assert_eq!(
        (&s["installed"], &s["enabled"], &s["done"]),
        (&json!(true), &json!(false), &json!([])),
        "{s}"
    );
    // Enabled, as systemd records it (the link `systemctl --user enable`
    // makes), is read from the files.
    std::fs::create_dir_all(wants_link(&n).parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&unit, wants_link(&n)).unwrap();
    assert_eq!(n.json(&["service", "status"])["enabled"], true);

    // `down` says the service starts the daemon again at login, and how
    // to stop that.
    n.start();
    let said = n.ok(&["down"]);
    assert!(
        said.contains("starts the daemon again at your next login")
            && said.contains("agentmesh service stop")
            && said.contains("agentmesh service uninstall"),
        "{said}"
    );
    let v = n.json(&["down"]);
    assert_eq!(
        (&v["service_installed"], &v["starts_at_login"]),
        (&json!(true), &json!(true)),
        "{v}"
    );

    // Uninstalled: the unit and its link are gone, and `down` says
    // nothing of a service.
    let u = n.json(&["service", "uninstall"]);
    assert_eq!(u["done"], json!(["disabled", "removed"]), "{u}");
    assert_eq!(u["installed"], false, "{u}");
    assert!(!unit.exists() && wants_link(&n).symlink_metadata().is_err());
    let again = n.json(&["service", "uninstall"]);
    assert_eq!(again["done"], json!([]), "{again}");
    let said = n.ok(&["down"]);
    assert!(!said.contains("service"), "{said}");
    assert!(
        n.ok(&["service", "status"])
            .contains("No systemd user unit is installed")
    );
}

#[test]
fn a_unit_that_runs_another_home_is_not_replaced() {
    let a = Node::new("alpha");
    let b = Node::new("bravo");
    a.ok(&["service", "install"]);
    let out = b
        .command(&["service", "install", "--json"])
        .env("XDG_CONFIG_HOME", a.xdg_config())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).lines().last().unwrap()).unwrap();
    assert_eq!(err["code"], "service_other_home", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("agentmesh service uninstall"),
        "{err}"
    );
    // alpha's unit is as it was.
    let text = std::fs::read_to_string(unit_path(&a)).unwrap();
    assert!(text.contains(a.home().to_str().unwrap()), "{text}");
}

#[test]
fn start_and_stop_say_what_is_missing() {
    let n = Node::new("alpha");
    let err = n.fails(&["service", "stop", "--json"]);
    assert!(err.contains("\"service_not_installed\""), "{err}");
    n.ok(&["service", "install", "--no-start"]);
    let err = n.fails(&["service", "start", "--json"]);
    assert!(err.contains("\"no_service_manager\""), "{err}");
    assert!(err.contains("systemctl --user"), "{err}");
    let err = n.fails(&["service", "stop"]);
    assert!(err.contains("agentmesh down"), "{err}");
}

/// Python's reading of the launchd agent's property list.
fn plist(path: &Path) -> Option<Value> {
    let python = tool("python3", "python3")?;
    let out = Command::new(python)
        .args([
            "-c",
            "import json, plistlib, sys; print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "plistlib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn the_launchd_agent_is_a_property_list_that_runs_the_daemon_at_login() {
    if cfg!(target_os = "macos") {
        // HOME does not keep launchctl from the person's own gui/UID
        // domain: this test would load and boot out a real agent.
        eprintln!("skipping on macOS: it would use the real launchd");
        return;
    }
    let n = Node::new("alpha");
    let user_home = tempfile::tempdir().unwrap();
    let out = n
        .command(&["service", "install", "--manager", "launchd", "--json"])
        .env("HOME", user_home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = user_home
        .path()
        .join("Library/LaunchAgents/dev.agentmesh.daemon.plist");
    assert_eq!(v["path"], path.to_str().unwrap(), "{v}");
    assert_eq!(v["command"], expected_command(&n), "{v}");
    assert!(
        v["next"]
            .as_str()
            .unwrap()
            .contains("launchctl bootstrap gui/$(id -u)"),
        "{v}"
    );
    if let Some(p) = plist(&path) {
        assert_eq!(p["Label"], "dev.agentmesh.daemon", "{p}");
        assert_eq!(p["ProgramArguments"], expected_command(&n), "{p}");
        assert_eq!(p["RunAtLoad"], true, "{p}");
        assert_eq!(p["KeepAlive"], json!({"SuccessfulExit": false}), "{p}");
        assert_eq!(
            p["StandardErrorPath"],
            n.home().join("daemon.log").to_str().unwrap(),
            "{p}"
        );
    }
    let out = n
        .command(&["service", "uninstall", "--manager", "launchd", "--json"])
        .env("HOME", user_home.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!path.exists());
}

#[test]
fn completions_and_the_manual_page_name_every_command() {
    let n = Node::new("alpha");
    let bash = n.ok(&["completions", "bash"]);
    let zsh = n.ok(&["completions", "zsh"]);
    let fish = n.ok(&["completions", "fish"]);
    assert!(zsh.starts_with("#compdef agentmesh"), "{zsh:.80}");
    assert!(fish.contains("complete -c agentmesh"), "{fish:.80}");
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_ascii_alphanumeric())
            .map(str::to_owned)
            .collect()
    };
    for (shell, script) in [("bash", &bash), ("zsh", &zsh), ("fish", &fish)] {
        let words = words(script);
        for command in ["service", "send", "inbox", "completions", "man"] {
            assert!(
                words.iter().any(|w| w == command),
                "{shell} completion lacks {command}"
            );
        }
    }
    // bash itself loads it, and completes `agentmesh ser` to `service`.
    if let Some(bash_bin) = tool("bash", "bash") {
        let out = Command::new(bash_bin)
            .args([
                "-c",
                r#"source /dev/stdin; complete -p agentmesh; COMP_WORDS=(agentmesh ser); COMP_CWORD=1; COMP_LINE="agentmesh ser"; COMP_POINT=${#COMP_LINE}; _agentmesh agentmesh ser agentmesh; echo "${COMPREPLY[@]}""#,
            ])
            .stdin(std::fs::File::open(write_temp(&bash).path()).unwrap())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(said.contains("-F _agentmesh agentmesh"), "{said}");
        assert!(
            said.lines()
                .last()
                .unwrap()
                .split(' ')
                .any(|w| w == "service"),
            "{said}"
        );
    }
    let man = n.ok(&["man"]);
    assert!(man.contains(".TH agentmesh 1"), "{man:.200}");
    for command in ["service", "completions", "man"] {
        assert!(
            words(&man).iter().any(|w| w == command),
            "the manual lists {command}"
        );
    }
    let v = n.json(&["completions", "fish"]);
    assert_eq!((&v["kind"], &v["text"]), (&json!("fish"), &json!(fish)));
    // A shell it does not know: a usage error naming the ones it does.
    let err = n.fails(&["completions", "tcsh"]);
    assert!(err.contains("bash") && err.contains("zsh"), "{err}");
}

fn write_temp(text: &str) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}
