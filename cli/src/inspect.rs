//! `status`, `peers`, `doctor` and `config show`: looking without touching.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;

use agentmesh_node::api::{PeerRow, Status, TeamView};
use agentmesh_node::client::ClientError;
use agentmesh_node::config::Config;
use agentmesh_node::home::Home;

use crate::term;

/// Prints a status for people.
pub fn print_status(s: &Status) {
    println!("machine    {}", s.name);
    println!("peer id    {}", s.peer_id);
    match (&s.team, s.team_standing.as_deref()) {
        (Some(t), Some("member")) => println!("team       {} ({})", t.name, &t.team_id[..12]),
        (Some(t), standing) => {
            println!(
                "team       {} ({}): this machine is no longer a member ({})",
                t.name,
                &t.team_id[..12],
                standing.unwrap_or("not listed")
            );
            println!("           create a team:  agentmesh team create NAME --owner YOU");
            println!(
                "           or join one:    agentmesh join TICKET --name {} --owner YOU",
                s.name
            );
        }
        (None, _) => {
            println!("team       none yet");
            println!("           create one:  agentmesh team create NAME --owner YOU");
            println!(
                "           or join one: agentmesh join TICKET --name {} --owner YOU",
                s.name
            );
        }
    }
    if s.listen_addrs.is_empty() {
        println!("listening  (not yet)");
    }
    for (i, a) in s.listen_addrs.iter().enumerate() {
        println!("{}{a}", if i == 0 { "listening  " } else { "           " });
    }
    for (i, a) in s.external_addrs.iter().enumerate() {
        println!("{}{a}", if i == 0 { "external   " } else { "           " });
    }
    println!("reachable  {}", s.reachability);
    println!("peers      {} connected", s.connected_peers);
}

