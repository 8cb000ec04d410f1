//! The local web page (`agentmesh ui`): what a person sees at a glance —
//! peers, the team and its directory, threads, held mail, the bus's
//! decisions, the audit log — served by the daemon on 127.0.0.1 only.
//!
//! The page is a client of the local API like any other: each request
//! opens the daemon's socket, attaches as the person (`human`, "NAME (web
//! page)", so the audit log says where a decision was made) and reads the
//! answers as the API's view types. Live updates come from the same event
//! stream `watch` reads.
//!
//! Who may see it: a browser signed in with the secret in the URL
//! `agentmesh ui` prints. That secret is a sign-in ticket: made for each
//! `agentmesh ui`, good once and for ten minutes, so one seen later (in a
//! process list, a browser's history) opens nothing. Signing in gives the
//! browser a session token of its own in a cookie (HttpOnly,
//! SameSite=Strict, named for the port), kept in this daemon's memory
//! only: a cookie a browser sends to another server of this machine is
//! worth nothing there, nor here after a restart. A request whose `Host`
//! or `Origin` is not this server's is refused (DNS rebinding); a form
//! posted without its session's `csrf` value is refused. Templates escape
//! every value, and the Content-Security-Policy allows only the page's
//! own script file, so a peer's text can never act in the owner's
//! browser.

mod assets;
mod forms;
mod http;
mod log;
mod pages;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::api::UiView;
use crate::config::UiConfig;
use crate::home::Home;

/// Connections served at once, at most; past it a new one is closed at
/// once. A tab holds two or three (its page, its assets, its live
/// updates).
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The web page's listener, bound before the daemon says it is up.
#[derive(Debug)]
pub struct Bound {
    listener: TcpListener,
    /// The port it listens on.
    pub port: u16,
    /// The configured port was taken: this is another.
    pub fell_back: bool,
}

/// Binds 127.0.0.1 on the configured port, or on a free one if that is
/// taken; `None` when the page is off.
pub async fn bind(config: &UiConfig) -> std::io::Result<Option<Bound>> {
    if !config.enabled {
        return Ok(None);
    }
    let at = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let (listener, fell_back) = match TcpListener::bind(at(config.port)).await {
        Ok(l) => (l, false),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            tracing::info!(
                port = config.port,
                "the web page's port is taken (another daemon on this machine?); using a free one"
            );
            (TcpListener::bind(at(0)).await?, true)
        }
        Err(e) => return Err(e),
    };
    let port = listener.local_addr()?.port();
    Ok(Some(Bound {
        listener,
        port,
        fell_back,
    }))
}

/// How long a sign-in ticket is good for, and how many are kept (the
/// oldest goes first).
const TICKET_LIFETIME: Duration = Duration::from_secs(600);
const MAX_TICKETS: usize = 16;

/// Browsers signed in at once, at most: a new sign-in past it signs the
/// longest-signed-in one out.
pub const MAX_SESSIONS: usize = 64;

/// The page's sign-in tickets and sessions, for this run of the daemon
/// only. Kept as SHA-256 digests: a lookup's timing says nothing of a
/// token.
#[derive(Debug, Clone, Default)]
pub struct Keys(Arc<Mutex<KeyRing>>);

#[derive(Debug, Default)]
struct KeyRing {
    tickets: VecDeque<([u8; 32], Instant)>,
    sessions: VecDeque<[u8; 32]>,
}

/// 32 random bytes, hex.
fn token() -> String {
    let mut bytes = [0u8; 32];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut bytes);
    data_encoding::HEXLOWER.encode(&bytes)
}

fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl Keys {
    /// A new sign-in ticket.
    pub fn ticket(&self) -> String {
        self.ticket_at(Instant::now())
    }

    fn ticket_at(&self, now: Instant) -> String {
        let t = token();
        if let Ok(mut k) = self.0.lock() {
            k.tickets.retain(|(_, until)| *until > now);
            if k.tickets.len() >= MAX_TICKETS {
                k.tickets.pop_front();
            }
            k.tickets.push_back((digest(&t), now + TICKET_LIFETIME));
        }
        t
    }

    /// Spends `ticket`, if it is good: a new session's token.
    fn redeem(&self, ticket: &str) -> Option<String> {
        self.redeem_at(ticket, Instant::now())
    }

    fn redeem_at(&self, ticket: &str, now: Instant) -> Option<String> {
        let d = digest(ticket);
        let mut k = self.0.lock().ok()?;
        let at = k
            .tickets
            .iter()
            .position(|(t, until)| *t == d && *until > now)?;
        k.tickets.remove(at);
        let session = token();
        if k.sessions.len() >= MAX_SESSIONS {
            k.sessions.pop_front();
        }
        k.sessions.push_back(digest(&session));
        Some(session)
    }

    /// Whether `session` is signed in.
    fn signed_in(&self, session: &str) -> bool {
        let d = digest(session);
        self.0.lock().is_ok_and(|k| k.sessions.contains(&d))
    }
}

