//! Running the daemon: lock the home, load the configuration and the
//! identity, open the store, start the swarm, serve the socket, and stop
//! cleanly on `agentmesh down`, SIGTERM or Ctrl-C.

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use agentmesh_protocol::Multiaddr;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError, Settings};
use crate::home::{Home, HomeError};
use crate::mail::{Mail, MailSetup};
use crate::net::{self as swarm, BuildError};
use crate::net::{Net, NetError, NetSetup};
use crate::store::{MailStore, SledStore, Store, StoreError, TeamStore};

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`: replaces the configured addresses when not empty.
    pub listen: Vec<Multiaddr>,
    /// `--no-mdns`.
    pub no_mdns: bool,
    /// `--relay`: relays used besides the configured ones.
    pub relays: Vec<Multiaddr>,
    /// `--bootstrap`: bootstrap nodes used besides the configured ones.
    pub bootstrap: Vec<Multiaddr>,
}

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The home is unusable.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// Another daemon holds this home.
    #[error("another agentmesh daemon is already running on {home}{}; stop it with `agentmesh down`, or use another --home", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyRunning {
        /// The home.
        home: String,
        /// Its process id, if recorded.
        pid: Option<u32>,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The network could not start.
    #[error(transparent)]
    Swarm(#[from] BuildError),
    /// The network could not start.
    #[error(transparent)]
    Net(#[from] NetError),
    /// A fixed port to listen on is taken.
    #[error(
        "port {port} ({transport}, in {addr}) is already in use, perhaps by another agentmesh daemon with another home; stop it (`agentmesh --home OTHER down`), or choose another port with --listen (such as {suggestion}) or `listen` in config.toml"
    )]
    PortInUse {
        /// The address asked for.
        addr: Multiaddr,
        /// Its port.
        port: u16,
        /// `TCP` or `UDP`.
        transport: &'static str,
        /// The same address on the next port.
        suggestion: String,
    },
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// Takes the home's daemon lock: refused while a daemon holds it.
fn lock_home(home: &Home) -> Result<fs::File, DaemonError> {
    let lock_path = home.lock_file();
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(format!("cannot open {}", lock_path.display())))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let pid = fs::read_to_string(home.pid_file())
                .ok()
                .and_then(|p| p.trim().parse().ok());
            return Err(DaemonError::AlreadyRunning {
                home: home.root().display().to_string(),
                pid,
            });
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(io(format!("cannot lock {}", lock_path.display()))(e));
        }
    }
    Ok(lock)
}

/// This machine's name and its team's name, if it is a current member,
/// read from the store of a home whose daemon is not running (taking the
/// daemon lock meanwhile, so none starts). `None` without a store, an
/// identity or a team.
pub fn stored_membership(home: &Home) -> Result<Option<(String, String, bool)>, DaemonError> {
    if !home.data_dir().exists() {
        return Ok(None);
    }
    let _lock = lock_home(home)?;
    let Some(identity) = home.read_identity()? else {
        return Ok(None);
    };
    let store = SledStore::open(&home.data_dir(), 1024 * 1024)?;
    let Some(team) = crate::team::load_team(&store)? else {
        return Ok(None);
    };
    let me = identity.peer_id();
    Ok(team
        .member(&me)
        .filter(|m| m.standing == agentmesh_protocol::team::Standing::Current)
        .map(|m| {
            (
                m.name.to_string(),
                team.genesis()
                    .map(|g| g.team_name.to_string())
                    .unwrap_or_default(),
                team.genesis().is_some_and(|g| g.founder == me),
            )
        }))
}

/// The inbox of a home whose daemon is not running (`agentmesh inbox`
/// with the daemon down), read from its store while holding the daemon's
/// lock, so none starts meanwhile; nothing is marked read. With this
/// machine's name (what its mailboxes' addresses end with); `None` without
/// a store.
pub fn stored_inbox(
    home: &Home,
    mailbox: Option<&str>,
    unread: bool,
) -> Result<Option<(String, Vec<crate::api::MessageView>)>, DaemonError> {
    with_stored(home, |store, me| {
        crate::mail::stored::inbox(store, mailbox, unread).map(|all| (me.to_owned(), all))
    })
}

/// The outbox of a home whose daemon is not running, as
/// [`stored_inbox`] reads the inbox.
pub fn stored_outbox(home: &Home) -> Result<Option<Vec<crate::api::OutboxView>>, DaemonError> {
    with_stored(home, |store, me| crate::mail::stored::outbox(store, me))
}

/// `read` over the store of a home whose daemon is not running, with
/// this machine's name (its team's name for it, else its configured
/// one).
fn with_stored<T>(
    home: &Home,
    read: impl FnOnce(&SledStore, &str) -> Result<T, crate::api::ApiError>,
) -> Result<Option<T>, DaemonError> {
    if !home.data_dir().exists() {
        return Ok(None);
    }
    let _lock = lock_home(home)?;
    let store = SledStore::open(&home.data_dir(), 1024 * 1024)?;
    let member = match (home.read_identity()?, crate::team::load_team(&store)?) {
        (Some(id), Some(team)) => team.member(&id.peer_id()).map(|m| m.name.to_string()),
        _ => None,
    };
    let me = match member {
        Some(n) => n,
        None => Config::load_settings(&home.config_file())?.name.to_string(),
    };
    read(&store, &me)
        .map(Some)
        .map_err(|e| DaemonError::Store(StoreError::Corrupt(e.message)))
}

/// Takes the daemon lock of a home for `agentmesh backup`.
fn backup_lock(home: &Home) -> Result<fs::File, crate::backup::BackupError> {
    lock_home(home).map_err(|e| crate::backup::BackupError::Locked {
        running: matches!(e, DaemonError::AlreadyRunning { .. }),
        message: e.to_string(),
    })
}

/// `agentmesh backup export` of a home whose daemon is not running (the
/// command reads the store, holding the daemon lock meanwhile).
pub fn backup_stopped(
    home: &Home,
    to: &std::path::Path,
    passphrase: &crate::api::Passphrase,
    with_mail: bool,
) -> Result<crate::api::BackupMade, crate::backup::BackupError> {
    let now = crate::clock::now();
    crate::backup::export_stopped(home, to, passphrase, with_mail, (now, &backup_lock))
}

/// `agentmesh backup import`: the backup `from` restored into `home` (new
/// or empty), holding its daemon lock meanwhile.
pub fn restore_backup(
    home: &Home,
    from: &std::path::Path,
    passphrase: &crate::api::Passphrase,
) -> Result<crate::backup::Restored, crate::backup::BackupError> {
    let now = crate::clock::now();
    crate::backup::import(home, from, passphrase, (now, &backup_lock))
}

/// What `init --new-identity` did.
#[derive(Debug)]
pub struct NewIdentity {
    /// The old key's PeerId, if there was one.
    pub old: Option<agentmesh_protocol::PeerId>,
    /// The new identity's.
    pub new: agentmesh_protocol::PeerId,
    /// Where the old key was kept.
    pub kept: Option<PathBuf>,
    /// The team forgotten, if the store named one.
    pub team: Option<String>,
    /// Messages still on their way, failed (the old key's envelopes can't
    /// reach anyone as the new one).
    pub failed: usize,
}

/// Gives a home whose daemon is not running a new identity, keeping its
/// config and mailboxes (and its inbox, held mail and peer table) and
/// forgetting its team: an old key that left or was revoked can never
/// rejoin, a new one is a new machine to admit. Holds the daemon lock
/// meanwhile, so none starts.
pub fn new_identity(
    home: &Home,
    now: agentmesh_protocol::Timestamp,
) -> Result<NewIdentity, DaemonError> {
    home.create()?;
    let _lock = lock_home(home)?;
    let old = home.read_identity().ok().flatten().map(|i| i.peer_id());
    let mut team = None;
    let mut failed = 0;
    if home.data_dir().exists() {
        let store = SledStore::open(&home.data_dir(), 1024 * 1024)?;
        if let Some(state) = crate::team::load_team(&store)? {
            team = state.genesis().map(|g| g.team_name.to_string());
            store.set_team(None)?;
            store.delete_team(&state.id())?;
        }
        let stuck: Vec<crate::store::OutboxRecord> = store
            .outbox()?
            .into_iter()
            .map(|mut r| {
                r.status = crate::store::OutboxStatus::Failed;
                r.reason = Some(
                    "this machine took a new identity; its old team can't be reached as it".into(),
                );
                r
            })
            .collect();
        failed = stuck.len();
        store.put_outbox(&stuck)?;
        store.flush()?;
    }
    let (id, kept) = home.replace_identity(now.as_unix_millis() / 1000)?;
    Ok(NewIdentity {
        old,
        new: id.peer_id(),
        kept: old.map(|_| kept),
        team,
        failed,
    })
}

/// The team the store of a home whose daemon is not running records, and
/// how this machine stands in it.
#[derive(Debug, Clone)]
pub struct StoredTeam {
    /// The team's name.
    pub team: String,
    /// This machine's name in it.
    pub name: String,
    /// Whether this machine is a current member.
    pub current: bool,
    /// Whether it is the team's admin (its founder).
    pub admin: bool,
}

/// The team a home whose daemon is not running records, if any (taking
/// the daemon lock meanwhile).
pub fn stored_team(home: &Home) -> Result<Option<StoredTeam>, DaemonError> {
    if !home.data_dir().exists() {
        return Ok(None);
    }
    let _lock = lock_home(home)?;
    let me = home.read_identity()?.map(|i| i.peer_id());
    let store = SledStore::open(&home.data_dir(), 1024 * 1024)?;
    let Some(team) = crate::team::load_team(&store)? else {
        return Ok(None);
    };
    let member = me.and_then(|p| team.member(&p));
    Ok(Some(StoredTeam {
        team: team
            .genesis()
            .map(|g| g.team_name.to_string())
            .unwrap_or_default(),
        name: member.map(|m| m.name.to_string()).unwrap_or_default(),
        current: member.is_some_and(|m| m.standing == agentmesh_protocol::team::Standing::Current),
        admin: member.is_some_and(|m| m.admin),
    }))
}

/// The settings of config.toml with the command line's `overrides` over
/// them (a relay or bootstrap address given is added, once).
fn settings_with(mut settings: Settings, overrides: Overrides) -> Settings {
    if !overrides.listen.is_empty() {
        settings.config.listen = overrides.listen.iter().map(ToString::to_string).collect();
        settings.listen = overrides.listen;
    }
    if overrides.no_mdns {
        settings.mdns = false;
        settings.config.mdns = false;
    }
    for (given, used, shown) in [
        (
            overrides.relays,
            &mut settings.relays,
            &mut settings.config.relays.addrs,
        ),
        (
            overrides.bootstrap,
            &mut settings.bootstrap,
            &mut settings.config.bootstrap,
        ),
    ] {
        for a in given {
            if !used.contains(&a) {
                shown.push(a.to_string());
                used.push(a);
            }
        }
    }
    settings
}

/// Stops the daemon's tasks (aborting those still running after
/// [`STOP_TIMEOUT`]), then lets the flusher write what they submitted,
/// then flushes the store.
async fn stop(mut tasks: JoinSet<()>, flusher: std::thread::JoinHandle<()>, store: &SledStore) {
    if tokio::time::timeout(STOP_TIMEOUT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!("tasks did not stop within {STOP_TIMEOUT:?}; aborting them");
        tasks.abort_all();
    }
    // Every actor has stopped and dropped its handle to the flusher: what
    // they submitted is written, then the flusher's thread ends.
    let joined = tokio::task::spawn_blocking(move || flusher.join());
    if tokio::time::timeout(STOP_TIMEOUT, joined).await.is_err() {
        tracing::error!("the flusher did not finish within {STOP_TIMEOUT:?}");
    }
    // Peer records and statuses written without a flush reach the disk now.
    if let Err(e) = Store::flush(store) {
        tracing::error!(error = %e, "cannot flush the store at shutdown");
    }
}

/// Runs the daemon for `home` until it is told to stop.
pub async fn run(home: &Home, overrides: Overrides) -> Result<(), DaemonError> {
    home.create()?;
    let lock = lock_home(home)?;

    // A person or a service started it (an agent session starts none while
    // the record is there): `agentmesh down` no longer holds.
    if home.clear_stopped_by_down()? {
        tracing::info!("started after `agentmesh down`: agent sessions may start the daemon again");
    }

    raise_open_file_limit();
    let settings = settings_with(Config::load_settings(&home.config_file())?, overrides);
    probe_ports(&settings.listen)?;
    let (identity, created) = home.load_or_create_identity()?;
    if created {
        tracing::info!(peer_id = %identity.peer_id(), "created this machine's identity");
    }
    let store = Arc::new(SledStore::open(&home.data_dir(), settings.cache_bytes)?);
    let swarm = swarm::build(crate::libp2p_keypair(&identity), settings.mdns)?;
    let (name, peer_id) = (settings.name.to_string(), identity.peer_id().to_string());
    tracing::info!(%peer_id, %name, home = %home.root().display(), "starting");
    #[cfg(feature = "test-clock")]
    tracing::warn!(
        "this is a test build: its local API can move the daemon's clock (clock_advance)"
    );
    let lifetime = settings.message_lifetime;
    let audit_retention = settings.audit_retention;
    let loops = settings.loops;
    let replies_per_ask = settings.replies_per_ask;
    let preset = settings.preset;
    let judge = settings.judge.clone();
    let wake = settings.wake.clone();
    let carry = settings.carry.clone();
    let ui_config = settings.config.ui.clone();
    let (commit, flusher) = crate::store::GroupCommit::start(store.clone());
    // The web page records the connections of other users it refuses.
    let ui_commit = commit.clone();
    // This machine's mailboxes: the mail actor publishes them, the team
    // signs them into its directory record.
    let (local_tx, local_rx) =
        tokio::sync::watch::channel(Arc::new(crate::team::records::LocalDirectory::default()));
    let (net, handle, carrier, link) = Net::new(NetSetup {
        swarm,
        me: identity.clone(),
        settings,
        store: store.clone(),
        commit: commit.clone(),
        local_directory: local_rx,
    })?;
    // One token for the daemon: the node fires it on `shutdown`, a signal
    // fires it, and every task stops on it.
    let cancel = CancellationToken::new();
    let (mail, mail_task) = Mail::start(MailSetup {
        me: identity,
        store: store.clone(),
        directory: net.directory(),
        net: carrier,
        link,
        commit,
        lifetime,
        audit_retention,
        loops,
        replies_per_ask,
        preset,
        judge,
        local_directory: local_tx,
        wake,
        home: home.root().to_path_buf(),
        carry,
        cancel: cancel.child_token(),
    })?;

    let socket = home.socket();
    let listener = crate::server::bind(&socket)
        .map_err(io(format!("cannot listen on {}", socket.display())))?;
    // The web page: on 127.0.0.1, a free port if its own is taken. A page
    // that can't be served leaves the daemon running without it.
    let page = match crate::ui::bind(&ui_config).await {
        Ok(bound) => bound,
        Err(e) => {
            tracing::warn!(error = %e, "cannot serve the web page on 127.0.0.1; running without it");
            None
        }
    };
    let keys = crate::ui::Keys::default();
    let door = crate::ui::Door::new(page.as_ref(), &ui_config, keys.clone());
    let pid_path = home.pid_file();
    fs::File::create(&pid_path)
        .and_then(|mut f| writeln!(f, "{}", std::process::id()))
        .map_err(io(format!("cannot write {}", pid_path.display())))?;
    let mut tasks = JoinSet::new();
    tasks.spawn(mail_task);
    if let Some(page) = page {
        tasks.spawn(crate::ui::serve(
            page,
            keys,
            home.clone(),
            name.clone(),
            crate::audit::AuditLog::new(ui_commit),
            cancel.child_token(),
        ));
    }
    tasks.spawn(crate::server::serve(
        listener,
        handle,
        mail,
        (name, peer_id),
        (
            door,
            crate::backup::Source::new(home.clone(), store.clone()),
        ),
        cancel.child_token(),
    ));
    tasks.spawn(stop_on_signal(cancel.clone()));

    net.run(cancel.clone()).await;

    cancel.cancel();
    stop(tasks, flusher, store.as_ref()).await;
    let _ = fs::remove_file(&socket);
    let _ = fs::remove_file(&pid_path);
    drop(lock);
    tracing::info!("stopped");
    Ok(())
}

/// How long the daemon's tasks, then its flusher, get to stop.
const STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Checks that every fixed port to listen on is free, by binding it
/// without `SO_REUSEPORT` for a moment. libp2p-tcp sets `SO_REUSEPORT` on
/// every listener (TCP hole punching needs it), so a second daemon given
/// the same port would start, and the kernel would split incoming
/// connections between the two without a word.
fn probe_ports(listen: &[Multiaddr]) -> Result<(), DaemonError> {
    use libp2p::multiaddr::Protocol;
    for addr in listen {
        let mut ip = None;
        let mut port = None;
        for p in addr.iter() {
            match p {
                Protocol::Ip4(a) => ip = Some(std::net::IpAddr::V4(a)),
                Protocol::Ip6(a) => ip = Some(std::net::IpAddr::V6(a)),
                Protocol::Tcp(n) => port = Some((n, "TCP")),
                Protocol::Udp(n) => port = Some((n, "UDP")),
                _ => {}
            }
        }
        let (Some(ip), Some((port, transport))) = (ip, port) else {
            continue;
        };
        if port == 0 {
            continue;
        }
        let at = std::net::SocketAddr::new(ip, port);
        let probe = if transport == "TCP" {
            std::net::TcpListener::bind(at).map(drop)
        } else {
            std::net::UdpSocket::bind(at).map(drop)
        };
        if let Err(e) = probe
            && e.kind() == std::io::ErrorKind::AddrInUse
        {
            let suggestion = addr
                .to_string()
                .replace(&format!("/{port}"), &format!("/{}", port.wrapping_add(1)));
            return Err(DaemonError::PortInUse {
                addr: addr.clone(),
                port,
                transport,
                suggestion,
            });
        }
    }
    Ok(())
}

/// Raises the soft limit on open files to the hard one: every client,
/// connection and sled file is a descriptor, and many systems start
/// processes at 1,024, which a daemon holding a thousand idle sockets and a
/// few hundred connections would reach.
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(error = %e, soft, hard, "cannot raise the open file limit");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open file limit"),
    }
}

async fn stop_on_signal(cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for signals; stop the daemon with `agentmesh down`");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        () = cancel.cancelled() => return,
    }
    // Stopping first: nothing after it (a log line) may keep it from it.
    cancel.cancel();
    tracing::info!("signal received, stopping");
}
