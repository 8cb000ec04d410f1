//! The service's files: where they go, what they say (a systemd unit, a
//! launchd property list), and reading back the command a written one
//! runs.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::term;

/// The unit's file name (systemd).
pub const UNIT: &str = "agentmesh.service";
/// The agent's label (launchd).
pub const LABEL: &str = "dev.agentmesh.daemon";

/// `agentmesh daemon`'s exit status when another daemon holds its home:
/// the unit names it in `RestartPreventExitStatus=`, so that the daemon is
/// not started again and again beside the one that runs.
pub const ALREADY_RUNNING_EXIT: u8 = 3;

/// A user service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    /// systemd's user instance (`systemctl --user`).
    Systemd,
    /// launchd's per-user agents (`launchctl … gui/UID`).
    Launchd,
}

impl Manager {
    /// The platform's: launchd on macOS, systemd elsewhere.
    pub fn platform() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    /// The manager itself, as a message names it.
    pub fn manager_name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd user manager",
            Manager::Launchd => "launchd",
        }
    }

    /// What it runs, as a message names it.
    pub fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd user unit",
            Manager::Launchd => "launchd agent",
        }
    }
}

/// `$XDG_CONFIG_HOME`, else `~/.config` (the XDG base directory rule;
/// root included).
fn config_dir() -> anyhow::Result<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => Ok(dir),
        _ => Ok(user_home()?.join(".config")),
    }
}

fn user_home() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| {
            term::cli_error(
                "no_home",
                "HOME is not set to an absolute path, so there is no place for the user's services; set it and run this again",
            )
        })
}

/// The service's file for `manager`.
pub fn path(manager: Manager) -> anyhow::Result<PathBuf> {
    Ok(match manager {
        Manager::Systemd => config_dir()?.join("systemd/user").join(UNIT),
        Manager::Launchd => user_home()?
            .join("Library/LaunchAgents")
            .join(format!("{LABEL}.plist")),
    })
}

/// systemd's record that the unit starts at login: its link in the
/// target it is wanted by.
pub(super) fn wants_link(unit: &Path) -> Option<PathBuf> {
    Some(unit.parent()?.join("default.target.wants").join(UNIT))
}

/// The command the service runs: this binary, the home when it is not
/// the default, `daemon`.
pub(super) fn command(agent_home: Option<&Path>) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe()?;
    let mut c = vec![exe.to_string_lossy().into_owned()];
    if let Some(home) = agent_home {
        c.push("--home".into());
        c.push(home.to_string_lossy().into_owned());
    }
    c.push("daemon".into());
    Ok(c)
}

/// One argument of a unit's `ExecStart`, quoted as systemd reads it: in
/// double quotes, `\` and `"` escaped, `%` (a specifier) and `$` (a
/// variable) doubled.
fn systemd_arg(arg: &str) -> String {
    let mut out = String::from("\"");
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Refuses a command a unit or property list could not hold as one line
/// of arguments: a control character (a newline would end `ExecStart`).
pub(super) fn check_command(command: &[String]) -> anyhow::Result<()> {
    match command.iter().find(|a| a.chars().any(char::is_control)) {
        Some(arg) => Err(term::cli_error(
            "bad_service_path",
            format!(
                "{arg:?} has a control character, which a service file can't hold; move the binary or the home to a plain path and install again"
            ),
        )),
        None => Ok(()),
    }
}

/// The systemd unit running `command`.
pub fn unit_text(command: &[String]) -> String {
    let exec: Vec<String> = command.iter().map(|a| systemd_arg(a)).collect();
    format!(
        "# Written by `agentmesh service install`; `agentmesh service uninstall` removes it.
[Unit]
Description=agentmesh daemon (messages between coding agents across machines)

[Service]
# In the foreground; its log goes to the journal (journalctl --user -u agentmesh).
ExecStart={}
# A clean stop (`agentmesh down`, SIGTERM) exits 0 and stays stopped; so
# does a daemon that finds another running on its home (status {}).
Restart=on-failure
RestartPreventExitStatus={}
RestartSec=5

[Install]
WantedBy=default.target
",
        exec.join(" "),
        ALREADY_RUNNING_EXIT,
        ALREADY_RUNNING_EXIT,
    )
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The launchd agent running `command`, its output to `log`.
pub fn plist_text(command: &[String], log: &Path) -> String {
    let args: String = command
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml(a)))
        .collect();
    let log = xml(&log.to_string_lossy());
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `agentmesh service install`; `agentmesh service uninstall` removes it. -->
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{LABEL}</string>
  <key>ProgramArguments</key>
  <array>
{args}  </array>
  <key>RunAtLoad</key>
  <true/>
  <!-- Started again when it fails, not after a clean stop (`agentmesh down`). -->
  <key>KeepAlive</key>
  <dict>
    <key>SuccessfulExit</key>
    <false/>
  </dict>
  <key>ThrottleInterval</key>
  <integer>5</integer>
  <key>StandardOutPath</key>
  <string>{log}</string>
  <key>StandardErrorPath</key>
  <string>{log}</string>
</dict>
</plist>
"#
    )
}