/// Where the page is, for `agentmesh ui`: what the socket server answers
/// `ui` with.
#[derive(Debug, Clone)]
pub struct Door {
    /// The port it listens on, if it serves the page.
    port: Option<u16>,
    fell_back: bool,
    configured_port: u16,
    keys: Keys,
}

impl Door {
    /// The door to `bound` (none: the page is off).
    pub fn new(bound: Option<&Bound>, config: &UiConfig, keys: Keys) -> Door {
        Door {
            port: bound.map(|b| b.port),
            fell_back: bound.is_some_and(|b| b.fell_back),
            configured_port: config.port,
            keys,
        }
    }

    /// Where the page is, with a new sign-in ticket.
    pub fn view(&self) -> UiView {
        let address = self.port.map(|p| format!("http://127.0.0.1:{p}/"));
        UiView {
            enabled: self.port.is_some(),
            url: address
                .as_ref()
                .map(|a| format!("{a}?secret={}", self.keys.ticket())),
            address,
            port: self.port,
            configured_port: self.configured_port,
            fell_back: self.fell_back,
        }
    }
}

/// What every request is served with.
#[derive(Debug)]
struct Site {
    home: Home,
    port: u16,
    keys: Keys,
    /// The machine's name, for the page's title.
    machine: String,
    /// Who the page attaches to the daemon as.
    person: String,
}

/// Serves the page until `cancel` fires.
pub async fn serve(
    bound: Bound,
    keys: Keys,
    home: Home,
    machine: String,
    cancel: CancellationToken,
) {
    let person = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "owner".to_owned(), |u| u.name);
    let site = Arc::new(Site {
        home,
        port: bound.port,
        keys,
        machine,
        person: format!("{} (web page)", person.chars().take(40).collect::<String>()),
    });
    tracing::info!(address = %format!("http://127.0.0.1:{}/", bound.port), "web page listening");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            () = cancel.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = bound.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "web page: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!("web page: every connection slot is taken; closing a new one");
            continue;
        };
        let (site, cancel) = (site.clone(), cancel.clone());
        tasks.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (site, cancel) = (site.clone(), cancel.clone());
                async move { Ok::<_, std::convert::Infallible>(http::answer(req, &site, cancel).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(64 * 1024)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "web page: a connection failed");
            }
            drop(slot);
        });
    }
    tasks.abort_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_signs_in_once_within_its_lifetime_and_sessions_are_bounded() {
        let keys = Keys::default();
        let now = Instant::now();
        let t = keys.ticket_at(now);
        assert!(keys.redeem_at("not a ticket", now).is_none());
        let session = keys.redeem_at(&t, now).unwrap();
        assert_ne!(session, t, "the session is not the ticket");
        assert!(keys.signed_in(&session));
        assert!(!keys.signed_in(&t), "a ticket is no session");
        assert!(keys.redeem_at(&t, now).is_none(), "a ticket is good once");

        let late = keys.ticket_at(now);
        let after = now + TICKET_LIFETIME + Duration::from_secs(1);
        assert!(keys.redeem_at(&late, after).is_none(), "expired");

        // Past MAX_TICKETS the oldest ticket goes; past MAX_SESSIONS the
        // oldest session.
        let first = keys.ticket_at(now);
        for _ in 0..MAX_TICKETS {
            keys.ticket_at(now);
        }
        assert!(
            keys.redeem_at(&first, now).is_none(),
            "the oldest ticket went"
        );
        let sessions: Vec<String> = (0..MAX_SESSIONS)
            .map(|_| {
                let t = keys.ticket_at(now);
                keys.redeem_at(&t, now).unwrap()
            })
            .collect();
        assert!(!keys.signed_in(&session), "the oldest session went");
        assert!(sessions.iter().all(|s| keys.signed_in(s)));
    }
}
