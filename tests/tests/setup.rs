//! `agentmesh setup claude|codex`: agentmesh's MCP server and hooks go
//! into the agents' config files beside what is there, a second run
//! changes nothing, and `--uninstall` gives every file back byte for byte
//! (or, if someone edited it since, takes out only agentmesh's entries).
//!
//! Every run gets its own HOME, CLAUDE_CONFIG_DIR, CODEX_HOME,
//! AGENTMESH_HOME and PATH (without any real `claude` or `codex`) in a
//! temporary folder, and nothing else from the environment: no test can
//! touch a real agent's config.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use agentmesh_tests::{DEADLINE, bin, exit_code};
use serde_json::{Value, json};

/// The hook events agentmesh installs, in every agent.
const EVENTS: [&str; 4] = ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"];

/// Claude Code's, with its SessionEnd (Codex has none).
const CLAUDE_EVENTS: [&str; 5] = [
    "SessionStart",
    "UserPromptSubmit",
    "PostToolUse",
    "Stop",
    "SessionEnd",
];

/// A machine of one's own: a home with the agents' folders, a PATH, a
/// project folder to run in, and an agentmesh home.
struct Sandbox {
    dir: tempfile::TempDir,
    /// Left out of the environment (the agent's default under HOME applies).
    unset: Vec<&'static str>,
}

impl Sandbox {
    fn new() -> Sandbox {
        // Short: `up` puts a Unix socket in the agentmesh home.
        let dir = tempfile::Builder::new()
            .prefix("am-su-")
            .tempdir_in("/tmp")
            .unwrap();
        for d in ["home", "bin", "project"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        Sandbox { dir, unset: vec![] }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn claude_dir(&self) -> PathBuf {
        self.home().join("claude-config")
    }
    fn codex_dir(&self) -> PathBuf {
        self.home().join("codex-home")
    }
    fn agentmesh_home(&self) -> PathBuf {
        self.dir.path().join("am")
    }
    fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }
    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }
    fn settings(&self) -> PathBuf {
        self.claude_dir().join("settings.json")
    }
    fn mcp_json(&self) -> PathBuf {
        self.project().join(".mcp.json")
    }
    fn claude_log(&self) -> PathBuf {
        self.dir.path().join("claude.log")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args).current_dir(self.project()).env_clear();
        let vars = [
            ("HOME", self.home()),
            ("CLAUDE_CONFIG_DIR", self.claude_dir()),
            ("CODEX_HOME", self.codex_dir()),
            ("AGENTMESH_HOME", self.agentmesh_home()),
            ("PATH", self.bin_dir()),
        ];
        for (k, v) in vars {
            if !self.unset.contains(&k) {
                c.env(k, v);
            }
        }
        c.env("NO_COLOR", "1");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "`agentmesh {}` failed: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&self.ok(&args)).unwrap()
    }

    /// Claude Code's own file of user-scope MCP servers.
    fn claude_json(&self) -> PathBuf {
        self.claude_dir().join(".claude.json")
    }

    /// A `claude` on the PATH that notes its arguments, one line a run,
    /// and keeps `.claude.json` as Claude Code's `mcp add --scope user` and
    /// `mcp remove --scope user` do (refusing a name that exists, and a
    /// server that doesn't, with its messages).
    fn fake_claude(&self) {
        let script = self.bin_dir().join("claude");
        let (log, dir, file) = (self.claude_log(), self.claude_dir(), self.claude_json());
        std::fs::write(
            &script,
            format!(
                r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
PATH=/usr/bin:/bin
f='{file}'
case "$1 $2" in
"mcp add")
  if [ -e "$f" ]; then echo "MCP server agentmesh already exists in user config" >&2; exit 1; fi
  shift 6
  cmd=$1; shift
  args=
  for a in "$@"; do args="$args${{args:+, }}\"$a\""; done
  mkdir -p '{dir}'
  printf '{{"mcpServers": {{"agentmesh": {{"type": "stdio", "command": "%s", "args": [%s], "env": {{}}}}}}}}\n' "$cmd" "$args" > "$f" ;;
"mcp remove")
  if [ ! -e "$f" ]; then echo "No MCP server found with name: agentmesh" >&2; exit 1; fi
  rm "$f" ;;
esac
"#,
                log = log.display(),
                dir = dir.display(),
                file = file.display(),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn claude_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.claude_log())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Every file, folder and link under the sandbox, with the files' bytes
    /// and where the links point.
    fn snapshot(&self) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.symlink_metadata().unwrap().is_symlink() {
                    let to = std::fs::read_link(&p).unwrap();
                    out.insert(p, Some(format!("-> {}", to.display()).into_bytes()));
                } else if p.is_dir() {
                    out.insert(p.clone(), None);
                    walk(&p, out);
                } else {
                    out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.dir.path(), &mut out);
        out
    }
}