/// The command a written file runs, read back (`None`: not ours, or not
/// readable).
pub(super) fn written_command(manager: Manager, text: &str) -> Option<Vec<String>> {
    match manager {
        Manager::Systemd => {
            let line = text.lines().find_map(|l| l.strip_prefix("ExecStart="))?;
            unquote_systemd(line)
        }
        Manager::Launchd => {
            let array = text.split_once("<key>ProgramArguments</key>")?.1;
            let array = array.split_once("</array>")?.0;
            Some(
                array
                    .split("<string>")
                    .skip(1)
                    .filter_map(|s| s.split_once("</string>"))
                    .map(|(s, _)| {
                        s.replace("&quot;", "\"")
                            .replace("&lt;", "<")
                            .replace("&gt;", ">")
                            .replace("&amp;", "&")
                    })
                    .collect(),
            )
        }
    }
}

/// The arguments of an `ExecStart` line as [`systemd_arg`] writes them.
fn unquote_systemd(line: &str) -> Option<Vec<String>> {
    let mut args = vec![];
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => continue,
            '"' => {
                let mut arg = String::new();
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => arg.push(chars.next()?),
                        '%' if chars.peek() == Some(&'%') => {
                            chars.next();
                            arg.push('%');
                        }
                        '$' if chars.peek() == Some(&'$') => {
                            chars.next();
                            arg.push('$');
                        }
                        c => arg.push(c),
                    }
                }
                args.push(arg);
            }
            _ => return None,
        }
    }
    Some(args)
}

/// The home a written command runs (`None`: the default one).
pub(super) fn home_of(command: &[String]) -> Option<&str> {
    let at = command.iter().position(|a| a == "--home")?;
    command.get(at + 1).map(String::as_str)
}

/// Writes `text` to `path` by a rename, so a unit is never read half
/// written.
pub(super) fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no folder", path.display()))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_start_reads_back_as_written() {
        let command: Vec<String> = [
            "/opt/my tools/agentmesh",
            "--home",
            "/home/a \"b\"/50%$HOME\\x",
            "daemon",
        ]
        .map(String::from)
        .to_vec();
        let unit = unit_text(&command);
        assert!(unit.contains("%%$$HOME"), "{unit}");
        assert_eq!(written_command(Manager::Systemd, &unit), Some(command));
    }

    #[test]
    fn a_plist_reads_back_as_written() {
        let command: Vec<String> = ["/Applications/a&b/<agentmesh>", "daemon"]
            .map(String::from)
            .to_vec();
        let plist = plist_text(&command, Path::new("/tmp/log"));
        assert!(plist.contains("a&amp;b/&lt;agentmesh&gt;"), "{plist}");
        assert_eq!(written_command(Manager::Launchd, &plist), Some(command));
    }

    #[test]
    fn the_default_home_is_no_home_flag() {
        let with = ["x", "--home", "/h", "daemon"].map(String::from);
        assert_eq!(home_of(&with), Some("/h"));
        assert_eq!(home_of(&["x".into(), "daemon".into()]), None);
    }
}
