//! The page's views: each asks the daemon through the local API, like any
//! client, and renders the typed answers with a template that escapes
//! every value.

use askama::Template;
use hyper::StatusCode;

use super::Site;
use super::chrome::{Chrome, View, call, connect, failed, notice, short, when};
use crate::api::{
    self, Connection, DirectoryPage, Event, InboxPage, MessageView, OutboxView, PeerRow, Status,
    TeamView, Who, ops,
};
use crate::client::{Client, ClientError};

/// A view's answer: its HTML, or a status and why not.
pub type Rendered = Result<String, (StatusCode, String)>;

/// The most messages the threads view reads from the inbox (newest
/// kept), and the most threads it shows.
const MAX_THREAD_MESSAGES: usize = 2000;
const MAX_THREADS: usize = 100;

/// The word a live update names (what changed).
pub fn event_word(e: &Event) -> &'static str {
    match e {
        Event::Message { .. } => "message",
        Event::Held { .. } => "held",
        Event::Resolved { .. } => "resolved",
        Event::Lagged { .. } => "lagged",
        Event::Folders => "folders",
    }
}

/// Renders `view`, with `error` (a form's failure) above it.
pub async fn render(view: View, query: &str, site: &Site, csrf: &str) -> Rendered {
    render_with(view, query, site, csrf, None, None).await
}

