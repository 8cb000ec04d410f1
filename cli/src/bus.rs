//! `agentmesh profile set|show`, `agentmesh directory`, `agentmesh
//! broadcast` and `agentmesh bus log`: what this machine's mailboxes say
//! of themselves, the team's directory, and the broadcasts judged.

use std::process::ExitCode;

use agentmesh_node::api::Preset;
use agentmesh_node::api::{self, ops};
use agentmesh_node::home::Home;

use crate::term;

/// A preset on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PresetArg {
    /// Only what is clearly about this mailbox's work.
    Strict,
    /// What is likely to matter (the default).
    Balanced,
    /// Anything that might matter.
    Loose,
}

impl From<PresetArg> for Preset {
    fn from(p: PresetArg) -> Preset {
        match p {
            PresetArg::Strict => Preset::Strict,
            PresetArg::Balanced => Preset::Balanced,
            PresetArg::Loose => Preset::Loose,
        }
    }
}

fn show_profile(p: &api::ProfileView) {
    crate::say!("{}", term::clean(&p.address));
    crate::say!(
        "  status:  {}{}",
        p.status,
        p.last_active
            .as_deref()
            .map(|t| format!(" (last active {t})"))
            .unwrap_or_default()
    );
    crate::say!(
        "  preset:  {}{}",
        p.preset,
        if p.preset_is_default {
            " (the machine's default)"
        } else {
            ""
        }
    );
    crate::say!(
        "  goal:    {}",
        if p.goal.is_empty() {
            "(none)".to_owned()
        } else {
            term::clean(&p.goal)
        }
    );
    crate::say!(
        "  profile: {}",
        if p.profile.is_empty() {
            "(none)".to_owned()
        } else {
            term::clean(&p.profile)
        }
    );
    if let Some(w) = &p.wake {
        crate::say!(
            "  wake:    {}; {} of {} wakes left today (resets {}){}",
            w.wake.map_or("off", |a| a.name()),
            w.left,
            w.budget,
            term::ago(&w.resets_at),
            w.running
                .as_deref()
                .map(|r| format!("; run {r} running"))
                .unwrap_or_default()
        );
    }
    if !p.notes.is_empty() {
        crate::say!(
            "  not for me ({}; the judge reads the last 5):",
            p.notes.len()
        );
        for n in &p.notes {
            crate::say!("    {} {}: {}", n.at, n.id, term::clean(&n.note));
        }
    }
}

