//! Codex: `[mcp_servers.agentmesh]` in `config.toml` and the hooks in
//! `hooks.json`, in `$CODEX_HOME` (default `~/.codex`) or a project's
//! `.codex/`.
//!
//! `config.toml` is edited with `toml_edit`, so its comments, key order
//! and formatting stay as they were; a file with nothing to change is not
//! rewritten.

use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, Item, Table, value};

use super::{Agent, Kind, Scope, Server, Target, env_dir, home_dir};
use crate::term;

/// The environment variable that moves Codex's user directory.
pub(super) const CODEX_HOME_ENV: &str = "CODEX_HOME";

/// The comment above the table agentmesh adds, so a person reading the
/// file knows where it came from and how to take it out.
const TABLE_COMMENT: &str =
    "# Added by `agentmesh setup codex`; `agentmesh setup codex --uninstall` removes it.\n";

/// Codex's user directory: `$CODEX_HOME`, else `~/.codex`.
pub(super) fn user_dir() -> anyhow::Result<PathBuf> {
    match env_dir(CODEX_HOME_ENV) {
        Some(d) => Ok(d),
        None => Ok(home_dir()?.join(".codex")),
    }
}

/// The files `setup codex` manages at `scope`.
pub(super) fn targets(scope: &Scope) -> anyhow::Result<Vec<Target>> {
    let dir = match scope {
        Scope::User => user_dir()?,
        Scope::Project(cwd) => cwd.join(".codex"),
    };
    Ok(vec![
        Target {
            path: dir.join("config.toml"),
            kind: Kind::CodexConfig,
        },
        Target {
            path: dir.join("hooks.json"),
            kind: Kind::Hooks(Agent::Codex),
        },
    ])
}

/// What Codex users are told after setup.
pub(super) fn notes(scope: &Scope) -> Vec<String> {
    let mut notes = vec![
        "Codex asks you to review new hooks before it runs them: open /hooks in Codex and trust agentmesh's (again after a setup that changed them)".to_owned(),
    ];
    if matches!(scope, Scope::Project(_)) {
        notes.push(
            "Codex reads a project's .codex/ folder only once you trust the project".to_owned(),
        );
    }
    notes
}

