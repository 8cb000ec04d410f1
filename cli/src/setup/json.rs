//! Editing agents' JSON files: hooks (Claude Code's `settings.json`,
//! Codex's `hooks.json`) and MCP servers (`.mcp.json`).
//!
//! A file is parsed, agentmesh's entries put in or taken out, and written
//! back with the file's own indentation, its keys in their order
//! (serde_json's `preserve_order`) and everything else as it was. A file
//! whose value did not change is not rewritten at all.

use std::path::Path;

use serde_json::{Map, Value};

use super::{Agent, Hook, Server};
use crate::term;

/// A parsed JSON file and how it was laid out.
struct Doc {
    root: Map<String, Value>,
    /// The indentation of its first indented line; `None`: all on one line.
    indent: Option<String>,
    trailing_newline: bool,
}

fn parse(path: &Path, text: Option<&str>) -> anyhow::Result<Doc> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(Doc {
            root: Map::new(),
            indent: Some("  ".into()),
            trailing_newline: true,
        });
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        term::cli_error(
            "bad_agent_config",
            format!(
                "{} is not valid JSON (line {}, column {}: {e}); fix it or move it away, then run this again. Nothing was changed",
                path.display(),
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(root) = value else {
        return Err(term::cli_error(
            "bad_agent_config",
            format!(
                "{} holds JSON that is not an object ({{ … }}); fix it or move it away, then run this again. Nothing was changed",
                path.display()
            ),
        ));
    };
    let body = text.trim_end();
    let indent = body.contains('\n').then(|| {
        body.lines()
            .skip(1)
            .map(|l| &l[..l.len() - l.trim_start().len()])
            .find(|w| !w.is_empty())
            .unwrap_or("  ")
            .to_owned()
    });
    Ok(Doc {
        root,
        indent,
        trailing_newline: text.ends_with('\n'),
    })
}

fn render(doc: &Doc) -> anyhow::Result<String> {
    let value = Value::Object(doc.root.clone());
    let mut text = match &doc.indent {
        None => serde_json::to_string(&value)?,
        Some(indent) => {
            let mut out = vec![];
            let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(&value, &mut ser)?;
            String::from_utf8(out)?
        }
    };
    if doc.trailing_newline {
        text.push('\n');
    }
    Ok(text)
}

/// Runs `edit` on the file's object; the new text, or the old text
/// unchanged if the value is the same.
fn edit(
    path: &Path,
    text: Option<&str>,
    edit: impl FnOnce(&mut Map<String, Value>) -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let mut doc = parse(path, text)?;
    let before = doc.root.clone();
    edit(&mut doc.root)?;
    if text.is_some() && doc.root == before {
        return Ok(text.unwrap_or_default().to_owned());
    }
    render(&doc)
}

/// Whether the file's value is `{}` (what is left of a file agentmesh
/// created once its entries are out).
pub(super) fn is_empty(path: &Path, text: &str) -> bool {
    parse(path, Some(text)).is_ok_and(|d| d.root.is_empty())
}

fn not_a(path: &Path, key: &str, what: &str) -> anyhow::Error {
    term::cli_error(
        "bad_agent_config",
        format!(
            "{key} in {} is not {what}; fix it by hand, then run this again. Nothing was changed",
            path.display()
        ),
    )
}

/// Whether a hook command is one agentmesh installed for `agent`: it runs
/// a program named `agentmesh` with `hook AGENT`.
pub(super) fn is_our_hook(command: &str, agent: Agent) -> bool {
    let Some(program) = first_word(command) else {
        return false;
    };
    let name = Path::new(&program).file_name().and_then(|n| n.to_str());
    name == Some("agentmesh") && command.contains(&format!(" hook {} ", agent.name()))
}

/// The first word of a shell command, its quotes removed.
fn first_word(command: &str) -> Option<String> {
    let mut word = String::new();
    let mut chars = command.trim_start().chars();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None | Some('"'), '\\') => word.push(chars.next()?),
            (None, c) if c.is_whitespace() => break,
            (_, c) => word.push(c),
        }
    }
    (!word.is_empty()).then_some(word)
}

fn hook_value(hook: &Hook) -> Value {
    serde_json::json!({
        "type": "command",
        "command": hook.command,
        "timeout": hook.timeout_secs,
    })
}

fn is_ours(value: &Value, agent: Agent) -> bool {
    value
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| is_our_hook(c, agent))
}

