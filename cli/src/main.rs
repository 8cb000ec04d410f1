//! # agentmesh (the command)
//!
//! Parses the command line and runs the command. Every command that needs
//! the daemon talks to it through `agentmesh_node::client`, the same way
//! every other client does; `daemon`, `up`, `init`, `config show` and
//! `doctor` work without one.

mod daemonctl;
mod demo;
mod inspect;
mod mail;
mod team;
mod term;

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_node::home::Home;
use clap::{Parser, Subcommand};

/// agentmesh: messages between AI coding agents and their people, across
/// machines. A person admits every machine; nothing from the mesh counts as
/// the user's own instruction.
#[derive(Debug, Parser)]
#[command(name = "agentmesh", version, about, propagate_version = true)]
struct Cli {
    /// The node's home directory (config, keys, data, socket). Default:
    /// $AGENTMESH_HOME, else ~/.local/share/agentmesh.
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// More log output from the daemon (-v debug, -vv trace). RUST_LOG
    /// overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon in the foreground.
    Daemon(NetArgs),
    /// Start the daemon in the background (does nothing if it runs).
    Up(NetArgs),
    /// Stop the daemon.
    Down,
    /// Create this machine's identity and set its name (safe to repeat).
    Init {
        /// This machine's name in its team: lowercase letters, digits, '-'.
        #[arg(long)]
        name: String,
    },
    /// Show the daemon's identity, team and addresses.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every known peer: membership, connection, addresses, RTT.
    Peers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check this node's setup and say what to fix. Never writes anything.
    Doctor,
    /// Show or check the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Create, show or leave the team.
    Team {
        #[command(subcommand)]
        command: TeamCommand,
    },
    /// Print a single-use ticket another machine can join with.
    Invite {
        /// How long the ticket lasts, e.g. 10m, 1h.
        #[arg(long, value_name = "DURATION")]
        ttl: Option<String>,
        /// Print JSON: {"ticket": ..., "expires_at": ...}.
        #[arg(long)]
        json: bool,
    },
    /// Ask to join a team with a ticket from its founder.
    Join {
        /// The ticket `agentmesh invite` printed on the founder's machine.
        ticket: String,
        /// This machine's name in the team.
        #[arg(long)]
        name: String,
        /// The person who runs this machine.
        #[arg(long)]
        owner: String,
    },
    /// Admit a machine that asked to join (a person must type its code).
    Admit,
    /// Revoke a member of the team, by machine name.
    Revoke {
        /// The member's machine name.
        name: String,
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
        /// Reply to the received message with this id (threaded).
        #[arg(long, value_name = "ID")]
        reply_to: Option<String>,
        /// Send from this mailbox (default: the owner's).
        #[arg(long, value_name = "MAILBOX")]
        from: Option<String>,
        /// Print JSON: {"id": ...}.
        #[arg(long)]
        json: bool,
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
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a received message and mark it read.
    Read {
        /// The message id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List sent messages and where each stands.
    Outbox {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print messages and approval prompts as they arrive, until Ctrl-C.
    Watch {
        /// Only this mailbox.
        #[arg(long)]
        mailbox: Option<String>,
    },
    /// Opt a folder in: its mailbox receives mail.
    Allow {
        /// The folder.
        path: String,
        /// The mailbox name (default: the folder's name).
        #[arg(long)]
        mailbox: Option<String>,
    },
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
    Mailboxes {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List mail held for approval.
    Held {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deliver a held message.
    Approve {
        /// The message id.
        id: String,
    },
    /// Drop a held message.
    Reject {
        /// The message id.
        id: String,
        /// Why, for the audit log.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Stop holding a machine's mail.
    Trust {
        /// Its machine name.
        machine: String,
    },
    /// Hold all inbound mail until `resume`.
    Pause {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deliver inbound mail again, including what `pause` held (mail that
    /// would have been held anyway stays held).
    Resume {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the audit log: every decision, with body hashes, never bodies.
    Audit {
        /// Only the last DURATION (e.g. 1h, 7d).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the whole job on loopback: two temporary daemons, a team, an
    /// ask and its reply, the peer table, inboxes and audit trail.
    Demo,
    /// Dial a peer by address and sync the team with it.
    Connect {
        /// A multiaddr, such as /ip4/192.168.1.20/tcp/7650/p2p/12D3KooW...
        addr: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print the configuration in effect, defaults filled in.
    Show,
}

#[derive(Debug, Subcommand)]
enum TeamCommand {
    /// Found a team, with this machine as its admin.
    Create {
        /// The team's name.
        name: String,
        /// The person who runs this machine.
        #[arg(long)]
        owner: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the team and its members.
    Show {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Leave the team (this machine revokes itself).
    Leave,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let home = match Home::resolve(cli.home.as_deref()) {
        Ok(h) => h,
        Err(e) => return term::fail(&e.into()),
    };
    let result = match cli.command {
        Command::Daemon(net) => daemonctl::daemon(&home, &net, cli.verbose),
        Command::Up(net) => daemonctl::up(&home, &net, cli.verbose),
        Command::Down => daemonctl::down(&home),
        Command::Init { name } => daemonctl::init(&home, &name),
        Command::Status { json } => inspect::status(&home, json),
        Command::Peers { json } => inspect::peers(&home, json),
        Command::Doctor => inspect::doctor(&home),
        Command::Config {
            command: ConfigCommand::Show,
        } => inspect::config_show(&home),
        Command::Team { command } => match command {
            TeamCommand::Create { name, owner, json } => team::create(&home, &name, &owner, json),
            TeamCommand::Show { json } => team::show(&home, json),
            TeamCommand::Leave => team::leave(&home),
        },
        Command::Invite { ttl, json } => team::invite(&home, ttl.as_deref(), json),
        Command::Join {
            ticket,
            name,
            owner,
        } => team::join(&home, &ticket, &name, &owner),
        Command::Admit => team::admit(&home),
        Command::Revoke { name } => team::revoke(&home, &name),
        Command::Connect { addr, json } => team::connect(&home, &addr, json),
        Command::Demo => demo::demo(),
        Command::Send {
            to,
            text,
            ask,
            reply_to,
            from,
            json,
        } => mail::send(&home, &to, &text, ask, reply_to, from, json),
        Command::Inbox {
            mailbox,
            unread,
            limit,
            json,
        } => mail::inbox(&home, mailbox, unread, limit, json),
        Command::Read { id, json } => mail::read(&home, &id, json),
        Command::Outbox { json } => mail::outbox(&home, json),
        Command::Watch { mailbox } => mail::watch(&home, mailbox),
        Command::Allow { path, mailbox } => mail::allow(&home, &path, mailbox, true),
        Command::Deny { path, mailbox } => {
            mail::allow(&home, path.as_deref().unwrap_or_default(), mailbox, false)
        }
        Command::Held { json } => mail::held(&home, json),
        Command::Mailboxes { json } => mail::mailboxes(&home, json),
        Command::Approve { id } => mail::decide(&home, &id, true, None),
        Command::Reject { id, reason } => mail::decide(&home, &id, false, reason),
        Command::Trust { machine } => mail::trust(&home, &machine),
        Command::Pause { json } => mail::pause(&home, true, json),
        Command::Resume { json } => mail::pause(&home, false, json),
        Command::Audit { since, json } => mail::audit(&home, since.as_deref(), json),
    };
    match result {
        Ok(code) => code,
        Err(e) => term::fail(&e),
    }
}
