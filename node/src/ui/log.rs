//! The page's Bus and Audit views: the bus's decisions, wake runs and
//! budgets; the audit log, searchable and paged.

use askama::Template;
use hyper::StatusCode;

use super::chrome::{Chrome, call, param, when};
use crate::api::{self, AuditView, BusLogView, Status, WakeListView, ops};
use crate::client::Client;

/// Audit entries per page, and bus entries shown.
const AUDIT_PAGE: usize = 50;
const MAX_BUS_ENTRIES: usize = 500;

// ---- Bus ----

#[derive(Debug, Template)]
#[template(path = "bus.html")]
pub(super) struct BusPage {
    page: Chrome,
    stats: api::BusStatsView,
    entries: Vec<BusLine>,
    runs: Vec<RunLine>,
    budgets: Vec<api::WakeStatusView>,
}

#[derive(Debug)]
struct BusLine {
    at: String,
    event: &'static str,
    mailbox: String,
    sender: String,
    score: String,
    stage: String,
    /// The agent's reason (its words: escaped like every value).
    why: String,
    verdict: &'static str,
    preset: String,
    detail: String,
}

#[derive(Debug)]
struct RunLine {
    id: String,
    mailbox: String,
    agent: &'static str,
    status: &'static str,
    started: String,
    took: String,
    messages: usize,
    log: String,
}

pub(super) async fn bus(page: Chrome, c: &mut Client) -> Result<BusPage, (StatusCode, String)> {
    let log: BusLogView = call(
        c,
        ops::BusLog {
            since_secs: None,
            mailbox: None,
        },
    )
    .await?;
    let runs: WakeListView = call(c, ops::WakeList).await?;
    let stats: api::BusStatsView = call(c, ops::BusStats).await?;
    let status: Status = call(c, ops::Status).await?;
    let entries = log
        .entries
        .iter()
        .rev()
        .take(MAX_BUS_ENTRIES)
        .map(|e| {
            use api::BusEvent as B;
            BusLine {
                at: when(&e.at),
                event: e.event.as_str(),
                mailbox: e.mailbox.clone().unwrap_or_default(),
                sender: e.sender.clone().unwrap_or_default(),
                score: e.score.map(|s| format!("{s:.2}")).unwrap_or_default(),
                stage: e.stage.clone().unwrap_or_default(),
                why: e.why.clone().unwrap_or_default(),
                verdict: match e.event {
                    B::BroadcastDelivered => "delivered",
                    B::BroadcastDropped => "dropped",
                    B::BroadcastSkipped => "skipped",
                    B::NotForMe => "not for me",
                    B::Budget | B::Taint | B::TaintRefused | B::DirectoryRefused => "held back",
                    _ => "",
                },
                preset: match (e.preset, e.threshold) {
                    (Some(p), Some(t)) => format!("{p} ≥ {t:.2}"),
                    (Some(p), None) => p.to_string(),
                    _ => String::new(),
                },
                detail: e.detail.clone(),
            }
        })
        .collect();
    Ok(BusPage {
        page,
        stats,
        entries,
        runs: runs
            .runs
            .iter()
            .map(|r| RunLine {
                id: r.id.clone(),
                mailbox: r.mailbox.clone(),
                agent: r.agent.name(),
                status: r.status.as_str(),
                started: when(&r.started),
                took: format!("{:.1} s", r.duration_ms as f64 / 1000.0),
                messages: r.messages.len(),
                log: log_tail(&r.log),
            })
            .collect(),
        budgets: status.wake,
    })
}

/// The end of a wake run's log file (the last 4 KiB), or why not.
fn log_tail(path: &str) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(TAIL)))?;
        let mut bytes = vec![];
        f.take(TAIL).read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    read().unwrap_or_else(|e| format!("({path}: {e})"))
}

// ---- Audit ----

#[derive(Debug, Template)]
#[template(path = "audit.html")]
pub(super) struct AuditPage {
    page: Chrome,
    q: String,
    entries: Vec<AuditLine>,
    total: usize,
    number: usize,
    pages: usize,
    prev: Option<String>,
    next: Option<String>,
}

/// An audit entry as the page shows it: the machine by name (its PeerId
/// on hover), the id shortened (whole on hover).
#[derive(Debug)]
struct AuditLine {
    at: String,
    event: String,
    /// The machine's name, else the PeerId shortened; empty for none.
    machine: String,
    peer: String,
    sender: String,
    recipient: String,
    id: String,
    id_short: String,
    detail: String,
}

impl AuditLine {
    fn of(e: AuditView, names: &std::collections::HashMap<String, String>) -> AuditLine {
        let peer = e.peer.unwrap_or_default();
        let machine = match names.get(&peer) {
            Some(n) => n.clone(),
            None if peer.is_empty() => String::new(),
            None => super::chrome::short(&peer),
        };
        let id = e.id.unwrap_or_default();
        AuditLine {
            at: when(&e.at),
            event: e.event,
            machine,
            peer,
            sender: e.sender.unwrap_or_default(),
            recipient: e.recipient.unwrap_or_default(),
            id_short: id.chars().take(8).collect(),
            id,
            detail: e.detail,
        }
    }
}

pub(super) async fn audit(
    page: Chrome,
    c: &mut Client,
    query: &str,
) -> Result<AuditPage, (StatusCode, String)> {
    let all: Vec<AuditView> = call(c, ops::Audit { since_secs: None }).await?;
    // Machines by PeerId: the team's members (revoked ones too), and this
    // one.
    let mut names: std::collections::HashMap<String, String> = Default::default();
    if let Ok(team) = call(c, ops::TeamShow).await {
        for m in team.members {
            names.insert(m.peer_id, m.name);
        }
    }
    let status: Status = call(c, ops::Status).await?;
    names.insert(status.peer_id, status.name);
    let q = param(query, "q").unwrap_or_default();
    let needle = q.trim().to_lowercase();
    let mut matched: Vec<AuditView> = all
        .into_iter()
        .rev()
        .filter(|e| {
            needle.is_empty()
                || [
                    Some(&e.event),
                    Some(&e.detail),
                    e.peer.as_ref(),
                    e.sender.as_ref(),
                    e.recipient.as_ref(),
                    e.id.as_ref(),
                ]
                .into_iter()
                .flatten()
                .any(|f| f.to_lowercase().contains(&needle))
        })
        .collect();
    let total = matched.len();
    let pages = total.div_ceil(AUDIT_PAGE).max(1);
    let number = param(query, "page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let entries: Vec<AuditLine> = matched
        .drain(..)
        .skip((number - 1) * AUDIT_PAGE)
        .take(AUDIT_PAGE)
        .map(|e| AuditLine::of(e, &names))
        .collect();
    let link = |n: usize| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        if !q.is_empty() {
            s.append_pair("q", &q);
        }
        s.append_pair("page", &n.to_string());
        format!("/audit?{}", s.finish())
    };
    Ok(AuditPage {
        page,
        prev: (number > 1).then(|| link(number - 1)),
        next: (number < pages).then(|| link(number + 1)),
        q,
        entries,
        total,
        number,
        pages,
    })
}
