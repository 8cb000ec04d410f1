//! # agentmesh (the command)
//!
//! Parses the command line and runs the command. Every command that needs
//! the daemon talks to it through `agentmesh_node::client`, the same way
//! every other client does; `daemon`, `up`, `down`, `init`, `config` and
//! `doctor` work without one, and so does `setup`, which edits coding
//! agents' config files.
//!
//! Every command takes `--json`: its result as JSON on stdout (`watch`:
//! one object per line), and on failure a last line on stderr that is one
//! JSON object, `{"code": …, "message": …}`, with the stable code.

mod agents;
mod allocator;
mod backup;
mod bus;
mod call;
mod daemonctl;
mod demo;
mod inspect;
mod judge;
mod mail;
mod manual;
mod receipts;
mod relays;
mod service;
mod settings;
mod setup;
mod team;
mod term;
mod ui;
mod wake;
mod watch;

pub use agents::mcp::transcript as mcp_transcript;

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_node::home::Home;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// agentmesh: messages between AI coding agents and the people who run
/// them, across machines. A person admits every machine; nothing from the
/// mesh counts as the user's own instruction.
#[derive(Debug, Parser)]
#[command(name = "agentmesh", propagate_version = true)]
struct Cli {
    /// The node's home directory (config, keys, data, socket). Default:
    /// $AGENTMESH_HOME, else ~/.local/share/agentmesh.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Print the result as JSON (errors too: the last line on stderr is
    /// {"code": …, "message": …}).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args, Clone, Default)]
struct NetArgs {
    /// A multiaddr to listen on, instead of the configured ones (repeat for
    /// several). Default: TCP and QUIC on port 7650, every interface.
    #[arg(long, value_name = "MULTIADDR")]
    listen: Vec<String>,
    /// Do not discover or announce on the local network with mDNS.
    #[arg(long)]
    no_mdns: bool,
    /// A relay to hold a reservation on, so machines on other networks can
    /// reach this one: a multiaddr ending in /p2p/RELAY_PEER_ID (repeat for
    /// several; used besides `relays` in config.toml).
    #[arg(long, value_name = "MULTIADDR")]
    relay: Vec<String>,
    /// A Kademlia bootstrap node (an agentmesh-relay is one), ending in
    /// /p2p/PEER_ID (repeat for several; besides `bootstrap` in config.toml).
    #[arg(long, value_name = "MULTIADDR")]
    bootstrap: Vec<String>,
}

/// `daemon`'s and `up`'s flags.
#[derive(Debug, clap::Args, Clone, Default)]
struct StartArgs {
    #[command(flatten)]
    net: NetArgs,
    /// Also write these settings (--listen, --no-mdns, --relay,
    /// --bootstrap) to config.toml, in place, so that every later start
    /// uses them: `agentmesh up` with no flags, and the daemon an agent
    /// session starts.
    #[arg(long)]
    save: bool,
    /// More log output from the daemon (-v debug, -vv trace). RUST_LOG
    /// overrides it.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon in the foreground (with --json, its log as JSON lines).
    Daemon(StartArgs),
    /// Start the daemon in the background (if it runs already: nothing,
    /// unless the flags ask for other settings, which is refused).
    Up(StartArgs),
    /// Stop the daemon; agent sessions start none until `agentmesh up`.
    Down,
    /// Create this machine's identity and set its name (safe to repeat), or
    /// give it a new identity (--new-identity).
    Init {
        /// This machine's name in its team: lowercase letters, digits, '-'.
        #[arg(long, required_unless_present = "new_identity")]
        name: Option<String>,
        /// Replace this machine's key with a new one: the way back after it
        /// left its team or was revoked (the old key can never rejoin). Keeps
        /// config and mailboxes, forgets the team; asks first.
        #[arg(long)]
        new_identity: bool,
        /// Do not ask for confirmation (with --new-identity).
        #[arg(long, requires = "new_identity")]
        yes: bool,
    },
    /// Show the daemon's identity, team, addresses and mail state.
    Status,
    /// Show every known peer: membership, owner, connection, addresses, RTT.
    Peers,
    /// Check this node's setup and say what to fix. Never writes anything.
    Doctor,
    /// List the relays this machine holds reservations on, and their state;
    /// `relays forget PEER_ID` drops one adopted from a ticket.
    Relays {
        #[command(subcommand)]
        command: Option<relays::RelaysCommand>,
    },
    /// Show, check or change the configuration (config.toml).
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Create, show or leave the team.
    Team {
        #[command(subcommand)]
        command: team::TeamCommand,
    },
    /// Print a single-use ticket another machine can join with.
    Invite {
        #[arg(long, value_name = "DURATION", help = invite_ttl_help())]
        ttl: Option<String>,
    },
    /// Ask to join a team with a ticket from its founder.
    Join {
        /// The ticket `agentmesh invite` printed on the founder's machine.
        ticket: String,
        /// This machine's name in the team. Default: its configured name
        /// (`agentmesh init --name`, else the host name).
        #[arg(long)]
        name: Option<String>,
        /// The person who runs this machine. Default: the login name.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Admit a machine that asked to join (a person must type its code,
    /// then say whose machine it is).
    Admit {
        /// Whose machine it is, said in advance: an existing person of the
        /// team (the machine then counts as theirs: mail between their
        /// machines is never held), or a new person's name.
        #[arg(long, value_name = "NAME")]
        person: Option<String>,
        /// Days its membership lasts unless renewed (default: the team's
        /// --member-days, else 180).
        #[arg(long, value_name = "N")]
        days: Option<u32>,
    },
    /// Revoke a member of the team, by machine name.
    Revoke {
        /// The member's machine name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Send a message to MAILBOX@MACHINE (or @MACHINE, its owner).
    Send {
        /// MAILBOX@MACHINE, or @MACHINE for the machine's owner.
        to: String,
        /// The message; `-` reads it from standard input.
        text: String,
        /// Ask a question (a reply is expected) rather than tell.
        #[arg(long)]
        ask: bool,
        /// Reply to the received message with this id (or a unique prefix).
        #[arg(long, value_name = "ID")]
        reply_to: Option<String>,
        /// Send from this mailbox (default: the owner's).
        #[arg(long, value_name = "MAILBOX")]
        from: Option<String>,
        /// At a terminal, do not wait (up to 2 s) for the recipient's
        /// first answer.
        #[arg(long)]
        no_wait: bool,
    },
    /// Reply to a received message: to its sender, from the mailbox that
    /// received it, in its thread.
    Reply {
        /// The message id, or a unique prefix of it.
        id: String,
        /// The reply; `-` reads it from standard input.
        text: String,
    },
    /// List received messages.
    Inbox {
        /// Only this mailbox (`@` for the owner's).
        #[arg(long)]
        mailbox: Option<String>,
        /// Only unread messages.
        #[arg(long)]
        unread: bool,
        /// Only the newest N.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Show a received message and mark it read.
    Read {
        /// The message id, or a unique prefix of it.
        id: String,
    },
    /// List sent messages and where each stands (queued, carried,
    /// delivered, held, approved, rejected, deferred, read, failed,
    /// refused), or one of them with every state it went through.
    Outbox {
        /// Only this message (its id, or a unique prefix of it).
        id: Option<String>,
        /// Only the newest N.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Show, or set, whether a mailbox tells senders when their mail was
    /// read (delivered, held, approved, rejected, deferred and refused
    /// are always told).
    Receipts {
        /// The mailbox (`@` for the owner's).
        mailbox: String,
        /// `on` or `off`.
        #[arg(long, value_name = "on|off", value_parser = on_off)]
        read: Option<bool>,
    },
    /// Print messages and approval prompts as they arrive, until Ctrl-C.
    Watch {
        /// Only this mailbox.
        #[arg(long)]
        mailbox: Option<String>,
        /// Exit (non-zero) when the daemon goes away, instead of waiting
        /// for it to come back.
        #[arg(long)]
        no_reconnect: bool,
    },
    /// Opt a folder in: its mailbox receives mail.
    Allow {
        /// The folder.
        path: String,
        /// The mailbox name (default: the folder's name).
        #[arg(long)]
        mailbox: Option<String>,
        /// Move the mailbox here when it is bound to another folder (its
        /// inbox, profile and wake settings come along; its address
        /// stays). Asks first at a terminal.
        #[arg(long = "move")]
        move_bound: bool,
        /// With --move: move without asking.
        #[arg(long, short = 'y')]
        yes: bool,
        /// And wake an idle session of this agent there when mail arrives
        /// (as `agentmesh wake set MAILBOX AGENT`).
        #[arg(long, value_name = "AGENT")]
        wake: Option<wake::WakeArg>,
    },
    /// Wake an idle session when mail arrives: the receiver's choice, in
    /// a daily budget the receiver sets.
    #[command(subcommand)]
    Wake(WakeCommand),
    /// Opt a folder out: its mailbox refuses mail.
    Deny {
        /// The folder (it may be gone already).
        #[arg(required_unless_present = "mailbox")]
        path: Option<String>,
        /// Or the mailbox's name.
        #[arg(long)]
        mailbox: Option<String>,
    },
    /// List the mailboxes: folders opted in (or out) and their names.
    Mailboxes,
    /// A mailbox's profile, goal and preset, which the team's directory
    /// shows (`agentmesh directory`).
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// The team's directory: every member machine's mailboxes, with each
    /// one's profile, goal and status (control characters cleaned).
    Directory,
    /// Say something to every mailbox in the team it concerns: each
    /// machine's judge delivers it only to the mailboxes it is relevant to.
    Broadcast {
        /// The message; `-` reads it from standard input.
        text: String,
        /// Send from this mailbox (default: the owner's).
        #[arg(long, value_name = "MAILBOX")]
        from: Option<String>,
    },
    /// Mark a mailbox tainted: its session reads text others wrote
    /// (issues, chat, web pages), so everything it sends carries taint.
    /// `--off` (at a terminal: its person's decision) clears it whole.
    Taint {
        /// The mailbox.
        mailbox: String,
        /// Clear the mark, and the taint it caught from tainted mail.
        #[arg(long)]
        off: bool,
    },
    /// The bus's decisions.
    #[command(subcommand)]
    Bus(BusCommand),
    /// List mail held for approval.
    Held,
    /// Deliver a held message.
    Approve {
        /// The message id, or a unique prefix of it.
        id: String,
    },
    /// Drop a held message.
    Reject {
        /// The message id, or a unique prefix of it.
        id: String,
        /// Why: kept in the audit log, and told to the sender (its
        /// outbox shows the message `rejected` with this reason).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Stop holding a machine's mail (what is held from it already stays
    /// held unless --approve-held), or with --off hold it again.
    Trust {
        /// Its machine name.
        machine: String,
        /// Hold its mail again (what was delivered stays delivered).
        #[arg(long, conflicts_with = "approve_held")]
        off: bool,
        /// Also approve every message held from it now.
        #[arg(long)]
        approve_held: bool,
    },
    /// Hold all inbound mail until `resume`.
    Pause,
    /// Deliver inbound mail again, including what `pause` held (mail that
    /// would have been held anyway stays held).
    Resume,
    /// Show the audit log: every decision, with body hashes, never bodies.
    Audit {
        /// Only the last DURATION (e.g. 1h, 7d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
    },
    /// Open the local web page (peers, team and directory, threads, held
    /// mail, the bus, the audit log) in the browser; with --no-open (or
    /// no display), print its address with its secret.
    Ui {
        /// Print the address (which holds the page's secret) instead of
        /// opening a browser.
        #[arg(long)]
        no_open: bool,
    },
    /// Show the whole job on loopback: two temporary daemons, a team, an
    /// ask and its reply, the peer table, inboxes and audit trail.
    Demo,
    /// Write this machine to an encrypted file, or restore one (a new laptop).
    #[command(subcommand)]
    Backup(backup::BackupCommand),
    /// Start the daemon at login with the user's service manager (a
    /// systemd user unit, a launchd agent): install, uninstall, status,
    /// start, stop.
    Service {
        #[command(subcommand)]
        command: service::ServiceCommand,
    },
    /// Print the shell completion script for SHELL, e.g.
    /// `agentmesh completions bash > ~/.local/share/bash-completion/completions/agentmesh`.
    Completions {
        /// The shell (bash, zsh, fish, elvish, powershell).
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `agentmesh man | man -l -`.
    Man,
    /// Judge broadcasts as the daemon does (the built-in relevance judge,
    /// or `[bus] judge_command`), no daemon needed: JSON lines on stdin,
    /// each {"broadcast", "profile", "goal", "status", "notes"?}; one {"p",
    /// "deliver"} line out for each. See docs/agents.md.
    Judge {
        /// The threshold `deliver` is judged at.
        #[arg(long, value_enum, default_value_t = bus::PresetArg::Balanced)]
        preset: bus::PresetArg,
        /// The built-in judge, even when config.toml sets
        /// `[bus] judge_command`.
        #[arg(long)]
        builtin: bool,
        /// Score the judge on a JSON-lines file of labelled pairs (each
        /// with "relevant": true|false) instead of judging stdin: pairs,
        /// AUC, each preset's precision and recall.
        #[arg(long, value_name = "FILE")]
        eval: Option<PathBuf>,
    },
    /// Dial a peer by address and sync the team with it.
    Connect {
        /// A multiaddr, such as /ip4/192.168.1.20/tcp/7650/p2p/12D3KooW...
        addr: String,
    },
    /// Run the MCP server an agent's session talks to (stdio; started by
    /// the agent, see `agentmesh setup`).
    Mcp(agents::mcp::McpArgs),
    /// Bring mail into an agent's session at a turn boundary (run by the
    /// agent's hooks; reads the hook's JSON on stdin, always exits 0).
    Hook {
        /// The agent whose hook this is.
        agent: agents::hooks::Agent,
        /// The hook event: SessionStart, UserPromptSubmit, PostToolUse, Stop.
        event: String,
        /// The mailbox to serve, instead of the one of the hook's folder.
        #[arg(long)]
        mailbox: Option<String>,
    },
    /// Connect a coding agent (Claude Code or Codex) to agentmesh, or
    /// disconnect it with --uninstall.
    ///
    /// Registers agentmesh's MCP server (`agentmesh mcp`) with the agent
    /// and installs its hooks (`agentmesh hook AGENT EVENT`), merged into
    /// the agent's config files; --uninstall restores byte for byte every
    /// file only agentmesh edited. See docs/agents.md.
    Setup {
        /// The agent: claude (Claude Code) or codex.
        #[arg(value_enum)]
        agent: setup::Agent,
        /// Where to install it.
        #[arg(long, value_enum, default_value_t = setup::ScopeArg::User)]
        scope: setup::ScopeArg,
        /// Show the changes (a diff per file, the commands) and write
        /// nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take agentmesh out again: files only agentmesh edited are
        /// restored byte for byte.
        #[arg(long)]
        uninstall: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ProfileCommand {
    /// Set what MAILBOX says of itself (`@` for the owner's): each option
    /// given replaces its value.
    Set {
        /// The mailbox (`@` for the owner's).
        mailbox: String,
        /// What its session knows and works on (at most 1 KiB).
        #[arg(long)]
        profile: Option<String>,
        /// Its current objective (at most 256 bytes).
        #[arg(long)]
        goal: Option<String>,
        /// How eager it is for broadcasts (kept on this machine only).
        #[arg(long, value_enum)]
        preset: Option<bus::PresetArg>,
    },
    /// Show this machine's mailboxes' profiles, goals, statuses and
    /// presets, or MAILBOX's.
    Show {
        /// The mailbox (`@` for the owner's).
        mailbox: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum WakeCommand {
    /// Mail to MAILBOX, when none of its sessions is live, starts one
    /// headless run of the agent in its folder (least privilege: read
    /// the folder, answer with `reply`); `off` stops that.
    Set {
        /// The mailbox (a folder's, on this machine).
        mailbox: String,
        /// The agent to wake, or off.
        wake: wake::WakeArg,
        /// Wakes a day it may cost (default 20: `wake.budget`); 0: only
        /// its person's own session reads its mail.
        #[arg(long, value_name = "N")]
        budget: Option<u32>,
        /// A Claude Code run's spending cap, US dollars (default 0.50:
        /// `wake.max_budget_usd`).
        #[arg(long, value_name = "X")]
        max_budget_usd: Option<f64>,
    },
    /// Print the exact command a run for MAILBOX would start now, and
    /// whether mail arriving now would start it; runs nothing.
    Test {
        /// The mailbox.
        mailbox: String,
    },
    /// The recent wake runs, newest first: mailbox, status, session,
    /// duration, the messages each showed, its log.
    List,
    /// End a wake run: SIGTERM to its process group, SIGKILL 10 s later.
    /// Its messages stay unread.
    Stop {
        /// The run's id (or a unique prefix), as `wake list` shows it.
        run: String,
    },
}

#[derive(Debug, Subcommand)]
enum BusCommand {
    /// Each broadcast judged (mailbox, score, preset, delivered or dropped
    /// and why), each `not_for_me`, each directory record refused: a
    /// filtered view of the audit log (body hashes, never bodies).
    Log {
        /// Only the last DURATION (e.g. 1h, 7d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Only this mailbox's (NAME, NAME@MACHINE, or @ for the owner's).
        #[arg(long, value_name = "MAILBOX")]
        mailbox: Option<String>,
    },
    /// Per mailbox and in all: broadcasts delivered and dropped, the wake
    /// runs they started, and the share of those runs that sent nothing
    /// and marked nothing (silent_wake_share).
    Stats,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the configuration in effect: what the running daemon uses, or
    /// (with none running) the file with defaults filled in.
    Show,
    /// Set KEY to VALUE in config.toml, in place (comments and order kept),
    /// checked as the daemon checks it; nothing is written if it is not
    /// valid. Never asks.
    Set {
        /// The key, dotted for tables: mdns, relays, agents.max_hop.
        key: String,
        /// The value, as TOML (true, 3, "x", ["a", "b"]); a bare word
        /// is text where the key holds text, and one item alone is a list
        /// where it holds a list.
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Remove KEY from config.toml: its default applies again. Never asks.
    Unset {
        /// The key, dotted for tables (agents.max_hop).
        key: String,
    },
}

/// `invite --ttl`'s help: the default and the longest a ticket may
/// last, as a fresh config.toml has them.
fn invite_ttl_help() -> String {
    use agentmesh_protocol::time::exact_duration;
    let join = agentmesh_node::config::JoinConfig::default();
    let spoken = |d: &str| {
        humantime::parse_duration(d)
            .map(exact_duration)
            .unwrap_or_else(|_| d.to_owned())
    };
    format!(
        "How long the ticket lasts, e.g. 10m, 1h. Default: {} (join.invite_ttl in config.toml); at most {} (join.max_invite_ttl, which may be raised to 7 days)",
        spoken(&join.invite_ttl),
        spoken(&join.max_invite_ttl)
    )
}

/// `agentmesh 0.1.0`, saying so when this is a test build.
fn version() -> &'static str {
    let v = if agentmesh_node::clock::TEST_BUILD {
        format!(
            "{} (test build: its daemon's clock can be moved through the local API; do not run it as your daemon)",
            env!("CARGO_PKG_VERSION")
        )
    } else {
        env!("CARGO_PKG_VERSION").to_owned()
    };
    Box::leak(v.into_boxed_str())
}

/// The command line as the parser, the completions and the manual page
/// read it.
fn cli_command() -> clap::Command {
    Cli::command()
        .version(version())
        .mut_subcommand("config", |c| {
            c.mut_subcommand("set", |s| s.after_help(settings::keys_help()))
        })
}

/// Runs the command line this process was started with: `agentmesh`'s
/// `main` (src/main.rs). The crate is a library as well as the command so
/// that the fuzz targets (fuzz/) can drive the MCP server's input.
pub fn main() -> ExitCode {
    let json = std::env::args().any(|a| a == "--json");
    let matches = match cli_command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return term::usage_error(e, json),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return term::usage_error(e, json),
    };
    let json = cli.json;
    let home = match Home::resolve(cli.home.as_deref()) {
        Ok(h) => h,
        Err(e) => return term::fail(&e.into(), json),
    };
    // The home agents' servers and hooks must name: the one chosen here,
    // unless it is the default they would find anyway.
    let chosen = cli.home.is_some()
        || std::env::var_os(agentmesh_node::home::HOME_ENV).is_some_and(|h| !h.is_empty());
    let agent_home = chosen.then(|| home.root().to_owned());
    match dispatch(cli.command, &home, agent_home.as_deref(), json) {
        Ok(code) => code,
        Err(e) => term::fail(&e, json),
    }
}

/// Runs `command` against the daemon of `home` (`agent_home`: the home
/// agents' servers and hooks must name, when it is not the default).
fn dispatch(
    command: Command,
    home: &Home,
    agent_home: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Daemon(args) => daemonctl::daemon(home, &args, json),
        Command::Up(args) => daemonctl::up(home, agent_home, &args, json),
        Command::Down => daemonctl::down(home, agent_home, json),
        Command::Init {
            name,
            new_identity: true,
            yes,
        } => daemonctl::new_identity(home, name.as_deref(), yes, json),
        Command::Init { name, .. } => {
            daemonctl::init(home, name.as_deref().unwrap_or_default(), json)
        }
        Command::Status => inspect::status(home, json),
        Command::Peers => inspect::peers(home, json),
        Command::Doctor => inspect::doctor(home, json),
        Command::Relays { command } => relays::run(home, command, json),
        Command::Config { command } => match command {
            ConfigCommand::Show => inspect::config_show(home, json),
            ConfigCommand::Set { key, value } => settings::set(home, &key, Some(&value), json),
            ConfigCommand::Unset { key } => settings::set(home, &key, None, json),
        },
        Command::Team { command } => team::run(home, command, json),
        Command::Invite { ttl } => team::invite(home, ttl.as_deref(), json),
        Command::Join {
            ticket,
            name,
            owner,
        } => team::join(home, &ticket, name, owner, json),
        Command::Admit { person, days } => team::admit(home, person.as_deref(), days, json),
        Command::Revoke { name, yes } => team::revoke(home, &name, yes, json),
        Command::Connect { addr } => team::connect(home, &addr, json),
        Command::Demo => demo::demo(json),
        Command::Service { command } => service::run(home, agent_home, command, json),
        Command::Backup(command) => backup::run(home, command, json),
        Command::Completions { shell } => manual::completions(cli_command(), shell, json),
        Command::Man => manual::man(cli_command(), json),
        Command::Ui { no_open } => ui::run(home, no_open, json),
        Command::Judge {
            preset,
            builtin,
            eval,
        } => judge::judge_with(home, builtin).and_then(|with| match eval {
            Some(file) => judge::eval(home, &file, with, json),
            None => judge::run(home, preset.into(), with, json),
        }),
        Command::Mcp(args) => agents::mcp::run(home, args),
        Command::Hook {
            agent,
            event,
            mailbox,
        } => Ok(agents::hooks::run(home, agent, &event, mailbox.as_deref())),
        Command::Send {
            to,
            text,
            ask,
            reply_to,
            from,
            no_wait,
        } => mail::send(home, &to, &text, (ask, no_wait), reply_to, from, json),
        Command::Inbox {
            mailbox,
            unread,
            limit,
        } => mail::inbox(home, mailbox, unread, limit, json),
        Command::Read { id } => mail::read(home, &id, json),
        Command::Reply { id, text } => mail::reply(home, &id, &text, json),
        Command::Outbox { id: Some(id), .. } => receipts::one(home, &id, json),
        Command::Outbox { id: None, limit } => mail::outbox(home, limit, json),
        Command::Receipts { mailbox, read } => receipts::receipts(home, &mailbox, read, json),
        Command::Watch {
            mailbox,
            no_reconnect,
        } => watch::watch(home, mailbox, no_reconnect, json),
        Command::Allow {
            path,
            mailbox,
            move_bound,
            yes,
            wake,
        } => mail::allow(home, (&path, mailbox), (move_bound, yes), wake, json),
        Command::Wake(WakeCommand::Set {
            mailbox,
            wake,
            budget,
            max_budget_usd,
        }) => wake::set(home, &mailbox, wake, (budget, max_budget_usd), json),
        Command::Wake(WakeCommand::Test { mailbox }) => wake::test(home, &mailbox, json),
        Command::Wake(WakeCommand::List) => wake::list(home, json),
        Command::Wake(WakeCommand::Stop { run }) => wake::stop(home, &run, json),
        Command::Deny { path, mailbox } => {
            mail::deny(home, path.as_deref().unwrap_or_default(), mailbox, json)
        }
        Command::Held => mail::held(home, json),
        Command::Mailboxes => mail::mailboxes(home, json),
        Command::Profile(ProfileCommand::Set {
            mailbox,
            profile,
            goal,
            preset,
        }) => bus::set(home, &mailbox, profile, goal, preset, json),
        Command::Profile(ProfileCommand::Show { mailbox }) => bus::show(home, mailbox, json),
        Command::Directory => bus::directory(home, json),
        Command::Broadcast { text, from } => bus::broadcast(home, &text, from, json),
        Command::Taint { mailbox, off } => bus::taint(home, &mailbox, !off, json),
        Command::Bus(BusCommand::Log { since, mailbox }) => {
            bus::log(home, since.as_deref(), mailbox, json)
        }
        Command::Bus(BusCommand::Stats) => bus::stats(home, json),
        Command::Approve { id } => mail::decide(home, &id, true, None, json),
        Command::Reject { id, reason } => mail::decide(home, &id, false, reason, json),
        Command::Trust {
            machine,
            off,
            approve_held,
        } => mail::trust(home, &machine, (off, approve_held), json),
        Command::Pause => mail::pause(home, true, json),
        Command::Resume => mail::pause(home, false, json),
        Command::Audit { since } => mail::audit(home, since.as_deref(), json),
        Command::Setup {
            agent,
            scope,
            dry_run,
            uninstall,
        } => setup::run(
            home,
            agent_home,
            &setup::Request {
                agent,
                scope,
                dry_run,
                uninstall,
            },
            json,
        ),
    }
}

/// `on` or `off`, as a flag's value.
fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        other => Err(format!("{other:?} is neither `on` nor `off`")),
    }
}
