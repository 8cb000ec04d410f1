//! config.toml edited in place, for `agentmesh config set|unset`,
//! `up --save` and `init --name`: comments, key order and formatting are
//! kept (toml_edit), and every result is checked by the daemon's own
//! parser and validation ([`super::Config::parse`], then
//! [`super::Config::validate`]) before anything is written.
//!
//! The keys are derived from [`super::Config`] itself (its defaults,
//! serialised), so a field added there is a key here with nothing else to
//! change.

use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table, TableLike};

use super::{Config, ConfigError, Settings};

/// What a key's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Text (names, durations such as `"10m"`).
    String,
    /// A whole number.
    Integer,
    /// A number.
    Float,
    /// `true` or `false`.
    Boolean,
    /// A list (of multiaddrs, in this configuration).
    List,
}

impl Kind {
    fn of(value: &toml::Value) -> Option<Kind> {
        Some(match value {
            toml::Value::String(_) | toml::Value::Datetime(_) => Kind::String,
            toml::Value::Integer(_) => Kind::Integer,
            toml::Value::Float(_) => Kind::Float,
            toml::Value::Boolean(_) => Kind::Boolean,
            toml::Value::Array(_) => Kind::List,
            toml::Value::Table(_) => return None,
        })
    }

    /// How to write a value of this kind, for errors.
    fn example(self) -> &'static str {
        match self {
            Kind::String => "text, such as \"10m\"",
            Kind::Integer => "a whole number, such as 3",
            Kind::Float => "a number, such as 0.5",
            Kind::Boolean => "true or false",
            Kind::List => "a list, such as '[\"/ip4/0.0.0.0/tcp/7650\"]' (or one item alone)",
        }
    }
}

/// One key of config.toml.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// Dotted: `mdns`, `agents.max_hop`.
    pub name: String,
    /// What it holds.
    pub kind: Kind,
    /// Its value when the file does not set it.
    pub default: toml::Value,
}

impl Key {
    fn path(&self) -> Vec<&str> {
        self.name.split('.').collect()
    }
}

/// Every key, dotted, in the order of the configuration's fields, with
/// its default.
pub fn keys() -> Vec<Key> {
    // `name` is the one field left out of the file when unset
    // (`skip_serializing_if`): its default is the host name, folded.
    let every = Config {
        name: Some(super::default_name().to_string()),
        ..Config::default()
    };
    let text = every.to_toml();
    let values = toml::Value::try_from(&every).expect("the configuration always serialises");
    // The serialised text keeps the fields' order; the value gives the kinds.
    let doc: DocumentMut = text.parse().expect("the configuration's TOML parses");
    let mut out = vec![];
    walk(doc.as_table(), &mut vec![], &values, &mut out);
    out
}

fn walk(table: &dyn TableLike, at: &mut Vec<String>, values: &toml::Value, out: &mut Vec<Key>) {
    for (k, item) in table.iter() {
        at.push(k.to_owned());
        if let Some(t) = item.as_table_like() {
            walk(t, at, values, out);
        } else {
            let name = at.join(".");
            let default = at
                .iter()
                .try_fold(values, |v, seg| v.get(seg))
                .cloned()
                .expect("every key has a default");
            if let Some(kind) = Kind::of(&default) {
                out.push(Key {
                    name,
                    kind,
                    default,
                });
            }
        }
        at.pop();
    }
}

/// The key `name`, or why there is none: an unknown key with the nearest
/// known one, or a table named where a key is meant.
pub fn key(name: &str) -> Result<Key, ConfigError> {
    let all = keys();
    // `relays` was a list before it was a table: the name still sets the
    // list.
    let name = if name == "relays" {
        "relays.addrs"
    } else {
        name
    };
    if let Some(k) = all.iter().find(|k| k.name == name) {
        return Ok(k.clone());
    }
    let prefix = format!("{name}.");
    let inside: Vec<&str> = all
        .iter()
        .filter(|k| k.name.starts_with(&prefix))
        .map(|k| k.name.as_str())
        .collect();
    if !inside.is_empty() {
        return Err(ConfigError::BadValue {
            key: name.to_owned(),
            problem: format!(
                "is a table of settings; name one of its keys: {}",
                inside.join(", ")
            ),
        });
    }
    Err(ConfigError::UnknownKey {
        key: name.to_owned(),
        suggestion: nearest(name, &all),
        known: all.into_iter().map(|k| k.name).collect(),
    })
}

