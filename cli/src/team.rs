//! `team`, `invite`, `join`, `admit`, `revoke`, `connect`: the life of a team.

use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{
    AdmitApproved, AdmitState, Connected, Invite, JoinRequestView, JoinStarted, JoinState, Op,
    TeamView,
};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;
use agentmesh_protocol::Timestamp;
use agentmesh_protocol::ticket::Ticket;

use crate::term;

/// How often interactive commands poll the daemon while a person waits.
const POLL: Duration = Duration::from_millis(100);

fn now() -> Timestamp {
    agentmesh_node::clock::now()
}

fn print_team(t: &TeamView) {
    crate::say!("team {} (id {})", t.name, t.team_id);
    crate::say!(
        "founder {} ({})",
        t.founder_name,
        term::short_peer(&t.founder)
    );
    let rows: Vec<Vec<String>> = t
        .members
        .iter()
        .map(|m| {
            vec![
                format!("{}{}", m.name, if m.this_machine { " *" } else { "" }),
                m.owner.clone(),
                term::short_peer(&m.peer_id),
                term::ago(&m.admitted_at),
                if m.admin {
                    "admin".into()
                } else {
                    m.standing.replace('_', " ")
                },
            ]
        })
        .collect();
    term::table(&["MACHINE", "OWNER", "PEER", "ADMITTED", "STATUS"], &rows);
}

