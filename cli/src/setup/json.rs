//! Editing agents' JSON files: hooks (Claude Code's `settings.json`,
//! Codex's `hooks.json`) and MCP servers (`.mcp.json`).
//!
//! A file is parsed, agentmesh's entries put in or taken out, and written
//! back with the file's own indentation, its keys in their order
//! (serde_json's `preserve_order`) and everything else as it was. A file
//! whose value did not change is not rewritten at all. A file with a key
//! twice in one object is refused: a reader keeps one of the two
//! (serde_json the last), so rewriting it would lose the other.
//!
//! Setup's entries are the ones its record lists ([`Entry`]): a hook is
//! found by its event and exact command (first in the group it was
//! written in), a server by its name and exact command line.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{Agent, Edited, Entry, Foreign, Hook, SERVER_NAME, Server, is_agentmesh, shown};
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
    refuse_duplicate_keys(path, text)?;
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

/// Refuses a text with a key twice in one object, naming the key and its
/// second line. Other errors are left to the parse that follows.
fn refuse_duplicate_keys(path: &Path, text: &str) -> anyhow::Result<()> {
    let twice = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let Err(e) = Unique(&twice).deserialize(&mut de) else {
        return Ok(());
    };
    match twice.into_inner() {
        Some(key) => Err(term::cli_error(
            "bad_agent_config",
            format!(
                "{} has the key {key:?} twice in one object (line {}): a reader keeps only one of them, so agentmesh would lose the other; merge the two by hand, then run this again. Nothing was changed",
                path.display(),
                e.line()
            ),
        )),
        None => Ok(()),
    }
}

/// Walks a JSON value, failing at the first key an object has twice (the
/// key is left in the cell; the error carries its line).
struct Unique<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Unique(self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let e = de::Error::custom(format_args!("the key {key:?} twice"));
                *self.0.borrow_mut() = Some(key);
                return Err(e);
            }
            map.next_value_seed(Unique(self.0))?;
        }
        Ok(())
    }
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