/// The agentmesh binary as setup names it.
fn agentmesh() -> String {
    std::fs::canonicalize(bin())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Asserts that `words` appear in `text` in this order (JSON keys: the
/// file's order, which parsing here would not keep).
fn in_order(text: &str, words: &[&str]) {
    let mut at = 0;
    for w in words {
        let i = text[at..]
            .find(w)
            .unwrap_or_else(|| panic!("{w} missing, or out of order, in:\n{text}"));
        at += i + w.len();
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The commands of the hooks in `hooks` for `event`, in order.
fn commands(hooks: &Value, event: &str) -> Vec<String> {
    hooks["hooks"][event]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .flat_map(|g| g["hooks"].as_array().unwrap().clone())
        .map(|h| h["command"].as_str().unwrap().to_owned())
        .collect()
}

/// A settings.json someone keeps by hand: four-space indents, keys in no
/// particular order, hooks of their own (one for an event agentmesh hooks).
const SETTINGS: &str = r#"{
    "permissions": {
        "allow": ["Bash(ls:*)"]
    },
    "model": "opus",
    "hooks": {
        "Stop": [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": "notify-send done"
                    }
                ]
            }
        ],
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {
                        "type": "command",
                        "command": "audit-bash"
                    }
                ]
            }
        ]
    },
    "env": {
        "Z": "1",
        "A": "2"
    }
}
"#;

/// A Codex config with comments, another server before and after an
/// unrelated table, and inline formatting.
const CONFIG_TOML: &str = r#"# My Codex setup. Keep this comment.
model = "o3"   # the good one
approval_policy = "on-request"

[mcp_servers.zeta]
# zeta goes first, on purpose
command = "zeta"
args = ["serve", "--fast"]

[profiles.fast]
model = "o4-mini"

[mcp_servers.alpha]
command = "alpha"
env = { TOKEN = "keep-me" }
"#;

const CODEX_HOOKS: &str = "{\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"say codex-done\"\n          }\n        ]\n      }\n    ]\n  }\n}\n";

