//! Claude Code: the hooks in `settings.json`; the MCP server through
//! `claude mcp add --scope user` when `claude` is on the PATH (Claude Code
//! keeps user servers in `~/.claude.json` and rewrites that file itself),
//! else, and always for a project, in the project's `.mcp.json`.
//!
//! | scope   | hooks                                    | MCP server                         |
//! |---------|------------------------------------------|------------------------------------|
//! | user    | `$CLAUDE_CONFIG_DIR/settings.json`, else `~/.claude/settings.json` | `claude mcp add --scope user`, else `./.mcp.json` |
//! | project | `./.claude/settings.json`                | `./.mcp.json`                      |
//!
//! A project's `.mcp.json` is written by agentmesh rather than by `claude
//! mcp add --scope project`: the file is the same, but `claude mcp remove`
//! leaves `{"mcpServers": {}}` behind, and uninstall must give the folder
//! back as it was.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::files::{self, Records};
use super::{Agent, Foreign, Kind, SERVER_NAME, Scope, Target, env_dir, home_dir};
use crate::term;

/// The environment variable that moves Claude Code's user directory (and
/// its `.claude.json`).
pub(super) const CLAUDE_CONFIG_DIR_ENV: &str = "CLAUDE_CONFIG_DIR";

/// How long a `claude mcp` command may take. It starts Node and edits a
/// file (under a second here); a minute means it is stuck.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Claude Code's user directory: `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
pub(super) fn user_dir() -> anyhow::Result<PathBuf> {
    match env_dir(CLAUDE_CONFIG_DIR_ENV) {
        Some(d) => Ok(d),
        None => Ok(home_dir()?.join(".claude")),
    }
}

/// The file Claude Code keeps user-scope MCP servers in:
/// `$CLAUDE_CONFIG_DIR/.claude.json`, else `~/.claude.json`. agentmesh only
/// reads it.
pub(super) fn user_config_file() -> anyhow::Result<PathBuf> {
    match env_dir(CLAUDE_CONFIG_DIR_ENV) {
        Some(d) => Ok(d.join(".claude.json")),
        None => Ok(home_dir()?.join(".claude.json")),
    }
}

/// The files `setup claude` manages at `scope`. `registers` says whether
/// the MCP server goes through `claude mcp add` instead of `.mcp.json`.
pub(super) fn targets(scope: &Scope, registers: bool) -> anyhow::Result<Vec<Target>> {
    let settings = match scope {
        Scope::User => user_dir()?.join("settings.json"),
        Scope::Project(cwd) => cwd.join(".claude").join("settings.json"),
    };
    let mut targets = vec![Target {
        path: settings,
        kind: Kind::Hooks(Agent::Claude),
    }];
    if !registers {
        let cwd = match scope {
            Scope::User => std::env::current_dir()?,
            Scope::Project(cwd) => cwd.clone(),
        };
        targets.push(Target {
            path: cwd.join(".mcp.json"),
            kind: Kind::McpJson,
        });
    }
    Ok(targets)
}

/// What Claude Code users are told after setup.
pub(super) fn notes(scope: &Scope, registers: bool) -> anyhow::Result<Vec<String>> {
    let mut notes = vec![];
    match scope {
        Scope::User if !registers => {
            let here = std::env::current_dir()?.join(".mcp.json");
            notes.push(format!(
                "`claude` is not on the PATH, so the MCP server goes into {}: a project file, which Claude Code reads in this folder only (it keeps user servers in ~/.claude.json, which it rewrites itself). Once `claude` is on the PATH, run `agentmesh setup claude` again to register it for every project",
                here.display()
            ));
        }
        Scope::Project(_) => notes.push(
            "Claude Code asks once before it starts the servers of a project's .mcp.json".into(),
        ),
        Scope::User => {}
    }
    Ok(notes)
}

/// A `claude mcp` command to run.
#[derive(Debug, Clone)]
pub(super) struct CliCommand {
    /// The arguments after `claude`.
    pub args: Vec<String>,
    /// What it does to agentmesh's record of the registration.
    pub effect: Effect,
}

/// What a command changes in Claude Code's user config.
#[derive(Debug, Clone)]
pub(super) enum Effect {
    /// Registers the server with this command line.
    Adds(Vec<String>),
    /// Unregisters it.
    Removes,
}

