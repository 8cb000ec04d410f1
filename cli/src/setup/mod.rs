//! `agentmesh setup claude|codex [--scope user|project] [--dry-run]
//! [--uninstall]`: registers agentmesh's MCP server (`agentmesh mcp`) with
//! a coding agent and installs its hooks (`agentmesh hook AGENT EVENT`);
//! `--uninstall` takes them out again, restoring byte for byte every file
//! only agentmesh edited.
//!
//! ```text
//! mod.rs     the command and its report (or --dry-run diffs); `up`'s offer
//! claude.rs  Claude Code's files and the `claude mcp` commands
//! codex.rs   Codex's files; config.toml through toml_edit
//! json.rs    merging into and out of JSON config files
//! plan.rs    one run: the plan, worked out before anything is written; apply
//! files.rs   the records that make --uninstall exact; writes, diffs
//! ```
//!
//! Everything is planned before anything is written: a file that can't
//! be read or parsed stops the command with nothing changed.

mod claude;
mod codex;
mod files;
mod json;
mod plan;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentmesh_node::home::Home;
use serde::{Deserialize, Serialize};

use crate::term;
use files::Records;
use plan::{Action, Setup};

/// The name the MCP server is registered under, in every agent.
const SERVER_NAME: &str = "agentmesh";

/// The agent events agentmesh hooks: the session's start and every turn
/// boundary (a prompt, a tool's result, the end of a turn).
const EVENTS: [&str; 4] = ["SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"];

/// How long an agent waits for an agentmesh hook. A hook holds up the
/// agent's turn, and it only asks the local daemon, which answers in
/// milliseconds: 5 s is the ceiling for a stuck daemon, not a budget.
const HOOK_TIMEOUT_SECS: u64 = 5;

/// A coding agent `setup` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Agent {
    /// Claude Code.
    Claude,
    /// OpenAI Codex.
    Codex,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Agent::Claude => "Claude Code",
            Agent::Codex => "Codex",
        }
    }
}

/// Where `setup` installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ScopeArg {
    /// For every project of yours (the agent's user config).
    #[default]
    User,
    /// For the project in the current folder only.
    Project,
}

/// What `agentmesh setup` was asked to do.
#[derive(Debug, Clone)]
pub struct Request {
    /// The agent.
    pub agent: Agent,
    /// User or project scope.
    pub scope: ScopeArg,
    /// Show the diffs and commands, write nothing.
    pub dry_run: bool,
    /// Take agentmesh out instead.
    pub uninstall: bool,
}

/// A scope, with the project's folder.
#[derive(Debug, Clone)]
enum Scope {
    User,
    Project(PathBuf),
}

impl Scope {
    fn of(arg: ScopeArg) -> anyhow::Result<Scope> {
        Ok(match arg {
            ScopeArg::User => Scope::User,
            ScopeArg::Project => Scope::Project(std::env::current_dir()?),
        })
    }

    fn name(&self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project(_) => "project",
        }
    }

    /// The setup's name in file records: `claude:user`,
    /// `codex:project:/path/to/project`.
    fn owner(&self, agent: Agent) -> String {
        match self {
            Scope::User => format!("{}:user", agent.name()),
            Scope::Project(dir) => format!("{}:project:{}", agent.name(), dir.display()),
        }
    }
}

/// What a config file is, so agentmesh knows how to edit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    /// Hooks JSON (Claude Code's `settings.json`, Codex's `hooks.json`).
    Hooks(Agent),
    /// A Claude Code `.mcp.json`.
    McpJson,
    /// Codex's `config.toml`.
    CodexConfig,
}

/// One file a setup manages.
#[derive(Debug, Clone)]
struct Target {
    path: PathBuf,
    kind: Kind,
}

/// One hook agentmesh installs.
#[derive(Debug, Clone)]
struct Hook {
    event: &'static str,
    matcher: Option<&'static str>,
    command: String,
    timeout_secs: u64,
}

/// The MCP server agentmesh registers.
#[derive(Debug, Clone)]
struct Server {
    command: String,
    args: Vec<String>,
}