#[test]
fn setup_merges_into_settings_json_and_uninstall_restores_it_byte_for_byte() {
    let s = Sandbox::new();
    write(&s.settings(), SETTINGS);
    let before: Value = serde_json::from_str(SETTINGS).unwrap();

    let out = s.ok(&["setup", "claude"]);
    assert!(
        out.contains("merged") && out.contains("settings.json"),
        "{out}"
    );
    let text = std::fs::read_to_string(s.settings()).unwrap();
    let after: Value = serde_json::from_str(&text).unwrap();
    // Everything that was there is still there, in its order.
    for key in ["permissions", "model", "env"] {
        assert_eq!(after[key], before[key], "{key} changed:\n{text}");
    }
    in_order(
        &text,
        &[
            "\"permissions\"",
            "\"model\"",
            "\"hooks\"",
            "\"env\"",
            "\"Z\": \"1\"",
            "\"A\": \"2\"",
        ],
    );
    assert_eq!(after["hooks"]["PreToolUse"], before["hooks"]["PreToolUse"]);
    assert!(
        text.contains("\n    \"model\": \"opus\""),
        "indent kept:\n{text}"
    );
    // docs/agents.md ("What setup installs") names every event setup
    // hooks in Claude Code.
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agents.md"))
            .unwrap();
    let section = docs
        .split("## What setup installs")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let hooked: Vec<&String> = after["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|e| *e != "PreToolUse")
        .collect();
    assert_eq!(hooked.len(), CLAUDE_EVENTS.len(), "{hooked:?}");
    for event in hooked {
        assert!(
            section.contains(&format!("`{event}`")),
            "docs/agents.md's \"What setup installs\" does not name {event}"
        );
    }
    // Ours: after the user's Stop hook, and one per event.
    let home = s.agentmesh_home();
    for event in CLAUDE_EVENTS {
        let cmds = commands(&after, event);
        let ours: Vec<&String> = cmds
            .iter()
            .filter(|c| c.contains(" hook claude "))
            .collect();
        assert_eq!(ours.len(), 1, "{event}: {cmds:?}");
        assert_eq!(
            *ours[0],
            format!(
                "'{}' --home '{}' hook claude {event}",
                agentmesh(),
                home.display()
            )
        );
    }
    assert_eq!(
        commands(&after, "Stop"),
        [
            "notify-send done".to_owned(),
            format!(
                "'{}' --home '{}' hook claude Stop",
                agentmesh(),
                home.display()
            )
        ]
    );
    let stop = &after["hooks"]["Stop"][1];
    assert_eq!(stop["hooks"][0]["type"], "command");
    assert_eq!(stop["hooks"][0]["timeout"], 5);
    assert_eq!(after["hooks"]["PostToolUse"][0]["matcher"], "*");

    // Twice is once: nothing is rewritten.
    let merged = std::fs::read(s.settings()).unwrap();
    let mcp = std::fs::read(s.mcp_json()).unwrap();
    let again = s.ok(&["setup", "claude"]);
    assert!(again.contains("already set up"), "{again}");
    assert_eq!(std::fs::read(s.settings()).unwrap(), merged);
    assert_eq!(std::fs::read(s.mcp_json()).unwrap(), mcp);

    let out = s.ok(&["setup", "claude", "--uninstall"]);
    assert!(out.contains("restored"), "{out}");
    assert_eq!(std::fs::read_to_string(s.settings()).unwrap(), SETTINGS);
    assert!(
        !s.mcp_json().exists(),
        "the .mcp.json agentmesh created is gone"
    );
    let again = s.ok(&["setup", "claude", "--uninstall"]);
    assert!(again.contains("nothing to remove"), "{again}");
}

#[test]
fn codex_config_toml_keeps_its_comments_order_and_servers() {
    let s = Sandbox::new();
    let config = s.codex_dir().join("config.toml");
    let hooks = s.codex_dir().join("hooks.json");
    write(&config, CONFIG_TOML);
    write(&hooks, CODEX_HOOKS);

    s.ok(&["setup", "codex"]);
    let text = std::fs::read_to_string(&config).unwrap();
    let table = format!(
        "[mcp_servers.agentmesh]\ncommand = \"{}\"\nargs = [\"mcp\", \"--home\", \"{}\"]\n",
        agentmesh(),
        s.agentmesh_home().display()
    );
    assert!(text.contains(&table), "{text}");
    // Take our table (and the comment above it) out: what is left is the
    // file as it was, comments, order and spacing.
    let start = text.find("\n# Added by `agentmesh setup codex`").unwrap();
    let end = text.find(&table).unwrap() + table.len();
    assert_eq!(format!("{}{}", &text[..start], &text[end..]), CONFIG_TOML);
    let h = read_json(&hooks);
    assert_eq!(commands(&h, "Stop")[0], "say codex-done");
    for event in EVENTS {
        let cmds = commands(&h, event);
        assert!(
            cmds.last()
                .unwrap()
                .ends_with(&format!(" hook codex {event}")),
            "{event}: {cmds:?}"
        );
    }
    assert!(
        h["hooks"]["PostToolUse"][0].get("matcher").is_none(),
        "Codex matchers are regexes: none means every tool"
    );

    let (c1, h1) = (
        std::fs::read(&config).unwrap(),
        std::fs::read(&hooks).unwrap(),
    );
    assert!(s.ok(&["setup", "codex"]).contains("already set up"));
    assert_eq!(std::fs::read(&config).unwrap(), c1);
    assert_eq!(std::fs::read(&hooks).unwrap(), h1);

    s.ok(&["setup", "codex", "--uninstall"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), CONFIG_TOML);
    assert_eq!(std::fs::read_to_string(&hooks).unwrap(), CODEX_HOOKS);
}

#[test]
fn files_agentmesh_created_and_their_folders_go_at_uninstall() {
    let s = Sandbox::new();
    let before = s.snapshot();
    s.ok(&["setup", "codex"]);
    assert!(s.codex_dir().join("config.toml").exists());
    assert!(s.codex_dir().join("hooks.json").exists());
    s.ok(&["setup", "claude"]);
    assert!(s.settings().exists() && s.mcp_json().exists());
    s.ok(&["setup", "codex", "--uninstall"]);
    s.ok(&["setup", "claude", "--uninstall"]);
    let mut after = s.snapshot();
    // agentmesh's own home (its records) is all that is left.
    after.retain(|p, _| !p.starts_with(s.agentmesh_home()));
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
}

#[test]
fn uninstall_after_the_user_edited_a_file_takes_out_only_ours() {
    let s = Sandbox::new();
    write(&s.settings(), SETTINGS);
    let config = s.codex_dir().join("config.toml");
    write(&config, CONFIG_TOML);
    s.ok(&["setup", "claude"]);
    s.ok(&["setup", "codex"]);
    // The user changes both files afterwards.
    let mut edited = read_json(&s.settings());
    edited["theme"] = json!("dark");
    std::fs::write(s.settings(), serde_json::to_string_pretty(&edited).unwrap()).unwrap();
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str("\n# added later by hand\n[tui]\nnotifications = true\n");
    std::fs::write(&config, &toml).unwrap();

    let out = s.ok(&["setup", "claude", "--uninstall"]);
    assert!(out.contains("could not be restored byte for byte"), "{out}");
    let after = read_json(&s.settings());
    assert_eq!(after["theme"], "dark");
    let mut expected: Value = serde_json::from_str(SETTINGS).unwrap();
    expected["theme"] = json!("dark");
    assert_eq!(after, expected, "the user's file without agentmesh's hooks");

    let out = s.ok(&["setup", "codex", "--uninstall"]);
    assert!(out.contains("could not be restored byte for byte"), "{out}");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(!text.contains("agentmesh"), "{text}");
    assert!(text.contains("# added later by hand\n[tui]"), "{text}");
    assert!(text.starts_with(CONFIG_TOML), "{text}");
}

#[test]
fn dry_run_writes_nothing_and_prints_a_diff() {
    let s = Sandbox::new();
    write(&s.settings(), SETTINGS);
    write(&s.codex_dir().join("config.toml"), CONFIG_TOML);
    let before = s.snapshot();
    let out = s.ok(&["setup", "claude", "--dry-run"]);
    assert!(
        out.contains(&format!("--- {}", s.settings().display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("+++ {}", s.settings().display())),
        "{out}"
    );
    assert!(out.contains("--- /dev/null"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with('+') && l.contains("hook claude Stop")),
        "{out}"
    );
    let out = s.ok(&["setup", "codex", "--dry-run"]);
    assert!(out.contains("+[mcp_servers.agentmesh]"), "{out}");
    let j = s.json(&["setup", "codex", "--dry-run"]);
    assert_eq!(j["dry_run"], true);
    assert!(
        j["changed"][0]["diff"]
            .as_str()
            .unwrap()
            .contains("+[mcp_servers.agentmesh]")
    );
    assert_eq!(s.snapshot(), before, "a dry run wrote something");

    // Uninstall's dry run too.
    s.ok(&["setup", "claude"]);
    let before = s.snapshot();
    let out = s.ok(&["setup", "claude", "--uninstall", "--dry-run"]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("-") && l.contains("hook claude Stop")),
        "{out}"
    );
    assert_eq!(s.snapshot(), before, "an uninstall dry run wrote something");
}

#[test]
fn without_claude_on_the_path_the_server_goes_into_mcp_json() {
    let s = Sandbox::new();
    // A project .mcp.json with a server of its own.
    let mine = "{\n  \"mcpServers\": {\n    \"db\": {\n      \"command\": \"db-mcp\",\n      \"args\": []\n    }\n  }\n}\n";
    write(&s.mcp_json(), mine);
    let out = s.ok(&["setup", "claude"]);
    assert!(out.contains("`claude` is not on the PATH"), "{out}");
    assert!(out.contains(".mcp.json"), "{out}");
    let v = read_json(&s.mcp_json());
    assert_eq!(v["mcpServers"]["db"]["command"], "db-mcp");
    assert_eq!(
        v["mcpServers"]["agentmesh"],
        json!({
            "command": agentmesh(),
            "args": ["mcp", "--home", s.agentmesh_home()],
        })
    );
    in_order(
        &std::fs::read_to_string(s.mcp_json()).unwrap(),
        &["\"db\"", "\"agentmesh\""],
    );
    s.ok(&["setup", "claude", "--uninstall"]);
    assert_eq!(std::fs::read_to_string(s.mcp_json()).unwrap(), mine);
}

#[test]
fn with_claude_on_the_path_setup_runs_claude_mcp_add_and_uninstall_runs_remove() {
    let s = Sandbox::new();
    s.fake_claude();
    let j = s.json(&["setup", "claude"]);
    let home = s.agentmesh_home().display().to_string();
    let add = format!(
        "mcp add --scope user agentmesh -- {} mcp --home {home}",
        agentmesh()
    );
    assert_eq!(s.claude_calls(), std::slice::from_ref(&add));
    let expected: Vec<String> = format!("claude {add}")
        .split(' ')
        .map(str::to_owned)
        .collect();
    assert_eq!(j["commands"], json!([expected]));
    assert!(
        !s.mcp_json().exists(),
        "registered through claude, not .mcp.json"
    );
    assert!(s.settings().exists(), "the hooks are in settings.json");

    s.ok(&["setup", "claude", "--uninstall"]);
    assert_eq!(
        s.claude_calls(),
        [add, "mcp remove --scope user agentmesh".to_owned()]
    );
    assert!(!s.settings().exists());
}

#[test]
fn a_changed_command_line_updates_setups_own_entries_where_they_are() {
    // The default home first, then the same folder named with --home: the
    // command line setup writes changes (it now names the home), as it does
    // when the binary moves, and the records are the same ones.
    let mut s = Sandbox::new();
    s.fake_claude();
    s.unset = vec!["AGENTMESH_HOME"];
    s.ok(&["setup", "claude"]);
    s.ok(&["setup", "codex"]);
    // A Stop hook of the user's own, after agentmesh's.
    let mut settings = read_json(&s.settings());
    settings["hooks"]["Stop"]
        .as_array_mut()
        .unwrap()
        .push(json!({"hooks": [{"type": "command", "command": "notify-send done"}]}));
    std::fs::write(
        s.settings(),
        serde_json::to_string_pretty(&settings).unwrap(),
    )
    .unwrap();

    let home = s.home().join(".local/share/agentmesh");
    let h = home.to_str().unwrap();
    s.ok(&["--home", h, "setup", "claude"]);
    s.ok(&["--home", h, "setup", "codex"]);
    let ours =
        |agent: &str, event: &str| format!("'{}' --home '{h}' hook {agent} {event}", agentmesh());
    let after = read_json(&s.settings());
    assert_eq!(
        commands(&after, "Stop"),
        [ours("claude", "Stop"), "notify-send done".to_owned()]
    );
    for event in CLAUDE_EVENTS {
        assert_eq!(commands(&after, event)[0], ours("claude", event));
    }
    let add = |args: &str| {
        format!(
            "mcp add --scope user agentmesh -- {} mcp{args}",
            agentmesh()
        )
    };
    assert_eq!(
        s.claude_calls(),
        [
            add(""),
            "mcp remove --scope user agentmesh".to_owned(),
            add(&format!(" --home {h}")),
        ]
    );
    let config = std::fs::read_to_string(s.codex_dir().join("config.toml")).unwrap();
    assert_eq!(
        config.matches("[mcp_servers.agentmesh]").count(),
        1,
        "{config}"
    );
    assert!(
        config.contains(&format!("args = [\"mcp\", \"--home\", \"{h}\"]")),
        "{config}"
    );
    let codex_hooks = read_json(&s.codex_dir().join("hooks.json"));
    assert_eq!(commands(&codex_hooks, "Stop"), [ours("codex", "Stop")]);

    s.ok(&["--home", h, "setup", "claude", "--uninstall"]);
    assert_eq!(
        commands(&read_json(&s.settings()), "Stop"),
        ["notify-send done"]
    );
    assert!(!s.claude_json().exists(), "registration removed");
    s.ok(&["--home", h, "setup", "codex", "--uninstall"]);
    assert!(!s.codex_dir().exists());
}

/// A run's `--json` notes, one a line.
fn notes(j: &Value) -> String {
    j["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn agentmesh_hooks_setup_did_not_write_are_left_alone_and_named() {
    // Stop hooks of the user's for two other homes, and a PreToolUse hook
    // agentmesh never installs: all run a program named agentmesh.
    let s = Sandbox::new();
    let other = |home: &str| format!("'{}' --home '{home}' hook claude Stop", agentmesh());
    let pre = format!("'{}' hook claude PreToolUse", agentmesh());
    let theirs = json!({
        "model": "opus",
        "hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": other("/homes/work")}]},
                {"hooks": [{"type": "command", "command": other("/homes/play"), "timeout": 9}]}
            ],
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": pre}]}
            ]
        }
    });
    write(
        &s.settings(),
        &serde_json::to_string_pretty(&theirs).unwrap(),
    );
    let j = s.json(&["setup", "claude"]);
    let after = read_json(&s.settings());
    let ours = format!(
        "'{}' --home '{}' hook claude Stop",
        agentmesh(),
        s.agentmesh_home().display()
    );
    assert_eq!(
        commands(&after, "Stop"),
        [other("/homes/work"), other("/homes/play"), ours]
    );
    for (event, i) in [("Stop", 0), ("Stop", 1), ("PreToolUse", 0)] {
        assert_eq!(after["hooks"][event][i], theirs["hooks"][event][i]);
    }
    let n = notes(&j);
    for c in [other("/homes/work"), other("/homes/play"), pre.clone()] {
        assert!(n.contains(&c), "{c} not named in:\n{n}");
    }
    // Named in the text output too, on a run that changes nothing.
    let out = s.ok(&["setup", "claude"]);
    assert!(out.contains("already set up"), "{out}");
    assert!(out.contains(&other("/homes/play")), "{out}");
    assert!(out.contains(&pre), "{out}");

    // An unrelated edit, then uninstall: only agentmesh's own go.
    let mut edited = read_json(&s.settings());
    edited["theme"] = json!("dark");
    std::fs::write(s.settings(), serde_json::to_string_pretty(&edited).unwrap()).unwrap();
    let j = s.json(&["setup", "claude", "--uninstall"]);
    let mut expected = theirs.clone();
    expected["theme"] = json!("dark");
    assert_eq!(read_json(&s.settings()), expected);
    let n = notes(&j);
    for c in [other("/homes/work"), other("/homes/play"), pre] {
        assert!(n.contains(&c), "{c} not named in:\n{n}");
    }
}

