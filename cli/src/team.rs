//! `team`, `invite`, `join`, `admit`, `revoke`, `connect`: the life of a team.

use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{
    AdmitApproved, AdmitMatched, AdmitPhase, AdmitState, Connected, Invite, JoinPhase,
    JoinRequestView, JoinStarted, JoinState, PersonMoved, PersonView, RequestPhase, Standing,
    TeamView, ops,
};
use agentmesh_node::client::Client;
use agentmesh_node::codes::ErrorCode;
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
                format!(
                    "{}{}{}",
                    m.name,
                    if m.this_machine { " *" } else { "" },
                    if m.always_on { " (carrier)" } else { "" }
                ),
                m.owner.clone(),
                term::short_peer(&m.peer_id),
                term::ago(&m.admitted_at),
                if m.admin {
                    "admin".into()
                } else {
                    m.standing.as_str().replace('_', " ")
                },
                match (&m.expires_at, &m.renewed_by) {
                    (Some(until), Some(by)) => format!("{} (by {by})", term::ago(until)),
                    (Some(until), None) => term::ago(until),
                    _ => "never".into(),
                },
            ]
        })
        .collect();
    term::table(
        &["MACHINE", "OWNER", "PEER", "ADMITTED", "STATUS", "EXPIRES"],
        &rows,
    );
}

/// `agentmesh team`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TeamCommand {
    /// Found a team, with this machine as its admin.
    Create {
        /// The team's name.
        name: String,
        /// The person who runs this machine. Default: the login name.
        #[arg(long)]
        owner: Option<String>,
        /// Days a membership lasts unless renewed (default 180; a member
        /// asks to be renewed two thirds of the way through). The
        /// founder's own never expires.
        #[arg(long, value_name = "N")]
        member_days: Option<u32>,
    },
    /// Show the team and its members.
    Show,
    /// Move a machine to another person: whose machine it is decides
    /// which mail is held (founder only).
    Person {
        /// The machine's name.
        machine: String,
        /// The person who runs it from now on (an existing one, or new).
        person: String,
    },
    /// Extend a member's membership from now, one that lapsed too (founder
    /// only; members ask on their own before it ends).
    Renew {
        /// The machine's name.
        machine: String,
        /// For how many days (default: the team's --member-days, else 180).
        #[arg(long, value_name = "N")]
        days: Option<u32>,
    },
    /// Leave the team (this machine revokes itself).
    Leave {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

/// `agentmesh team …`.
pub fn run(home: &Home, command: TeamCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        TeamCommand::Create {
            name,
            owner,
            member_days,
        } => create(home, &name, owner, member_days, json),
        TeamCommand::Show => show(home, json),
        TeamCommand::Leave { yes } => leave(home, yes, json),
        TeamCommand::Person { machine, person: p } => person(home, &machine, &p, json),
        TeamCommand::Renew { machine, days } => renew(home, &machine, days, json),
    }
}

