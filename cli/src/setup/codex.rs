//! Codex: `[mcp_servers.agentmesh]` in `config.toml` and the hooks in
//! `hooks.json`, in `$CODEX_HOME` (default `~/.codex`) or a project's
//! `.codex/`.
//!
//! `config.toml` is edited with `toml_edit`, so its comments, key order
//! and formatting stay as they were; a file with nothing to change is not
//! rewritten.

use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, Item, Table, value};

use super::json::{describe_server, recorded_server, server_entry};
use super::{
    Agent, Edited, Entry, Foreign, Kind, SERVER_NAME, Scope, Server, Target, env_dir, home_dir,
    is_agentmesh,
};
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

/// The command line of a server table (`command = …`, `args = [ … ]`), if
/// it has that shape.
fn server_line(item: &Item) -> Option<(&str, Vec<&str>)> {
    let t = item.as_table_like()?;
    let command = t.get("command")?.as_str()?;
    let args = match t.get("args") {
        None => vec![],
        Some(a) => a
            .as_array()?
            .iter()
            .map(|v| v.as_str())
            .collect::<Option<_>>()?,
    };
    Some((command, args))
}

/// Whether a server table runs exactly `command args`.
fn runs(item: &Item, command: &str, args: &[String]) -> bool {
    server_line(item).is_some_and(|(c, a)| c == command && a == args)
}

/// The servers in `mcp_servers` that are someone else's: `agentmesh`
/// unless `ours` says it is setup's, and any other that runs a program
/// named agentmesh. `server` is setup's (`None` when uninstalling).
fn foreign_servers(doc: &DocumentMut, ours: bool, server: Option<&Server>) -> Vec<Foreign> {
    let Some(servers) = doc.get("mcp_servers").and_then(Item::as_table_like) else {
        return vec![];
    };
    servers
        .iter()
        .filter_map(|(name, item)| {
            let line = server_line(item);
            let named = name == SERVER_NAME;
            let runs_us = line.as_ref().is_some_and(|(c, _)| is_agentmesh(c));
            if (named && ours) || !(named || runs_us) {
                return None;
            }
            let mut f = Foreign::new(describe_server(name, line));
            if let Some(server) = server
                && named
            {
                f.same_as_ours = runs(item, &server.command, &server.args);
                f.in_the_way = !f.same_as_ours;
            }
            Some(f)
        })
        .collect()
}