/// The known key nearest `name`: one whose last part is `name` (a table
/// left out), else the closest in spelling, if it is close.
fn nearest(name: &str, all: &[Key]) -> Option<String> {
    let last = |k: &Key| k.name.rsplit('.').next().unwrap_or_default().to_owned();
    if let Some(k) = all.iter().find(|k| last(k) == name) {
        return Some(k.name.clone());
    }
    // Two edits (a letter dropped, doubled or swapped, `-` for `_`) are a
    // typo; more is another word. Measured against the whole key and
    // against its last part (the table left out as well).
    all.iter()
        .map(|k| {
            let d = strsim::damerau_levenshtein(name, &k.name)
                .min(strsim::damerau_levenshtein(name, &last(k)));
            (d, &k.name)
        })
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n.clone())
}

/// `given` as a value for `key`: TOML (`true`, `3`, `"x"`, `["a", "b"]`),
/// or, where the key holds text, a bare word as that text; where it holds
/// a list, one item alone as a list of it.
pub fn value_for(key: &Key, given: &str) -> Result<toml_edit::Value, ConfigError> {
    let parsed = given.trim().parse::<toml_edit::Value>().ok();
    let bad = || ConfigError::BadValue {
        key: key.name.clone(),
        problem: format!(
            "takes {}; `{given}` is not one (the default is {})",
            key.kind.example(),
            key.default
        ),
    };
    let value = match (key.kind, parsed) {
        (Kind::String, Some(v @ toml_edit::Value::String(_))) => v,
        (Kind::String, _) => toml_edit::Value::from(given),
        (Kind::List, Some(v @ toml_edit::Value::Array(_))) => v,
        (Kind::List, Some(toml_edit::Value::String(s))) => list_of(s.value()),
        (Kind::List, None) => list_of(given),
        (Kind::Integer, Some(v @ toml_edit::Value::Integer(_)))
        | (Kind::Float, Some(v @ toml_edit::Value::Float(_)))
        | (Kind::Boolean, Some(v @ toml_edit::Value::Boolean(_))) => v,
        (Kind::Float, Some(toml_edit::Value::Integer(i))) => {
            toml_edit::Value::from(*i.value() as f64)
        }
        _ => return Err(bad()),
    };
    let mut value = value;
    value.decor_mut().clear();
    Ok(value)
}

fn list_of(item: &str) -> toml_edit::Value {
    toml_edit::Value::Array(std::iter::once(item).collect())
}

/// config.toml, open for editing.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    before: String,
    doc: DocumentMut,
}