/// `agentmesh broadcast TEXT|-`.
pub fn broadcast(
    home: &Home,
    text: &str,
    from: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let text = crate::mail::message_text(text)?;
    // Typed at a terminal, it is the person speaking, as `send` is.
    let reset = crate::mail::person_speaks().then(|| crate::mail::reset_of(from.clone()));
    let op = ops::Broadcast {
        text,
        from_mailbox: from,
    };
    // At a terminal it waits (as `send` does for its first answer) for
    // what each machine did with its copy.
    let wait = reset.is_some();
    let rt = term::runtime()?;
    let (v, reports) = rt.block_on(async {
        let mut c = term::client(home).await?;
        if let Some(reset) = reset {
            let _ = c.call(reset).await;
        }
        let v: api::BroadcastView = c.call(op).await?;
        let reports = if wait {
            let ids: Vec<String> = v.machines.iter().map(|m| m.id.clone()).collect();
            Some(crate::receipts::first_counts(&mut c, &ids).await?)
        } else {
            None
        };
        anyhow::Ok((v, reports))
    })?;
    if json {
        term::json(&BroadcastOutput {
            reports: reports.as_ref().map(|r| {
                v.machines
                    .iter()
                    .zip(r)
                    .map(|(m, o)| CopyReport {
                        machine: m.machine.clone(),
                        id: m.id.clone(),
                        status: o.status,
                        offline: o.offline,
                        counts: o.counts.clone(),
                    })
                    .collect()
            }),
            sent: v,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::say!(
        "Broadcast {} to {}: {}.",
        v.id,
        term::count(v.machines.len(), "machine"),
        v.machines
            .iter()
            .map(|m| term::clean(&m.machine))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let Some(reports) = reports else {
        crate::say!(
            "Each machine judges its own mailboxes. `agentmesh outbox` shows what each one delivered and dropped as it reports; `agentmesh bus log` shows this machine's judgments."
        );
        return Ok(ExitCode::SUCCESS);
    };
    let mut skipped = vec![];
    for (m, o) in v.machines.iter().zip(&reports) {
        let machine = term::clean(&m.machine);
        match &o.counts {
            Some(c) => {
                if c.skipped > 0 {
                    skipped.push(machine.clone());
                }
                crate::say!("  {}", term::clean(&c.words));
            }
            None if o.offline => crate::say!(
                "  {machine} is offline: its copy goes when it connects, and it judges it then"
            ),
            None => crate::say!("  {machine}: no counts yet"),
        }
    }
    if !skipped.is_empty() {
        crate::say!("Not judged on {}: see above.", skipped.join(", "));
    }
    crate::say!(
        "`agentmesh outbox` shows what each machine did as it reports; `agentmesh bus log` shows this machine's judgments."
    );
    Ok(ExitCode::SUCCESS)
}

/// What `broadcast --json` prints: the daemon's answer, and what each
/// machine reported within the wait (absent when it did not wait).
#[derive(Debug, serde::Serialize)]
struct BroadcastOutput {
    #[serde(flatten)]
    sent: api::BroadcastView,
    #[serde(skip_serializing_if = "Option::is_none")]
    reports: Option<Vec<CopyReport>>,
}

/// One machine's copy when the wait ended.
#[derive(Debug, serde::Serialize)]
struct CopyReport {
    machine: String,
    id: String,
    status: api::MessageState,
    offline: bool,
    /// What it did with it, if it reported (see `outbox`).
    counts: Option<api::CountsView>,
}

/// `agentmesh bus log [--since DURATION] [--mailbox MAILBOX]`.
pub fn log(
    home: &Home,
    since: Option<&str>,
    mailbox: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let op = ops::BusLog {
        since_secs: crate::mail::since_secs(since)?,
        mailbox,
    };
    crate::call::simple(home, op, json, |v| {
        if v.entries.is_empty() {
            crate::say!("No decisions of the bus yet.");
        }
        for e in &v.entries {
            let what = match e.event {
                api::BusEvent::BroadcastDelivered => "delivered",
                api::BusEvent::BroadcastDropped => "dropped",
                api::BusEvent::BroadcastCounts => "counts",
                api::BusEvent::BroadcastSkipped => "skipped",
                api::BusEvent::NotForMe => "not for me",
                api::BusEvent::DirectoryRefused => "record refused",
                api::BusEvent::Tainted => "tainted",
                api::BusEvent::TaintCleared => "taint cleared",
                api::BusEvent::TaintRefused => "refused (tainted)",
                api::BusEvent::Budget => "budget spent",
                api::BusEvent::Taint => "waits (tainted)",
                api::BusEvent::WakeStarted => "wake run started",
                api::BusEvent::WakeEnded => "wake run ended",
            };
            let mut parts = vec![e.at.clone(), what.to_owned()];
            if let Some(m) = &e.mailbox {
                parts.push(term::clean(m));
            }
            if let Some(s) = &e.sender {
                parts.push(format!("from {}", term::clean(s)));
            }
            if let Some(stage) = &e.stage {
                parts.push(format!("by {}", term::clean(stage)));
            }
            if let Some(p) = e.score {
                parts.push(format!("score {p:.3}"));
            }
            if let Some(id) = &e.id {
                parts.push(format!("id {id}"));
            }
            parts.push(format!("- {}", term::clean(&e.detail)));
            if let Some(why) = &e.why {
                parts.push(format!("(the agent: {})", term::clean(why)));
            }
            crate::say!("{}", parts.join("  "));
        }
    })
}

/// `agentmesh profile set MAILBOX [--profile TEXT] [--goal TEXT] [--preset P]`.
pub fn set(
    home: &Home,
    mailbox: &str,
    profile: Option<String>,
    goal: Option<String>,
    preset: Option<PresetArg>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if profile.is_none() && goal.is_none() && preset.is_none() {
        anyhow::bail!(
            "nothing to set: give --profile TEXT, --goal TEXT or --preset strict|balanced|loose"
        );
    }
    let op = ops::ProfileSet {
        mailbox: Some(mailbox.to_owned()),
        profile,
        goal,
        preset: preset.map(Into::into),
        // A tainted mailbox's profile is its person's to set, at a
        // terminal; an agent's shell has none.
        at_terminal: term::interactive(),
    };
    crate::call::simple(home, op, json, |p| {
        crate::say!("Set. Members see it in their directory within seconds.");
        show_profile(p);
    })
}

/// `agentmesh taint MAILBOX [--off]`. Marking needs no person (a session
/// may only narrow itself); clearing does, as admitting does: only at a
/// terminal.
pub fn taint(home: &Home, mailbox: &str, on: bool, json: bool) -> anyhow::Result<ExitCode> {
    if !on && !term::interactive() {
        return Err(term::cli_error(
            "not_interactive",
            format!(
                "clearing {mailbox}'s taint is its person's decision, so it is taken only at an interactive terminal; run `agentmesh taint {mailbox} --off` in your own terminal (or speak to the session: your next prompt clears what it caught from tainted mail)"
            ),
        ));
    }
    let op = ops::Taint {
        mailbox: mailbox.to_owned(),
        on,
    };
    crate::call::simple(home, op, json, |t| {
        if t.tainted {
            crate::say!(
                "{} is tainted{}: what it sends carries taint, and it can't change its profile.",
                t.address,
                if t.marked {
                    " (marked by its person)"
                } else {
                    ""
                }
            );
        } else {
            crate::say!("{} is not tainted.", t.address);
        }
        if let Some(c) = &t.caught {
            crate::say!(
                "It received tainted mail {} from {} at {}; its person's next prompt clears that.",
                c.id,
                term::clean_lines(&c.from),
                c.at
            );
        }
    })
}

/// `agentmesh profile show [MAILBOX]`.
pub fn show(home: &Home, mailbox: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    crate::call::simple(home, ops::ProfileShow { mailbox }, json, |v| {
        for p in &v.mailboxes {
            show_profile(p);
        }
    })
}

/// `agentmesh directory`: every page of the team's directory.
pub fn directory(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let pages: Vec<api::DirectoryPage> = rt.block_on(async {
        let mut c = term::client(home).await?;
        let mut pages = vec![];
        let mut after = None;
        // A page per machine at least: a bound even if a member lies.
        for _ in 0..10_000 {
            let page: api::DirectoryPage = c
                .call(ops::Directory {
                    after: after.clone(),
                    max_bytes: None,
                })
                .await?;
            after = page.next_after.clone();
            pages.push(page);
            if after.is_none() {
                break;
            }
        }
        anyhow::Ok(pages)
    })?;
    // Pages split a machine's mailboxes: join them back.
    let mut machines: Vec<api::DirectoryMachineView> = vec![];
    for m in pages.iter().flat_map(|p| p.machines.iter().cloned()) {
        match machines.last_mut() {
            Some(last) if last.name == m.name => last.mailboxes.extend(m.mailboxes),
            _ => machines.push(m),
        }
    }
    let team = pages.first().and_then(|p| p.team.clone());
    if json {
        term::json(&api::DirectoryPage {
            team,
            machines,
            next_after: None,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(t) = &team {
        crate::say!(
            "Team {}. Profiles and goals are what each machine's sessions wrote (as claimed).",
            term::clean(t)
        );
    }
    for m in &machines {
        let reach = if m.this_machine {
            ", this machine".to_owned()
        } else if m.reachable {
            ", reachable".to_owned()
        } else {
            match &m.last_seen {
                Some(t) => format!(", unreachable (last seen {})", term::ago(t)),
                None => ", unreachable (not seen since this daemon started)".to_owned(),
            }
        };
        crate::say!(
            "{} ({}){}{}{}",
            term::clean(&m.name),
            term::clean(&m.owner),
            reach,
            if m.always_on {
                ", carrier (always on: holds mail for members that are offline)"
            } else {
                ""
            },
            if m.known {
                ""
            } else {
                ": no directory record yet (it has not synced since, or runs an older agentmesh)"
            }
        );
        for b in &m.mailboxes {
            crate::say!(
                "  {:<28} {:<11}{}",
                term::clean(&b.address),
                b.status.as_str(),
                b.last_active
                    .as_deref()
                    .map(|t| format!(" last active {t}"))
                    .unwrap_or_default()
            );
            if !b.goal.is_empty() {
                crate::say!("    goal:    {}", term::clean(&b.goal));
            }
            if !b.profile.is_empty() {
                crate::say!("    profile: {}", term::clean(&b.profile));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh bus stats`.
pub fn stats(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    crate::call::simple(home, ops::BusStats, json, |v| {
        if v.mailboxes.is_empty() {
            crate::say!("No broadcast judged here yet.");
            return;
        }
        let pct = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{:.0}%", 100.0 * s));
        let rows: Vec<Vec<String>> = v
            .mailboxes
            .iter()
            .chain(std::iter::once(&v.total))
            .map(|r| {
                vec![
                    if r.mailbox == "*" {
                        "all".to_owned()
                    } else {
                        term::clean(&r.mailbox)
                    },
                    r.delivered.to_string(),
                    r.dropped.to_string(),
                    r.wake_runs.to_string(),
                    r.silent_runs.to_string(),
                    pct(r.silent_wake_share),
                ]
            })
            .collect();
        term::table(
            &[
                "MAILBOX",
                "DELIVERED",
                "DROPPED",
                "WAKE RUNS",
                "SILENT",
                "SILENT SHARE",
            ],
            &rows,
        );
        crate::say!(
            "Judgments since {}; wake runs of the last {} kept. A silent run is one a broadcast started whose session sent nothing and marked nothing.",
            v.judged_since.as_deref().unwrap_or("-"),
            v.runs_kept
        );
    })
}
