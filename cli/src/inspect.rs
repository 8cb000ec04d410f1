//! `status`, `peers`, `doctor` and `config show`: looking without touching.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;

use agentmesh_node::api::{
    ConfigShown, Connection, OutboxView, PeerRow, Standing, Status, TeamView, ops,
};
use agentmesh_node::config::Config;
use agentmesh_node::home::Home;
use serde::Serialize;

use crate::term;

/// The team line of a member's status, with its term.
fn print_term(s: &Status, t: &agentmesh_node::api::TeamRef, lapsed: bool) {
    let until = s.member_until.as_deref();
    if lapsed {
        crate::say!(
            "team       {} ({}): its membership lapsed {} and was not renewed: not a member (its mail waits at its senders)",
            t.name,
            &t.team_id[..12],
            until.map(term::ago).unwrap_or_default()
        );
        crate::say!(
            "           ask the founder to run: agentmesh team renew {}",
            s.name
        );
        return;
    }
    crate::say!("team       {} ({})", t.name, &t.team_id[..12]);
    if let Some(until) = until {
        crate::say!(
            "           a member until {until} ({}; renewed by {}: it asks again two thirds of the way)",
            term::ago(until),
            s.renewed_by.as_deref().unwrap_or("an admin")
        );
    }
}

/// Prints a status for people.
pub fn print_status(s: &Status) {
    crate::say!("machine    {}", s.name);
    crate::say!("peer id    {}", s.peer_id);
    let me = term::login_name();
    match (&s.team, s.team_standing) {
        (Some(t), Some(standing @ (Standing::Current | Standing::Lapsed))) => {
            print_term(s, t, standing == Standing::Lapsed);
        }
        (Some(t), Some(Standing::NameTaken)) => {
            crate::say!(
                "team       {} ({}): not a member while another machine holds the name {} (admitted first)",
                t.name,
                &t.team_id[..12],
                s.name
            );
            crate::say!(
                "           it becomes one if the founder revokes that machine; or, to join under another name:"
            );
            crate::say!(
                "           agentmesh init --new-identity --name OTHER, then agentmesh join TICKET"
            );
        }
        (Some(t), standing) => {
            let how = match standing {
                Some(Standing::Left) => "it left",
                Some(Standing::Revoked) => "it was revoked",
                _ => "it is not listed",
            };
            crate::say!(
                "team       {} ({}): this machine is no longer a member ({how}); its key can never rejoin",
                t.name,
                &t.team_id[..12],
            );
            crate::say!(
                "           to be in a team again, make a new identity: agentmesh init --new-identity"
            );
            crate::say!(
                "           then create a team (agentmesh team create NAME --owner {me}) or join one (agentmesh join TICKET)"
            );
        }
        (None, _) => {
            crate::say!("team       none yet");
            crate::say!("           create one:  agentmesh team create NAME --owner {me}");
            crate::say!(
                "           or join one: agentmesh join TICKET (as {}, owner {me})",
                s.name
            );
        }
    }
    if s.listen_addrs.is_empty() {
        crate::say!("listening  (not yet)");
    }
    for (i, a) in s.listen_addrs.iter().enumerate() {
        crate::say!("{}{a}", if i == 0 { "listening  " } else { "           " });
    }
    for (i, a) in s.external_addrs.iter().enumerate() {
        crate::say!("{}{a}", if i == 0 { "external   " } else { "           " });
    }
    let why = match s.reachability.as_str() {
        "public" => " (AutoNAT: others dialled back in)",
        "private" => " (AutoNAT: behind NAT or a firewall; reached through relays)",
        // AutoNAT asks only this machine's relays (docs/networking.md).
        _ if s.reservations.is_empty() => " (no relay to ask)",
        _ => " (AutoNAT has not decided yet)",
    };
    crate::say!("reachable  {}{why}", s.reachability);
    for r in &s.reservations {
        let how = match (&r.error, r.state.as_str()) {
            (_, "reserved") => "reserved".to_owned(),
            (Some(e), _) => format!("{}: {e}", r.state),
            (None, state) => state.to_owned(),
        };
        let from = if r.adopted { " (from the ticket)" } else { "" };
        crate::say!("relay      {}{from}: {how}", r.relay);
    }
    for (i, a) in s.circuit_addrs.iter().enumerate() {
        crate::say!("{}{a}", if i == 0 { "via relay  " } else { "           " });
    }
    crate::say!("peers      {} connected", s.connected_peers);
    if s.paused {
        crate::say!("inbound    PAUSED: mail is held until `agentmesh resume`");
    }
    if s.held > 0 {
        crate::say!(
            "held       {} for approval: `agentmesh held`",
            term::count_with(s.held, "message", "waits", "wait")
        );
    }
    if s.outbox_waiting > 0 {
        crate::say!(
            "outbox     {} on {} way: `agentmesh outbox`",
            term::count_with(s.outbox_waiting, "message", "is", "are"),
            if s.outbox_waiting == 1 {
                "its"
            } else {
                "their"
            }
        );
    }
    if s.carrying > 0 {
        crate::say!(
            "carrying   {} for members that are offline",
            agentmesh_protocol::time::count(s.carrying as u64, "envelope")
        );
    }
    for w in &s.wake {
        let agent = w.wake.map_or("off", |a| a.name());
        let mut line = format!(
            "wake       {} ({agent}): {} of {} left today, resets {}",
            w.mailbox,
            w.left,
            w.budget,
            term::ago(&w.resets_at)
        );
        if let Some(r) = &w.running {
            line.push_str(&format!("; run {r} running"));
        }
        crate::say!("{line}");
        if let Some(f) = &w.failed {
            crate::say!(
                "           its last run {} {}: {}; its mail stays unread (`agentmesh wake list`, log {})",
                f.id,
                f.status.as_str(),
                term::clean(f.exit.as_deref().unwrap_or("unknown")),
                f.log
            );
        }
    }
    if s.test_build {
        crate::say!(
            "build      TEST BUILD: its clock can be moved through the local API; do not use it as your daemon"
        );
    }
}