/// `agentmesh team create`.
pub fn create(
    home: &Home,
    name: &str,
    owner: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let owner = owner.unwrap_or_else(term::login_name);
    let rt = term::runtime()?;
    let t: TeamView = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(Op::TeamCreate {
                name: name.into(),
                owner,
            })
            .await?,
        )
    })?;
    if json {
        term::json(&t)?;
    } else {
        crate::say!("Founded team {} with this machine as its admin.", t.name);
        crate::say!("Invite a machine with `agentmesh invite`.");
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh team show`.
pub fn show(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let t: TeamView = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(Op::TeamShow).await?)
    })?;
    if json {
        term::json(&t)?;
    } else {
        print_team(&t);
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh team leave`.
pub fn leave(home: &Home, yes: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let v = rt.block_on(async {
        let mut c = term::client(home).await?;
        let t: TeamView = c.call(Op::TeamShow).await?;
        if !term::confirm(
            &format!(
                "Leave team {}? This machine can't rejoin with its key; it would need a new identity and a new admission.",
                t.name
            ),
            yes,
        )? {
            return Err(term::cli_error("declined", "not left: you answered no"));
        }
        anyhow::Ok(c.call::<serde_json::Value>(Op::TeamLeave).await?)
    })?;
    if json {
        term::json(&v)?;
    } else {
        crate::say!("This machine left its team; members stop accepting it as they learn of it.");
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh invite`.
pub fn invite(home: &Home, ttl: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let ttl_secs = ttl
        .map(|t| {
            humantime::parse_duration(t)
                .map(|d| d.as_secs())
                .map_err(|e| {
                    anyhow::anyhow!("--ttl {t:?} is not a duration ({e}); write it like 10m or 1h")
                })
        })
        .transpose()?;
    let rt = term::runtime()?;
    let invite: Invite = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(Op::Invite { ttl_secs }).await?)
    })?;
    if json {
        term::json(&invite)?;
    } else {
        crate::say!("{}", invite.ticket);
        eprintln!(
            "\nSingle use, valid until {} ({}). On the new machine run:\n  agentmesh join TICKET\n(it joins under its configured name; `--name NAME` picks another), then run `agentmesh admit` here and type the code it shows.",
            invite.expires_at,
            term::ago(&invite.expires_at)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh join`. With `--json`, what a person reads goes to stderr
/// and the result to stdout.
pub fn join(
    home: &Home,
    ticket: &str,
    name: Option<String>,
    owner: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // A mistyped or expired ticket is caught here, before the daemon.
    Ticket::parse(ticket, now())?;
    let rt = term::runtime()?;
    let say = |text: &str| {
        if json {
            // Names in it come from the other machine.
            eprintln!("{}", term::clean_lines(text));
        } else {
            crate::say!("{text}");
        }
    };
    rt.block_on(async {
        let mut c = term::client(home).await?;
        if !term::interactive() {
            return Err(term::cli_error(
                "not_interactive",
                "joining needs a person at an interactive terminal to compare codes with the founder; run `agentmesh join` in your own terminal",
            ));
        }
        // The configured name (what `init --name` set, else the host
        // name) and the login name, unless given.
        let name = name.unwrap_or_else(|| c.name.clone());
        let owner = owner.unwrap_or_else(term::login_name);
        let spin = term::spinner("contacting the founder…");
        let started: Result<JoinStarted, _> = c
            .call(Op::JoinStart {
                ticket: ticket.into(),
                name: name.clone(),
                owner: owner.clone(),
            })
            .await;
        spin.finish_and_clear();
        let started = started?;
        say(&format!(
            "Asking to join team {} as {name} (owner {owner}).",
            started.team_name
        ));
        say("");
        say(&format!("    Pairing code: {}", started.pairing_code));
        say("");
        say("Read this code to the founder, who types it into `agentmesh admit`.");
        let spin = term::spinner("waiting for the founder…");
        let state = loop {
            let s: JoinState = c.call(Op::JoinStatus { join_id: started.join_id }).await?;
            if s.state != "waiting" {
                break s;
            }
            tokio::time::sleep(POLL).await;
        };
        spin.finish_and_clear();
        match state.state.as_str() {
            "approved" => {}
            "refused" => {
                return Err(term::cli_error(
                    "join_refused",
                    format!("the founder refused: {}", state.reason.unwrap_or_default()),
                ));
            }
            other => {
                return Err(term::cli_error(
                    "join_ended",
                    format!("the join ended: {other}; start again with a new ticket"),
                ));
            }
        }
        let team_code = state.team_code.unwrap_or_default();
        say("The founder accepted the pairing code. Their screen now shows a team code.");
        say("");
        say(&format!("    Team code: {team_code}"));
        say("");
        let answer = term::prompt("Does the founder's screen show this same team code? [y/N] ")?;
        let accept = matches!(answer.to_lowercase().as_str(), "y" | "yes");
        let done: JoinState = c
            .call(Op::JoinConfirm {
                join_id: started.join_id,
                accept,
            })
            .await?;
        if !accept {
            return Err(term::cli_error(
                "declined",
                "declined: the team codes differ, so this machine did not join; someone may be in the middle. Start again with a new ticket",
            ));
        }
        if json {
            term::json(&serde_json::json!({ "joined": done.team, "name": name, "owner": owner }))?;
        } else {
            let team = done.team.map(|t| t.name).unwrap_or_default();
            crate::say!("Joined team {team} as {name}.");
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

async fn pick_request(c: &mut Client, say: &impl Fn(&str)) -> anyhow::Result<JoinRequestView> {
    let mut spin = None;
    let requests = loop {
        let list: Vec<JoinRequestView> = c.call(Op::AdmitList).await?;
        let waiting: Vec<JoinRequestView> =
            list.into_iter().filter(|r| r.state == "waiting").collect();
        if !waiting.is_empty() {
            break waiting;
        }
        if spin.is_none() {
            spin = Some(term::spinner(
                "no join requests yet; waiting for one (run `agentmesh join` on the other machine; Ctrl-C to stop)…",
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    if let Some(s) = spin {
        s.finish_and_clear();
    }
    if requests.len() == 1 {
        return Ok(requests.into_iter().next().expect("one request"));
    }
    say("Machines asking to join:");
    for (i, r) in requests.iter().enumerate() {
        say(&format!(
            "  {}. {} (owner {}, peer {}, {} ago)",
            i + 1,
            r.name,
            r.owner,
            term::short_peer(&r.peer_id),
            agentmesh_protocol::time::human_duration(Duration::from_secs(r.age_secs))
        ));
    }
    loop {
        let answer = term::prompt(&format!("Which one? [1-{}] ", requests.len()))?;
        if let Some(r) = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| requests.get(n.wrapping_sub(1)))
        {
            return Ok(r.clone());
        }
        say(&format!("Type a number from 1 to {}.", requests.len()));
    }
}

/// `agentmesh admit`. With `--json`, what a person reads goes to stderr
/// and the result to stdout.
pub fn admit(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let say = |text: &str| {
        if json {
            // Names in it come from the other machine.
            eprintln!("{}", term::clean_lines(text));
        } else {
            crate::say!("{text}");
        }
    };
    rt.block_on(async {
        let mut c = term::client(home).await?;
        if !term::interactive() {
            return Err(term::cli_error(
                "not_interactive",
                "admitting a machine needs a person at an interactive terminal; run `agentmesh admit` in your own terminal (it is never available to scripts or agents)",
            ));
        }
        let r = pick_request(&mut c, &say).await?;
        say(&format!(
            "{} (owner {}, peer {}) asks to join.",
            r.name, r.owner, r.peer_id
        ));
        if let Some(was) = &r.name_was {
            say(&format!(
                "WARNING: the name {} belonged to another machine ({}, owner {}, peer {}). Admitted, this machine's mail will show as from @{}: make sure that is what your team expects, or refuse and have it join with another --name.",
                r.name,
                was.standing.replace('_', " "),
                was.owner,
                term::short_peer(&was.peer_id),
                r.name
            ));
        }
        say("(Type `reject` to refuse it.)");
        let approved: AdmitApproved = loop {
            let typed = term::prompt(&format!("Type the pairing code shown on {}: ", r.name))?;
            if typed.eq_ignore_ascii_case("reject") {
                c.call::<serde_json::Value>(Op::AdmitReject { request_id: r.request_id })
                    .await?;
                if json {
                    term::json(&serde_json::json!({ "rejected": r.name, "peer_id": r.peer_id }))?;
                } else {
                    crate::say!("Refused the request from {}.", r.name);
                }
                return Ok(ExitCode::FAILURE);
            }
            match c
                .call::<AdmitApproved>(Op::AdmitCode {
                    request_id: r.request_id,
                    code: typed,
                })
                .await
            {
                Ok(a) => break a,
                Err(e) if matches!(e.code(), Some("wrong_code" | "not_a_code")) => say(&e.to_string()),
                Err(e) => return Err(e.into()),
            }
        };
        say("The code matches.");
        say("");
        say(&format!("    Team code: {}", approved.team_code));
        say("");
        say(&format!("Read this team code to {}; they confirm it on their screen.", r.name));
        let spin = term::spinner(&format!("waiting for {} to confirm…", r.name));
        let end = loop {
            let s: AdmitState = c.call(Op::AdmitStatus { request_id: r.request_id }).await?;
            if s.state != "awaiting_confirmation" {
                break s;
            }
            tokio::time::sleep(POLL).await;
        };
        spin.finish_and_clear();
        match end.state.as_str() {
            "admitted" => {
                if json {
                    term::json(&serde_json::json!({ "admitted": r.name, "owner": r.owner, "peer_id": r.peer_id }))?;
                } else {
                    crate::say!("{} is now a member of the team.", r.name);
                }
                Ok(ExitCode::SUCCESS)
            }
            "declined" => Err(term::cli_error(
                "declined",
                format!(
                    "{} said the team codes differ, so it was not admitted; someone may be in the middle",
                    r.name
                ),
            )),
            other => Err(term::cli_error(
                "request_ended",
                format!(
                    "the request ended ({other}): {}",
                    end.reason.unwrap_or_default()
                ),
            )),
        }
    })
}

/// `agentmesh revoke NAME`.
pub fn revoke(home: &Home, name: &str, yes: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let v: serde_json::Value = rt.block_on(async {
        let mut c = term::client(home).await?;
        let t: TeamView = c.call(Op::TeamShow).await?;
        let who = t
            .members
            .iter()
            .find(|m| m.name == name && m.standing != "revoked")
            .map(|m| {
                format!(
                    " (owner {}, peer {})",
                    m.owner,
                    term::short_peer(&m.peer_id)
                )
            })
            .unwrap_or_default();
        if !term::confirm(
            &format!("Revoke {name}{who}? Every member will refuse it, for good."),
            yes,
        )? {
            return Err(term::cli_error("declined", "not revoked: you answered no"));
        }
        anyhow::Ok(c.call(Op::Revoke { name: name.into() }).await?)
    })?;
    if json {
        term::json(&v)?;
    } else {
        crate::say!(
            "Revoked {name} ({}). Members refuse it as the revocation reaches them.",
            v.get("revoked")
                .and_then(|p| p.as_str())
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh connect ADDR`.
pub fn connect(home: &Home, addr: &str, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let c: Connected = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(Op::Connect { addr: addr.into() }).await?)
    })?;
    if json {
        term::json(&c)?;
    } else {
        crate::say!(
            "Connected to {} ({}); {} new team blocks.",
            c.peer_id,
            c.membership,
            c.new_blocks
        );
    }
    Ok(ExitCode::SUCCESS)
}