#[test]
fn an_agentmesh_server_setup_did_not_write_is_left_alone_and_named() {
    let s = Sandbox::new();
    // Codex: the user's own [mcp_servers.agentmesh], with a token.
    let config = s.codex_dir().join("config.toml");
    let hooks = s.codex_dir().join("hooks.json");
    let theirs = format!(
        "{CONFIG_TOML}\n[mcp_servers.agentmesh]\ncommand = \"/opt/mesh/agentmesh\"\nargs = [\"mcp\", \"--home\", \"/srv/mesh\"]\nenv = {{ AGENTMESH_TOKEN = \"s3cret\" }}\n"
    );
    write(&config, &theirs);
    let j = s.json(&["setup", "codex"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), theirs);
    let n = notes(&j);
    assert!(
        n.contains(&format!("{}: the MCP server `agentmesh`", config.display())),
        "{n}"
    );
    assert!(n.contains("/opt/mesh/agentmesh"), "{n}");
    assert!(n.contains("so agentmesh's was not added"), "{n}");
    assert!(commands(&read_json(&hooks), "Stop")[0].ends_with(" hook codex Stop"));
    let out = s.ok(&["setup", "codex", "--uninstall"]);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), theirs);
    assert!(!hooks.exists());
    assert!(out.contains("/opt/mesh/agentmesh"), "{out}");

    // Claude Code without `claude` on the PATH: the project's .mcp.json.
    let mcp = serde_json::to_string_pretty(&json!({"mcpServers": {"agentmesh": {
        "command": "/opt/mesh/agentmesh", "args": ["mcp"], "env": {"AGENTMESH_TOKEN": "s3cret"}
    }}}))
    .unwrap();
    write(&s.mcp_json(), &mcp);
    let out = s.ok(&["setup", "claude"]);
    assert_eq!(std::fs::read_to_string(s.mcp_json()).unwrap(), mcp);
    assert!(out.contains("so agentmesh's was not added"), "{out}");
    assert!(
        s.settings().exists(),
        "the hooks are installed all the same"
    );
    s.ok(&["setup", "claude", "--uninstall"]);
    assert_eq!(std::fs::read_to_string(s.mcp_json()).unwrap(), mcp);
    assert!(!s.settings().exists());

    // Claude Code's own registration: the user's, and one that runs what
    // setup's would (setup has no record of registering either).
    s.fake_claude();
    let home = s.agentmesh_home().display().to_string();
    for command in ["/opt/mesh/agentmesh".to_owned(), agentmesh()] {
        let registered = json!({"mcpServers": {"agentmesh": {
            "type": "stdio", "command": command, "args": ["mcp", "--home", home],
            "env": {"AGENTMESH_TOKEN": "s3cret"}
        }}})
        .to_string();
        write(&s.claude_json(), &registered);
        let j = s.json(&["setup", "claude"]);
        assert!(s.claude_calls().is_empty(), "{:?}", s.claude_calls());
        let n = notes(&j);
        assert!(n.contains(&s.claude_json().display().to_string()), "{n}");
        assert!(n.contains(&command), "{n}");
        s.ok(&["setup", "claude", "--uninstall"]);
        assert!(s.claude_calls().is_empty(), "{:?}", s.claude_calls());
        assert_eq!(
            std::fs::read_to_string(s.claude_json()).unwrap(),
            registered
        );
    }
}