fn add(server: &[String]) -> CliCommand {
    let mut args: Vec<String> = ["mcp", "add", "--scope", "user", SERVER_NAME, "--"]
        .map(String::from)
        .into();
    args.extend(server.iter().cloned());
    CliCommand {
        args,
        effect: Effect::Adds(server.to_vec()),
    }
}

fn remove() -> CliCommand {
    CliCommand {
        args: ["mcp", "remove", "--scope", "user", SERVER_NAME]
            .map(String::from)
            .into(),
        effect: Effect::Removes,
    }
}

/// The server as Claude Code's user config lists it now, if it does.
fn registered() -> anyhow::Result<Option<Vec<String>>> {
    let config = user_config_file()?;
    let text = files::read(&config)?;
    Ok(text.and_then(|t| super::json::server_command(&String::from_utf8_lossy(&t))))
}

/// A registration setup did not make, named in the report.
fn foreign(current: &[String]) -> Foreign {
    let line = current.iter().skip(1).map(String::as_str).collect();
    let command = current.first().map(String::as_str).unwrap_or_default();
    Foreign::new(super::json::describe_server(
        SERVER_NAME,
        Some((command, line)),
    ))
}

/// The commands that register `server` (its command line): none if Claude
/// Code has it registered already, `remove` then `add` if setup's own
/// registration (recorded, with the command line Claude Code still lists)
/// has another command line. A registration setup did not make is left
/// alone, and returned to be named.
pub(super) fn register(
    server: &[String],
    records: &Records,
) -> anyhow::Result<(Vec<CliCommand>, Vec<Foreign>)> {
    let ours = records.mcp(&user_config_file()?)?;
    Ok(match registered()? {
        None => (vec![add(server)], vec![]),
        Some(current) if ours.is_some_and(|r| r.command == current) => {
            if current == server {
                (vec![], vec![])
            } else {
                // `add` refuses a name that exists, so `remove` goes first.
                (vec![remove(), add(server)], vec![])
            }
        }
        Some(current) => {
            let mut f = foreign(&current);
            f.same_as_ours = current == server;
            f.in_the_way = !f.same_as_ours;
            (vec![], vec![f])
        }
    })
}

/// What uninstalling does to the registration: `remove` if Claude Code
/// lists setup's own (recorded, with the same command line); a
/// registration setup did not make is left alone and returned to be named.
/// The last part says whether setup's record is to be forgotten without a
/// command (Claude Code no longer lists it, or lists another).
pub(super) fn unregister(
    records: &Records,
) -> anyhow::Result<(Vec<CliCommand>, Vec<Foreign>, bool)> {
    let ours = records.mcp(&user_config_file()?)?;
    Ok(match (registered()?, ours) {
        (Some(current), Some(r)) if r.command == current => (vec![remove()], vec![], false),
        (Some(current), ours) => (vec![], vec![foreign(&current)], ours.is_some()),
        (None, ours) => (vec![], vec![], ours.is_some()),
    })
}

/// Runs `claude ARGS` (the program found on the PATH) and carries out its
/// effect on the records.
pub(super) fn run(program: &Path, command: &CliCommand, records: &Records) -> anyhow::Result<()> {
    let shown = super::shell_line("claude", &command.args);
    let rt = term::runtime()?;
    let out = rt.block_on(async {
        tokio::time::timeout(
            CLI_TIMEOUT,
            tokio::process::Command::new(program)
                .args(&command.args)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
    });
    let out = match out {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => {
            return Err(term::cli_error(
                "agent_cli_failed",
                format!("cannot run `{shown}`: {e}"),
            ));
        }
        Err(_) => {
            return Err(term::cli_error(
                "agent_cli_failed",
                format!(
                    "`{shown}` did not finish within {}; run it yourself to see why, then run this again",
                    agentmesh_protocol::time::exact_duration(CLI_TIMEOUT)
                ),
            ));
        }
    };
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Removing a server Claude Code no longer has is what was wanted.
    let gone = matches!(command.effect, Effect::Removes) && said.contains("No MCP server");
    if !out.status.success() && !gone {
        return Err(term::cli_error(
            "agent_cli_failed",
            format!(
                "`{shown}` failed ({}): {}; fix that and run this again",
                out.status,
                said.trim()
            ),
        ));
    }
    let config = user_config_file()?;
    match &command.effect {
        Effect::Adds(server) => records.save_mcp(&config, "user", server),
        Effect::Removes => records.forget_mcp(&config),
    }
}
