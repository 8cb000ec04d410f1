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
//! Who may see it: a browser of the daemon's own user (a connection whose
//! client socket another user owns is closed before a byte is read:
//! [`owner`]), signed in with the secret in the URL `agentmesh ui`
//! prints. That secret is a sign-in ticket: made for each
//! `agentmesh ui`, good once and for ten minutes, so one seen later (in a
//! process list, a browser's history) opens nothing. Signing in gives the
//! browser a session token of its own in a cookie (HttpOnly,
//! SameSite=Strict, named for the port), kept in this daemon's memory
//! only: a cookie a browser sends to another server of this machine is
//! worth nothing there, nor here after a restart, nor from another user. A
//! request whose `Host` or `Origin` is not this server's is refused (DNS
//! rebinding); a form posted without its session's `csrf` value (an HMAC
//! of the session under a key drawn at each start, never written down)
//! is refused. Templates escape
//! every value, and the Content-Security-Policy allows only the page's
//! own script file, so a peer's text can never act in the owner's
//! browser.

mod assets;
mod chrome;
mod forms;
mod http;
mod log;
pub mod owner;
mod pages;

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::api::UiView;
use crate::audit::{AuditEvent, AuditLog};
use crate::config::UiConfig;
use crate::home::Home;

/// Connections served at once, at most; past it a new one is closed at
/// once. A tab holds two or three (its page, its assets, its live
/// updates).
pub const MAX_CONNECTIONS: usize = 64;

/// How long a connection may take to send a request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections refused as another user's are audited at most this often
/// (the first at once, the rest counted into the next).
pub const REFUSALS_AUDITED_EVERY: Duration = Duration::from_secs(60);

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

#[derive(Debug)]
struct KeyRing {
    tickets: VecDeque<([u8; 32], Instant)>,
    sessions: VecDeque<[u8; 32]>,
    /// What the forms' csrf values are keyed with: drawn at each start,
    /// never written down.
    csrf_key: [u8; 32],
}

impl Default for KeyRing {
    fn default() -> KeyRing {
        let mut csrf_key = [0u8; 32];
        rand::Rng::fill_bytes(&mut rand::rng(), &mut csrf_key);
        KeyRing {
            tickets: VecDeque::new(),
            sessions: VecDeque::new(),
            csrf_key,
        }
    }
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

    /// The value every form of `session` carries: HMAC-SHA256 of it under
    /// this run's key, so only a page served to that session knows it
    /// (the cookie alone does not give it).
    pub(super) fn csrf_of(&self, session: &str) -> String {
        use hmac::{KeyInit, Mac};
        let Ok(key) = self.0.lock().map(|k| k.csrf_key) else {
            // A poisoned lock: a value no form has.
            return token();
        };
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key)
            .expect("HMAC takes a key of any length");
        mac.update(session.as_bytes());
        data_encoding::HEXLOWER.encode(&mac.finalize().into_bytes()[..16])
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

/// Connections of other users refused since the last audit entry, and
/// when that was: each minute's in one entry.
#[derive(Debug, Default)]
struct Refusals {
    audited: Option<Instant>,
    count: u64,
    uids: std::collections::BTreeSet<u32>,
}

impl Refusals {
    /// A connection of `uid` was refused at `now`: audited now if none
    /// was in the last minute, else counted into the next.
    fn refused(&mut self, uid: u32, now: Instant, log: &mut AuditLog) {
        self.count += 1;
        if self.uids.len() < 8 {
            self.uids.insert(uid);
        }
        if self
            .audited
            .is_none_or(|at| now.duration_since(at) >= REFUSALS_AUDITED_EVERY)
        {
            self.audit(now, log);
        }
    }

    /// When the refusals counted since the last entry are due, if any are.
    fn due(&self) -> Option<Instant> {
        let at = self.audited?;
        (self.count > 0).then(|| at + REFUSALS_AUDITED_EVERY)
    }