/// `agentmesh team renew MACHINE [--days N]`.
fn renew(home: &Home, machine: &str, days: Option<u32>, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let r = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(ops::TeamRenew {
                machine: machine.into(),
                days,
            })
            .await?,
        )
    })?;
    if json {
        term::json(&r)?;
    } else {
        crate::say!(
            "Renewed {}: a member until {} ({}). Its team hears of it at the next sync.",
            r.machine,
            r.expires_at,
            term::ago(&r.expires_at)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh team create`.
pub fn create(
    home: &Home,
    name: &str,
    owner: Option<String>,
    member_days: Option<u32>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let owner = owner.unwrap_or_else(term::login_name);
    let rt = term::runtime()?;
    let t: TeamView = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(ops::TeamCreate {
                name: name.into(),
                owner,
                member_days,
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
        anyhow::Ok(c.call(ops::TeamShow).await?)
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
        let t: TeamView = c.call(ops::TeamShow).await?;
        // Whether it can leave at all is said before anything is asked.
        let me = t.members.iter().find(|m| m.this_machine);
        match me {
            Some(m) if m.admin => {
                return Err(term::cli_error(
                    "admin_cannot_leave",
                    "the founder cannot leave its team: admins can't be revoked; to end the team, stop using it",
                ));
            }
            Some(m) if m.standing != Standing::Current => {
                return Err(term::cli_error(
                    "not_in_team",
                    format!(
                        "this machine is not a current member of team {} ({}); there is nothing to leave. To join a team again it needs a new identity: `agentmesh init --new-identity`",
                        t.name,
                        m.standing.as_str().replace('_', " ")
                    ),
                ));
            }
            _ => {}
        }
        if !term::confirm(
            &format!(
                "Leave team {}? This machine can't rejoin with its key; it would need a new identity (`agentmesh init --new-identity`) and a new admission.",
                t.name
            ),
            "leaving the team",
            yes,
        )? {
            return Err(term::cli_error("declined", "not left: you answered no"));
        }
        anyhow::Ok(c.call(ops::TeamLeave).await?)
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
        anyhow::Ok(c.call(ops::Invite { ttl_secs }).await?)
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
            .call(ops::JoinStart {
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
        let spin = term::spinner("waiting for the founder… (Ctrl-C withdraws the request)");
        let wait = async {
            loop {
                let s: JoinState = c.call(ops::JoinStatus { join_id: started.join_id }).await?;
                if s.state != JoinPhase::Waiting {
                    break anyhow::Ok(s);
                }
                tokio::time::sleep(POLL).await;
            }
        };
        let state = tokio::select! {
            s = wait => s?,
            _ = tokio::signal::ctrl_c() => {
                spin.finish_and_clear();
                // Withdrawn, so the founder's `admit` no longer lists it.
                let withdrawn = c
                    .call(ops::JoinConfirm { join_id: started.join_id, accept: false })
                    .await;
                return Err(term::cli_error(
                    "interrupted",
                    match withdrawn {
                        Ok(_) => "stopped: the request was withdrawn from the founder's `agentmesh admit`; run `agentmesh join` again with a new ticket to ask again".to_owned(),
                        Err(e) => format!("stopped; the request could not be withdrawn ({e}), so it waits on the founder's side until it expires"),
                    },
                ));
            }
        };
        spin.finish_and_clear();
        match state.state {
            JoinPhase::Approved => {}
            JoinPhase::Refused => {
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
            .call(ops::JoinConfirm {
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
        let person = done.person.clone().unwrap_or_else(|| owner.clone());
        if json {
            term::json(&serde_json::json!({
                "joined": done.team,
                "name": name,
                "owner": person,
                "person": person,
                "claimed_owner": owner,
            }))?;
        } else {
            let team = done.team.map(|t| t.name).unwrap_or_default();
            crate::say!("Joined team {team} as {name}, {person}'s machine (the founder chose the person; mail between {person}'s machines is never held, mail from other people's is held until approved).");
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

async fn pick_request(c: &mut Client, say: &impl Fn(&str)) -> anyhow::Result<JoinRequestView> {
    let mut spin = None;
    let requests = loop {
        let list: Vec<JoinRequestView> = c.call(ops::AdmitList).await?;
        // A request whose code matched in an `admit` that stopped before
        // saying whose machine it is can be picked up again.
        let waiting: Vec<JoinRequestView> = list
            .into_iter()
            .filter(|r| matches!(r.state, RequestPhase::Waiting | RequestPhase::Matched))
            .collect();
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

/// Asks whose machine `machine` is (its claim: `claimed`), unless
/// `given` (`admit --person`) answers it: the person, and whether they are
/// one of `persons` already. Counting a machine as an existing person's
/// takes an explicit yes, so a claimed name is never merged silently.
fn whose(
    machine: &str,
    claimed: &str,
    persons: &[PersonView],
    given: Option<&str>,
    say: &impl Fn(&str),
) -> anyhow::Result<(String, bool)> {
    let merge = |person: &str| {
        format!(
            "{machine} will count as {person}'s machine: mail between {person}'s machines is never held."
        )
    };
    if let Some(p) = given {
        let existing = persons.iter().any(|x| x.person == p);
        if existing {
            say(&format!("{} (--person {p})", merge(p)));
        } else {
            say(&format!(
                "{machine} is admitted as a new person, {p} (--person)."
            ));
        }
        return Ok((p.to_owned(), existing));
    }
    say(&format!(
        "Whose machine is {machine}? It says its owner is {claimed:?}, but that is only what was typed there. The person you choose decides holding: mail from another person's machine waits for approval (`agentmesh held`), mail between one person's machines never does."
    ));
    for (i, p) in persons.iter().enumerate() {
        say(&format!(
            "  {}. {} ({})",
            i + 1,
            p.person,
            p.machines.join(", ")
        ));
    }
    say("  n. a new person");
    loop {
        let range = match persons.len() {
            1 => "1".to_owned(),
            n => format!("1-{n}"),
        };
        let answer = term::prompt(&format!("Which? [{range}, or n] "))?;
        let chosen = if answer.eq_ignore_ascii_case("n") {
            let typed = term::prompt(&format!("The new person's name [{claimed}]: "))?;
            let name = if typed.is_empty() {
                claimed.to_owned()
            } else {
                typed
            };
            if !persons.iter().any(|p| p.person == name) {
                return Ok((name, false));
            }
            say(&format!("{name} is a person of this team already."));
            name
        } else if let Some(p) = answer
            .parse::<usize>()
            .ok()
            .and_then(|n| persons.get(n.wrapping_sub(1)))
        {
            p.person.clone()
        } else {
            say(&format!("Type a number from 1 to {}, or n.", persons.len()));
            continue;
        };
        let yes = term::prompt(&format!("{} Is that right? [y/N] ", merge(&chosen)))?;
        if matches!(yes.to_lowercase().as_str(), "y" | "yes") {
            return Ok((chosen, true));
        }
        say("Then choose again (n for a new person).");
    }
}

/// `agentmesh admit`. With `--json`, what a person reads goes to stderr
/// and the result to stdout.
pub fn admit(
    home: &Home,
    person: Option<&str>,
    days: Option<u32>,
    json: bool,
) -> anyhow::Result<ExitCode> {
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
            "{} (it says its owner is {}; peer {}) asks to join.",
            r.name, r.owner, r.peer_id
        ));
        if let Some(was) = &r.name_was {
            say(&format!(
                "WARNING: the name {} belonged to another machine ({}, owner {}, peer {}). Admitted, this machine's mail will show as from @{}: make sure that is what your team expects, or refuse and have it join with another --name.",
                r.name,
                was.standing.as_str().replace('_', " "),
                was.owner,
                term::short_peer(&was.peer_id),
                r.name
            ));
        }
        say("(Type `reject` to refuse it.)");
        let matched: AdmitMatched = loop {
            let typed = term::prompt(&format!("Type the pairing code shown on {}: ", r.name))?;
            if typed.eq_ignore_ascii_case("reject") {
                c.call(ops::AdmitReject { request_id: r.request_id })
                    .await?;
                if json {
                    term::json(&serde_json::json!({ "rejected": r.name, "peer_id": r.peer_id }))?;
                } else {
                    crate::say!("Refused the request from {}.", r.name);
                }
                return Ok(ExitCode::FAILURE);
            }
            match c
                .call(ops::AdmitCode {
                    request_id: r.request_id,
                    code: typed,
                })
                .await
            {
                Ok(a) => break a,
                Err(e) if matches!(e.code(), Some(ErrorCode::WrongCode | ErrorCode::NotACode)) => say(&e.to_string()),
                Err(e) => return Err(e.into()),
            }
        };
        say("The code matches.");
        let approved: AdmitApproved = loop {
            let (chosen, existing) =
                whose(&r.name, &matched.claimed_owner, &matched.persons, person, &say)?;
            match c
                .call(ops::AdmitPerson {
                    request_id: r.request_id,
                    person: chosen,
                    existing,
                    days,
                })
                .await
            {
                Ok(a) => break a,
                // A name the rule refuses: ask again (a --person given is
                // not asked twice).
                Err(e) if person.is_none() && e.code() == Some(ErrorCode::BadOwner) => say(&e.to_string()),
                Err(e) => return Err(e.into()),
            }
        };
        say(&format!("{} is admitted as {}'s machine.", r.name, approved.person));
        say("");
        say(&format!("    Team code: {}", approved.team_code));
        say("");
        say(&format!("Read this team code to {}; they confirm it on their screen.", r.name));
        let spin = term::spinner(&format!("waiting for {} to confirm…", r.name));
        let end = loop {
            let s: AdmitState = c.call(ops::AdmitStatus { request_id: r.request_id }).await?;
            if s.state != AdmitPhase::AwaitingConfirmation {
                break s;
            }
            tokio::time::sleep(POLL).await;
        };
        spin.finish_and_clear();
        match end.state {
            AdmitPhase::Admitted => {
                if json {
                    term::json(&serde_json::json!({
                        "admitted": r.name,
                        "owner": approved.person,
                        "person": approved.person,
                        "claimed_owner": r.owner,
                        "peer_id": r.peer_id,
                    }))?;
                } else {
                    crate::say!(
                        "{} is now a member of the team, as {}'s machine.",
                        r.name,
                        approved.person
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            AdmitPhase::Declined => Err(term::cli_error(
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

/// `agentmesh team person MACHINE PERSON`.
pub fn person(home: &Home, machine: &str, person: &str, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let moved: PersonMoved = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(ops::TeamPerson {
                machine: machine.into(),
                person: person.into(),
            })
            .await?,
        )
    })?;
    if json {
        term::json(&moved)?;
    } else if moved.was == moved.person {
        crate::say!(
            "{} is {}'s machine already; nothing changed.",
            moved.machine,
            moved.person
        );
    } else {
        crate::say!(
            "{} is now {}'s machine (it was {}'s){}. Holding follows at once here, and on each member as the change reaches it.",
            moved.machine,
            moved.person,
            moved.was,
            if moved.new_person {
                format!("; {} is a new person of the team", moved.person)
            } else {
                String::new()
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh revoke NAME`.
pub fn revoke(home: &Home, name: &str, yes: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let v: agentmesh_node::api::RevokedView = rt.block_on(async {
        let mut c = term::client(home).await?;
        let t: TeamView = c.call(ops::TeamShow).await?;
        let target = t.members.iter().find(|m| {
            m.name == name && m.standing != Standing::Revoked && m.standing != Standing::Left
        });
        let admin = t.members.iter().any(|m| m.this_machine && m.admin);
        // Only what would really happen is asked about: a revoke the
        // daemon refuses (not the founder, no such member, the founder
        // itself) goes straight to it and is refused, saying why.
        if let Some(m) = target.filter(|m| admin && !m.admin)
            && !term::confirm(
                &format!(
                    "Revoke {name} ({}'s machine, peer {})? Every member will refuse it, for good.",
                    m.owner,
                    term::short_peer(&m.peer_id)
                ),
                &format!("revoking {name}"),
                yes,
            )?
        {
            return Err(term::cli_error("declined", "not revoked: you answered no"));
        }
        anyhow::Ok(c.call(ops::Revoke { name: name.into() }).await?)
    })?;
    if json {
        term::json(&v)?;
    } else {
        crate::say!(
            "Revoked {name} ({}). Members refuse it as the revocation reaches them.",
            v.revoked
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh connect ADDR`.
pub fn connect(home: &Home, addr: &str, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let c: Connected = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(ops::Connect { addr: addr.into() }).await?)
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