/// What agentmesh puts into an agent's config.
#[derive(Debug, Clone)]
struct Ours {
    hooks: Vec<Hook>,
    server: Server,
}

impl Ours {
    /// The running binary, and `--home DIR` when the home was chosen (so
    /// the agent's server and hooks talk to this daemon).
    fn new(agent: Agent, agent_home: Option<&Path>) -> anyhow::Result<Ours> {
        let bin = std::env::current_exe()?.canonicalize()?;
        let bin = bin.to_string_lossy().into_owned();
        let mut args = vec!["mcp".to_owned()];
        let mut prefix = shell_quote(&bin);
        if let Some(h) = agent_home {
            let h = h.to_string_lossy();
            args.extend(["--home".to_owned(), h.to_string()]);
            prefix = format!("{prefix} --home {}", shell_quote(&h));
        }
        let hooks = EVENTS
            .iter()
            .map(|&event| Hook {
                event,
                // Claude Code's tool events filter by tool name ("*" is
                // every tool); its other events take none. Codex's
                // matchers are regular expressions, and none is every
                // tool.
                matcher: (agent == Agent::Claude && event == "PostToolUse").then_some("*"),
                command: format!("{prefix} hook {} {event}", agent.name()),
                timeout_secs: HOOK_TIMEOUT_SECS,
            })
            .collect();
        Ok(Ours {
            hooks,
            server: Server { command: bin, args },
        })
    }

    fn server_line(&self) -> Vec<String> {
        let mut line = vec![self.server.command.clone()];
        line.extend(self.server.args.iter().cloned());
        line
    }
}

impl Kind {
    fn install(self, path: &Path, text: Option<&str>, ours: &Ours) -> anyhow::Result<String> {
        match self {
            Kind::Hooks(agent) => json::install_hooks(path, text, agent, &ours.hooks),
            Kind::McpJson => json::install_server(path, text, &ours.server),
            Kind::CodexConfig => codex::install_server(path, text, &ours.server),
        }
    }

    fn remove(self, path: &Path, text: &str) -> anyhow::Result<String> {
        match self {
            Kind::Hooks(agent) => json::remove_hooks(path, text, agent),
            Kind::McpJson => json::remove_server(path, text),
            Kind::CodexConfig => codex::remove_server(path, text),
        }
    }

    fn has_ours(self, path: &Path, text: &str) -> bool {
        match self {
            Kind::Hooks(agent) => json::has_hooks(path, text, agent),
            Kind::McpJson => json::has_server(path, text),
            Kind::CodexConfig => codex::has_server(path, text),
        }
    }

    /// Whether nothing is left in it.
    fn is_empty(self, path: &Path, text: &str) -> bool {
        match self {
            Kind::Hooks(_) | Kind::McpJson => json::is_empty(path, text),
            Kind::CodexConfig => text.trim().is_empty(),
        }
    }
}

/// The report `--json` prints.
#[derive(Debug, Serialize)]
struct Report {
    agent: Agent,
    scope: &'static str,
    dry_run: bool,
    uninstall: bool,
    changed: Vec<FileReport>,
    commands: Vec<Vec<String>>,
    notes: Vec<String>,
}

#[derive(Debug, Serialize)]
struct FileReport {
    path: PathBuf,
    action: Action,
    /// With `--dry-run`: the unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    diff: Option<String>,
}