#[test]
fn a_dangling_symlink_stays_a_link_and_one_into_a_missing_folder_is_refused() {
    // Dotfiles kept in a repository, linked into place before the file
    // exists: setup writes where the link points.
    let s = Sandbox::new();
    let dotfiles = s.dir.path().join("dotfiles");
    std::fs::create_dir(&dotfiles).unwrap();
    let real = dotfiles.join("settings.json");
    std::fs::create_dir_all(s.claude_dir()).unwrap();
    std::os::unix::fs::symlink(&real, s.settings()).unwrap();
    s.ok(&["setup", "claude"]);
    assert!(
        s.settings().symlink_metadata().unwrap().is_symlink(),
        "the link was replaced by a file"
    );
    assert_eq!(std::fs::read_link(s.settings()).unwrap(), real);
    assert!(commands(&read_json(&real), "Stop")[0].contains(" hook claude Stop"));
    s.ok(&["setup", "claude", "--uninstall"]);
    assert!(s.settings().symlink_metadata().unwrap().is_symlink());
    assert!(!real.exists(), "the file setup created is gone");
    assert!(dotfiles.is_dir());

    // A (relative) link into a folder that does not exist: refused.
    let hooks = s.codex_dir().join("hooks.json");
    std::fs::create_dir_all(s.codex_dir()).unwrap();
    std::os::unix::fs::symlink("../../nowhere/hooks.json", &hooks).unwrap();
    let before = s.snapshot();
    let out = s.run(&["setup", "codex"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!("{} is a symbolic link to", hooks.display())),
        "{e}"
    );
    assert!(e.contains("Nothing was changed"), "{e}");
    assert_eq!(s.snapshot(), before);
}