/// The groups of one event: `hooks.EVENT`, created if missing.
fn event_list<'a>(
    path: &Path,
    root: &'a mut Map<String, Value>,
    event: &str,
) -> anyhow::Result<&'a mut Vec<Value>> {
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| not_a(path, "\"hooks\"", "an object"))?;
    hooks
        .entry(event)
        .or_insert_with(|| Value::Array(vec![]))
        .as_array_mut()
        .ok_or_else(|| not_a(path, &format!("\"hooks\".\"{event}\""), "a list"))
}

/// Puts agentmesh's hooks in: for each event, agentmesh's hook where it is
/// (brought up to date), else a new group at the end of the event's list.
/// Other hooks, groups and keys are left alone.
pub(super) fn install_hooks(
    path: &Path,
    text: Option<&str>,
    agent: Agent,
    hooks: &[Hook],
) -> anyhow::Result<String> {
    edit(path, text, |root| {
        for hook in hooks {
            let ours = hook_value(hook);
            let list = event_list(path, root, hook.event)?;
            let mut found = false;
            list.retain_mut(|group| {
                let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
                    return true;
                };
                let n = handlers.len();
                handlers.retain_mut(|h| {
                    if !is_ours(h, agent) {
                        return true;
                    }
                    if found {
                        return false; // a second copy
                    }
                    found = true;
                    if *h != ours {
                        *h = ours.clone();
                    }
                    true
                });
                // A group that only held a second copy goes with it.
                !(handlers.is_empty() && n > 0)
            });
            if !found {
                let mut group = Map::new();
                if let Some(m) = hook.matcher {
                    group.insert("matcher".into(), Value::String(m.into()));
                }
                group.insert("hooks".into(), Value::Array(vec![ours]));
                list.push(Value::Object(group));
            }
        }
        Ok(())
    })
}

/// Takes every agentmesh hook for `agent` out, with the groups, event
/// lists and `hooks` object that only held them.
pub(super) fn remove_hooks(path: &Path, text: &str, agent: Agent) -> anyhow::Result<String> {
    edit(path, Some(text), |root| {
        let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let mut removed = 0;
        let mut emptied_events = vec![];
        for (event, list) in hooks.iter_mut() {
            let Some(list) = list.as_array_mut() else {
                continue;
            };
            let before = list.len();
            list.retain_mut(|group| {
                let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
                    return true;
                };
                let n = handlers.len();
                handlers.retain(|h| !is_ours(h, agent));
                removed += n - handlers.len();
                // A group only agentmesh's hooks were in goes with them.
                !(handlers.is_empty() && n > 0)
            });
            if list.is_empty() && before > 0 {
                emptied_events.push(event.clone());
            }
        }
        for e in emptied_events {
            hooks.shift_remove(&e);
        }
        if removed > 0 && hooks.is_empty() {
            root.shift_remove("hooks");
        }
        Ok(())
    })
}

/// Whether the file holds an agentmesh hook for `agent`.
pub(super) fn has_hooks(path: &Path, text: &str, agent: Agent) -> bool {
    let Ok(doc) = parse(path, Some(text)) else {
        return false;
    };
    let Some(hooks) = doc.root.get("hooks").and_then(Value::as_object) else {
        return false;
    };
    hooks
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|g| g.get("hooks").and_then(Value::as_array))
        .flatten()
        .any(|h| is_ours(h, agent))
}

/// Puts `mcpServers.agentmesh` in a `.mcp.json`, or brings its command and
/// arguments up to date (other keys of it, such as `env`, stay).
pub(super) fn install_server(
    path: &Path,
    text: Option<&str>,
    server: &Server,
) -> anyhow::Result<String> {
    edit(path, text, |root| {
        let servers = root
            .entry("mcpServers")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or_else(|| not_a(path, "\"mcpServers\"", "an object"))?;
        let entry = servers
            .entry(super::SERVER_NAME)
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(entry) = entry.as_object_mut() else {
            return Err(not_a(path, "\"mcpServers\".\"agentmesh\"", "an object"));
        };
        let command = Value::String(server.command.clone());
        let args = Value::Array(server.args.iter().cloned().map(Value::String).collect());
        if entry.get("command") != Some(&command) {
            entry.insert("command".into(), command);
        }
        if entry.get("args") != Some(&args) {
            entry.insert("args".into(), args);
        }
        Ok(())
    })
}

/// Takes `mcpServers.agentmesh` out, and `mcpServers` if it held nothing
/// else.
pub(super) fn remove_server(path: &Path, text: &str) -> anyhow::Result<String> {
    edit(path, Some(text), |root| {
        if let Some(servers) = root.get_mut("mcpServers").and_then(Value::as_object_mut)
            && servers.shift_remove(super::SERVER_NAME).is_some()
            && servers.is_empty()
        {
            root.shift_remove("mcpServers");
        }
        Ok(())
    })
}

