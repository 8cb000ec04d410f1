//! What every view of the page shares: the views and their links, the
//! chrome around each, the person's connection to the daemon, and how a
//! query or a time is read.

use hyper::StatusCode;

use super::Site;
use crate::api::{Request, Who, WhoKind};
use crate::client::{Client, ClientError};

/// The page's views, each a link from every page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Every peer, how it is reached; this machine's reachability.
    Peers,
    /// Members, persons, and the directory's mailboxes.
    Team,
    /// Conversations, newest first; send and reply.
    Threads,
    /// Mail waiting for the person.
    Held,
    /// Broadcasts judged, wake runs, budgets, taint.
    Bus,
    /// The audit log.
    Audit,
}

impl View {
    pub(super) const ALL: [View; 6] = [
        View::Peers,
        View::Team,
        View::Threads,
        View::Held,
        View::Bus,
        View::Audit,
    ];

    /// The view at `path`.
    pub fn of(path: &str) -> Option<View> {
        View::ALL.into_iter().find(|v| v.path() == path)
    }

    /// Its path.
    pub fn path(self) -> &'static str {
        match self {
            View::Peers => "/peers",
            View::Team => "/team",
            View::Threads => "/threads",
            View::Held => "/held",
            View::Bus => "/bus",
            View::Audit => "/audit",
        }
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            View::Peers => "Peers",
            View::Team => "Team",
            View::Threads => "Threads",
            View::Held => "Held",
            View::Bus => "Bus",
            View::Audit => "Audit",
        }
    }
}

/// Who the page is to the daemon: the person, in the web page.
pub fn who(site: &Site) -> Who {
    Who {
        kind: WhoKind::Human,
        name: site.person.clone(),
        session_id: None,
        task: None,
    }
}

/// A link of the navigation.
#[derive(Debug)]
pub struct NavLink {
    pub(super) path: &'static str,
    pub(super) title: &'static str,
    pub(super) active: bool,
    pub(super) count: usize,
}

/// What every page shows around its view.
#[derive(Debug)]
pub struct Chrome {
    pub(super) title: &'static str,
    pub(super) view: &'static str,
    pub(super) machine: String,
    pub(super) person: String,
    pub(super) csrf: String,
    pub(super) nav: Vec<NavLink>,
    /// Seconds between refreshes of a view that changes without events
    /// (peers); 0: only on events.
    pub(super) refresh: u32,
    pub(super) notice: Option<&'static str>,
    pub(super) error: Option<String>,
    /// What the person typed in the Send form, kept when it failed.
    pub(super) draft: Option<Draft>,
}

/// A Send form that failed, as typed, and the known address nearest what
/// was typed in To, if one is near enough to be a slip.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    pub(super) to: String,
    pub(super) text: String,
    pub(super) ask: bool,
    pub(super) suggest: Option<String>,
}

impl Chrome {
    pub(super) fn new(view: View, site: &Site, csrf: &str, held: usize) -> Chrome {
        Chrome {
            title: view.title(),
            view: view.path().trim_start_matches('/'),
            machine: site.machine.clone(),
            person: site.person.clone(),
            csrf: csrf.to_owned(),
            nav: View::ALL
                .into_iter()
                .map(|v| NavLink {
                    path: v.path(),
                    title: v.title(),
                    active: v == view,
                    count: if v == View::Held { held } else { 0 },
                })
                .collect(),
            refresh: if view == View::Peers { 5 } else { 0 },
            notice: None,
            error: None,
            draft: None,
        }
    }
}

/// What a form that worked says, by the `done` word it redirects with
/// (fixed words: nothing of the request is shown back).
pub(super) fn notice(query: &str) -> Option<&'static str> {
    let done = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "done")?
        .1;
    Some(match &*done {
        "approved" => "Approved: the message is in its mailbox.",
        "rejected" => "Rejected: the message is dropped.",
        "trusted" => "Trusted: that machine's mail is no longer held.",
        "sent" => "Sent.",
        _ => return None,
    })
}

pub(super) fn param(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

/// A request-only connection to the daemon, as the person.
pub async fn connect(site: &Site) -> Result<Client, (StatusCode, String)> {
    Client::connect(&site.home, who(site)).await.map_err(failed)
}

/// One typed call.
pub async fn call<R: Request>(c: &mut Client, r: R) -> Result<R::Answer, (StatusCode, String)> {
    c.call(r).await.map_err(failed)
}

pub(super) fn failed(e: ClientError) -> (StatusCode, String) {
    let status = match &e {
        ClientError::Api(_) => StatusCode::CONFLICT,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, e.to_string())
}

/// A time as the page shows it: `2026-12-05 08:30:12`, UTC.
pub(super) fn when(rfc3339: &str) -> String {
    rfc3339
        .replacen('T', " ", 1)
        .trim_end_matches('Z')
        .to_owned()
}

/// A PeerId shortened for the page (its end; the whole on hover).
pub(super) fn short(peer_id: &str) -> String {
    let n = peer_id.len();
    if n > 12 {
        format!("…{}", &peer_id[n - 8..])
    } else {
        peer_id.to_owned()
    }
}