/// `agentmesh status`. With no daemon running it still fails (scripts
/// test for it), its code saying why: `stopped_by_down` (a person ran
/// `agentmesh down`) or `not_running`.
pub fn status(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let s = rt
        .block_on(async {
            term::client(home)
                .await?
                .status()
                .await
                .map_err(anyhow::Error::from)
        })
        .map_err(|e| match term::not_running(&e) {
            Some(n) => term::cli_error(n.code(), n.message.clone()),
            None => e,
        })?;
    if json {
        term::json(&s)?;
    } else {
        crate::say!("agentmesh {} is running (pid {})", s.version, s.pid);
        if let Some(a) = &s.another_copy {
            crate::say!("WARNING: {}", another_copy_words(a));
            crate::say!("  -> {ANOTHER_COPY_FIX}");
        }
        print_status(&s);
    }
    Ok(ExitCode::SUCCESS)
}

/// What to do about another daemon with this machine's key.
const ANOTHER_COPY_FIX: &str = "stop one of them for good (`agentmesh down` there), or give the second machine its own identity (`agentmesh init --new-identity`, then join); docs/operations.md, \"Two copies of one machine\"";

/// Another daemon with this machine's key, in words.
fn another_copy_words(a: &agentmesh_node::api::AnotherCopyView) -> String {
    format!(
        "another daemon runs with this machine's key: a member passed on its contact record (seq {}, addresses {}) at {}; each copy gets part of the mail and neither all of it",
        a.seq,
        if a.addrs.is_empty() {
            "none".to_owned()
        } else {
            term::clean(&a.addrs.join(", "))
        },
        a.seen_at
    )
}