/// `agentmesh status`.
pub fn status(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let s = rt.block_on(async {
        term::client(home)
            .await?
            .status()
            .await
            .map_err(anyhow::Error::from)
    })?;
    if json {
        term::json(&s)?;
    } else {
        println!("agentmesh {} is running (pid {})", s.version, s.pid);
        print_status(&s);
    }
    Ok(ExitCode::SUCCESS)
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
        println!("No peers known yet.");
        return Ok(ExitCode::SUCCESS);
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone().unwrap_or_else(|| "-".into()),
                term::short_peer(&r.peer_id),
                r.membership.clone(),
                match (&r.connection[..], &r.relay) {
                    ("relayed", Some(relay)) => format!("relayed via {}", term::short_peer(relay)),
                    (c, _) => c.to_owned(),
                },
                r.transport.clone().unwrap_or_else(|| "-".into()),
                r.rtt_ms
                    .map_or_else(|| "-".into(), |ms| format!("{ms:.1}ms")),
                r.last_seen.clone().unwrap_or_else(|| "never".into()),
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

/// `agentmesh config show`.
pub fn config_show(home: &Home) -> anyhow::Result<ExitCode> {
    let mut config = Config::load(&home.config_file())?;
    let settings = config.validate()?;
    config.name = Some(settings.name.to_string());
    println!("# {} (defaults filled in)", home.config_file().display());
    print!("{}", config.to_toml());
    Ok(ExitCode::SUCCESS)
}

/// One finding of `doctor`.
struct Check {
    ok: bool,
    what: String,
    fix: Option<String>,
}

fn mode_of(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// `agentmesh doctor`: every check reads; nothing is created, opened for
/// writing, or changed, so it is safe to run at any time.
pub fn doctor(home: &Home) -> anyhow::Result<ExitCode> {
    let mut checks = vec![];
    let mut check =
        |ok: bool, what: String, fix: Option<String>| checks.push(Check { ok, what, fix });
    let root = home.root();
    match mode_of(root) {
        None => check(
            false,
            format!("home {} does not exist", root.display()),
            Some("start agentmesh with `agentmesh up`, which creates it".into()),
        ),
        Some(m) if m & 0o077 != 0 => check(
            false,
            format!(
                "home {} has mode {m:o}: other users can look inside",
                root.display()
            ),
            Some(format!("chmod 700 {}", root.display())),
        ),
        Some(_) => check(
            true,
            format!("home {} is private (700)", root.display()),
            None,
        ),
    }
    match mode_of(&home.key_file()) {
        None => check(
            false,
            "no identity yet".into(),
            Some("run `agentmesh init --name NAME` or `agentmesh up`".into()),
        ),
        Some(m) if m & 0o077 != 0 => check(
            false,
            format!("key file has mode {m:o}: other users can read this machine's keys"),
            Some(format!("chmod 600 {}", home.key_file().display())),
        ),
        Some(_) => match home.read_identity() {
            Ok(Some(id)) => check(
                true,
                format!("identity {} (key file 600)", id.peer_id()),
                None,
            ),
            Ok(None) => check(
                false,
                "no identity yet".into(),
                Some("run `agentmesh up`".into()),
            ),
            Err(e) => check(false, format!("key file unusable: {e}"), None),
        },
    }
    match Config::load(&home.config_file()).and_then(|c| c.validate()) {
        Ok(s) => check(
            true,
            format!("configuration valid (machine name {})", s.name),
            None,
        ),
        Err(e) => check(
            false,
            format!("configuration: {e}"),
            Some(format!("edit {}", home.config_file().display())),
        ),
    }
    match mode_of(&home.run_dir()) {
        Some(m) if m & 0o077 != 0 => check(
            false,
            format!("socket directory has mode {m:o}"),
            Some(format!("chmod 700 {}", home.run_dir().display())),
        ),
        Some(_) => check(true, "socket directory is private (700)".into(), None),
        None => {}
    }
    match mode_of(&home.socket()) {
        Some(m) if m & 0o077 != 0 => check(
            false,
            format!("socket has mode {m:o}"),
            Some(format!("chmod 600 {}", home.socket().display())),
        ),
        _ => {}
    }
    let rt = term::runtime()?;
    let daemon: anyhow::Result<(Status, Option<TeamView>)> = rt.block_on(async {
        let mut c = term::client(home).await?;
        let s = c.status().await?;
        let team = c.call(agentmesh_node::api::Op::TeamShow).await.ok();
        Ok((s, team))
    });
    let mut failed = checks.iter().any(|c| !c.ok);
    match daemon {
        Err(e) => {
            let not_running = matches!(
                e.downcast_ref::<ClientError>(),
                Some(ClientError::NotRunning { .. })
            );
            checks.push(Check {
                ok: false,
                what: if not_running {
                    "the daemon is not running".into()
                } else {
                    format!("the daemon: {e:#}")
                },
                fix: Some("start it with `agentmesh up`".into()),
            });
            failed = true;
        }
        Ok((s, team)) => {
            checks.push(Check {
                ok: true,
                what: format!("daemon running (pid {}), socket answers", s.pid),
                fix: None,
            });
            match team {
                Some(t) => {
                    let me = t.members.iter().find(|m| m.this_machine);
                    let ok = me.is_some_and(|m| m.standing == "current");
                    checks.push(Check {
                        ok,
                        what: format!(
                            "team {}: {} members, this machine {}",
                            t.name,
                            t.members.iter().filter(|m| m.standing == "current").count(),
                            me.map_or("not listed", |m| m.standing.as_str())
                        ),
                        fix: (!ok).then(|| "this machine is not a current member; join again with a new ticket".into()),
                    });
                    failed |= !ok;
                }
                None => checks.push(Check {
                    ok: true,
                    what: "no team yet".into(),
                    fix: Some("create one with `agentmesh team create NAME --owner YOU` or join one with `agentmesh join TICKET`".into()),
                }),
            }
            let ok = !s.listen_addrs.is_empty();
            checks.push(Check {
                ok,
                what: if ok {
                    format!("listening on {}", s.listen_addrs.join(", "))
                } else {
                    "not listening on any address".into()
                },
                fix: (!ok).then(|| "check `listen` in config.toml and the daemon log".into()),
            });
            failed |= !ok;
        }
    }
    for c in &checks {
        println!("{} {}", if c.ok { "ok  " } else { "FAIL" }, c.what);
        if let Some(fix) = &c.fix {
            println!("     -> {fix}");
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
