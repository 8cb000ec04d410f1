//! `agentmesh config set|unset` and the `--save` of `up` and `daemon`:
//! config.toml changed in place (`agentmesh_node::config::edit`), checked
//! as the daemon checks it before anything is written, and what the
//! running daemon makes of the change said. None of them asks: each
//! changes one file, which `config unset` (or the value before) undoes.

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_node::api::{ConfigShown, ops};
use agentmesh_node::config::Config;
use agentmesh_node::config::edit::{self, ConfigFile};
use agentmesh_node::daemon::Overrides;
use agentmesh_node::home::Home;
use agentmesh_protocol::Multiaddr;
use serde::Serialize;

use crate::term;

/// The keys and their defaults, for `agentmesh config set --help`.
pub fn keys_help() -> String {
    let keys = edit::keys();
    let width = keys.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let mut out = String::from("Keys, with their defaults:\n");
    for k in keys {
        out.push_str(&format!("  {:<width$}  {}\n", k.name, k.default));
    }
    out.push_str("\nSee the effect with `agentmesh config show`; most take effect when the daemon starts (`agentmesh down && agentmesh up`).");
    out
}

/// The value `key` (dotted) has in `config`, if it has one.
fn lookup(config: &Config, key: &str) -> Option<toml::Value> {
    let all = toml::Value::try_from(config).ok()?;
    key.split('.').try_fold(&all, |v, seg| v.get(seg)).cloned()
}

/// What the running daemon makes of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum DaemonTakes {
    /// No daemon runs: the next one uses the file.
    NotRunning,
    /// It runs with this value already.
    UsesIt,
    /// It runs with another value, until it restarts.
    RestartNeeded,
}

/// `config set` / `config unset`, as `--json` prints it.
#[derive(Debug, Serialize)]
struct ConfigChange {
    /// config.toml.
    file: PathBuf,
    /// The key, dotted.
    key: String,
    /// What the file now gives it (its default if the file does not set
    /// it); null for a key that is not the configuration's (removed).
    value: Option<toml::Value>,
    /// What it was: the file's value, else the default.
    previous: Option<toml::Value>,
    /// Whether the file was written (false: it held this already).
    written: bool,
    /// What the running daemon makes of it; null for a key that is not
    /// the configuration's.
    daemon: Option<DaemonTakes>,
    /// The running daemon's process id.
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon_pid: Option<u32>,
    /// The value the running daemon uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    daemon_value: Option<toml::Value>,
}

/// The running daemon's pid and configuration, if one runs.
fn running(home: &Home) -> anyhow::Result<Option<(u32, Config)>> {
    let rt = term::runtime()?;
    rt.block_on(async {
        let mut c = match term::client(home).await {
            Ok(c) => c,
            Err(e) if term::not_running(&e).is_some() => return Ok(None),
            Err(e) => return Err(e),
        };
        let pid = c.status().await?.pid;
        let shown: ConfigShown = c.call(ops::ConfigShow).await?;
        Ok(Some((pid, shown.config)))
    })
}

/// `agentmesh config set KEY VALUE`, or (`value` none) `config unset KEY`.
pub fn set(home: &Home, name: &str, value: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    if name == "name" {
        return Err(term::cli_error(
            "use_init",
            "this machine's name is set with `agentmesh init --name NAME`, which checks first that no team knows the machine by another name; nothing was changed",
        ));
    }
    let mut file = ConfigFile::open(&home.config_file())?;
    // An unknown key may still be unset when the file has it (a typo the
    // daemon refuses): `unset` says if it has not.
    let key = match edit::key(name) {
        Ok(k) => Some(k),
        Err(e) if value.is_some() => return Err(e.into()),
        Err(_) => None,
    };
    let previous = key
        .as_ref()
        .map(|k| file.get(k).unwrap_or_else(|| k.default.clone()));
    match (value, &key) {
        (Some(v), Some(key)) => {
            let v = edit::value_for(key, v)?;
            file.set(key, v)?;
        }
        _ => {
            file.unset(name)?;
        }
    }
    // What the daemon would refuse is refused here, naming the field,
    // before anything is written.
    let settings = file.check()?;
    let written = file.changed();
    if written {
        home.create()?;
        file.save()?;
    }
    let known = key.is_some();
    let now = known.then(|| lookup(&settings.config, name)).flatten();
    let (daemon, daemon_pid, daemon_value) = match (known, running(home)?) {
        (false, _) => (None, None, None),
        (true, None) => (Some(DaemonTakes::NotRunning), None, None),
        (true, Some((pid, config))) => {
            let uses = lookup(&config, name);
            let takes = if uses == now {
                DaemonTakes::UsesIt
            } else {
                DaemonTakes::RestartNeeded
            };
            (Some(takes), Some(pid), uses)
        }
    };
    let change = ConfigChange {
        file: file.path().to_owned(),
        key: name.to_owned(),
        value: now,
        previous,
        written,
        daemon,
        daemon_pid,
        daemon_value,
    };
    if json {
        term::json(&change)?;
    } else {
        print_change(&change, value.is_some());
    }
    Ok(ExitCode::SUCCESS)
}