/// `agentmesh peers`.
pub fn peers(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let rows: Vec<PeerRow> = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.peers().await?)
    })?;
    if json {
        term::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        crate::say!("No peers known yet.");
        return Ok(ExitCode::SUCCESS);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone().unwrap_or_else(|| "-".into()),
                term::clean(r.owner.as_deref().unwrap_or("-")),
                term::short_peer(&r.peer_id),
                if r.left {
                    "left".into()
                } else {
                    r.membership.to_string()
                },
                match (r.connection, &r.relay) {
                    (Connection::Relayed, Some(relay)) => {
                        format!("relayed via {}", term::short_peer(relay))
                    }
                    (c, _) => c.to_string(),
                },
                r.transport.map_or_else(|| "-".into(), |t| t.to_string()),
                r.rtt_ms
                    .map_or_else(|| "-".into(), |ms| format!("{ms:.1} ms")),
                match (r.connection, &r.last_seen) {
                    (Connection::Direct | Connection::HolePunched | Connection::Relayed, _) => {
                        "now".into()
                    }
                    (_, Some(t)) => term::ago(t),
                    (_, None) => "never".into(),
                },
                r.addresses.first().cloned().unwrap_or_else(|| "-".into())
                    + &if r.addresses.len() > 1 {
                        format!(" (+{})", r.addresses.len() - 1)
                    } else {
                        String::new()
                    },
            ]
        })
        .collect();
    term::table(
        &[
            "NAME",
            "OWNER",
            "PEER",
            "MEMBERSHIP",
            "CONNECTION",
            "TRANSPORT",
            "RTT",
            "LAST SEEN",
            "ADDRESSES",
        ],
        &table,
    );
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh config show`: what the running daemon uses, or, with none
/// running, what one would use.
pub fn config_show(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let running = rt.block_on(async {
        let mut c = term::client(home).await?;
        let pid = c.status().await?.pid;
        let shown: ConfigShown = c.call(ops::ConfigShow).await?;
        anyhow::Ok((pid, shown))
    });
    let (source, config, toml) = match running {
        Ok((pid, shown)) => (
            format!("the running daemon (pid {pid}), command-line overrides included"),
            shown.config,
            shown.toml,
        ),
        Err(e) => {
            if term::not_running(&e).is_none() {
                return Err(e);
            }
            let config = Config::load_settings(&home.config_file())?.config;
            (
                format!(
                    "{} with defaults filled in (no daemon is running)",
                    home.config_file().display()
                ),
                config.clone(),
                config.to_toml(),
            )
        }
    };
    if json {
        term::json(&serde_json::json!({ "source": source, "config": config }))?;
    } else {
        crate::say!("# {source}");
        term::out_raw(&toml);
    }
    Ok(ExitCode::SUCCESS)
}

/// One finding of `doctor`.
#[derive(Debug, Serialize)]
struct Check {
    /// `ok`, `warn` (worth knowing, not broken) or `fail`.
    status: &'static str,
    what: String,
    fix: Option<String>,
}

fn mode_of(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// Mail waiting for members that can't be reached now: per machine, how
/// many and since when.
fn stuck_mail(outbox: &[OutboxView], peers: &[PeerRow]) -> Vec<(String, usize, String)> {
    let mut stuck: std::collections::BTreeMap<String, (usize, String)> = Default::default();
    for m in outbox
        .iter()
        .filter(|m| m.status == agentmesh_node::api::MessageState::Queued)
    {
        let machine = m.to.rsplit('@').next().unwrap_or_default().to_owned();
        let reachable = peers.iter().any(|p| {
            p.name.as_deref() == Some(machine.as_str()) && p.connection != Connection::None
        });
        if reachable {
            continue;
        }
        let e = stuck.entry(machine).or_insert((0, m.created_at.clone()));
        e.0 += 1;
        if m.created_at < e.1 {
            e.1 = m.created_at.clone();
        }
    }
    stuck
        .into_iter()
        .map(|(machine, (n, oldest))| (machine, n, oldest))
        .collect()
}

/// `agentmesh doctor`: every check reads; nothing is created, opened for
/// writing, or changed, so it is safe to run at any time.
pub fn doctor(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let mut checks = Checks::default();
    let configured = check_files(home, &mut checks);
    check_daemon(home, &configured, &mut checks)?;
    let checks = checks.0;
    let failed = checks.iter().any(|c| c.status == "fail");
    if json {
        term::json(&serde_json::json!({ "ok": !failed, "checks": checks }))?;
    } else {
        for c in &checks {
            let mark = match c.status {
                "ok" => "ok  ",
                "warn" => "warn",
                _ => "FAIL",
            };
            crate::say!("{mark} {}", c.what);
            if let Some(fix) = &c.fix {
                crate::say!("     -> {fix}");
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether a relay holds a reservation, when one is known and this
/// machine is not public: without one, machines on other networks can't
/// reach it.
fn check_relays(s: &Status, checks: &mut Checks) {
    use agentmesh_node::api::{Reachability, ReservationState};
    if s.reservations.is_empty() || s.reachability == Reachability::Public {
        return;
    }
    let reserved = s
        .reservations
        .iter()
        .filter(|r| r.state == ReservationState::Reserved)
        .count();
    if reserved > 0 {
        checks.add(
            "ok",
            format!(
                "{} of {} hold a reservation",
                reserved,
                term::count(s.reservations.len(), "relay")
            ),
            None,
        );
        return;
    }
    // A first try still under way is not yet a failure.
    let first_try = s.reservations.iter().any(|r| {
        r.error.is_none()
            && matches!(
                r.state,
                ReservationState::Connecting | ReservationState::Reserving
            )
    });
    let errors: Vec<String> = s
        .reservations
        .iter()
        .filter_map(|r| {
            r.error
                .as_ref()
                .map(|e| format!("{}: {}", r.relay_peer_id, term::clean(e)))
        })
        .collect();
    checks.add(
        if first_try { "warn" } else { "fail" },
        format!(
            "no relay holds a reservation ({} known{}): machines on other networks can't reach this one{}",
            term::count(s.reservations.len(), "relay"),
            if first_try { ", asking now" } else { "" },
            if errors.is_empty() {
                String::new()
            } else {
                format!("; {}", errors.join("; "))
            }
        ),
        Some("`agentmesh relays` shows each relay's state and last error; check that the relay runs and that this machine reaches its address and port".into()),
    );
}

/// The checks `doctor` makes, in order.
#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, status: &'static str, what: String, fix: Option<String>) {
        self.0.push(Check { status, what, fix });
    }
}

/// `ok` or `fail`.
fn pass(ok: bool) -> &'static str {
    if ok { "ok" } else { "fail" }
}

/// The home, its key, its configuration (returned) and its socket: modes
/// and contents.
fn check_files(
    home: &Home,
    checks: &mut Checks,
) -> Result<agentmesh_node::config::Settings, agentmesh_node::config::ConfigError> {
    let root = home.root();
    match mode_of(root) {
        None => checks.add(
            "fail",
            format!("home {} does not exist", root.display()),
            Some("start agentmesh with `agentmesh up`, which creates it".into()),
        ),
        Some(m) if m & 0o022 != 0 => checks.add(
            "fail",
            format!(
                "home {} has mode {m:o}: other users can write to it, so the daemon refuses it",
                root.display()
            ),
            Some(format!("chmod 700 {}", root.display())),
        ),
        Some(m) if m & 0o077 != 0 => checks.add(
            "warn",
            format!(
                "home {} has mode {m:o}: other users can look inside",
                root.display()
            ),
            Some(format!("chmod 700 {}", root.display())),
        ),
        Some(_) => checks.add(
            "ok",
            format!("home {} is private (700)", root.display()),
            None,
        ),
    }
    match mode_of(&home.key_file()) {
        None => checks.add(
            "fail",
            "no identity yet".into(),
            Some("run `agentmesh init --name NAME` or `agentmesh up`".into()),
        ),
        Some(m) if m & 0o077 != 0 => checks.add(
            "fail",
            format!("key file has mode {m:o}: other users can read this machine's keys"),
            Some(format!("chmod 600 {}", home.key_file().display())),
        ),
        Some(_) => match home.read_identity() {
            Ok(Some(id)) => checks.add(
                "ok",
                format!("identity {} (key file 600)", id.peer_id()),
                None,
            ),
            Ok(None) => checks.add(
                "fail",
                "no identity yet".into(),
                Some("run `agentmesh up`".into()),
            ),
            Err(e) => checks.add("fail", format!("key file unusable: {e}"), None),
        },
    }
    let configured = Config::load_settings(&home.config_file());
    match &configured {
        Ok(s) => checks.add(
            "ok",
            format!("configuration valid (machine name {})", s.name),
            None,
        ),
        Err(e) => checks.add(
            "fail",
            format!("configuration: {e}"),
            Some(match e.field() {
                Some(field) => format!(
                    "`agentmesh config set {field} VALUE` or `agentmesh config unset {field}`, or edit {}",
                    home.config_file().display()
                ),
                None => format!("edit {}", home.config_file().display()),
            }),
        ),
    }
    match mode_of(&home.run_dir()) {
        Some(m) if m & 0o077 != 0 => checks.add(
            "fail",
            format!("socket directory has mode {m:o}"),
            Some(format!("chmod 700 {}", home.run_dir().display())),
        ),
        Some(_) => checks.add("ok", "socket directory is private (700)".into(), None),
        None => {}
    }
    if let Some(m) = mode_of(&home.socket())
        && m & 0o077 != 0
    {
        checks.add(
            "fail",
            format!("socket has mode {m:o}"),
            Some(format!("chmod 600 {}", home.socket().display())),
        );
    }
    configured
}

/// The daemon, as its answers show it: running, its team, what it
/// listens on, paused or held mail, mail stuck for a machine away.
fn check_daemon(
    home: &Home,
    configured: &Result<agentmesh_node::config::Settings, agentmesh_node::config::ConfigError>,
    checks: &mut Checks,
) -> anyhow::Result<()> {
    let rt = term::runtime()?;
    type Seen = (Status, Option<TeamView>, Vec<OutboxView>, Vec<PeerRow>);
    let daemon: anyhow::Result<Seen> = rt.block_on(async {
        let mut c = term::client(home).await?;
        let s = c.status().await?;
        let team = c.call(ops::TeamShow).await.ok();
        let outbox = c.call(ops::Outbox).await.unwrap_or_default();
        let peers = c.peers().await.unwrap_or_default();
        Ok((s, team, outbox, peers))
    });
    match daemon {
        Err(e) => {
            let (what, fix) = match term::not_running(&e) {
                Some(n) if n.stopped_by_down => (
                    "the daemon is not running: it was stopped with `agentmesh down`, so agent sessions start none".into(),
                    "start it with `agentmesh up`",
                ),
                Some(_) => ("the daemon is not running".into(), "start it with `agentmesh up`"),
                None => (format!("the daemon: {e:#}"), "start it with `agentmesh up`"),
            };
            checks.add("fail", what, Some(fix.into()));
        }
        Ok((s, team, outbox, peers)) => {
            checks.add(
                "ok",
                format!("daemon running (pid {}), socket answers", s.pid),
                None,
            );
            if let Some(a) = &s.another_copy {
                checks.add("fail", another_copy_words(a), Some(ANOTHER_COPY_FIX.into()));
            }
            match team {
                Some(t) => {
                    let me = t.members.iter().find(|m| m.this_machine);
                    let ok = me.is_some_and(|m| m.standing == Standing::Current);
                    checks.add(
                        pass(ok),
                        format!(
                            "team {}: {}, this machine {}",
                            t.name,
                            term::count(
                                t.members.iter().filter(|m| m.standing == Standing::Current).count(),
                                "member"
                            ),
                            me.map_or("not listed", |m| m.standing.as_str())
                        ),
                        (!ok).then(|| match me.map(|m| m.standing.as_str()) {
                            Some("name_taken") => "another machine holds this machine's name; the founder can revoke it, or make a new identity under another name (`agentmesh init --new-identity --name OTHER`) and join again".into(),
                            _ => "this machine's key can never rejoin; make a new identity (`agentmesh init --new-identity`), then join again with a new ticket".into(),
                        }),
                    );
                    if let (Some(me), Ok(settings)) = (me, &configured)
                        && ok
                        && me.name != settings.name.as_str()
                    {
                        checks.add(
                            "warn",
                            format!(
                                "config.toml names this machine {}, but its team knows it as {}; the team's name is the one used",
                                settings.name, me.name
                            ),
                            Some(format!(
                                "set `name = \"{}\"` in {}",
                                me.name,
                                home.config_file().display()
                            )),
                        );
                    }
                }
                None => checks.add(
                    "ok",
                    "no team yet".into(),
                    Some(format!(
                        "create one with `agentmesh team create NAME --owner {}` or join one with `agentmesh join TICKET`",
                        term::login_name()
                    )),
                ),
            }
            let ok = !s.listen_addrs.is_empty();
            checks.add(
                pass(ok),
                if ok {
                    format!("listening on {}", s.listen_addrs.join(", "))
                } else {
                    "not listening on any address".into()
                },
                (!ok).then(|| "check `listen` in config.toml and the daemon log".into()),
            );
            check_relays(&s, checks);
            if s.paused {
                checks.add(
                    "warn",
                    "inbound mail is paused: everything that arrives is held".into(),
                    Some("`agentmesh resume` delivers it again".into()),
                );
            }
            if s.held > 0 {
                checks.add(
                    "warn",
                    format!(
                        "{} for approval",
                        term::count_with(s.held, "message", "waits", "wait")
                    ),
                    Some("see them with `agentmesh held`".into()),
                );
            }
            for (machine, n, oldest) in stuck_mail(&outbox, &peers) {
                checks.add(
                    "warn",
                    format!(
                        "{} to {machine} {} in the outbox (the oldest sent {}); {machine} is not reachable now",
                        agentmesh_protocol::time::count(n as u64, "message"),
                        if n == 1 { "waits" } else { "wait" },
                        term::ago(&oldest)
                    ),
                    Some(format!(
                        "check that {machine}'s daemon runs; if it moved, `agentmesh connect /ip4/ADDRESS/tcp/PORT/p2p/PEER` reaches it (its address is in its `agentmesh status`)"
                    )),
                );
            }
        }
    }
    Ok(())
}