    /// The refusals counted, in one audit entry.
    fn audit(&mut self, now: Instant, log: &mut AuditLog) {
        if self.count == 0 {
            return;
        }
        // Logged with the audit entry, not per connection: another user
        // can't fill the daemon's log.
        tracing::warn!(
            refused = self.count,
            uids = ?self.uids,
            "web page: refused connections of another user"
        );
        let uids: Vec<String> = self.uids.iter().map(u32::to_string).collect();
        let detail = format!(
            "ui_refused: the web page closed {} from another user (uid {}) before reading anything: it serves only its own user (uid {}). Another user of this machine tried to open it",
            agentmesh_protocol::time::count(self.count, "connection"),
            uids.join(", "),
            nix::unistd::geteuid().as_raw(),
        );
        log.record(
            AuditEvent::UiRefused,
            crate::clock::now(),
            crate::store::AuditEntry {
                detail,
                ..crate::store::AuditEntry::default()
            },
        );
        if let Err(then) = log.try_submit(None) {
            // The disk is behind: the entry goes with the next one.
            drop(then);
        }
        self.audited = Some(now);
        self.count = 0;
        self.uids.clear();
    }
}

/// Serves the page until `cancel` fires; `log` records the connections
/// of other users it refuses.
pub async fn serve(
    bound: Bound,
    keys: Keys,
    home: Home,
    machine: String,
    mut log: AuditLog,
    cancel: CancellationToken,
) {
    let me = nix::unistd::geteuid();
    let person = crate::home::login_name();
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
    let mut refusals = Refusals::default();
    let (mut told_unknown, mut told_unreadable) = (false, false);
    loop {
        let due = refusals.due();
        let (stream, peer) = tokio::select! {
            () = cancel.cancelled() => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            () = sleep_until(due), if due.is_some() => {
                refusals.audit(Instant::now(), &mut log);
                continue;
            }
            accepted = bound.listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
        // Whose it is, before a byte of it is read.
        let local = stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, bound.port)));
        // (The table is read whole: off the runtime's threads, as a
        // machine with many sockets has a long one.)
        let owner = tokio::task::spawn_blocking(move || owner::of(local, peer))
            .await
            .unwrap_or_else(|e| owner::Owner::Unreadable(e.to_string()));
        match owner {
            owner::Owner::Uid(uid) if uid == me.as_raw() => {}
            owner::Owner::Uid(uid) => {
                refusals.refused(uid, Instant::now(), &mut log);
                continue;
            }
            // Closed before it could be looked up: nothing to serve.
            owner::Owner::Gone => continue,
            // Whose it is can't be told where it could be: refused, not
            // served on trust.
            owner::Owner::Unreadable(why) => {
                if !told_unreadable {
                    tracing::error!(
                        error = %why,
                        "web page: cannot tell which user a connection is from, so it is refused; use the CLI"
                    );
                    told_unreadable = true;
                }
                continue;
            }
            owner::Owner::Unknown => {
                if !told_unknown {
                    tracing::warn!(
                        "web page: which user a connection is from can't be known on this system (no /proc/net/tcp); the sign-in ticket alone guards the page"
                    );
                    told_unknown = true;
                }
            }
        }
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
    refusals.audit(Instant::now(), &mut log);
    log.submit(crate::store::Writes::default(), None);
    tasks.abort_all();
}

/// Sleeps until `at` (never, without one).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
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

    #[test]
    fn a_forms_csrf_value_is_keyed_by_this_run_and_not_a_function_of_the_cookie() {
        use sha2::Digest;
        let keys = Keys::default();
        let s = "a session";
        assert_eq!(keys.csrf_of(s), keys.csrf_of(s));
        assert_ne!(keys.csrf_of(s), keys.csrf_of("another session"));
        // Another run (a restart) keys them anew.
        assert_ne!(keys.csrf_of(s), Keys::default().csrf_of(s));
        // What the value was before: a public function of the cookie.
        let public = sha2::Sha256::digest(format!("agentmesh ui csrf {s}").as_bytes());
        assert_ne!(
            keys.csrf_of(s),
            data_encoding::HEXLOWER.encode(&public[..16])
        );
    }
}
