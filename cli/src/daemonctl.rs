//! `daemon`, `up`, `down` and `init`: starting, stopping and naming a node.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_node::api::{ConfigShown, Standing, ops};
use agentmesh_node::client::ClientError;
use agentmesh_node::config::Config;
use agentmesh_node::config::edit::{self, ConfigFile};
use agentmesh_node::daemon::{self, Overrides};
use agentmesh_node::home::Home;
use agentmesh_protocol::{Multiaddr, Name};
use anyhow::Context;

use crate::{NetArgs, StartArgs, inspect, settings, setup, term};

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
/// `--json`, logs JSON lines. With `--save`, writes the flags' settings
/// to config.toml first (refused while a daemon runs: nothing is saved).
pub fn daemon(home: &Home, args: &StartArgs, json: bool) -> anyhow::Result<ExitCode> {
    // Before any thread: the --save check below starts a runtime.
    let allocator = crate::allocator::one_arena();
    let mut overrides = overrides(&args.net)?;
    let saved = if args.save {
        let rt = term::runtime()?;
        if let Ok(mut c) = rt.block_on(term::client(home)) {
            let pid = rt.block_on(c.status())?.pid;
            return Err(term::cli_error(
                "already_running",
                format!(
                    "agentmesh is already running (pid {pid}); nothing was saved. Stop it first with `agentmesh down`"
                ),
            ));
        }
        let saved = settings::save(home, &overrides)?;
        // Started from the file, which now says all the flags did.
        overrides = Overrides::default();
        Some(saved)
    } else {
        None
    };
    // What a non-member can cause is logged at debug: strangers' refused
    // streams (request-response warns on each) must not fill the log.
    // Kademlia's behaviour warns only when its routing table is empty as
    // it bootstraps (a daemon with no bootstrap nodes and no relays,
    // which is every daemon on a LAN) and when replicating records (it
    // keeps none), so that is not worth a warning in a person's log.
    let default = match args.verbose {
        0 => {
            "info,libp2p_mdns=warn,libp2p_swarm=warn,libp2p_gossipsub=warn,libp2p_request_response=error,libp2p_kad::behaviour=error"
        }
        1 => "debug,agentmesh_node=debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A log whose reader went (`agentmesh daemon 2>&1 | head`) must not
        // stop the daemon: tracing-subscriber reports a failed write with
        // `eprintln!`, which panics on that same closed stderr, in whatever
        // task was logging (the signal handler, which then never stopped
        // the daemon).
        .log_internal_errors(false)
        .with_writer(std::io::stderr);
    if json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    tracing::debug!(allocator, "malloc settings");
    if let Some(saved) = saved {
        tracing::info!(file = %saved.file.display(), set = ?saved.set, written = saved.written, "saved the command line's settings");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    crate::allocator::start_giving_back();
    match rt.block_on(daemon::run(home, overrides)) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // Its own status, so that a service manager does not start it
        // again and again beside the daemon that runs.
        Err(e @ daemon::DaemonError::AlreadyRunning { .. }) => {
            term::fail(&e.into(), json);
            Ok(ExitCode::from(crate::service::ALREADY_RUNNING_EXIT))
        }
        Err(e) => Err(e.into()),
    }
}

/// `agentmesh up`: starts the daemon in the background, or reports the one
/// already running; then, with a person at the terminal, offers to set up
/// the coding agents installed here (`agentmesh setup`).
pub fn up(
    home: &Home,
    agent_home: Option<&Path>,
    args: &StartArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let code = up_daemon(home, args, json)?;
    if !json {
        setup::offer(home, agent_home);
    }
    Ok(code)
}

/// How the running daemon's settings differ from what the flags ask for,
/// one line each; none when every flag given is in effect. Flags not
/// given ask for nothing.
fn differences(running: &Config, wanted: &Overrides) -> Vec<String> {
    let parsed =
        |v: &[String]| -> Vec<Multiaddr> { v.iter().filter_map(|a| a.parse().ok()).collect() };
    let list = |v: &[Multiaddr]| {
        v.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = vec![];
    let listening = parsed(&running.listen);
    if !wanted.listen.is_empty() && listening != wanted.listen {
        out.push(format!(
            "listen: it listens on {}; --listen asks for {}",
            list(&listening),
            list(&wanted.listen)
        ));
    }
    if wanted.no_mdns && running.mdns {
        out.push("mdns: it runs mDNS; --no-mdns asks for none".into());
    }
    for (field, flag, have, want) in [
        ("relays", "--relay", &running.relays.addrs, &wanted.relays),
        (
            "bootstrap",
            "--bootstrap",
            &running.bootstrap,
            &wanted.bootstrap,
        ),
    ] {
        let have = parsed(have);
        let missing: Vec<Multiaddr> = want.iter().filter(|a| !have.contains(a)).cloned().collect();
        if !missing.is_empty() {
            out.push(format!(
                "{field}: it uses {}; {flag} asks for {}",
                if have.is_empty() {
                    "none".to_owned()
                } else {
                    list(&have)
                },
                list(&missing)
            ));
        }
    }
    out
}

/// `up`'s first half: the daemon, started or found running.
fn up_daemon(home: &Home, args: &StartArgs, json: bool) -> anyhow::Result<ExitCode> {
    let wanted = overrides(&args.net)?;
    let rt = term::runtime()?;
    if let Ok(mut c) = rt.block_on(term::client(home)) {
        let s = rt.block_on(c.status())?;
        let shown: ConfigShown = rt.block_on(c.call(ops::ConfigShow))?;
        // A person ran `up`: whatever `down` recorded no longer holds.
        home.clear_stopped_by_down()?;
        let differ = differences(&shown.config, &wanted);
        let saved = args
            .save
            .then(|| settings::save(home, &wanted))
            .transpose()?;
        let lines = differ
            .iter()
            .map(|d| format!("\n  - {d}"))
            .collect::<String>();
        match (&saved, differ.is_empty()) {
            (None, false) => {
                return Err(term::cli_error(
                    "settings_differ",
                    format!(
                        "agentmesh is already running (pid {}) with other settings, so nothing changed:{lines}\nStop it first (`agentmesh down`) and run this command again; add --save to keep these settings in config.toml for every start, the daemon agent sessions start included.",
                        s.pid
                    ),
                ));
            }
            // Saved as asked: done, not an error; the running daemon keeps
            // its settings until it restarts, which is the person's call.
            (Some(saved), false) => {
                if json {
                    term::json(&serde_json::json!({
                        "started": false,
                        "status": s,
                        "saved": saved,
                        "restart_needed": true,
                        "differences": differ,
                    }))?;
                } else {
                    crate::say!(
                        "{} The running daemon (pid {}) keeps its settings until it restarts:{lines}\nRestart it to use the saved ones: `agentmesh down && agentmesh up`.",
                        saved.line(),
                        s.pid
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            (saved, true) => {
                if json {
                    term::json(
                        &serde_json::json!({ "started": false, "status": s, "saved": saved }),
                    )?;
                } else {
                    if let Some(saved) = saved {
                        crate::say!("{}", saved.line());
                    }
                    crate::say!(
                        "agentmesh is already running (pid {}, peer {}).",
                        s.pid,
                        s.peer_id
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    let saved = args
        .save
        .then(|| settings::save(home, &wanted))
        .transpose()?;
    if let Some(saved) = saved.as_ref().filter(|_| !json) {
        crate::say!("{}", saved.line());
    }
    // Saved: started from the file, which now says all the flags did.
    let flags = if saved.is_some() {
        NetArgs::default()
    } else {
        args.net.clone()
    };
    let spin = (!json).then(|| term::spinner("starting the daemon…"));
    let status = start(home, &flags, args.verbose);
    drop(spin);
    let status = status?;
    if json {
        term::json(&serde_json::json!({
            "started": true,
            "log": home.log_file(),
            "status": status,
            "saved": saved,
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
    // A configuration the daemon would refuse is named here, with the
    // file, the field and the fix, before a process is started for it.
    Config::load_settings(&home.config_file())?;
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

/// `agentmesh down`: stops the daemon and records that a person did
/// (`run/stopped-by-down`), so agent sessions start none until `agentmesh
/// up`. With none running it records the same and exits 0, as `up` does
/// with one running: either way, afterwards it is down.
pub fn down(home: &Home, agent_home: Option<&Path>, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let pid = match rt.block_on(term::client(home)) {
        Ok(c) => Some(stop_running(home, &rt, c)?),
        Err(e) if term::not_running(&e).is_some() => {
            home.record_stopped_by_down(None)?;
            None
        }
        Err(e) => return Err(e),
    };
    // A service installed to start it at login will, whatever `down`
    // recorded: the person is told, with the way to stop that.
    let service = crate::service::starts_at_login(agent_home);
    if json {
        term::json(&serde_json::json!({
            "stopped": pid.is_some(),
            "pid": pid,
            "service_installed": service.is_some(),
            "starts_at_login": service.map_or(Some(false), |(_, enabled)| enabled),
        }))?;
    } else {
        match pid {
            Some(pid) => crate::say!(
                "agentmesh stopped (pid {pid}); agent sessions won't start it again until `agentmesh up`."
            ),
            None => crate::say!(
                "agentmesh is not running, so there is nothing to stop; agent sessions won't start it until `agentmesh up`."
            ),
        }
        match service {
            Some((manager, Some(false))) => crate::say!(
                "The {} is installed but not enabled: it won't start the daemon at login.",
                manager.name()
            ),
            Some((manager, enabled)) => crate::say!(
                "The {} {} at your next login: `agentmesh service stop` keeps it stopped, `agentmesh service uninstall` removes it.",
                manager.name(),
                if enabled.is_some() {
                    "starts the daemon again"
                } else {
                    "may start the daemon again"
                }
            ),
            None => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Stops the daemon `c` is attached to, as `down` does (agent sessions
/// start none until `up` clears the record), and waits until its process
/// is gone; its pid.
fn stop_running(
    home: &Home,
    rt: &tokio::runtime::Runtime,
    mut c: agentmesh_node::client::Client,
) -> anyhow::Result<u32> {
    let pid = rt.block_on(c.status())?.pid;
    // Recorded first: an agent session starting meanwhile must not start
    // the daemon again.
    home.record_stopped_by_down(Some(pid))?;
    // The daemon may close the connection before its answer is written:
    // either way it is stopping, and the lock below says when it is gone.
    match rt.block_on(c.call(ops::Shutdown)) {
        Ok(_) | Err(ClientError::Io(_)) => {}
        Err(e) => {
            home.clear_stopped_by_down()?;
            return Err(e.into());
        }
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
    Ok(pid)
}

/// Whether the process `pid` was started by a service manager (systemd
/// gives each service's processes `INVOCATION_ID`): `init --name` must not
/// restart such a daemon outside it. False where it can't be read.
fn under_a_service_manager(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|b| *b == 0)
            .any(|v| v.starts_with(b"INVOCATION_ID="))
    })
}

/// Why `init --name` can't rename a machine that is in a team (the
/// founder's way out differs: it can't leave).
fn renaming_a_member(name: &str, team: &str, wanted: &str, founder: bool) -> anyhow::Error {
    let what_works = if founder {
        format!(
            "this machine founded the team and its key is the team's admin key, so it can't leave or take a new identity without ending the team for everyone. What works: keep the name {name} (its mailboxes' addresses and the team's admissions use it), or found a new team under the new name (on a fresh home: `agentmesh init --name {wanted}`, `agentmesh team create`) and admit every member again"
        )
    } else {
        format!(
            "What works: leave (`agentmesh team leave`), make a new identity under the new name (`agentmesh init --new-identity --name {wanted}`), and be admitted again with a new ticket (`agentmesh join TICKET`); to the team that is a new machine"
        )
    };
    term::cli_error(
        "admitted",
        format!(
            "this machine is {name} in team {team}, the name its admission gave it, and members know it by that name; no block renames a member, so it can't become {wanted} while it is one. {what_works}"
        ),
    )
}

/// Makes `name` this machine's configured name: a first config.toml with
/// every setting at its default, or only the name changed in the person's
/// own file (comments and order kept).
fn write_name(home: &Home, name: &Name) -> anyhow::Result<()> {
    home.create()?;
    let path = home.config_file();
    if !path.exists() {
        let config = Config {
            name: Some(name.to_string()),
            ..Config::default()
        };
        config.validate().map_err(|e| e.in_file(&path))?;
        fs::write(&path, config.to_toml())
            .with_context(|| format!("cannot write {}", path.display()))?;
    } else if Config::load(&path)?.name.as_deref() != Some(name.as_str()) {
        let mut file = ConfigFile::open(&path)?;
        file.set(&edit::key("name")?, toml_edit::Value::from(name.as_str()))?;
        file.check()?;
        file.save()?;
    }
    Ok(())
}

/// `agentmesh init --name NAME`.
pub fn init(home: &Home, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let name = Name::parse("machine name", name)?;
    let rt = term::runtime()?;
    let running = rt.block_on(term::client(home));
    match running {
        Ok(mut c) => {
            let s = rt.block_on(c.status())?;
            if let (Some(team), Some(Standing::Current)) = (&s.team, s.team_standing)
                && s.name != name.as_str()
            {
                let founder = rt
                    .block_on(c.call(ops::TeamShow))
                    .is_ok_and(|t| t.members.iter().any(|m| m.this_machine && m.admin));
                return Err(renaming_a_member(
                    &s.name,
                    &team.name,
                    name.as_str(),
                    founder,
                ));
            }
            if c.name != name.as_str() {
                // In no team, the name is only this machine's: the daemon
                // restarts under it, unless it runs with settings a
                // restart would lose (flags not saved).
                let shown: ConfigShown = rt.block_on(c.call(ops::ConfigShow))?;
                let file = Config::load(&home.config_file())?;
                // The name is what changes: the daemon shows the one it
                // took (the host's, when the file names none).
                let mut running = shown.config;
                running.name.clone_from(&file.name);
                let why = if s.team.is_some() {
                    Some("")
                } else if running != file {
                    Some(
                        " with settings other than config.toml's (flags given to `up`, or settings saved since it started)",
                    )
                } else if under_a_service_manager(s.pid) {
                    Some(
                        " under a service manager (systemd), which started it and would not start it again",
                    )
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(term::cli_error(
                        "daemon_running",
                        format!(
                            "the daemon is running as {:?}{why}; stop it with `agentmesh down`, run this again, then start it again as it was started (`agentmesh up`)",
                            c.name,
                        ),
                    ));
                }
                let was = c.name.clone();
                let pid = stop_running(home, &rt, c)?;
                write_name(home, &name)?;
                home.clear_stopped_by_down()?;
                let status = start(home, &NetArgs::default(), 0)?;
                if json {
                    term::json(&serde_json::json!({
                        "name": name.as_str(),
                        "peer_id": status.peer_id,
                        "created": false,
                        "restarted": {"was": was, "old_pid": pid, "pid": status.pid},
                    }))?;
                } else {
                    crate::say!(
                        "This machine is {name} now (it was {was}); its daemon restarted under the new name (pid {}).",
                        status.pid
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
        Err(e) if term::not_running(&e).is_none() => return Err(e),
        Err(_) => {
            if let Some((current, team, founder)) = daemon::stored_membership(home)?
                && current != name.as_str()
            {
                return Err(renaming_a_member(&current, &team, name.as_str(), founder));
            }
        }
    }
    write_name(home, &name)?;
    let (id, created) = home.load_or_create_identity()?;
    let not_running = matches!(
        rt.block_on(term::client(home)),
        Err(e) if term::not_running(&e).is_some()
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
    let team = daemon::stored_team(home)?;
    // A key still in its team stays valid on every member: it leaves (or
    // is revoked) first. The founder's is the team's only admin key.
    match &team {
        Some(t) if t.current && t.admin => {
            return Err(term::cli_error(
                "founder",
                format!(
                    "this machine founded team {} and holds its only admin key: with a new identity nobody could admit or revoke machines in {} again. To start over as another machine, use another home (`agentmesh --home DIR init --name NAME`)",
                    t.team, t.team
                ),
            ));
        }
        Some(t) if t.current => {
            return Err(term::cli_error(
                "still_member",
                format!(
                    "this machine is still {} in team {}, and its key stays valid on every member until it leaves; leave first (`agentmesh team leave`, or have the founder revoke it), then make a new identity",
                    t.name, t.team
                ),
            ));
        }
        _ => {}
    }
    let forgets = team.as_ref().map_or_else(String::new, |t| {
        format!(
            " It forgets team {}: to be in a team again it must be admitted again with a new ticket.",
            t.team
        )
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
    let done = daemon::new_identity(home, agentmesh_node::clock::now())?;
    // The name only once the identity is made: a failure leaves both as
    // they were.
    if let Some(name) = &name {
        write_name(home, name)?;
    }
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