/// Puts `[mcp_servers.agentmesh]` in, or brings setup's own (recorded, and
/// still running the recorded command line) up to date: its other keys,
/// such as `env`, stay. An `agentmesh` table setup did not write is left
/// as it is.
pub(super) fn install_server(
    path: &Path,
    text: Option<&str>,
    server: &Server,
    recorded: &[Entry],
) -> anyhow::Result<Edited> {
    let original = text.unwrap_or_default();
    let mut doc = parse(path, original)?;
    let existing = doc.get("mcp_servers").and_then(|s| s.get(SERVER_NAME));
    let ours = match existing {
        None => true,
        Some(item) => recorded_server(recorded).is_some_and(|(c, a)| runs(item, c, a)),
    };
    let foreign = foreign_servers(&doc, ours, Some(server));
    if !ours {
        return Ok(Edited {
            text: original.to_owned(),
            entries: vec![],
            foreign,
        });
    }
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
    match servers.get_mut(SERVER_NAME) {
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
            servers.insert(SERVER_NAME, Item::Table(t));
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
    Ok(Edited {
        text: if changed {
            doc.to_string()
        } else {
            original.to_owned()
        },
        entries: vec![server_entry(server)],
        foreign,
    })
}

/// Takes `[mcp_servers.agentmesh]` out if it is setup's (recorded, and
/// still running the recorded command line), and `mcp_servers` if it held
/// nothing else and was only a heading.
pub(super) fn remove_server(path: &Path, text: &str, recorded: &[Entry]) -> anyhow::Result<Edited> {
    let mut doc = parse(path, text)?;
    let unchanged = |doc: &DocumentMut| Edited {
        text: text.to_owned(),
        entries: vec![],
        foreign: foreign_servers(doc, false, None),
    };
    let mine = doc
        .get("mcp_servers")
        .and_then(|s| s.get(SERVER_NAME))
        .zip(recorded_server(recorded))
        .is_some_and(|(item, (c, a))| runs(item, c, a));
    if !mine {
        return Ok(unchanged(&doc));
    }
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_like_mut) {
        servers.remove(SERVER_NAME);
    }
    let implicit_and_empty = doc
        .get("mcp_servers")
        .and_then(Item::as_table)
        .is_some_and(|t| t.is_empty() && t.is_implicit());
    if implicit_and_empty {
        doc.remove("mcp_servers");
    }
    Ok(Edited {
        text: doc.to_string(),
        entries: vec![],
        foreign: foreign_servers(&doc, false, None),
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
        let out = install_server(p, Some(CONFIG), &server(), &[]).unwrap();
        assert!(out.text.starts_with(CONFIG.trim_end()), "{}", out.text);
        assert!(
            out.text.contains(
                "[mcp_servers.agentmesh]\ncommand = \"/b/agentmesh\"\nargs = [\"mcp\", \"--home\", \"/h\"]\n"
            ),
            "{}",
            out.text
        );
        let again = install_server(p, Some(&out.text), &server(), &out.entries).unwrap();
        assert_eq!(again.text, out.text);
        assert_eq!(
            remove_server(p, &out.text, &out.entries).unwrap().text,
            CONFIG
        );
    }

    #[test]
    fn a_new_file_gets_only_the_table_and_loses_it_whole() {
        let p = Path::new("config.toml");
        let out = install_server(p, None, &server(), &[]).unwrap();
        assert!(out.text.starts_with(TABLE_COMMENT), "{}", out.text);
        assert!(!out.text.contains("[mcp_servers]\n"), "{}", out.text);
        assert_eq!(
            remove_server(p, &out.text, &out.entries)
                .unwrap()
                .text
                .trim(),
            ""
        );
    }

    #[test]
    fn setups_own_table_is_updated_in_place_and_its_env_kept() {
        let p = Path::new("config.toml");
        let old = Server {
            command: "/old/agentmesh".into(),
            args: vec!["mcp".into()],
        };
        let text = "[mcp_servers.agentmesh]\ncommand = \"/old/agentmesh\"\nargs = [\"mcp\"]\nenv = { A = \"1\" }\n";
        let recorded = [server_entry(&old)];
        let out = install_server(p, Some(text), &server(), &recorded).unwrap();
        assert!(
            out.text.contains("command = \"/b/agentmesh\""),
            "{}",
            out.text
        );
        assert!(out.text.contains("env = { A = \"1\" }"), "{}", out.text);
        // Not recorded: someone else's, left to the byte.
        let theirs = install_server(p, Some(text), &server(), &[]).unwrap();
        assert_eq!(theirs.text, text);
        assert!(theirs.foreign[0].in_the_way);
        assert!(theirs.foreign[0].what.contains("/old/agentmesh mcp"));
        assert_eq!(remove_server(p, text, &[]).unwrap().text, text);
    }

    #[test]
    fn servers_in_an_inline_table_get_ours_inline() {
        let p = Path::new("config.toml");
        let text = "model = \"o3\"\nmcp_servers = { db = { command = \"db\" } }\n";
        let out = install_server(p, Some(text), &server(), &[]).unwrap();
        let doc: DocumentMut = out.text.parse().unwrap();
        assert_eq!(
            doc["mcp_servers"]["agentmesh"]["command"].as_str(),
            Some("/b/agentmesh"),
            "{}",
            out.text
        );
        assert_eq!(doc["mcp_servers"]["db"]["command"].as_str(), Some("db"));
        assert_eq!(
            remove_server(p, &out.text, &out.entries).unwrap().text,
            text
        );
    }

    #[test]
    fn bad_toml_is_refused_with_its_line() {
        let e = install_server(
            Path::new("/c.toml"),
            Some("a = 1\nb = = 2\n"),
            &server(),
            &[],
        )
        .unwrap_err();
        let m = format!("{e:#}");
        assert!(m.contains("/c.toml is not valid TOML (line 2)"), "{m}");
    }
}