fn parse(path: &Path, text: &str) -> anyhow::Result<DocumentMut> {
    text.parse::<DocumentMut>().map_err(|e| {
        let line = e
            .span()
            .map(|s| text.as_bytes()[..s.start.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1);
        let at = line.map(|l| format!(" (line {l})")).unwrap_or_default();
        term::cli_error(
            "bad_agent_config",
            format!(
                "{} is not valid TOML{at}: {}; fix it or move it away, then run this again. Nothing was changed",
                path.display(),
                e.message()
            ),
        )
    })
}

fn not_a_table(path: &Path, key: &str) -> anyhow::Error {
    term::cli_error(
        "bad_agent_config",
        format!(
            "{key} in {} is not a table; fix it by hand, then run this again. Nothing was changed",
            path.display()
        ),
    )
}

/// Puts `[mcp_servers.agentmesh]` in, or brings its `command` and `args` up
/// to date (its other keys, such as `env`, stay).
pub(super) fn install_server(
    path: &Path,
    text: Option<&str>,
    server: &Server,
) -> anyhow::Result<String> {
    let original = text.unwrap_or_default();
    let mut doc = parse(path, original)?;
    // `mcp_servers = { … }` on one line: a comment can't go inside.
    let inline = doc.get("mcp_servers").is_some_and(Item::is_inline_table);
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_like_mut()
        .ok_or_else(|| not_a_table(path, "mcp_servers"))?;
    let mut changed = false;
    let args = Array::from_iter(server.args.iter().map(String::as_str));
    match servers.get_mut(super::SERVER_NAME) {
        None => {
            let mut t = Table::new();
            if !inline {
                t.decor_mut().set_prefix(if original.trim().is_empty() {
                    TABLE_COMMENT.to_owned()
                } else {
                    format!("\n{TABLE_COMMENT}")
                });
            }
            t.insert("command", value(server.command.as_str()));
            t.insert("args", value(args));
            servers.insert(super::SERVER_NAME, Item::Table(t));
            changed = true;
        }
        Some(entry) => {
            let entry = entry
                .as_table_like_mut()
                .ok_or_else(|| not_a_table(path, "mcp_servers.agentmesh"))?;
            if entry.get("command").and_then(Item::as_str) != Some(server.command.as_str()) {
                entry.insert("command", value(server.command.as_str()));
                changed = true;
            }
            let same_args = entry.get("args").and_then(Item::as_array).is_some_and(|a| {
                a.iter().map(|v| v.as_str()).collect::<Vec<_>>()
                    == server
                        .args
                        .iter()
                        .map(|s| Some(s.as_str()))
                        .collect::<Vec<_>>()
            });
            if !same_args {
                entry.insert("args", value(args));
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(original.to_owned());
    }
    Ok(doc.to_string())
}

/// Takes `[mcp_servers.agentmesh]` out, and `mcp_servers` if it held
/// nothing else and was only a heading.
pub(super) fn remove_server(path: &Path, text: &str) -> anyhow::Result<String> {
    let mut doc = parse(path, text)?;
    let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_like_mut) else {
        return Ok(text.to_owned());
    };
    if servers.remove(super::SERVER_NAME).is_none() {
        return Ok(text.to_owned());
    }
    let implicit_and_empty = doc
        .get("mcp_servers")
        .and_then(Item::as_table)
        .is_some_and(|t| t.is_empty() && t.is_implicit());
    if implicit_and_empty {
        doc.remove("mcp_servers");
    }
    Ok(doc.to_string())
}

/// Whether the file has `[mcp_servers.agentmesh]`.
pub(super) fn has_server(path: &Path, text: &str) -> bool {
    parse(path, text).is_ok_and(|d| {
        d.get("mcp_servers")
            .and_then(|s| s.get(super::SERVER_NAME))
            .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Server {
        Server {
            command: "/b/agentmesh".into(),
            args: vec!["mcp".into(), "--home".into(), "/h".into()],
        }
    }

    const CONFIG: &str = r#"# my Codex config
model = "o3"   # the good one

[mcp_servers.zeta]
command = "zeta"   # keep me
args = ["serve"]

[profiles.fast]
model = "o4-mini"

[mcp_servers.alpha]
command = "alpha"
"#;

    #[test]
    fn the_table_goes_in_with_everything_else_kept_and_comes_out_to_the_byte() {
        let p = Path::new("config.toml");
        let out = install_server(p, Some(CONFIG), &server()).unwrap();
        assert!(out.starts_with(CONFIG.trim_end()), "{out}");
        assert!(
            out.contains(
                "[mcp_servers.agentmesh]\ncommand = \"/b/agentmesh\"\nargs = [\"mcp\", \"--home\", \"/h\"]\n"
            ),
            "{out}"
        );
        assert_eq!(install_server(p, Some(&out), &server()).unwrap(), out);
        assert_eq!(remove_server(p, &out).unwrap(), CONFIG);
    }

    #[test]
    fn a_new_file_gets_only_the_table_and_loses_it_whole() {
        let p = Path::new("config.toml");
        let out = install_server(p, None, &server()).unwrap();
        assert!(out.starts_with(TABLE_COMMENT), "{out}");
        assert!(!out.contains("[mcp_servers]\n"), "{out}");
        assert_eq!(remove_server(p, &out).unwrap().trim(), "");
    }

    #[test]
    fn an_old_command_is_updated_in_place_and_its_env_kept() {
        let p = Path::new("config.toml");
        let text = "[mcp_servers.agentmesh]\ncommand = \"/old/agentmesh\"\nargs = [\"mcp\"]\nenv = { A = \"1\" }\n";
        let out = install_server(p, Some(text), &server()).unwrap();
        assert!(out.contains("command = \"/b/agentmesh\""), "{out}");
        assert!(out.contains("env = { A = \"1\" }"), "{out}");
    }

    #[test]
    fn servers_in_an_inline_table_get_ours_inline() {
        let p = Path::new("config.toml");
        let text = "model = \"o3\"\nmcp_servers = { db = { command = \"db\" } }\n";
        let out = install_server(p, Some(text), &server()).unwrap();
        let doc: DocumentMut = out.parse().unwrap();
        assert_eq!(
            doc["mcp_servers"]["agentmesh"]["command"].as_str(),
            Some("/b/agentmesh"),
            "{out}"
        );
        assert_eq!(doc["mcp_servers"]["db"]["command"].as_str(), Some("db"));
        assert_eq!(remove_server(p, &out).unwrap(), text);
    }

    #[test]
    fn bad_toml_is_refused_with_its_line() {
        let e =
            install_server(Path::new("/c.toml"), Some("a = 1\nb = = 2\n"), &server()).unwrap_err();
        let m = format!("{e:#}");
        assert!(m.contains("/c.toml is not valid TOML (line 2)"), "{m}");
    }
}
