//! `daemon`, `up`, `down` and `init`: starting, stopping and naming a node.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_node::client::ClientError;
use agentmesh_node::config::Config;
use agentmesh_node::daemon::{self, Overrides};
use agentmesh_node::home::Home;
use agentmesh_protocol::{Multiaddr, Name};
use anyhow::Context;

use crate::{NetArgs, inspect, setup, term};

/// How long `up` waits for a new daemon to answer on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `down` waits for the daemon to go.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

fn overrides(net: &NetArgs) -> anyhow::Result<Overrides> {
    let listen = net
        .listen
        .iter()
        .map(|a| {
            a.parse::<Multiaddr>().map_err(|_| {
                term::cli_error(
                    "bad_address",
                    format!(
                        "--listen {a:?} is not a multiaddr; write it like /ip4/0.0.0.0/tcp/7650"
                    ),
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let peer_addrs = |flag: &str, given: &[String]| {
        given
            .iter()
            .map(|a| {
                agentmesh_node::config::peer_addr(a)
                    .map_err(|why| term::cli_error("bad_address", format!("{flag} {why}")))
            })
            .collect::<anyhow::Result<Vec<_>>>()
    };
    Ok(Overrides {
        listen,
        no_mdns: net.no_mdns,
        relays: peer_addrs("--relay", &net.relay)?,
        bootstrap: peer_addrs("--bootstrap", &net.bootstrap)?,
    })
}

/// `agentmesh daemon`: runs in the foreground until stopped; with
/// `--json`, logs JSON lines.
pub fn daemon(home: &Home, net: &NetArgs, verbose: u8, json: bool) -> anyhow::Result<ExitCode> {
    let overrides = overrides(net)?;
    // What a non-member can cause is logged at debug: strangers' refused
    // streams (request-response warns on each) must not fill the log.
    let default = match verbose {
        0 => {
            "info,libp2p_mdns=warn,libp2p_swarm=warn,libp2p_gossipsub=warn,libp2p_request_response=error"
        }
        1 => "debug,agentmesh_node=debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(daemon::run(home, overrides))?;
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh up`: starts the daemon in the background, or reports the one
/// already running; then, with a person at the terminal, offers to set up
/// the coding agents installed here (`agentmesh setup`).
pub fn up(
    home: &Home,
    agent_home: Option<&Path>,
    net: &NetArgs,
    verbose: u8,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let code = up_daemon(home, net, verbose, json)?;
    if !json {
        setup::offer(home, agent_home);
    }
    Ok(code)
}

/// `up`'s first half: the daemon, started or found running.
fn up_daemon(home: &Home, net: &NetArgs, verbose: u8, json: bool) -> anyhow::Result<ExitCode> {
    overrides(net)?;
    let rt = term::runtime()?;
    if let Ok(mut c) = rt.block_on(term::client(home)) {
        let s = rt.block_on(c.status())?;
        if json {
            term::json(&serde_json::json!({ "started": false, "status": s }))?;
        } else {
            crate::say!(
                "agentmesh is already running (pid {}, peer {}).",
                s.pid,
                s.peer_id
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let spin = (!json).then(|| term::spinner("starting the daemon…"));
    let status = start(home, net, verbose);
    drop(spin);
    let status = status?;
    if json {
        term::json(&serde_json::json!({
            "started": true,
            "log": home.log_file(),
            "status": status,
        }))?;
    } else {
        crate::say!(
            "agentmesh started (pid {}); its log is {}",
            status.pid,
            home.log_file().display()
        );
        inspect::print_status(&status);
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts the daemon of `home` in the background, as `up` does, and waits
/// until it answers; its status. Prints nothing (the MCP server's stdout
/// is its protocol).
pub fn start(
    home: &Home,
    net: &NetArgs,
    verbose: u8,
) -> anyhow::Result<agentmesh_node::api::Status> {
    let rt = term::runtime()?;
    // Private from the start; an existing home is checked, not chmodded.
    home.create()?;
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.log_file())
        .with_context(|| format!("cannot open {}", home.log_file().display()))?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("--home").arg(home.root()).arg("daemon");
    for a in &net.listen {
        cmd.arg("--listen").arg(a);
    }
    if net.no_mdns {
        cmd.arg("--no-mdns");
    }
    for a in &net.relay {
        cmd.arg("--relay").arg(a);
    }
    for a in &net.bootstrap {
        cmd.arg("--bootstrap").arg(a);
    }
    if verbose > 0 {
        cmd.arg(format!("-{}", "v".repeat(verbose.into())));
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: Ctrl-C in this terminal must not stop it.
        .process_group(0);
    let log_start = fs::metadata(home.log_file()).map_or(0, |m| m.len());
    let mut child = cmd.spawn().context("cannot start the daemon")?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(mut c) = rt.block_on(term::client(home)) {
            return Ok(rt.block_on(c.status())?);
        }
        if let Some(exit) = child.try_wait()? {
            // What this start wrote: its last error line says why.
            let log = fs::read(home.log_file()).unwrap_or_default();
            let ours = String::from_utf8_lossy(log.get(log_start as usize..).unwrap_or_default());
            let why = ours
                .lines()
                .rev()
                .find(|l| l.starts_with("error: ") || l.contains("\"code\""))
                .map(|l| l.trim_start_matches("error: ").to_owned())
                .unwrap_or_else(|| {
                    let tail: Vec<&str> = ours.lines().rev().take(5).collect();
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                });
            let code = if why.contains("is already in use") {
                "port_in_use"
            } else {
                "daemon_failed"
            };
            return Err(term::cli_error(
                code,
                format!("the daemon exited at start ({exit}): {why}"),
            ));
        }
        if Instant::now() > deadline {
            return Err(term::cli_error(
                "daemon_failed",
                format!(
                    "the daemon did not answer within {}s; see {}",
                    START_TIMEOUT.as_secs(),
                    home.log_file().display()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `agentmesh down`.
pub fn down(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let mut c = rt.block_on(term::client(home))?;
    let pid = rt.block_on(c.status())?.pid;
    // The daemon may close the connection before its answer is written:
    // either way it is stopping, and the lock below says when it is gone.
    match rt.block_on(c.call::<serde_json::Value>(agentmesh_node::api::Op::Shutdown)) {
        Ok(_) | Err(ClientError::Io(_)) => {}
        Err(e) => return Err(e.into()),
    }
    drop(c);
    let deadline = Instant::now() + STOP_TIMEOUT;
    // The daemon holds its lock until its process ends; once the lock is
    // free, it is gone.
    let lock = fs::File::open(home.lock_file())?;
    while let Err(e) = lock.try_lock() {
        if Instant::now() > deadline {
            return Err(term::cli_error(
                "stop_timeout",
                format!(
                    "the daemon (pid {pid}) did not stop within {}s ({e}); stop it with `kill {pid}`",
                    STOP_TIMEOUT.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(lock);
    if json {
        term::json(&serde_json::json!({ "stopped": true, "pid": pid }))?;
    } else {
        crate::say!("agentmesh stopped (pid {pid}).");
    }
    Ok(ExitCode::SUCCESS)
}

/// Why `init --name` can't rename a machine that is in a team.
fn renaming_a_member(name: &str, team: &str, wanted: &str) -> anyhow::Error {
    term::cli_error(
        "admitted",
        format!(
            "this machine is {name} in team {team}, the name its admission gave it, and members know it by that name; no block renames a member, so it can't become {wanted} while it is one. What works: leave (`agentmesh team leave`), make a new identity under the new name (`agentmesh init --new-identity --name {wanted}`), and be admitted again with a new ticket (`agentmesh join TICKET`); to the team that is a new machine"
        ),
    )
}

/// `agentmesh init --name NAME`.
pub fn init(home: &Home, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let name = Name::parse("machine name", name)?;
    let rt = term::runtime()?;
    let running = rt.block_on(term::client(home));
    match running {
        Ok(mut c) => {
            let s = rt.block_on(c.status())?;
            if let (Some(team), Some("member")) = (&s.team, s.team_standing.as_deref())
                && s.name != name.as_str()
            {
                return Err(renaming_a_member(&s.name, &team.name, name.as_str()));
            }
            if c.name != name.as_str() {
                return Err(term::cli_error(
                    "daemon_running",
                    format!(
                        "the daemon is running as {:?}; stop it with `agentmesh down`, run this again, then `agentmesh up`",
                        c.name
                    ),
                ));
            }
        }
        Err(_) => {
            if let Some((current, team)) = daemon::stored_membership(home)?
                && current != name.as_str()
            {
                return Err(renaming_a_member(&current, &team, name.as_str()));
            }
        }
    }
    home.create()?;
    let mut config = Config::load(&home.config_file())?;
    if config.name.as_deref() != Some(name.as_str()) {
        config.name = Some(name.to_string());
        config.validate()?;
        fs::write(home.config_file(), config.to_toml())
            .with_context(|| format!("cannot write {}", home.config_file().display()))?;
    }
    let (id, created) = home.load_or_create_identity()?;
    let not_running = matches!(
        rt.block_on(term::client(home)),
        Err(e) if matches!(e.downcast_ref::<ClientError>(), Some(ClientError::NotRunning { .. }))
    );
    if json {
        term::json(&serde_json::json!({
            "name": name.as_str(),
            "peer_id": id.peer_id().to_string(),
            "created": created,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::say!(
        "{} {name} (peer {}).",
        if created {
            "Created this machine's identity:"
        } else {
            "This machine is"
        },
        id.peer_id()
    );
    if not_running {
        crate::say!("Next: start it with `agentmesh up`.");
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh init --new-identity [--name NAME]`.
pub fn new_identity(
    home: &Home,
    name: Option<&str>,
    yes: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let name = name.map(|n| Name::parse("machine name", n)).transpose()?;
    let rt = term::runtime()?;
    if let Ok(mut c) = rt.block_on(term::client(home)) {
        let s = rt.block_on(c.status())?;
        return Err(term::cli_error(
            "daemon_running",
            format!(
                "the daemon is running with this machine's key ({}); stop it with `agentmesh down`, run this again, then `agentmesh up`",
                s.peer_id
            ),
        ));
    }
    let old = home.read_identity()?.map(|i| i.peer_id());
    let team = daemon::stored_team_name(home)?;
    let forgets = team.as_deref().map_or_else(String::new, |t| {
        format!(" It forgets team {t}: to be in a team again it must be admitted again with a new ticket.")
    });
    let question = match old {
        Some(p) => format!(
            "Replace this machine's key ({p}) with a new one? Config, mailboxes and mail stay; the old key is kept as a file beside the new one.{forgets}"
        ),
        None => "Create a new identity for this machine?".to_owned(),
    };
    if !term::confirm(&question, "replacing this machine's identity", yes)? {
        return Err(term::cli_error(
            "declined",
            "nothing changed: you answered no",
        ));
    }
    if let Some(name) = &name {
        let mut config = Config::load(&home.config_file())?;
        if config.name.as_deref() != Some(name.as_str()) {
            home.create()?;
            config.name = Some(name.to_string());
            config.validate()?;
            fs::write(home.config_file(), config.to_toml())
                .with_context(|| format!("cannot write {}", home.config_file().display()))?;
        }
    }
    let done = daemon::new_identity(home, agentmesh_node::clock::now())?;
    if json {
        term::json(&serde_json::json!({
            "peer_id": done.new.to_string(),
            "old_peer_id": done.old.map(|p| p.to_string()),
            "old_key_kept_at": done.kept.as_ref().map(|p| p.display().to_string()),
            "team_forgotten": done.team,
            "outbox_failed": done.failed,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::say!("This machine's new identity: {}.", done.new);
    if let (Some(old), Some(kept)) = (done.old, &done.kept) {
        crate::say!("The old key ({old}) is kept at {}.", kept.display());
    }
    if let Some(t) = &done.team {
        crate::say!("It forgot team {t}.");
    }
    if done.failed > 0 {
        crate::say!(
            "{} {} still on the way failed: the old key's envelopes can't reach anyone as the new one (`agentmesh outbox`).",
            done.failed,
            if done.failed == 1 {
                "message"
            } else {
                "messages"
            }
        );
    }
    crate::say!(
        "Next: `agentmesh up`, then `agentmesh join TICKET` with a ticket from the founder (`agentmesh invite` there)."
    );
    Ok(ExitCode::SUCCESS)
}