/// Runs `edit` on the file's object; the new text (the old text unchanged
/// if the value is the same), and the object.
fn edit(
    path: &Path,
    text: Option<&str>,
    edit: impl FnOnce(&mut Map<String, Value>) -> anyhow::Result<()>,
) -> anyhow::Result<(String, Map<String, Value>)> {
    let mut doc = parse(path, text)?;
    let before = doc.root.clone();
    edit(&mut doc.root)?;
    let new = match text {
        Some(t) if doc.root == before => t.to_owned(),
        _ => render(&doc)?,
    };
    Ok((new, doc.root))
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

/// Whether a hook command runs a program named `agentmesh` (its first
/// word, quotes removed).
pub(super) fn runs_agentmesh(command: &str) -> bool {
    first_word(command).is_some_and(|p| is_agentmesh(&p))
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

fn command_of(handler: &Value) -> Option<&str> {
    handler.get("command").and_then(Value::as_str)
}

/// The handlers of a group (`{"matcher": …, "hooks": [ … ]}`).
fn handlers(group: &Value) -> &[Value] {
    group
        .get("hooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Where the handler running exactly `command` is in an event's list, as
/// (group, handler): in group `first` if it is there, else the first.
fn find_hook(list: &[Value], first: usize, command: &str) -> Option<(usize, usize)> {
    let at = |g: usize| {
        let i = handlers(list.get(g)?)
            .iter()
            .position(|h| command_of(h) == Some(command))?;
        Some((g, i))
    };
    at(first).or_else(|| (0..list.len()).find_map(at))
}

/// The hook entries of `recorded` that are `agent`'s.
fn recorded_hooks(recorded: &[Entry], agent: Agent) -> impl Iterator<Item = (&str, usize, &str)> {
    recorded.iter().filter_map(move |e| match e {
        Entry::Hook {
            agent: a,
            event,
            group,
            command,
        } if *a == agent => Some((event.as_str(), *group, command.as_str())),
        _ => None,
    })
}

/// Takes the handler running `command` out of `hooks.EVENT` (looked for
/// in group `group` first), with its group and the event's list if they
/// held only it. Whether it was there.
fn take_hook(hooks: &mut Map<String, Value>, event: &str, group: usize, command: &str) -> bool {
    let Some(list) = hooks.get_mut(event).and_then(Value::as_array_mut) else {
        return false;
    };
    let Some((g, i)) = find_hook(list, group, command) else {
        return false;
    };
    if let Some(hs) = list[g].get_mut("hooks").and_then(Value::as_array_mut) {
        hs.remove(i);
        if hs.is_empty() {
            list.remove(g);
        }
    }
    if list.is_empty() {
        hooks.shift_remove(event);
    }
    true
}

/// The hooks in the file that run agentmesh and are not among `ours`;
/// those running one of `same` are what setup would have written.
fn foreign_hooks(root: &Map<String, Value>, ours: &[Entry], same: &[String]) -> Vec<Foreign> {
    let mut out = vec![];
    let Some(hooks) = root.get("hooks").and_then(Value::as_object) else {
        return out;
    };
    for (event, list) in hooks {
        let Some(list) = list.as_array() else {
            continue;
        };
        // Setup's own in this event: (group, handler).
        let mine: Vec<(usize, usize)> = ours
            .iter()
            .filter_map(|e| match e {
                Entry::Hook {
                    event: ev,
                    group,
                    command,
                    ..
                } if ev == event => find_hook(list, *group, command),
                _ => None,
            })
            .collect();
        for (g, group) in list.iter().enumerate() {
            for (i, h) in handlers(group).iter().enumerate() {
                let Some(c) = command_of(h) else {
                    continue;
                };
                if runs_agentmesh(c) && !mine.contains(&(g, i)) {
                    let mut f = Foreign::new(format!("the {event} hook `{}`", shown(c)));
                    f.same_as_ours = same.iter().any(|s| s == c);
                    out.push(f);
                }
            }
        }
    }
    out
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

/// Puts agentmesh's hooks in: for each event, setup's recorded hook where
/// it is (brought up to date), else a new group at the end of the event's
/// list, unless a hook running exactly the same command is there already
/// (someone else's: it is used as it is). setup's recorded hooks for
/// events it no longer hooks come out. Other hooks, groups and keys are
/// left alone.
pub(super) fn install_hooks(
    path: &Path,
    text: Option<&str>,
    agent: Agent,
    hooks: &[Hook],
    recorded: &[Entry],
) -> anyhow::Result<Edited> {
    let mut entries = vec![];
    let mut same = vec![];
    let (text, root) = edit(path, text, |root| {
        for (event, group, command) in recorded_hooks(recorded, agent) {
            if !hooks.iter().any(|h| h.event == event)
                && let Some(all) = root.get_mut("hooks").and_then(Value::as_object_mut)
            {
                take_hook(all, event, group, command);
            }
        }
        for hook in hooks {
            let ours = hook_value(hook);
            let list = event_list(path, root, hook.event)?;
            let found = recorded_hooks(recorded, agent)
                .find(|(event, ..)| *event == hook.event)
                .and_then(|(_, group, command)| find_hook(list, group, command));
            let group = match found {
                Some((g, i)) => {
                    if let Some(h) = list[g]
                        .get_mut("hooks")
                        .and_then(Value::as_array_mut)
                        .and_then(|hs| hs.get_mut(i))
                    {
                        *h = ours;
                    }
                    g
                }
                None if find_hook(list, 0, &hook.command).is_some() => {
                    same.push(hook.command.clone());
                    continue;
                }
                None => {
                    let mut group = Map::new();
                    if let Some(m) = hook.matcher {
                        group.insert("matcher".into(), Value::String(m.into()));
                    }
                    group.insert("hooks".into(), Value::Array(vec![ours]));
                    list.push(Value::Object(group));
                    list.len() - 1
                }
            };
            entries.push(Entry::Hook {
                agent,
                event: hook.event.to_owned(),
                group,
                command: hook.command.clone(),
            });
        }
        Ok(())
    })?;
    let foreign = foreign_hooks(&root, &entries, &same);
    Ok(Edited {
        text,
        entries,
        foreign,
    })
}

/// Takes setup's recorded hooks for `agent` out, with the groups, event
/// lists and `hooks` object that only held them; everything else stays.
pub(super) fn remove_hooks(
    path: &Path,
    text: &str,
    agent: Agent,
    recorded: &[Entry],
) -> anyhow::Result<Edited> {
    let (text, root) = edit(path, Some(text), |root| {
        let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let mut removed = false;
        for (event, group, command) in recorded_hooks(recorded, agent) {
            removed |= take_hook(hooks, event, group, command);
        }
        if removed && hooks.is_empty() {
            root.shift_remove("hooks");
        }
        Ok(())
    })?;
    Ok(Edited {
        text,
        entries: vec![],
        foreign: foreign_hooks(&root, &[], &[]),
    })
}

/// The command line of a server entry (`{"command": …, "args": [ … ]}`),
/// if it has that shape.
fn server_line(entry: &Value) -> Option<(&str, Vec<&str>)> {
    let command = entry.get("command")?.as_str()?;
    let args = match entry.get("args") {
        None => vec![],
        Some(a) => a
            .as_array()?
            .iter()
            .map(Value::as_str)
            .collect::<Option<_>>()?,
    };
    Some((command, args))
}

/// Whether a server entry runs exactly `command args`.
fn runs(entry: &Value, command: &str, args: &[String]) -> bool {
    server_line(entry).is_some_and(|(c, a)| c == command && a == args)
}

/// Setup's recorded server entry, as (command, args).
pub(super) fn recorded_server(recorded: &[Entry]) -> Option<(&str, &[String])> {
    recorded.iter().find_map(|e| match e {
        Entry::Server {
            name,
            command,
            args,
        } if name == SERVER_NAME => Some((command.as_str(), args.as_slice())),
        _ => None,
    })
}

/// How a report names a server of someone else's: its name and command
/// line.
pub(super) fn describe_server(name: &str, line: Option<(&str, Vec<&str>)>) -> String {
    match line {
        Some((c, a)) => {
            let line = std::iter::once(c).chain(a).collect::<Vec<_>>().join(" ");
            format!("the MCP server `{}` (`{}`)", shown(name), shown(&line))
        }
        None => format!("the MCP server `{}`", shown(name)),
    }
}

/// The servers in `mcpServers` that are someone else's: `agentmesh` unless
/// `ours` says it is setup's, and any other that runs a program named
/// agentmesh. `server` is setup's (`None` when uninstalling: nothing is in
/// the way of a server that is not being added).
fn foreign_servers(root: &Map<String, Value>, ours: bool, server: Option<&Server>) -> Vec<Foreign> {
    let Some(servers) = root.get("mcpServers").and_then(Value::as_object) else {
        return vec![];
    };
    servers
        .iter()
        .filter_map(|(name, v)| {
            let line = server_line(v);
            let named = name == SERVER_NAME;
            let runs_us = line.as_ref().is_some_and(|(c, _)| is_agentmesh(c));
            if (named && ours) || !(named || runs_us) {
                return None;
            }
            let mut f = Foreign::new(describe_server(name, line));
            if let Some(server) = server
                && named
            {
                f.same_as_ours = runs(v, &server.command, &server.args);
                f.in_the_way = !f.same_as_ours;
            }
            Some(f)
        })
        .collect()
}

/// Puts `mcpServers.agentmesh` in a `.mcp.json`, or brings setup's own
/// (recorded, and still running the recorded command line) up to date:
/// its other keys, such as `env`, stay. An `agentmesh` server setup did
/// not write is left as it is.
pub(super) fn install_server(
    path: &Path,
    text: Option<&str>,
    server: &Server,
    recorded: &[Entry],
) -> anyhow::Result<Edited> {
    let mut ours = false;
    let (text, root) = edit(path, text, |root| {
        let servers = root
            .entry("mcpServers")
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or_else(|| not_a(path, "\"mcpServers\"", "an object"))?;
        let mine = |v: &Value| recorded_server(recorded).is_some_and(|(c, a)| runs(v, c, a));
        match servers.get(SERVER_NAME) {
            None => {
                servers.insert(SERVER_NAME.into(), Value::Object(Map::new()));
            }
            Some(v) if mine(v) => {}
            Some(_) => return Ok(()),
        }
        ours = true;
        let Some(entry) = servers.get_mut(SERVER_NAME).and_then(Value::as_object_mut) else {
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
    })?;
    Ok(Edited {
        foreign: foreign_servers(&root, ours, Some(server)),
        text,
        entries: if ours {
            vec![server_entry(server)]
        } else {
            vec![]
        },
    })
}

/// The record of a server setup wrote.
pub(super) fn server_entry(server: &Server) -> Entry {
    Entry::Server {
        name: SERVER_NAME.to_owned(),
        command: server.command.clone(),
        args: server.args.clone(),
    }
}

/// Takes `mcpServers.agentmesh` out if it is setup's (recorded, and still
/// running the recorded command line), and `mcpServers` if it held nothing
/// else.
pub(super) fn remove_server(path: &Path, text: &str, recorded: &[Entry]) -> anyhow::Result<Edited> {
    let recorded = recorded_server(recorded);
    let (text, root) = edit(path, Some(text), |root| {
        if let Some((c, a)) = recorded
            && let Some(servers) = root.get_mut("mcpServers").and_then(Value::as_object_mut)
            && servers.get(SERVER_NAME).is_some_and(|v| runs(v, c, a))
        {
            servers.shift_remove(SERVER_NAME);
            if servers.is_empty() {
                root.shift_remove("mcpServers");
            }
        }
        Ok(())
    })?;
    Ok(Edited {
        foreign: foreign_servers(&root, false, None),
        text,
        entries: vec![],
    })
}

/// The `agentmesh` server's command and arguments in a file of Claude
/// Code's own (`~/.claude.json`), read only.
pub(super) fn server_command(text: &str) -> Option<Vec<String>> {
    let root: Value = serde_json::from_str(text).ok()?;
    let server = root.get("mcpServers")?.get(SERVER_NAME)?;
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
    fn hooks_running_agentmesh_are_told_by_their_program() {
        assert!(runs_agentmesh("'/usr/bin/agentmesh' hook claude Stop"));
        assert!(runs_agentmesh(
            "'/opt/x y/agentmesh' --home '/h' hook codex Stop"
        ));
        assert!(runs_agentmesh("agentmesh hook claude PreToolUse"));
        assert!(!runs_agentmesh("/usr/bin/other hook claude Stop"));
        assert!(!runs_agentmesh("echo agentmesh hook claude Stop"));
        assert_eq!(first_word("'a'\\''b' c").as_deref(), Some("a'b"));
        assert_eq!(first_word("\"a b\" c").as_deref(), Some("a b"));
    }

    #[test]
    fn hooks_go_in_beside_others_and_come_out_alone() {
        let p = Path::new("settings.json");
        let text = "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": [\n            {\n                \"hooks\": [\n                    {\n                        \"type\": \"command\",\n                        \"command\": \"say done\"\n                    }\n                ]\n            }\n        ]\n    }\n}\n";
        let ours = [hook("Stop", "'/b/agentmesh' hook claude Stop")];
        let merged = install_hooks(p, Some(text), Agent::Claude, &ours, &[]).unwrap();
        assert!(
            merged.text.contains("\n    \"model\""),
            "4-space indent kept: {}",
            merged.text
        );
        assert_eq!(
            merged.entries,
            [Entry::Hook {
                agent: Agent::Claude,
                event: "Stop".into(),
                group: 1,
                command: "'/b/agentmesh' hook claude Stop".into()
            }]
        );
        let v: Value = serde_json::from_str(&merged.text).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["Stop"][0]["hooks"][0]["command"], "say done");
        assert_eq!(v["hooks"]["Stop"][1]["hooks"][0]["timeout"], 5);
        // Idempotent, to the byte.
        let again =
            install_hooks(p, Some(&merged.text), Agent::Claude, &ours, &merged.entries).unwrap();
        assert_eq!(again.text, merged.text);
        assert_eq!(again.entries, merged.entries);
        // A new binary path updates setup's hook where it is.
        let moved = [hook("Stop", "'/c/agentmesh' hook claude Stop")];
        let updated = install_hooks(
            p,
            Some(&merged.text),
            Agent::Claude,
            &moved,
            &merged.entries,
        )
        .unwrap();
        let v: Value = serde_json::from_str(&updated.text).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["hooks"]["Stop"][1]["hooks"][0]["command"],
            "'/c/agentmesh' hook claude Stop"
        );
        assert!(updated.foreign.is_empty(), "{:?}", updated.foreign);
        let removed = remove_hooks(p, &updated.text, Agent::Claude, &updated.entries).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&removed.text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
    }

    #[test]
    fn a_hook_setup_did_not_write_is_neither_updated_nor_removed() {
        let p = Path::new("settings.json");
        let theirs = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"'/b/agentmesh' --home '/other' hook claude Stop"}]}]}}"#;
        let ours = [hook("Stop", "'/b/agentmesh' hook claude Stop")];
        let out = install_hooks(p, Some(theirs), Agent::Claude, &ours, &[]).unwrap();
        let v: Value = serde_json::from_str(&out.text).unwrap();
        assert_eq!(
            v["hooks"]["Stop"][0]["hooks"][0]["command"],
            "'/b/agentmesh' --home '/other' hook claude Stop"
        );
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(out.foreign.len(), 1);
        assert!(out.foreign[0].what.contains("--home '/other'"));
        assert!(!out.foreign[0].same_as_ours);
        // Without a record, nothing is setup's: uninstall leaves the file.
        let removed = remove_hooks(p, &out.text, Agent::Claude, &[]).unwrap();
        assert_eq!(removed.text, out.text);
        assert_eq!(removed.foreign.len(), 2);
        // One that runs exactly setup's command gets no copy beside it.
        let same = install_hooks(p, Some(&out.text), Agent::Claude, &ours, &[]).unwrap();
        assert_eq!(same.text, out.text);
        assert!(same.entries.is_empty());
        assert!(same.foreign.iter().any(|f| f.same_as_ours));
    }

    #[test]
    fn keys_keep_their_order_and_a_compact_file_stays_compact() {
        let p = Path::new("x.json");
        let text = r#"{"z":1,"a":{"y":2,"b":3}}"#;
        let server = Server {
            command: "/b/agentmesh".into(),
            args: vec!["mcp".into()],
        };
        let out = install_server(p, Some(text), &server, &[]).unwrap();
        assert_eq!(
            out.text,
            r#"{"z":1,"a":{"y":2,"b":3},"mcpServers":{"agentmesh":{"command":"/b/agentmesh","args":["mcp"]}}}"#
        );
        assert_eq!(
            remove_server(p, &out.text, &out.entries).unwrap().text,
            text
        );
    }

    #[test]
    fn a_server_setup_did_not_write_keeps_its_name_and_bytes() {
        let p = Path::new(".mcp.json");
        let theirs = r#"{"mcpServers":{"agentmesh":{"command":"/x/agentmesh","args":["mcp"],"env":{"T":"1"}}}}"#;
        let server = Server {
            command: "/b/agentmesh".into(),
            args: vec!["mcp".into()],
        };
        let out = install_server(p, Some(theirs), &server, &[]).unwrap();
        assert_eq!(out.text, theirs);
        assert!(out.entries.is_empty());
        assert!(out.foreign[0].in_the_way, "{:?}", out.foreign);
        // Recorded with another command line: the user changed it, so it is
        // theirs now.
        let old = [server_entry(&Server {
            command: "/old/agentmesh".into(),
            args: vec!["mcp".into()],
        })];
        assert_eq!(
            install_server(p, Some(theirs), &server, &old).unwrap().text,
            theirs
        );
        assert_eq!(remove_server(p, theirs, &old).unwrap().text, theirs);
    }

    #[test]
    fn bad_json_is_refused_with_its_line() {
        let e = install_hooks(
            Path::new("/s.json"),
            Some("{\n  \"a\": 1,\n  oops\n}"),
            Agent::Claude,
            &[],
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
            &[],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("\"hooks\" in /s.json is not an object"));
    }

    #[test]
    fn a_key_twice_is_refused_with_its_line_at_any_depth() {
        let p = Path::new("/d.json");
        let m = |text: &str| format!("{:#}", parse(p, Some(text)).err().unwrap());
        assert!(
            m("{\"a\": 1,\n\"a\": 2}")
                .contains("/d.json has the key \"a\" twice in one object (line 2)"),
            "{}",
            m("{\"a\": 1,\n\"a\": 2}")
        );
        let deep = "{\"x\": [1, {\"b\": null,\n\n \"b\": {}}]}";
        assert!(
            m(deep).contains("the key \"b\" twice in one object (line 3)"),
            "{}",
            m(deep)
        );
        // Escapes decode to the same key.
        assert!(m("{\"k\": 1, \"\\u006b\": 2}").contains("the key \"k\" twice"));
        // The same key in two objects is fine.
        assert!(parse(p, Some("{\"a\": {\"k\": 1}, \"b\": {\"k\": 2}}")).is_ok());
    }
}