/// `agentmesh setup`. `agent_home` is the home to name in what gets
/// installed (`--home` or `$AGENTMESH_HOME` was given), `None` for the
/// default.
pub fn run(
    home: &Home,
    agent_home: Option<&Path>,
    req: &Request,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let setup = Setup::new(home, req.agent, Scope::of(req.scope)?, agent_home)?;
    let plan = if req.uninstall {
        setup.plan_uninstall()?
    } else {
        setup.plan_install()?
    };
    if !req.dry_run {
        setup.apply(&plan)?;
        if !req.uninstall {
            setup.records.undecline(req.agent.name())?;
        }
    }
    let mut report = Report {
        agent: req.agent,
        scope: setup.scope.name(),
        dry_run: req.dry_run,
        uninstall: req.uninstall,
        changed: plan
            .files
            .iter()
            .map(|f| FileReport {
                path: f.path.clone(),
                action: f.action,
                diff: (req.dry_run && f.action != Action::Unchanged)
                    .then(|| files::diff(&f.path, f.before.as_deref(), f.after.as_deref())),
            })
            .collect(),
        commands: plan
            .commands
            .iter()
            .map(|c| {
                let mut line = vec!["claude".to_owned()];
                line.extend(c.args.iter().cloned());
                line
            })
            .collect(),
        notes: plan.notes.clone(),
    };
    if plan.is_empty() {
        report.notes.push(nothing_to_do(&report));
    }
    if json {
        term::json(&report)?;
    } else {
        print_report(&report, plan.is_empty());
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run with nothing to do says.
fn nothing_to_do(r: &Report) -> String {
    let (title, scope) = (r.agent.title(), r.scope);
    if r.uninstall {
        format!("agentmesh is not set up for {title} ({scope} scope): nothing to remove")
    } else {
        format!("{title} is already set up for agentmesh ({scope} scope): nothing changed")
    }
}

fn print_report(r: &Report, nothing: bool) {
    let title = r.agent.title();
    let scope = r.scope;
    let again = match scope {
        "user" => String::new(),
        s => format!(" --scope {s}"),
    };
    if nothing {
        if let Some((headline, others)) = r.notes.split_last() {
            println!("{headline}.");
            for n in others {
                println!("note: {n}");
            }
        }
        return;
    }
    if r.dry_run {
        println!(
            "{} {title} ({scope} scope), dry run: nothing was written.",
            if r.uninstall {
                "Removing agentmesh from"
            } else {
                "Setting up"
            },
        );
        for f in r.changed.iter().filter(|f| f.diff.is_some()) {
            print!("{}", f.diff.as_deref().unwrap_or_default());
        }
        for c in &r.commands {
            println!("would run: {}", shell_line(&c[0], &c[1..]));
        }
    } else {
        println!(
            "{} {title} ({scope} scope):",
            if r.uninstall {
                "Removed agentmesh from"
            } else {
                "Set up"
            },
        );
        for c in &r.commands {
            println!("  ran        {}", shell_line(&c[0], &c[1..]));
        }
        for f in &r.changed {
            println!("  {:<10} {}", f.action.as_str(), f.path.display());
        }
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    if !r.uninstall && !r.dry_run {
        let check = match r.agent {
            Agent::Claude => "`claude mcp list` shows agentmesh ✔ Connected",
            Agent::Codex => "`codex mcp list` lists agentmesh",
        };
        println!(
            "Check it: {check}. Remove it: `agentmesh setup {}{again} --uninstall`.",
            r.agent.name()
        );
    }
}

/// Offers setup for each agent installed here and not set up yet, one
/// y/N question each (default no), when a person is at the terminal.
/// `agentmesh up` calls it once the daemon is up; a "no" is remembered.
pub fn offer(home: &Home, agent_home: Option<&Path>) {
    if !term::interactive() {
        return;
    }
    for agent in [Agent::Claude, Agent::Codex] {
        if let Err(e) = offer_one(home, agent, agent_home) {
            eprintln!("error: setting up {}: {e:#}", agent.title());
        }
    }
}

fn offer_one(home: &Home, agent: Agent, agent_home: Option<&Path>) -> anyhow::Result<()> {
    let records = Records::of(home);
    if !installed(agent)? || records.declined(agent.name()) {
        return Ok(());
    }
    let setup = Setup::new(home, agent, Scope::User, agent_home)?;
    if !records.files_of(&setup.owner)?.is_empty() {
        return Ok(());
    }
    // A config that does not parse is not set up: saying yes shows why.
    let what = match setup.plan_install() {
        Ok(plan) if plan.is_empty() => return Ok(()),
        Ok(plan) => {
            let mut what: Vec<String> = plan
                .files
                .iter()
                .filter(|f| f.action != Action::Unchanged)
                .map(|f| f.path.display().to_string())
                .collect();
            if !plan.commands.is_empty() {
                what.push("`claude mcp add --scope user`".into());
            }
            format!(" ({})", what.join(", "))
        }
        Err(_) => String::new(),
    };
    let answer = term::prompt(&format!(
        "{} is installed here. Set it up to use agentmesh: its MCP server and hooks{what}? [y/N] ",
        agent.title()
    ))?;
    if !matches!(answer.to_lowercase().as_str(), "y" | "yes") {
        records.decline(agent.name())?;
        println!(
            "Not set up; run `agentmesh setup {}` any time.",
            agent.name()
        );
        return Ok(());
    }
    let req = Request {
        agent,
        scope: ScopeArg::User,
        dry_run: false,
        uninstall: false,
    };
    run(home, agent_home, &req, false)?;
    Ok(())
}

/// Whether `agent` looks installed: its program on the PATH, or its user
/// directory there.
fn installed(agent: Agent) -> anyhow::Result<bool> {
    Ok(which(agent.name()).is_some()
        || match agent {
            Agent::Claude => claude::user_dir()?.is_dir(),
            Agent::Codex => codex::user_dir()?.is_dir(),
        })
}

/// An executable named `program` in a folder of `$PATH`.
fn which(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `$HOME`, which every agent's user config is under.
fn home_dir() -> anyhow::Result<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            term::cli_error(
                "no_home",
                "HOME is not set, so the agents' user config can't be found; set HOME, or use --scope project",
            )
        })
}

/// A folder an environment variable names, if it is set and not empty
/// (relative to the current folder if relative).
fn env_dir(var: &str) -> Option<PathBuf> {
    let d = PathBuf::from(std::env::var_os(var).filter(|v| !v.is_empty())?);
    Some(std::path::absolute(&d).unwrap_or(d))
}

/// A file's text, refusing bytes that are not UTF-8 (no agent config is).
fn utf8<'a>(path: &Path, bytes: Option<&'a [u8]>) -> anyhow::Result<Option<&'a str>> {
    bytes
        .map(|b| {
            std::str::from_utf8(b).map_err(|_| {
                term::cli_error(
                    "bad_agent_config",
                    format!(
                        "{} is not UTF-8 text; fix it or move it away, then run this again. Nothing was changed",
                        path.display()
                    ),
                )
            })
        })
        .transpose()
}