/// [`render`], with a form's failure shown above the view.
pub async fn render_with(
    view: View,
    query: &str,
    site: &Site,
    csrf: &str,
    error: Option<String>,
    draft: Option<super::chrome::Draft>,
) -> Rendered {
    let mut c = connect(site).await?;
    let held: Vec<MessageView> = call(&mut c, ops::Held).await?;
    let mut page = Chrome::new(view, site, csrf, held.len());
    page.notice = notice(query);
    page.error = error;
    page.draft = draft;
    let html = match view {
        View::Peers => peers(page, &mut c).await?.render(),
        View::Team => team(page, &mut c).await?.render(),
        View::Threads => threads(page, &mut c, &held).await?.render(),
        View::Held => HeldPage {
            held: held
                .iter()
                .map(|m| HeldLine::of(m, &page.machine))
                .collect(),
            page,
        }
        .render(),
        View::Bus => super::log::bus(page, &mut c).await?.render(),
        View::Audit => super::log::audit(page, &mut c, query).await?.render(),
    };
    html.map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

// ---- Peers ----

#[derive(Debug, Template)]
#[template(path = "peers.html")]
struct PeersPage {
    page: Chrome,
    me: Me,
    peers: Vec<PeerLine>,
}

#[derive(Debug)]
struct Me {
    name: String,
    peer_id: String,
    team: String,
    reachability: String,
    listen: Vec<String>,
    external: Vec<String>,
    circuits: Vec<String>,
    reservations: Vec<(String, String, String)>,
    connected: usize,
}

#[derive(Debug)]
struct PeerLine {
    peer_id: String,
    short: String,
    name: String,
    owner: String,
    membership: String,
    kind: &'static str,
    reached: String,
    transport: String,
    rtt: String,
    last_seen: String,
}

impl PeerLine {
    fn of(r: &PeerRow) -> PeerLine {
        let reached = match (r.connection, &r.relay) {
            (Connection::Relayed, Some(relay)) => format!("relayed via {}", short(relay)),
            (c, _) => c.to_string(),
        };
        PeerLine {
            peer_id: r.peer_id.clone(),
            short: short(&r.peer_id),
            name: r.name.clone().unwrap_or_else(|| "(unnamed)".into()),
            owner: r.owner.clone().unwrap_or_default(),
            membership: if r.left {
                "left".into()
            } else {
                r.membership.to_string()
            },
            kind: r.connection.as_str(),
            reached,
            transport: r.transport.map_or_else(|| "–".into(), |t| t.to_string()),
            rtt: r
                .rtt_ms
                .map_or_else(|| "–".into(), |ms| format!("{ms:.1} ms")),
            last_seen: match (r.connection, &r.last_seen) {
                (Connection::None, Some(t)) => when(t),
                (Connection::None, None) => "never".into(),
                _ => "now".into(),
            },
        }
    }
}

async fn peers(page: Chrome, c: &mut Client) -> Result<PeersPage, (StatusCode, String)> {
    let s: Status = call(c, ops::Status).await?;
    let rows = c.peers().await.map_err(failed)?;
    let team = match (&s.team, s.team_standing) {
        (Some(t), Some(standing)) => {
            format!("{} ({})", t.name, api::team_standing::word(standing))
        }
        (Some(t), None) => t.name.clone(),
        (None, _) => "no team yet".into(),
    };
    Ok(PeersPage {
        page,
        me: Me {
            name: s.name,
            peer_id: s.peer_id,
            team,
            reachability: s.reachability.to_string(),
            listen: s.listen_addrs,
            external: s.external_addrs,
            circuits: s.circuit_addrs,
            reservations: s
                .reservations
                .into_iter()
                .map(|r| (r.relay, r.state.to_string(), r.error.unwrap_or_default()))
                .collect(),
            connected: s.connected_peers,
        },
        peers: rows.iter().map(PeerLine::of).collect(),
    })
}

// ---- Team ----

#[derive(Debug, Template)]
#[template(path = "team.html")]
struct TeamPage {
    page: Chrome,
    team: Option<(String, String, String)>,
    members: Vec<MemberLine>,
    persons: Vec<(String, String)>,
    machines: Vec<api::DirectoryMachineView>,
}

#[derive(Debug)]
struct MemberLine {
    name: String,
    owner: String,
    short: String,
    standing: String,
    admin: bool,
    this_machine: bool,
    carrier: bool,
    admitted: String,
}

async fn team(page: Chrome, c: &mut Client) -> Result<TeamPage, (StatusCode, String)> {
    let view: Option<TeamView> = match c.call(ops::TeamShow).await {
        Ok(v) => Some(v),
        Err(ClientError::Api(e)) if e.code == crate::codes::ErrorCode::NotInTeam => None,
        Err(e) => return Err(failed(e)),
    };
    let mut machines = vec![];
    let mut after = None;
    if view.is_some() {
        loop {
            let p: DirectoryPage = call(
                c,
                ops::Directory {
                    after,
                    max_bytes: None,
                },
            )
            .await?;
            for m in p.machines {
                match machines.last_mut() {
                    Some(last) if same_machine(last, &m) => last.mailboxes.extend(m.mailboxes),
                    _ => machines.push(m),
                }
            }
            match p.next_after {
                Some(n) => after = Some(n),
                None => break,
            }
        }
    }
    let members: Vec<MemberLine> = view
        .as_ref()
        .map(|t| {
            t.members
                .iter()
                .map(|m| MemberLine {
                    name: m.name.clone(),
                    owner: m.owner.clone(),
                    short: short(&m.peer_id),
                    standing: m.standing.to_string(),
                    admin: m.admin,
                    this_machine: m.this_machine,
                    carrier: m.always_on,
                    admitted: when(&m.admitted_at),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut persons: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for m in members.iter().filter(|m| m.standing == "current") {
        persons
            .entry(m.owner.clone())
            .or_default()
            .push(m.name.clone());
    }
    Ok(TeamPage {
        page,
        team: view.map(|t| (t.name, t.team_id, t.founder_name)),
        members,
        persons: persons
            .into_iter()
            .map(|(p, m)| (p, m.join(", ")))
            .collect(),
        machines,
    })
}

fn same_machine(a: &api::DirectoryMachineView, b: &api::DirectoryMachineView) -> bool {
    a.name == b.name && a.owner == b.owner
}

// ---- Threads ----

#[derive(Debug, Template)]
#[template(path = "threads.html")]
struct ThreadsPage {
    page: Chrome,
    threads: Vec<Thread>,
    addresses: Vec<String>,
}

#[derive(Debug)]
struct Thread {
    id: String,
    subject: String,
    last_at: String,
    items: Vec<Item>,
    /// The newest message of it this machine received: what a reply
    /// answers.
    reply_to: Option<String>,
}

#[derive(Debug)]
struct Item {
    id: String,
    mine: bool,
    from: String,
    who: String,
    to: String,
    kind: String,
    hop: u8,
    taint: bool,
    state: String,
    at: String,
    text: String,
}

/// The known address nearest `typed`, if it is not `typed` itself and is
/// within a third of its length in edits (a slip of the keyboard: a swap
/// of two letters is one edit).
fn nearest_address(typed: &str, known: &[String]) -> Option<String> {
    let typed = typed.trim();
    // A known address was right: the send failed for another reason.
    if known.iter().any(|k| k == typed) {
        return None;
    }
    let room = (typed.chars().count() / 3).max(1);
    known
        .iter()
        .filter(|k| k.as_str() != typed)
        .map(|k| (strsim::damerau_levenshtein(typed, k), k))
        .filter(|(d, _)| *d <= room)
        .min()
        .map(|(_, k)| k.clone())
}

fn who_words(w: &Who) -> String {
    let kind = w.kind.as_str();
    // A person named only by their kind ("human") is not "human human".
    let name = if w.name.is_empty() || w.name == kind {
        kind.to_owned()
    } else {
        format!("{kind} {}", w.name)
    };
    match &w.session_id {
        Some(s) => format!("{name} (session {s})"),
        None => name,
    }
}

async fn threads(
    page: Chrome,
    c: &mut Client,
    held: &[MessageView],
) -> Result<ThreadsPage, (StatusCode, String)> {
    let here = page.machine.clone();
    let mut received: Vec<MessageView> = vec![];
    let mut after_seq = None;
    loop {
        let op = ops::Inbox {
            mailbox: None,
            unread: false,
            after_seq,
            limit: None,
        };
        let p: InboxPage = call(c, op).await?;
        received.extend(p.messages);
        if received.len() > MAX_THREAD_MESSAGES {
            received.drain(..received.len() - MAX_THREAD_MESSAGES);
        }
        match p.next_after_seq {
            Some(n) => after_seq = Some(n),
            None => break,
        }
    }
    received.extend(held.iter().cloned());
    let sent: Vec<OutboxView> = call(c, ops::Outbox).await?;
    let mut by_thread: std::collections::HashMap<String, Thread> = Default::default();
    let mut add = |thread: String, item: Item, received_id: Option<String>| {
        let t = by_thread.entry(thread.clone()).or_insert_with(|| Thread {
            id: thread,
            subject: String::new(),
            last_at: String::new(),
            items: vec![],
            reply_to: None,
        });
        if item.at >= t.last_at {
            t.last_at = item.at.clone();
            if received_id.is_some() {
                t.reply_to = received_id;
            }
        }
        t.items.push(item);
    };
    for m in &received {
        let state = match (&m.held, m.read) {
            (Some(_), _) => "held",
            (None, true) => "read",
            (None, false) => "unread",
        };
        let reply = m.held.is_none().then(|| m.id.clone());
        let to = format!("{}@{}", m.mailbox.as_deref().unwrap_or_default(), here);
        add(
            m.thread.clone(),
            Item {
                id: m.id.clone(),
                mine: false,
                from: m.from.clone(),
                who: who_words(&m.who),
                to,
                kind: m.kind.to_string(),
                hop: m.hop,
                taint: m.taint,
                state: state.into(),
                at: when(&m.received_at),
                text: m.text.clone(),
            },
            reply,
        );
    }
    for s in sent
        .iter()
        .filter(|s| !matches!(s.kind, api::MessageKind::Receipt | api::MessageKind::Counts))
    {
        add(
            s.thread.clone().unwrap_or_else(|| s.id.clone()),
            Item {
                id: s.id.clone(),
                mine: true,
                from: "this machine".into(),
                who: String::new(),
                to: s.to.clone(),
                kind: s.kind.to_string(),
                hop: 0,
                taint: false,
                state: s.status.to_string(),
                at: when(&s.created_at),
                text: s.text.clone().unwrap_or_else(|| "(text not kept)".into()),
            },
            None,
        );
    }
    let mut threads: Vec<Thread> = by_thread.into_values().collect();
    for t in &mut threads {
        t.items.sort_by(|a, b| a.at.cmp(&b.at));
        let first = t.items.first().map(|i| i.text.as_str()).unwrap_or_default();
        let line = first.lines().next().unwrap_or_default();
        t.subject = line.chars().take(80).collect();
    }
    threads.sort_by(|a, b| b.last_at.cmp(&a.last_at));
    threads.truncate(MAX_THREADS);
    let mut addresses: Vec<String> = received.iter().map(|m| m.from.clone()).collect();
    addresses.extend(sent.iter().map(|s| s.to.clone()));
    // Every mailbox of the team's directory (its first page) too.
    let op = ops::Directory {
        after: None,
        max_bytes: None,
    };
    if let Ok(d) = call(c, op).await {
        addresses.extend(
            d.machines
                .iter()
                .flat_map(|m| m.mailboxes.iter().map(|b| b.address.clone())),
        );
    }
    addresses.retain(|a| !a.starts_with('*'));
    addresses.sort();
    addresses.dedup();
    let mut page = page;
    if let Some(d) = &mut page.draft {
        d.suggest = nearest_address(&d.to, &addresses);
    }
    Ok(ThreadsPage {
        page,
        threads,
        addresses,
    })
}

// ---- Held ----

#[derive(Debug, Template)]
#[template(path = "held.html")]
struct HeldPage {
    page: Chrome,
    held: Vec<HeldLine>,
}

#[derive(Debug)]
struct HeldLine {
    id: String,
    from: String,
    owner: String,
    who: String,
    to: String,
    kind: String,
    hop: u8,
    taint: bool,
    why: String,
    gone: Option<String>,
    at: String,
    text: String,
}

impl HeldLine {
    /// The sending machine, as `trust` names it.
    fn machine(&self) -> &str {
        machine_of(&self.from)
    }

    fn of(m: &MessageView, here: &str) -> HeldLine {
        HeldLine {
            id: m.id.clone(),
            from: m.from.clone(),
            owner: m.from_owner.clone().unwrap_or_default(),
            who: who_words(&m.who),
            to: format!("{}@{here}", m.mailbox.as_deref().unwrap_or_default()),
            kind: m.kind.to_string(),
            hop: m.hop,
            taint: m.taint,
            why: m
                .held
                .map(api::HeldReason::words)
                .unwrap_or_default()
                .into(),
            gone: m.sender_gone.clone(),
            // When it was sent (a carrier may have brought it later).
            at: when(m.sent_at.as_deref().unwrap_or(&m.received_at)),
            text: m.text.clone(),
        }
    }
}

/// The machine of an address `mailbox@machine` (or `@machine`).
pub fn machine_of(address: &str) -> &str {
    address.rsplit_once('@').map_or(address, |(_, m)| m)
}