impl ConfigFile {
    /// Reads `path` (a missing file is an empty one). A file that is not
    /// TOML at all can't be edited in place and is refused, saying where.
    pub fn open(path: &Path) -> Result<ConfigFile, ConfigError> {
        let before = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        let doc = before
            .parse::<DocumentMut>()
            .map_err(|e| ConfigError::Parse {
                path: path.display().to_string(),
                at: at(&before, e.span()),
                field: None,
                message: one_line(e.message()),
            })?;
        Ok(ConfigFile {
            path: path.to_owned(),
            before,
            doc,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text as edited.
    pub fn text(&self) -> String {
        self.doc.to_string()
    }

    /// Whether an edit changed the text.
    pub fn changed(&self) -> bool {
        self.text() != self.before
    }

    /// The value the file gives `key` as it is now, if it sets it.
    pub fn get(&self, key: &Key) -> Option<toml::Value> {
        let path = key.path();
        let (leaf, parents) = path.split_last()?;
        let mut t: &dyn TableLike = self.doc.as_table();
        let v = match self.doc.get(SHORT_LIST).and_then(Item::as_array) {
            // The short form of `[relays]`: the list alone is `addrs`.
            Some(list) if path == [SHORT_LIST, "addrs"] => &toml_edit::Value::Array(list.clone()),
            Some(_) if parents.first() == Some(&SHORT_LIST) => return None,
            _ => {
                for seg in parents {
                    t = t.get(seg)?.as_table_like()?;
                }
                t.get(leaf)?.as_value()?
            }
        };
        let mut v = v.clone();
        v.decor_mut().clear();
        toml::from_str::<toml::Table>(&format!("v = {v}"))
            .ok()?
            .remove("v")
    }

    /// Sets `key` to `value`: an existing entry keeps its place, the
    /// comments around it and its spacing; a new one goes at the end of
    /// its table, a new table at the end of the file.
    pub fn set(&mut self, key: &Key, value: toml_edit::Value) -> Result<(), ConfigError> {
        let path = key.path();
        let (leaf, parents) = path.split_last().expect("a key has a name");
        if parents.first() == Some(&SHORT_LIST) {
            self.lift_short_list();
        }
        let table = table_mut(&mut self.doc, parents, &key.name)?;
        match table.get_mut(leaf) {
            // Assigned in place: `insert` would reset the key's formatting,
            // and the comment lines above it with it.
            Some(Item::Value(old)) => {
                let decor = old.decor().clone();
                *old = value;
                *old.decor_mut() = decor;
            }
            Some(other) => *other = Item::Value(value),
            None => {
                table.insert(leaf, Item::Value(value));
            }
        }
        Ok(())
    }

    /// Removes `name` from the file (the default applies again); whether
    /// it was there. A key the configuration does not know may be removed
    /// too when the file has it: that is how a typo the daemon refuses is
    /// taken out.
    pub fn unset(&mut self, name: &str) -> Result<bool, ConfigError> {
        let known = key(name);
        // A table of known keys is not removed whole.
        if let Err(e @ ConfigError::BadValue { .. }) = known {
            return Err(e);
        }
        let name = match &known {
            Ok(k) => k.name.as_str(),
            Err(_) => name,
        };
        let path: Vec<&str> = name.split('.').collect();
        let (leaf, parents) = path.split_last().expect("split gives one part");
        if parents.first() == Some(&SHORT_LIST) {
            self.lift_short_list();
        }
        let mut t: Option<&mut dyn TableLike> = Some(self.doc.as_table_mut());
        for seg in parents {
            t = t
                .and_then(|t| t.get_mut(seg))
                .and_then(Item::as_table_like_mut);
        }
        let removed = t.and_then(|t| t.remove(leaf)).is_some();
        match known {
            Err(e) if !removed => Err(e),
            _ => Ok(removed),
        }
    }

    /// The edited file as the daemon would read it: parsed and validated
    /// by the daemon's own code; an error names the file and the field.
    pub fn check(&self) -> Result<Settings, ConfigError> {
        Config::parse(&self.text(), &self.path)?
            .validate()
            .map_err(|e| e.in_file(&self.path))
    }

    /// Writes the edited file, if it changed: a temporary file beside it,
    /// synced, renamed over it (a crash leaves the old file or the new
    /// one, never half of one), with the old file's permissions.
    pub fn save(&self) -> Result<(), ConfigError> {
        if !self.changed() {
            return Ok(());
        }
        let failed = |source| ConfigError::Write {
            path: self.path.display().to_string(),
            source,
        };
        // A linked config.toml (dotfiles) stays a link: the file it points
        // to is the one replaced.
        let target = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        let mode = std::fs::metadata(&target).map(|m| m.permissions().mode() & 0o7777);
        let mut tmp = target.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            if let Ok(mode) = mode {
                f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            f.write_all(self.text().as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &target)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            failed(e)
        })
    }
}

/// The key that is a table now and may be written as a list, its short
/// form (`relays = ["…"]` for `[relays] addrs = ["…"]`).
const SHORT_LIST: &str = "relays";

impl ConfigFile {
    /// A file with `relays = [...]` gets `[relays]` with that list as
    /// `addrs` instead (the comment above it kept), so a key of the table
    /// can be set or removed.
    fn lift_short_list(&mut self) {
        let root = self.doc.as_table_mut();
        let Some(list) = root.get(SHORT_LIST).and_then(Item::as_array).cloned() else {
            return;
        };
        // The comment lines above it go with it.
        let above = root
            .key(SHORT_LIST)
            .and_then(|k| k.leaf_decor().prefix())
            .and_then(|p| p.as_str())
            .unwrap_or_default()
            .to_owned();
        root.remove(SHORT_LIST);
        let mut table = Table::new();
        let mut list = list;
        list.decor_mut().clear();
        table.insert("addrs", Item::Value(toml_edit::Value::Array(list)));
        table.decor_mut().set_prefix(above);
        root.insert(SHORT_LIST, Item::Table(table));
    }
}

/// The table `parents` names, made (at the end of the file) if the file
/// has none.
fn table_mut<'a>(
    doc: &'a mut DocumentMut,
    parents: &[&str],
    key: &str,
) -> Result<&'a mut dyn TableLike, ConfigError> {
    let mut t: &mut dyn TableLike = doc.as_table_mut();
    for seg in parents {
        if t.get(seg).is_none() {
            t.insert(seg, Item::Table(Table::new()));
        }
        t = match t.get_mut(seg).and_then(Item::as_table_like_mut) {
            Some(next) => next,
            None => {
                return Err(ConfigError::BadValue {
                    key: key.to_owned(),
                    problem: format!(
                        "the file sets `{seg}` to a value, where a table of settings belongs; remove it with `agentmesh config unset {seg}` first"
                    ),
                });
            }
        };
    }
    Ok(t)
}