/// `s` in single quotes, for a shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A command line as a person would type it: words quoted where needed.
fn shell_line(program: &str, args: &[String]) -> String {
    let plain = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
    };
    std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(|w| {
            if plain(w) {
                w.to_owned()
            } else {
                shell_quote(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_a_shell() {
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(
            shell_line("claude", &["mcp".into(), "/x y".into()]),
            "claude mcp '/x y'"
        );
    }

    #[test]
    fn hooks_name_the_agent_the_event_and_the_home() {
        let ours = Ours::new(Agent::Codex, Some(Path::new("/h o"))).unwrap();
        assert_eq!(ours.hooks.len(), EVENTS.len());
        let stop = ours.hooks.iter().find(|h| h.event == "Stop").unwrap();
        assert!(
            stop.command.ends_with(" --home '/h o' hook codex Stop"),
            "{}",
            stop.command
        );
        // (Under `cargo test` the running binary is the test executable,
        // so the program name is checked with a stand-in.)
        let as_installed = format!(
            "'/usr/bin/agentmesh'{}",
            &stop.command[stop.command.find(" --home").unwrap()..]
        );
        assert!(
            json::is_our_hook(&as_installed, Agent::Codex),
            "{as_installed}"
        );
        assert!(!json::is_our_hook(&as_installed, Agent::Claude));
        assert_eq!(ours.server.args, ["mcp", "--home", "/h o"]);
        assert!(ours.hooks.iter().all(|h| h.matcher.is_none()));
        let claude = Ours::new(Agent::Claude, None).unwrap();
        let post = claude
            .hooks
            .iter()
            .find(|h| h.event == "PostToolUse")
            .unwrap();
        assert_eq!(post.matcher, Some("*"));
        assert_eq!(claude.server.args, ["mcp"]);
    }
}
