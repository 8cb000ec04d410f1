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
//! Who may see it: whoever holds the secret (`HOME/ui-secret`, made once,
//! mode 0600), given once in the URL `agentmesh ui` prints and then kept
//! in a cookie (HttpOnly, SameSite=Strict, named for the port, so two
//! daemons of one machine keep theirs apart). A request whose `Host` or
//! `Origin` is not this server's is refused (DNS rebinding); a form posted
//! without the page's `csrf` value is refused. Templates escape every
//! value, and the Content-Security-Policy allows only the page's own
//! script file, so a peer's text can never act in the owner's browser.

mod assets;
mod forms;
mod http;
mod log;
mod pages;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

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

/// The page's secret, made once per home (32 random bytes, hex) and kept
/// in `HOME/ui-secret`, readable by this user only: a tab stays signed in
/// across restarts of the daemon.
pub fn secret(home: &Home) -> std::io::Result<String> {
    let path = home.root().join("ui-secret");
    match std::fs::read_to_string(&path) {
        Ok(s) if is_secret(s.trim()) => return Ok(s.trim().to_owned()),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "the web page's secret was unreadable; making a new one")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut bytes = [0u8; 32];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut bytes);
    let s = data_encoding::HEXLOWER.encode(&bytes);
    write_private(&path, s.as_bytes())?;
    Ok(s)
}

fn is_secret(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// What `agentmesh ui` is told: where the page is, and the URL that signs
/// a browser in.
pub fn view(bound: Option<&Bound>, secret: &str, config: &UiConfig) -> UiView {
    match bound {
        Some(b) => {
            let address = format!("http://127.0.0.1:{}/", b.port);
            UiView {
                enabled: true,
                url: Some(format!("{address}?secret={secret}")),
                address: Some(address),
                port: Some(b.port),
                configured_port: config.port,
                fell_back: b.fell_back,
            }
        }
        None => UiView {
            enabled: false,
            url: None,
            address: None,
            port: None,
            configured_port: config.port,
            fell_back: false,
        },
    }
}

/// What every request is served with.
#[derive(Debug)]
struct Site {
    home: Home,
    port: u16,
    secret: String,
    /// The value every form carries (derived from the secret).
    csrf: String,
    /// The machine's name, for the page's title.
    machine: String,
    /// Who the page attaches to the daemon as.
    person: String,
}

/// Serves the page until `cancel` fires.
pub async fn serve(
    bound: Bound,
    secret: String,
    home: Home,
    machine: String,
    cancel: CancellationToken,
) {
    let person = nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "owner".to_owned(), |u| u.name);
    let site = Arc::new(Site {
        csrf: http::csrf_of(&secret),
        home,
        port: bound.port,
        secret,
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