/// A parse or deserialisation error of `text` (the contents of `path`),
/// on one line, with where it is and, when it points at one, the field.
pub(super) fn parse_error(e: &toml::de::Error, text: &str, path: &Path) -> ConfigError {
    let field = e.span().and_then(|span| field_at(text, span));
    ConfigError::Parse {
        path: path.display().to_string(),
        at: at(text, e.span()),
        field,
        message: one_line(e.message()),
    }
}

/// `line L, column C` of a byte offset.
fn at(text: &str, span: Option<Range<usize>>) -> String {
    let Some(span) = span else {
        return "somewhere".into();
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .unwrap_or_default()
        .chars()
        .count()
        + 1;
    format!("line {line}, column {column}")
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The dotted field whose key or value holds the start of `span`.
fn field_at(text: &str, span: Range<usize>) -> Option<String> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut path = vec![];
    find(doc.as_table(), span.start, &mut path).then(|| path.join("."))
}

fn find(table: &dyn TableLike, at: usize, path: &mut Vec<String>) -> bool {
    let holds = |s: Option<Range<usize>>| s.is_some_and(|s| s.contains(&at));
    for (k, item) in table.iter() {
        path.push(k.to_owned());
        let key_span = table.key(k).and_then(toml_edit::Key::span);
        if let Some(t) = item.as_table_like() {
            if find(t, at, path) {
                return true;
            }
            // The span of a table's header (an unknown `[section]`).
            if holds(key_span) {
                return true;
            }
        } else if holds(key_span) || holds(item.span()) {
            return true;
        }
        path.pop();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn the_keys_are_the_configurations_fields() {
        let names: Vec<String> = keys().into_iter().map(|k| k.name).collect();
        for k in [
            "name",
            "listen",
            "mdns",
            "relays.addrs",
            "relays.reservations",
            "agents.max_hop",
            "join.max_pending",
        ] {
            assert!(names.contains(&k.to_owned()), "{k}: {names:?}");
        }
        // In the order of the fields.
        assert_eq!(names[..3], ["name", "listen", "mdns"]);
        assert_eq!(key("agents.max_hop").unwrap().kind, Kind::Integer);
        assert_eq!(key("relays").unwrap().kind, Kind::List);
        assert_eq!(key("mdns").unwrap().default, toml::Value::Boolean(true));
    }

    #[test]
    fn unknown_keys_get_the_near_one_or_the_list() {
        let e = key("agents.max_hops").unwrap_err().to_string();
        assert_eq!(
            e,
            "no config key `agents.max_hops`; did you mean `agents.max_hop`?"
        );
        for typo in ["max_hop", "max_hops", "agents.maxhop", "mnds"] {
            let e = key(typo).unwrap_err().to_string();
            assert!(e.contains("did you mean `"), "{typo}: {e}");
        }
        let e = key("no.such").unwrap_err().to_string();
        assert!(
            e.starts_with("no config key `no.such`; the keys are name, listen, mdns"),
            "{e}"
        );
        let e = key("agents").unwrap_err().to_string();
        assert!(
            e.starts_with("agents: is a table of settings; name one of its keys: agents.max_hop"),
            "{e}"
        );
    }

    #[test]
    fn values_are_toml_and_bare_words_are_text() {
        let v = |k: &str, given: &str| value_for(&key(k).unwrap(), given).map(|v| v.to_string());
        assert_eq!(v("agents.max_hop", "3").unwrap(), "3");
        assert_eq!(v("messages.lifetime", "3d").unwrap(), "\"3d\"");
        assert_eq!(v("messages.lifetime", "\"3d\"").unwrap(), "\"3d\"");
        assert_eq!(v("mdns", "false").unwrap(), "false");
        assert_eq!(
            v("relays", "/ip4/1.2.3.4/tcp/1/p2p/X").unwrap(),
            "[\"/ip4/1.2.3.4/tcp/1/p2p/X\"]"
        );
        assert_eq!(v("listen", "[\"a\", \"b\"]").unwrap(), "[\"a\", \"b\"]");
        let e = v("mdns", "yes").unwrap_err().to_string();
        assert_eq!(
            e,
            "mdns: takes true or false; `yes` is not one (the default is true)"
        );
        assert!(v("agents.max_hop", "three").is_err());
    }

    #[test]
    fn set_keeps_comments_order_and_spacing_and_checks_like_the_daemon() {
        let text =
            "# my settings\nmdns = false # no LAN here\n\n[agents]\n# fewer hops\nmax_hop   = 1\n";
        let (_dir, path) = file(text);
        let mut f = ConfigFile::open(&path).unwrap();
        let k = key("agents.max_hop").unwrap();
        assert_eq!(f.get(&k), Some(toml::Value::Integer(1)));
        f.set(&k, value_for(&k, "3").unwrap()).unwrap();
        assert_eq!(
            f.text(),
            "# my settings\nmdns = false # no LAN here\n\n[agents]\n# fewer hops\nmax_hop   = 3\n"
        );
        let m = key("mdns").unwrap();
        f.set(&m, value_for(&m, "true").unwrap()).unwrap();
        assert!(
            f.text().contains("mdns = true # no LAN here\n"),
            "{}",
            f.text()
        );
        // A new key of a new table: at the end.
        let j = key("join.max_pending").unwrap();
        f.set(&j, value_for(&j, "4").unwrap()).unwrap();
        assert!(
            f.text()
                .ends_with("max_hop   = 3\n\n[join]\nmax_pending = 4\n"),
            "{}",
            f.text()
        );
        f.check().unwrap();
        f.save().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), f.text());
        // Refused by the daemon's validation, naming the file and field.
        f.set(&k, value_for(&k, "17").unwrap()).unwrap();
        let e = f.check().unwrap_err().to_string();
        assert!(
            e.contains("config field `agents.max_hop`: must be from 0 to 16"),
            "{e}"
        );
        assert!(e.contains(&path.display().to_string()), "{e}");
        // Out of the type's range: the parser's refusal names the field.
        f.set(&k, value_for(&k, "300").unwrap()).unwrap();
        let e = f.check().unwrap_err();
        assert_eq!(e.field(), Some("agents.max_hop"), "{e}");
    }

    #[test]
    fn unset_removes_and_a_typo_in_the_file_can_be_removed() {
        let (_dir, path) = file("mdsn = false\n[agents]\nmax_hop = 1\n");
        let e = Config::load(&path).unwrap_err();
        assert_eq!(e.field(), Some("mdsn"), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("line 1, column 1") && e.contains("unknown field `mdsn`"),
            "{e}"
        );
        assert!(e.contains("agentmesh config unset mdsn"), "{e}");
        let mut f = ConfigFile::open(&path).unwrap();
        assert!(f.unset("mdsn").unwrap());
        assert!(f.unset("agents.max_hop").unwrap());
        assert!(!f.unset("agents.max_hop").unwrap());
        assert!(f.unset("no.such").is_err());
        assert!(f.unset("agents").is_err(), "a table is not removed whole");
        assert_eq!(f.text(), "[agents]\n");
        f.check().unwrap();
    }

    #[test]
    fn relays_written_as_a_list_reads_and_becomes_the_table_when_a_key_of_it_is_set() {
        let relay = "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN";
        let (_dir, path) = file(&format!(
            "# mine\nrelays = [\"{relay}\"] # the office\nmdns = false\n"
        ));
        let mut f = ConfigFile::open(&path).unwrap();
        let addrs = key("relays.addrs").unwrap();
        assert_eq!(key("relays").unwrap(), addrs, "the old name sets the list");
        assert_eq!(
            f.get(&addrs),
            Some(toml::Value::Array(vec![toml::Value::String(relay.into())]))
        );
        let reservations = key("relays.reservations").unwrap();
        assert_eq!(f.get(&reservations), None);
        f.set(&reservations, value_for(&reservations, "3").unwrap())
            .unwrap();
        let settings = f.check().unwrap();
        assert_eq!(settings.reservations, 3);
        assert_eq!(settings.relays.len(), 1);
        assert_eq!(
            f.text(),
            format!("mdns = false\n# mine\n[relays]\naddrs = [\"{relay}\"]\nreservations = 3\n"),
            "the comment above the list stays above it"
        );
        // Out of range is refused, saying the range.
        f.set(&reservations, value_for(&reservations, "9").unwrap())
            .unwrap();
        let e = f.check().unwrap_err().to_string();
        assert!(
            e.contains("`relays.reservations`: is 9; it must be from 1 to 8"),
            "{e}"
        );
    }

    #[test]
    fn a_file_that_is_not_toml_says_where() {
        let (_dir, path) = file("mdns = \n");
        let e = ConfigFile::open(&path).unwrap_err().to_string();
        assert!(e.contains("line 1, column 8"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
