//! `relay.toml`: the relay's flags, as a file.
//!
//! Every key is a flag's long name in snake case (`max_reservations` for
//! `--max-reservations`); a flag that repeats takes an array; `metrics`
//! takes an address, or `true` for the default one. The file is turned into
//! the arguments it stands for and parsed by the same clap parser as the
//! command line, so a value means the same in both places and is checked
//! the same way. A flag given on the command line wins over its key: the
//! file's arguments for it are left out.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// Arguments that are not settings: no key stands for them.
const NOT_KEYS: [&str; 3] = ["config", "help", "version"];

/// What is wrong with a config file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// It is not TOML.
    #[error("{path} is not valid TOML: {error}")]
    Toml {
        /// The file.
        path: String,
        /// Where and why, as the parser says.
        error: String,
    },
    /// A key names no flag.
    #[error("{path}: unknown key `{key}`; the keys are the flags' names in snake case: {keys}")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// Every key there is.
        keys: String,
    },
    /// A key's value has the wrong shape.
    #[error("{path}: `{key}` {what}")]
    Value {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// What it should be.
        what: String,
    },
    /// The values do not parse as their flags' (clap's message, with the
    /// flags named as keys).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// Clap's message.
        message: String,
    },
}

/// One key of the file and the arguments it stands for.
#[derive(Debug)]
pub struct Setting {
    /// The argument's id (the `Cli` field it fills).
    pub id: String,
    /// `--flag=value`, once per value.
    pub args: Vec<OsString>,
}

/// The keys a file may hold, in the parser's order.
pub fn keys(cmd: &Command) -> Vec<String> {
    cmd.get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| !NOT_KEYS.contains(l))
        .map(|l| l.replace('-', "_"))
        .collect()
}

/// The settings of the file at `path`, as arguments of `cmd`, in the
/// file's order. Their values are not checked here: parsing them is.
pub fn read(path: &Path, cmd: &Command) -> Result<Vec<Setting>, FileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| FileError::Read {
        path: shown.clone(),
        error,
    })?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| FileError::Toml {
        path: shown.clone(),
        error: e.to_string(),
    })?;
    let mut settings = vec![];
    for (key, value) in &table {
        let long = key.replace('_', "-");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && !NOT_KEYS.contains(&long.as_str()))
            .filter(|_| !key.contains('-'))
            .ok_or_else(|| FileError::UnknownKey {
                path: shown.clone(),
                key: key.clone(),
                keys: keys(cmd).join(", "),
            })?;
        let wrong = |what: &str| FileError::Value {
            path: shown.clone(),
            key: key.clone(),
            what: what.to_owned(),
        };
        let repeats = matches!(arg.get_action(), ArgAction::Append);
        let optional_value = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        let flag = |v: &str| OsString::from(format!("--{long}={v}"));
        let args = match value {
            toml::Value::Array(items) if repeats => items
                .iter()
                .map(|i| scalar(i).map(|s| flag(&s)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| wrong("takes an array of strings or numbers"))?,
            toml::Value::Array(_) => return Err(wrong("takes one value, not an array")),
            toml::Value::Boolean(true) if optional_value => {
                vec![OsString::from(format!("--{long}"))]
            }
            toml::Value::Boolean(false) if optional_value => vec![],
            v => vec![flag(&scalar(v).ok_or_else(|| {
                wrong(if repeats {
                    "takes an array of strings or numbers (or one of them)"
                } else {
                    "takes a string or a number"
                })
            })?)],
        };
        settings.push(Setting {
            id: arg.get_id().to_string(),
            args,
        });
    }
    Ok(settings)
}

/// A string or a number, as an argument's text.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        _ => None,
    }
}

/// The ids of the arguments given on the command line itself.
pub fn given(matches: &ArgMatches) -> HashSet<String> {
    matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        .map(|id| id.to_string())
        .collect()
}

/// The arguments to parse: `program`, the file's settings the command line
/// does not give, then the command line's own arguments.
pub fn merged(
    program: OsString,
    settings: Vec<Setting>,
    given: &HashSet<String>,
    command_line: impl IntoIterator<Item = OsString>,
) -> Vec<OsString> {
    std::iter::once(program)
        .chain(
            settings
                .into_iter()
                .filter(|s| !given.contains(&s.id))
                .flat_map(|s| s.args),
        )
        .chain(command_line)
        .collect()
}

/// Clap's message about the file's arguments, with each flag named as the
/// file's key and clap's usage lines left out.
pub fn invalid(path: &Path, cmd: &Command, error: &clap::Error) -> FileError {
    let mut message = error
        .render()
        .to_string()
        .lines()
        .take_while(|l| !l.starts_with("Usage:"))
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(rest) = message.strip_prefix("error: ") {
        message = rest.to_owned();
    }
    let mut longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
    // The longest first: `--max-circuits-per-ip` before `--max-circuits`.
    longs.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for long in longs {
        let key = format!("`{}`", long.replace('-', "_"));
        for shape in [format!("'--{long} <"), format!("'--{long}'")] {
            while let Some(at) = message.find(&shape) {
                let end = message[at + 1..]
                    .find('\'')
                    .map_or(message.len(), |e| at + 2 + e);
                message.replace_range(at..end, &key);
            }
        }
    }
    FileError::Invalid {
        path: path.display().to_string(),
        message,
    }
}