/// Whether the file lists an `agentmesh` server.
pub(super) fn has_server(path: &Path, text: &str) -> bool {
    parse(path, Some(text)).is_ok_and(|d| {
        d.root
            .get("mcpServers")
            .and_then(|s| s.get(super::SERVER_NAME))
            .is_some()
    })
}

/// The `agentmesh` server's command and arguments in a file of Claude
/// Code's own (`~/.claude.json`), read only.
pub(super) fn server_command(text: &str) -> Option<Vec<String>> {
    let root: Value = serde_json::from_str(text).ok()?;
    let server = root.get("mcpServers")?.get(super::SERVER_NAME)?;
    let mut command = vec![server.get("command")?.as_str()?.to_owned()];
    for a in server
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        command.push(a.as_str()?.to_owned());
    }
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: &'static str, command: &str) -> Hook {
        Hook {
            event,
            matcher: None,
            command: command.into(),
            timeout_secs: 5,
        }
    }

    #[test]
    fn our_hooks_are_told_apart_by_program_and_subcommand() {
        let c = Agent::Claude;
        assert!(is_our_hook("'/usr/bin/agentmesh' hook claude Stop", c));
        assert!(is_our_hook(
            "'/opt/x y/agentmesh' --home '/h' hook claude Stop",
            c
        ));
        assert!(is_our_hook("agentmesh hook claude SessionStart", c));
        assert!(!is_our_hook("'/usr/bin/agentmesh' hook codex Stop", c));
        assert!(!is_our_hook("/usr/bin/other hook claude Stop", c));
        assert!(!is_our_hook("echo agentmesh hook claude Stop", c));
        assert_eq!(first_word("'a'\\''b' c").as_deref(), Some("a'b"));
        assert_eq!(first_word("\"a b\" c").as_deref(), Some("a b"));
    }

    #[test]
    fn hooks_go_in_beside_others_and_come_out_alone() {
        let p = Path::new("settings.json");
        let text = "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"say done\"\n                    }\n                ]\n            }\n        ]\n    }\n}\n";
        let ours = [hook("Stop", "'/b/agentmesh' hook claude Stop")];
        let merged = install_hooks(p, Some(text), Agent::Claude, &ours).unwrap();
        assert!(
            merged.contains("\n    \"model\""),
            "4-space indent kept: {merged}"
        );
        let v: Value = serde_json::from_str(&merged).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["Stop"][0]["hooks"][0]["command"], "say done");
        assert_eq!(v["hooks"]["Stop"][1]["hooks"][0]["timeout"], 5);
        // Idempotent, to the byte.
        let again = install_hooks(p, Some(&merged), Agent::Claude, &ours).unwrap();
        assert_eq!(again, merged);
        // A new binary path updates the hook where it is.
        let moved = [hook("Stop", "'/c/agentmesh' hook claude Stop")];
        let updated = install_hooks(p, Some(&merged), Agent::Claude, &moved).unwrap();
        let v: Value = serde_json::from_str(&updated).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["hooks"]["Stop"][1]["hooks"][0]["command"],
            "'/c/agentmesh' hook claude Stop"
        );
        let removed = remove_hooks(p, &updated, Agent::Claude).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&removed).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn keys_keep_their_order_and_a_compact_file_stays_compact() {
        let p = Path::new("x.json");
        let text = r#"{"z":1,"a":{"y":2,"b":3}}"#;
        let out = install_server(
            p,
            Some(text),
            &Server {
                command: "/b/agentmesh".into(),
                args: vec!["mcp".into()],
            },
        )
        .unwrap();
        assert_eq!(
            out,
            r#"{"z":1,"a":{"y":2,"b":3},"mcpServers":{"agentmesh":{"command":"/b/agentmesh","args":["mcp"]}}}"#
        );
        assert_eq!(remove_server(p, &out).unwrap(), text);
    }

    #[test]
    fn bad_json_is_refused_with_its_line() {
        let e = install_hooks(
            Path::new("/s.json"),
            Some("{\n  \"a\": 1,\n  oops\n}"),
            Agent::Claude,
            &[],
        )
        .unwrap_err();
        let m = format!("{e:#}");
        assert!(m.contains("/s.json is not valid JSON (line 3"), "{m}");
        let e = install_hooks(
            Path::new("/s.json"),
            Some("{\"hooks\": []}"),
            Agent::Claude,
            &[hook("Stop", "agentmesh hook claude Stop")],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("\"hooks\" in /s.json is not an object"));
    }
}