#[test]
fn a_read_only_file_is_refused_and_nothing_changes_anywhere() {
    let s = Sandbox::new();
    s.fake_claude();
    write(&s.settings(), SETTINGS);
    std::fs::set_permissions(s.settings(), std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = s.snapshot();
    let out = s.run(&["setup", "claude"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!("{} is read-only", s.settings().display())),
        "{e}"
    );
    assert!(e.contains("Nothing was changed"), "{e}");
    assert!(s.claude_calls().is_empty(), "{:?}", s.claude_calls());
    assert_eq!(s.snapshot(), before);
    let out = s.run(&["setup", "claude", "--json"]);
    let e = String::from_utf8_lossy(&out.stderr);
    let last: Value = serde_json::from_str(e.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "agent_config_not_writable", "{e}");
    assert_eq!(s.snapshot(), before);

    // Made read-only after setup: uninstall refuses, and leaves the other
    // file too.
    s.ok(&["setup", "codex"]);
    let hooks = s.codex_dir().join("hooks.json");
    std::fs::set_permissions(&hooks, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = s.snapshot();
    let out = s.run(&["setup", "codex", "--uninstall"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!("{} is read-only", hooks.display())),
        "{e}"
    );
    assert_eq!(s.snapshot(), before);
}

#[test]
fn a_json_file_with_a_key_twice_is_refused_naming_the_file_line_and_key() {
    let s = Sandbox::new();
    // A reader keeps one "hooks" (serde_json the last): rewriting the file
    // would lose the other.
    let text =
        "{\n  \"hooks\": {\n    \"Stop\": []\n  },\n  \"model\": \"opus\",\n  \"hooks\": {}\n}\n";
    write(&s.settings(), text);
    let before = s.snapshot();
    let out = s.run(&["setup", "claude"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!(
            "{} has the key \"hooks\" twice in one object (line 6)",
            s.settings().display()
        )),
        "{e}"
    );
    assert!(e.contains("Nothing was changed"), "{e}");
    assert_eq!(s.snapshot(), before);

    // Deeper down, in another file: the same.
    std::fs::remove_file(s.settings()).unwrap();
    let mcp = "{\"mcpServers\": {\"db\": {\n  \"command\": \"a\",\n  \"command\": \"b\"}}}\n";
    write(&s.mcp_json(), mcp);
    let before = s.snapshot();
    let out = s.run(&["setup", "claude"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!(
            "{} has the key \"command\" twice in one object (line 3)",
            s.mcp_json().display()
        )),
        "{e}"
    );
    assert_eq!(s.snapshot(), before);
}

#[test]
fn project_scope_writes_under_the_current_folder() {
    let s = Sandbox::new();
    s.fake_claude();
    let j = s.json(&["setup", "claude", "--scope", "project"]);
    assert_eq!(j["scope"], "project");
    let settings = s.project().join(".claude/settings.json");
    assert!(commands(&read_json(&settings), "Stop")[0].contains(" hook claude Stop"));
    assert!(
        read_json(&s.mcp_json())["mcpServers"]["agentmesh"].is_object(),
        "a project's server is in its .mcp.json"
    );
    assert!(s.claude_calls().is_empty(), "{:?}", s.claude_calls());
    assert!(!s.claude_dir().exists(), "nothing in the user's config");

    s.ok(&["setup", "codex", "--scope", "project"]);
    let codex = s.project().join(".codex");
    assert!(
        std::fs::read_to_string(codex.join("config.toml"))
            .unwrap()
            .contains("[mcp_servers.agentmesh]")
    );
    assert!(commands(&read_json(&codex.join("hooks.json")), "Stop")[0].contains(" hook codex "));
    assert!(!s.codex_dir().exists(), "nothing in the user's config");

    s.ok(&["setup", "claude", "--scope", "project", "--uninstall"]);
    s.ok(&["setup", "codex", "--scope", "project", "--uninstall"]);
    let left: Vec<_> = std::fs::read_dir(s.project()).unwrap().collect();
    assert!(left.is_empty(), "the project folder is as it was: {left:?}");
}

#[test]
fn json_reports_what_was_done() {
    let s = Sandbox::new();
    write(&s.settings(), SETTINGS);
    let j = s.json(&["setup", "claude"]);
    assert_eq!(j["agent"], "claude");
    assert_eq!(j["scope"], "user");
    assert_eq!(j["dry_run"], false);
    assert_eq!(j["uninstall"], false);
    let changed = j["changed"].as_array().unwrap();
    let find = |p: &Path| {
        changed
            .iter()
            .find(|c| c["path"] == p.display().to_string())
            .unwrap_or_else(|| panic!("{} not in {j}", p.display()))["action"]
            .clone()
    };
    assert_eq!(find(&s.settings()), "merged");
    assert_eq!(find(&s.mcp_json()), "created");
    assert_eq!(j["commands"], json!([]));
    assert!(
        j["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(".mcp.json"))
    );

    let j = s.json(&["setup", "claude"]);
    assert!(
        j["changed"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["action"] == "unchanged"),
        "{j}"
    );

    let j = s.json(&["setup", "claude", "--uninstall"]);
    assert_eq!(j["uninstall"], true);
    let actions: BTreeMap<String, String> = j["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(actions[&s.settings().display().to_string()], "restored");
    assert_eq!(actions[&s.mcp_json().display().to_string()], "removed");
}

#[test]
fn an_invalid_settings_json_is_refused_and_left_untouched() {
    let s = Sandbox::new();
    let broken = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n    \"Stop\": [\n  }\n";
    write(&s.settings(), broken);
    let before = s.snapshot();
    let out = s.run(&["setup", "claude"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains(&format!(
            "{} is not valid JSON (line 5",
            s.settings().display()
        )),
        "{e}"
    );
    assert!(e.contains("Nothing was changed"), "{e}");
    assert_eq!(s.snapshot(), before);
    let out = s.run(&["setup", "claude", "--json"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    let last: Value = serde_json::from_str(e.lines().last().unwrap()).unwrap();
    assert_eq!(last["code"], "bad_agent_config", "{e}");
    assert_eq!(s.snapshot(), before);
    // A config.toml that isn't TOML, the same.
    write(&s.codex_dir().join("config.toml"), "model = = 1\n");
    let before = s.snapshot();
    let out = s.run(&["setup", "codex"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not valid TOML (line 1)"));
    assert_eq!(s.snapshot(), before);
}

#[test]
fn the_agents_default_folders_are_under_home_and_the_default_home_is_not_named() {
    let mut s = Sandbox::new();
    s.unset = vec!["CLAUDE_CONFIG_DIR", "CODEX_HOME", "AGENTMESH_HOME"];
    // An explicit --home is named.
    let other = s.dir.path().join("other-home");
    let other = other.to_str().unwrap();
    let dry_run = ["--home", other, "setup", "codex", "--dry-run"];
    let j = s.json(&dry_run);
    let diff = j["changed"][0]["diff"].as_str().unwrap().to_owned();
    assert!(diff.contains(&format!("\"--home\", \"{other}\"")), "{diff}");

    s.ok(&["setup", "claude"]);
    s.ok(&["setup", "codex"]);
    let settings = s.home().join(".claude/settings.json");
    let stop = commands(&read_json(&settings), "Stop");
    // No --home: the agent's hook finds the same default home agentmesh does.
    assert_eq!(stop, [format!("'{}' hook claude Stop", agentmesh())]);
    let config = std::fs::read_to_string(s.home().join(".codex/config.toml")).unwrap();
    assert!(config.contains("args = [\"mcp\"]\n"), "{config}");
    assert!(s.home().join(".codex/hooks.json").exists());
    // To the other home, the server the default home's setup wrote is
    // another home's: left alone (its hooks would go in beside).
    let j = s.json(&dry_run);
    assert_eq!(j["changed"][0]["action"], "unchanged", "{j}");
    assert!(notes(&j).contains("so agentmesh's was not added"), "{j}");
    let hooks = j["changed"][1]["diff"].as_str().unwrap();
    assert!(
        hooks.contains(&format!("--home '{other}' hook codex Stop")),
        "{hooks}"
    );
}

/// Stops the daemon `up` started, even when the test fails.
struct Down<'a>(&'a Sandbox);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["down"]);
    }
}

#[test]
fn up_offers_setup_at_a_terminal_and_never_to_a_script() {
    let s = Sandbox::new();
    s.fake_claude();
    std::fs::create_dir(s.codex_dir()).unwrap(); // Codex looks installed too
    let up = ["up", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"];
    // A script: no question, nothing written.
    let out = s.ok(&up);
    let _down = Down(&s);
    assert!(!out.contains("[y/N]"), "{out}");
    assert!(!s.settings().exists());
    assert!(s.claude_calls().is_empty());

    // A person: one question per agent; yes for Claude Code, no for Codex.
    let pty = |args: &[&str]| {
        let options = rexpect::reader::Options::new()
            .timeout_ms(Some(DEADLINE.as_millis() as u64))
            .strip_ansi_escape_codes(true);
        rexpect::session::spawn_with_options(s.command(args), options).unwrap()
    };
    let mut p = pty(&up);
    p.exp_string("Claude Code is installed here").unwrap();
    p.exp_string("[y/N]").unwrap();
    p.send_line("y").unwrap();
    p.exp_string("Set up Claude Code (user scope)").unwrap();
    p.exp_string("Codex is installed here").unwrap();
    p.exp_string("[y/N]").unwrap();
    p.send_line("").unwrap();
    p.exp_string("agentmesh setup codex").unwrap();
    p.exp_eof().unwrap();
    assert_eq!(exit_code(&p), Some(0));
    assert!(s.settings().exists());
    assert_eq!(s.claude_calls().len(), 1, "{:?}", s.claude_calls());
    assert!(!s.codex_dir().join("config.toml").exists());

    // Set up, and declined: no more questions.
    let mut p = pty(&up);
    let rest = p.exp_eof().unwrap();
    assert!(!rest.contains("[y/N]"), "{rest}");
    assert!(rest.contains("already running"), "{rest}");
    assert_eq!(exit_code(&p), Some(0));
}

#[test]
fn a_file_two_setups_share_is_given_back_when_the_last_one_goes() {
    // Without `claude` on the PATH, the user scope's server and the
    // project scope's both live in the project's .mcp.json.
    let s = Sandbox::new();
    let mine = "{\"mcpServers\":{}}\n";
    write(&s.mcp_json(), mine);
    s.ok(&["setup", "claude"]);
    s.ok(&["setup", "claude", "--scope", "project"]);
    let out = s.ok(&["setup", "claude", "--scope", "project", "--uninstall"]);
    assert!(out.contains("still used by `claude:user`"), "{out}");
    assert!(read_json(&s.mcp_json())["mcpServers"]["agentmesh"].is_object());
    assert!(!s.project().join(".claude").exists());
    s.ok(&["setup", "claude", "--uninstall"]);
    assert_eq!(std::fs::read_to_string(s.mcp_json()).unwrap(), mine);
}

#[test]
fn a_symlinked_settings_file_stays_a_link_and_keeps_its_mode() {
    // Dotfiles kept in a repository, linked into place.
    let s = Sandbox::new();
    let real = s.dir.path().join("dotfiles/settings.json");
    write(&real, SETTINGS);
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir_all(s.claude_dir()).unwrap();
    std::os::unix::fs::symlink(&real, s.settings()).unwrap();
    s.ok(&["setup", "claude"]);
    assert!(s.settings().symlink_metadata().unwrap().is_symlink());
    assert!(commands(&read_json(&real), "Stop")[1].contains(" hook claude Stop"));
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    s.ok(&["setup", "claude", "--uninstall"]);
    assert!(s.settings().symlink_metadata().unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&real).unwrap(), SETTINGS);
}