fn shown(v: &Option<toml::Value>) -> String {
    v.as_ref()
        .map_or_else(|| "nothing".into(), ToString::to_string)
}

fn print_change(c: &ConfigChange, set: bool) {
    let file = c.file.display();
    let key = &c.key;
    match (set, c.written, c.value.is_some()) {
        (true, true, _) => crate::say!(
            "Set {key} = {} in {file} (it was {}).",
            shown(&c.value),
            shown(&c.previous)
        ),
        (true, false, _) => crate::say!(
            "{key} is {} in {file} already; nothing was written.",
            shown(&c.value)
        ),
        (false, true, true) => crate::say!(
            "Removed {key} from {file}: it is the default again, {}.",
            shown(&c.value)
        ),
        (false, true, false) => {
            crate::say!("Removed {key}, which is not a config key, from {file}.")
        }
        (false, false, _) => crate::say!(
            "{key} is not set in {file}: it is the default, {}; nothing was written.",
            shown(&c.value)
        ),
    }
    match (c.daemon, c.daemon_pid) {
        (Some(DaemonTakes::NotRunning), _) => {
            crate::say!(
                "The daemon is not running; it uses the file when it starts (`agentmesh up`)."
            )
        }
        (Some(DaemonTakes::UsesIt), Some(pid)) => {
            crate::say!("The running daemon (pid {pid}) uses this value already.")
        }
        (Some(DaemonTakes::RestartNeeded), Some(pid)) => crate::say!(
            "The running daemon (pid {pid}) uses the old value, {}, until `agentmesh down && agentmesh up`.",
            shown(&c.daemon_value)
        ),
        _ => {}
    }
}

/// What `--save` wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Saved {
    /// config.toml.
    pub file: PathBuf,
    /// Each key set, as `key = value`.
    pub set: Vec<String>,
    /// Whether the file changed (false: it held all of it already).
    pub written: bool,
}

impl Saved {
    /// The line that says so.
    pub fn line(&self) -> String {
        if self.written {
            format!("Saved to {}: {}.", self.file.display(), self.set.join(", "))
        } else {
            format!("{} has these settings already.", self.file.display())
        }
    }
}

/// Writes the settings the command line gave (`--listen` as `listen`,
/// `--no-mdns` as `mdns = false`, `--relay` and `--bootstrap` added to
/// `relays.addrs` and `bootstrap`, as the flags add to them) to config.toml,
/// checked first as the daemon checks it.
pub fn save(home: &Home, given: &Overrides) -> anyhow::Result<Saved> {
    let mut file = ConfigFile::open(&home.config_file())?;
    let mut set = vec![];
    let mut put = |file: &mut ConfigFile, name: &str, value: toml_edit::Value| {
        let key = edit::key(name)?;
        set.push(format!("{} = {value}", key.name));
        file.set(&key, value)
    };
    if !given.listen.is_empty() {
        put(
            &mut file,
            "listen",
            list(given.listen.iter().map(ToString::to_string)),
        )?;
    }
    if given.no_mdns {
        put(&mut file, "mdns", toml_edit::Value::from(false))?;
    }
    for (name, addrs) in [("relays", &given.relays), ("bootstrap", &given.bootstrap)] {
        if addrs.is_empty() {
            continue;
        }
        let key = edit::key(name)?;
        let mut have: Vec<String> = match file.get(&key) {
            Some(toml::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        };
        for a in addrs {
            if !have
                .iter()
                .any(|h| h.parse::<Multiaddr>().ok().as_ref() == Some(a))
            {
                have.push(a.to_string());
            }
        }
        put(&mut file, name, list(have.into_iter()))?;
    }
    file.check()?;
    let written = file.changed();
    if written {
        home.create()?;
        file.save()?;
    }
    Ok(Saved {
        file: file.path().to_owned(),
        set,
        written,
    })
}

fn list(items: impl Iterator<Item = String>) -> toml_edit::Value {
    toml_edit::Value::Array(items.collect())
}
