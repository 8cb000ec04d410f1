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
    agentmesh_node::node::now()
}

fn print_team(t: &TeamView) {
    println!("team {} (id {})", t.name, t.team_id);
    println!(
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
                m.admitted_at.clone(),
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
pub fn create(home: &Home, name: &str, owner: &str, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let t: TeamView = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(Op::TeamCreate {
                name: name.into(),
                owner: owner.into(),
            })
            .await?,
        )
    })?;
    if json {
        term::json(&t)?;
    } else {
        println!("Founded team {} with this machine as its admin.", t.name);
        println!("Invite a machine with `agentmesh invite`.");
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
pub fn leave(home: &Home) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call::<serde_json::Value>(Op::TeamLeave).await?)
    })?;
    println!("This machine left its team; members stop accepting it as they learn of it.");
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
        println!("{}", invite.ticket);
        eprintln!(
            "\nSingle use, valid until {}. On the new machine run:\n  agentmesh join TICKET --name NAME --owner PERSON\nthen run `agentmesh admit` here and type the code it shows.",
            invite.expires_at
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh join`.
pub fn join(home: &Home, ticket: &str, name: &str, owner: &str) -> anyhow::Result<ExitCode> {
    // A mistyped or expired ticket is caught here, before the daemon.
    Ticket::parse(ticket, now())?;
    let rt = term::runtime()?;
    rt.block_on(async {
        let mut c = term::client(home).await?;
        if !term::interactive() {
            anyhow::bail!(
                "joining needs a person at an interactive terminal to compare codes with the founder; run `agentmesh join` in your own terminal"
            );
        }
        let spin = term::spinner("contacting the founder…");
        let started: Result<JoinStarted, _> = c
            .call(Op::JoinStart {
                ticket: ticket.into(),
                name: name.into(),
                owner: owner.into(),
            })
            .await;
        spin.finish_and_clear();
        let started = started?;
        println!("Asking to join team {} as {name}.", started.team_name);
        println!();
        println!("    Pairing code: {}", started.pairing_code);
        println!();
        println!("Read this code to the founder, who types it into `agentmesh admit`.");
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
            "refused" => anyhow::bail!("the founder refused: {}", state.reason.unwrap_or_default()),
            other => anyhow::bail!("the join ended: {other}"),
        }
        let team_code = state.team_code.unwrap_or_default();
        println!("The founder accepted the pairing code. Their screen now shows a team code.");
        println!();
        println!("    Team code: {team_code}");
        println!();
        let answer = term::prompt("Does the founder's screen show this same team code? [y/N] ")?;
        let accept = matches!(answer.to_lowercase().as_str(), "y" | "yes");
        let done: JoinState = c
            .call(Op::JoinConfirm {
                join_id: started.join_id,
                accept,
            })
            .await?;
        if !accept {
            anyhow::bail!(
                "declined: the team codes differ, so this machine did not join; someone may be in the middle. Start again with a new ticket"
            );
        }
        let team = done.team.map(|t| t.name).unwrap_or_default();
        println!("Joined team {team} as {name}.");
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

async fn pick_request(c: &mut Client) -> anyhow::Result<JoinRequestView> {
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
    println!("Machines asking to join:");
    for (i, r) in requests.iter().enumerate() {
        println!(
            "  {}. {} (owner {}, peer {}, {}s ago)",
            i + 1,
            r.name,
            r.owner,
            term::short_peer(&r.peer_id),
            r.age_secs
        );
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
        println!("Type a number from 1 to {}.", requests.len());
    }
}

/// `agentmesh admit`.
pub fn admit(home: &Home) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    rt.block_on(async {
        let mut c = term::client(home).await?;
        if !term::interactive() {
            anyhow::bail!(
                "admitting a machine needs a person at an interactive terminal; run `agentmesh admit` in your own terminal (it is never available to scripts or agents)"
            );
        }
        let r = pick_request(&mut c).await?;
        println!(
            "{} (owner {}, peer {}) asks to join.",
            r.name, r.owner, r.peer_id
        );
        println!("(Type `reject` to refuse it.)");
        let approved: AdmitApproved = loop {
            let typed = term::prompt(&format!("Type the pairing code shown on {}: ", r.name))?;
            if typed.eq_ignore_ascii_case("reject") {
                c.call::<serde_json::Value>(Op::AdmitReject { request_id: r.request_id })
                    .await?;
                println!("Refused the request from {}.", r.name);
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
                Err(e) if matches!(e.code(), Some("wrong_code" | "not_a_code")) => println!("{e}"),
                Err(e) => return Err(e.into()),
            }
        };
        println!("The code matches.");
        println!();
        println!("    Team code: {}", approved.team_code);
        println!();
        println!("Read this team code to {}; they confirm it on their screen.", r.name);
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
                println!("{} is now a member of the team.", r.name);
                Ok(ExitCode::SUCCESS)
            }
            "declined" => anyhow::bail!(
                "{} said the team codes differ, so it was not admitted; someone may be in the middle",
                r.name
            ),
            other => anyhow::bail!(
                "the request ended ({other}): {}",
                end.reason.unwrap_or_default()
            ),
        }
    })
}

/// `agentmesh revoke NAME`.
pub fn revoke(home: &Home, name: &str) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let v: serde_json::Value = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(Op::Revoke { name: name.into() }).await?)
    })?;
    println!(
        "Revoked {name} ({}). Members refuse it as the revocation reaches them.",
        v.get("revoked")
            .and_then(|p| p.as_str())
            .unwrap_or_default()
    );
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
        println!(
            "Connected to {} ({}); {} new team blocks.",
            c.peer_id, c.membership, c.new_blocks
        );
    }
    Ok(ExitCode::SUCCESS)
}
