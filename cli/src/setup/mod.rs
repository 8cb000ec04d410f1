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
//! be read, parsed or written stops the command with nothing changed.
//!
//! setup touches only the entries it wrote: each file's record lists them
//! ([`Entry`]: a hook's agent, event, place and exact command; a server's
//! name and exact command line). An entry that runs a program named
//! `agentmesh` (or holds the server name `agentmesh`) but is not in the
//! record is someone else's: the user's own, or another agentmesh home's.
//! It is left as it is, byte for byte, and named in the report
//! ([`Foreign`]).

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

/// The events only Claude Code has: its SessionEnd marks a session ended
/// at once, so mail that arrives after its person closed it wakes it
/// (Codex has none: its sessions end by 12 hours with no hook).
const CLAUDE_ONLY: [&str; 1] = ["SessionEnd"];

/// The events `setup` hooks in `agent`.
fn events(agent: Agent) -> Vec<&'static str> {
    let mut all = EVENTS.to_vec();
    if agent == Agent::Claude {
        all.extend(CLAUDE_ONLY);
    }
    all
}

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

/// One entry setup wrote into a file, as the file's record keeps it: what
/// later runs (setup again, `--uninstall`) look for, and the only thing
/// they touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
enum Entry {
    /// A hook handler, in a group of its own in the event's list.
    Hook {
        /// The agent it is for (`hook claude …`, `hook codex …`).
        agent: Agent,
        /// The event (`Stop`).
        event: String,
        /// Its group's place in the event's list when setup last wrote
        /// it: where it is looked for first (the user may add groups
        /// around it).
        group: usize,
        /// The exact command: what tells it apart from another hook of
        /// the same program.
        command: String,
    },
    /// An MCP server: `mcpServers.NAME` in JSON, `[mcp_servers.NAME]` in
    /// TOML. Setup's as long as it runs exactly this command line.
    Server {
        /// Its name (`agentmesh`).
        name: String,
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
}

/// An entry that has agentmesh's name or runs a program named `agentmesh`,
/// but that setup did not write: left as it is, and named in the report.
#[derive(Debug, Clone)]
struct Foreign {
    /// What it is, for a person: ``the Stop hook `'/bin/agentmesh' …` ``.
    what: String,
    /// It is exactly what setup would have written, so setup added none
    /// beside it.
    same_as_ours: bool,
    /// It holds the name setup's own entry needs (the server `agentmesh`),
    /// so setup's was not added.
    in_the_way: bool,
}

/// The most entries of others a report names per file; a file with more
/// gets one line more saying how many. A config file with hundreds of agentmesh hooks is a
/// mistake worth one line, not hundreds.
const FOREIGN_NAMED_PER_FILE: usize = 10;

/// The most characters of someone else's command a report shows. A hook
/// command can be a whole script; its start is enough to recognise it.
const FOREIGN_COMMAND_SHOWN: usize = 200;

impl Foreign {
    fn new(what: String) -> Foreign {
        Foreign {
            what,
            same_as_ours: false,
            in_the_way: false,
        }
    }
}

/// A command line of someone else's, fit for a report: control and
/// invisible characters shown as `?`, and at most
/// [`FOREIGN_COMMAND_SHOWN`] characters.
fn shown(command: &str) -> String {
    let mut s: String = term::clean(command)
        .chars()
        .take(FOREIGN_COMMAND_SHOWN)
        .collect();
    if command.chars().count() > FOREIGN_COMMAND_SHOWN {
        s.push('…');
    }
    s
}

/// Whether `program` (a path, or a bare name) is named `agentmesh`.
fn is_agentmesh(program: &str) -> bool {
    Path::new(program).file_name().and_then(|n| n.to_str()) == Some("agentmesh")
}

/// What editing a file comes to: its new text, setup's entries in it, and
/// the entries of others it left alone.
#[derive(Debug)]
struct Edited {
    text: String,
    entries: Vec<Entry>,
    foreign: Vec<Foreign>,
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
        let hooks = events(agent)
            .into_iter()
            .map(|event| Hook {
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
    /// Puts setup's entries in (those of `recorded` still there brought up
    /// to date where they are, the others added), leaving everything else.
    fn install(
        self,
        path: &Path,
        text: Option<&str>,
        ours: &Ours,
        recorded: &[Entry],
    ) -> anyhow::Result<Edited> {
        match self {
            Kind::Hooks(agent) => json::install_hooks(path, text, agent, &ours.hooks, recorded),
            Kind::McpJson => json::install_server(path, text, &ours.server, recorded),
            Kind::CodexConfig => codex::install_server(path, text, &ours.server, recorded),
        }
    }

    /// Takes the entries of `recorded` that are still there out.
    fn remove(self, path: &Path, text: &str, recorded: &[Entry]) -> anyhow::Result<Edited> {
        match self {
            Kind::Hooks(agent) => json::remove_hooks(path, text, agent, recorded),
            Kind::McpJson => json::remove_server(path, text, recorded),
            Kind::CodexConfig => codex::remove_server(path, text, recorded),
        }
    }

    /// Whether any entry of `recorded` is still in the file.
    fn has_ours(self, path: &Path, text: &str, recorded: &[Entry]) -> bool {
        // Taking them out changes the text exactly when one is there.
        self.remove(path, text, recorded)
            .is_ok_and(|e| e.text != text)
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
    let mut plan = if req.uninstall {
        setup.plan_uninstall()?
    } else {
        setup.plan_install()?
    };
    // A file setup may not write stops the run before anything (a `claude
    // mcp` command included) is done; a dry run says what would stop it.
    let unwritable = plan.unwritable();
    if req.dry_run {
        plan.notes.extend(
            unwritable
                .iter()
                .map(|e| format!("a real run stops here: {e}")),
        );
    } else if let Some(e) = unwritable.into_iter().next() {
        return Err(e);
    }
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
        notes: [plan.notes.as_slice(), plan.foreign.as_slice()].concat(),
    };
    if plan.is_empty() {
        report.notes.push(nothing_to_do(&report, plan.blocked));
    }
    if json {
        term::json(&report)?;
    } else {
        print_report(&report, plan.is_empty());
    }
    Ok(ExitCode::SUCCESS)
}

/// What a run with nothing to do says. `blocked`: someone else's server
/// holds the name setup's needs (a note says which).
fn nothing_to_do(r: &Report, blocked: bool) -> String {
    let (title, scope) = (r.agent.title(), r.scope);
    if r.uninstall {
        format!("agentmesh is not set up for {title} ({scope} scope): nothing to remove")
    } else if blocked {
        format!(
            "{title} has agentmesh's hooks ({scope} scope), and an MCP server named agentmesh that setup did not write (see above): nothing changed"
        )
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
            crate::outln!("{headline}.");
            for n in others {
                crate::outln!("note: {n}");
            }
        }
        return;
    }
    if r.dry_run {
        crate::outln!(
            "{} {title} ({scope} scope), dry run: nothing was written.",
            if r.uninstall {
                "Removing agentmesh from"
            } else {
                "Setting up"
            },
        );
        for f in r.changed.iter().filter(|f| f.diff.is_some()) {
            term::out_raw(f.diff.as_deref().unwrap_or_default());
        }
        for c in &r.commands {
            crate::outln!("would run: {}", shell_line(&c[0], &c[1..]));
        }
    } else {
        crate::outln!(
            "{} {title} ({scope} scope):",
            if r.uninstall {
                "Removed agentmesh from"
            } else {
                "Set up"
            },
        );
        for c in &r.commands {
            crate::outln!("  ran        {}", shell_line(&c[0], &c[1..]));
        }
        for f in &r.changed {
            crate::outln!("  {:<10} {}", f.action.as_str(), f.path.display());
        }
    }
    for n in &r.notes {
        crate::outln!("note: {n}");
    }
    if !r.uninstall && !r.dry_run {
        let check = match r.agent {
            Agent::Claude => "`claude mcp list` shows agentmesh ✔ Connected",
            Agent::Codex => "`codex mcp list` lists agentmesh",
        };
        crate::outln!(
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
        crate::outln!(
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
pub(crate) fn shell_line(program: &str, args: &[String]) -> String {
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
        assert!(json::runs_agentmesh(&as_installed), "{as_installed}");
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
