//! `agentmesh backup export FILE` / `backup import FILE`: this machine in
//! one file, encrypted with a passphrase, restored into a new home (a new
//! laptop) as the same machine of the same team.
//!
//! A backup carries the key, config.toml, and the store's trees that are
//! not mail (`store::sled_store::backup::SETTINGS`: the team's blocks,
//! every member's contact and directory records, folder bindings,
//! profiles, wake settings, trust, the relays adopted from a ticket); with
//! `--with-mail` the mail trees too. The file ([`file`]) is age's format
//! with an scrypt recipient, behind a line that says what it is and how
//! long it is, so a file cut short is told from one changed.
//!
//! Import writes nothing until the file has decrypted and decoded whole:
//! the store is made in `HOME/data.restoring` and renamed into place,
//! config.toml follows, the key file comes last (a home with a key is a
//! restored one). The restored machine numbers its records above any the
//! backed-up one made, so its team takes its new addresses at once.

use std::path::{Path, PathBuf};

use agentmesh_protocol::{Identity, Timestamp};
use serde::{Deserialize, Serialize};

pub use crate::api::{BackupMade as Made, Passphrase};
use crate::codes::ErrorCode;
use crate::home::{Home, HomeError};
use crate::store::{Restoring, SledStore, StoreError};

mod file;

/// The environment variable a script gives the passphrase in.
pub const PASSPHRASE_ENV: &str = "AGENTMESH_PASSPHRASE";

/// `passphrase` as age takes it.
fn secret(passphrase: &Passphrase) -> age::secrecy::SecretString {
    age::secrecy::SecretString::from(passphrase.expose().to_owned())
}

/// Why a backup could not be made or restored. Import refuses each with
/// its own code and writes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The passphrase does not open the file.
    #[error("the passphrase does not open {file}; try again with the passphrase it was made with")]
    WrongPassphrase {
        /// The file.
        file: PathBuf,
    },
    /// The file ends before its end.
    #[error(
        "{file} is cut short ({have} of its {want} bytes): it was not copied whole; copy it again from where it was made"
    )]
    Truncated {
        /// The file.
        file: PathBuf,
        /// Its bytes.
        have: u64,
        /// The bytes it says it has.
        want: u64,
    },
    /// The file was changed since it was made.
    #[error(
        "{file} was changed since it was made ({why}); nothing was restored: use another copy of the backup"
    )]
    Tampered {
        /// The file.
        file: PathBuf,
        /// What does not hold.
        why: String,
    },
    /// The file is not an agentmesh backup.
    #[error(
        "{file} is not an agentmesh backup ({why}); give the file `agentmesh backup export` wrote"
    )]
    NotABackup {
        /// The file.
        file: PathBuf,
        /// What it looks like instead.
        why: String,
    },
    /// The home already has a key.
    #[error(
        "{home} already has a key ({key}): a backup is restored only into a new home; give another with --home (or move this one away)"
    )]
    HomeHasKey {
        /// The home.
        home: PathBuf,
        /// Its key file.
        key: PathBuf,
    },
    /// The home holds other files.
    #[error(
        "{home} is not empty (it holds {found}): a backup is restored only into a new or empty home; give another with --home"
    )]
    HomeNotEmpty {
        /// The home.
        home: PathBuf,
        /// What it holds.
        found: String,
    },
    /// The home to back up has no key: there is no machine to back up.
    #[error(
        "{home} has no key, so there is no machine to back up; run `agentmesh init --name NAME` first"
    )]
    NoKey {
        /// The home.
        home: PathBuf,
    },
    /// `--with-mail` while the daemon runs: mail moves between the store's
    /// trees as it works, so a copy of them made meanwhile may not hold
    /// together.
    #[error(
        "a backup with the mail is made with the daemon stopped (mail moves between the store's parts while it runs): run `agentmesh down`, then this again"
    )]
    MailWhileRunning,
    /// Another backup is being made.
    #[error("another backup of this machine is being made; wait for it, then try again")]
    Busy,
    /// Reading or writing a file failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The store failed (or the backup's is newer than this build reads).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The home is not usable.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The home's daemon lock could not be taken (a daemon runs on it).
    #[error("{message}")]
    Locked {
        /// Why, as the lock said.
        message: String,
        /// A daemon runs on the home.
        running: bool,
    },
}

impl BackupError {
    /// Its stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            BackupError::WrongPassphrase { .. } => ErrorCode::WrongPassphrase,
            BackupError::Truncated { .. } => ErrorCode::BackupTruncated,
            BackupError::Tampered { .. } => ErrorCode::BackupTampered,
            BackupError::NotABackup { .. } => ErrorCode::NotABackup,
            BackupError::HomeHasKey { .. } => ErrorCode::HomeHasKey,
            BackupError::HomeNotEmpty { .. } => ErrorCode::HomeNotEmpty,
            BackupError::NoKey { .. } => ErrorCode::NoIdentity,
            BackupError::MailWhileRunning => ErrorCode::DaemonRunning,
            BackupError::Busy => ErrorCode::Busy,
            BackupError::Store(StoreError::TooNew { .. }) => ErrorCode::BackupTooNew,
            BackupError::Locked { running: true, .. } => ErrorCode::AlreadyRunning,
            _ => ErrorCode::BackupFailed,
        }
    }

    /// It as the local API's error.
    pub fn to_api(&self) -> crate::api::ApiError {
        crate::api::ApiError::new(self.code(), self.to_string())
    }
}

/// What a backup says of itself, before its entries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// When it was made (Unix ms).
    pub made_at: u64,
    /// The machine's PeerId.
    pub peer_id: String,
    /// Its name.
    pub name: String,
    /// Its team's name, if it is in one.
    pub team: Option<String>,
    /// Whether the mail trees are in it.
    pub with_mail: bool,
    /// The store format its entries are in.
    pub store_format: u32,
    /// The key file.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// config.toml, if the home had one.
    pub config: Option<String>,
}

/// What `backup import` restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restored {
    /// The home it restored into.
    pub home: PathBuf,
    /// The machine.
    pub name: String,
    /// Its PeerId.
    pub peer_id: String,
    /// Its team, if any.
    pub team: Option<String>,
    /// The store entries restored.
    pub entries: u64,
    /// Whether the mail came too.
    pub with_mail: bool,
    /// When the backup was made, RFC 3339.
    pub made_at: String,
    /// The number this machine's next contact record carries (above any
    /// the backed-up machine made, so its team takes the new one).
    pub contact_seq: u64,
}

/// What a running daemon makes a backup of: its home and its store
/// (`backup_export` on the local socket).
#[derive(Debug, Clone)]
pub struct Source {
    home: Home,
    store: std::sync::Arc<SledStore>,
    /// One export at a time (scrypt alone takes 256 MiB).
    one: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Source {
    /// The backups of `home`, whose open store is `store`.
    pub fn new(home: Home, store: std::sync::Arc<SledStore>) -> Self {
        Source {
            home,
            store,
            one: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Serves `backup_export`: the work (scrypt, reading the store,
    /// writing the file) on a blocking thread, the daemon's others
    /// going on meanwhile.
    pub async fn export(&self, op: crate::api::ops::BackupExport) -> crate::api::Reply {
        use crate::api::{answer, err, ops};
        if !op.file.is_absolute() {
            return err(
                ErrorCode::BadPath,
                format!("{} is not an absolute path", op.file.display()),
            );
        }
        if op.with_mail {
            return Err(BackupError::MailWhileRunning.to_api());
        }
        let Ok(permit) = self.one.clone().try_acquire_owned() else {
            return Err(BackupError::Busy.to_api());
        };
        let this = self.clone();
        let now = crate::clock::now();
        let made = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            export(
                &this.home,
                &this.store,
                &op.file,
                &op.passphrase,
                op.with_mail,
                now,
            )
        })
        .await;
        match made {
            Ok(made) => answer::<ops::BackupExport>(made.map_err(|e| e.to_api())),
            Err(e) => err(ErrorCode::Internal, format!("the backup stopped: {e}")),
        }
    }
}

/// Writes a backup of `home` (whose store is `store`) to `file`.
pub fn export(
    home: &Home,
    store: &SledStore,
    to: &Path,
    passphrase: &Passphrase,
    with_mail: bool,
    now: Timestamp,
) -> Result<Made, BackupError> {
    let io = |what, path: &Path| {
        let path = path.to_owned();
        move |source| BackupError::Io { what, path, source }
    };
    let identity = home.read_identity()?.ok_or_else(|| BackupError::NoKey {
        home: home.root().to_owned(),
    })?;
    let config = match std::fs::read_to_string(home.config_file()) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("read", &home.config_file())(e)),
    };
    let (name, team) = naming(home, store, &identity)?;
    let header = Header {
        made_at: now.as_unix_millis(),
        peer_id: identity.peer_id().to_string(),
        name: name.clone(),
        team: team.clone(),
        with_mail,
        store_format: store.format_version()?,
        key: identity.to_key_file().to_vec(),
        config,
    };
    let (bytes, entries) = file::write(to, passphrase, &header, |each| {
        store.backup_entries(with_mail, each)
    })?;
    Ok(Made {
        file: to.to_owned(),
        bytes,
        entries,
        with_mail,
        name,
        peer_id: header.peer_id,
        team,
    })
}

/// Takes a home's daemon lock (held while the returned file lives).
pub type Lock<'a> = &'a dyn Fn(&Home) -> Result<std::fs::File, BackupError>;

/// [`export`] of a home whose daemon is not running (holding its lock,
/// taken by `lock`, meanwhile, so none starts).
pub fn export_stopped(
    home: &Home,
    to: &Path,
    passphrase: &Passphrase,
    with_mail: bool,
    (now, lock): (Timestamp, Lock<'_>),
) -> Result<Made, BackupError> {
    let _lock = lock(home)?;
    if home.read_identity()?.is_none() {
        return Err(BackupError::NoKey {
            home: home.root().to_owned(),
        });
    }
    let store = SledStore::open(&home.data_dir(), 1024 * 1024)?;
    export(home, &store, to, passphrase, with_mail, now)
}

/// This machine's name (its team's name for it, else its configured one)
/// and its team's name.
fn naming(
    home: &Home,
    store: &SledStore,
    identity: &Identity,
) -> Result<(String, Option<String>), BackupError> {
    let team = crate::team::load_team(store)?;
    let member = team
        .as_ref()
        .and_then(|t| t.member(&identity.peer_id()).map(|m| m.name.to_string()));
    let name = match member {
        Some(n) => n,
        None => crate::config::Config::load_settings(&home.config_file())
            .map(|s| s.name.to_string())
            .unwrap_or_default(),
    };
    let team = team.and_then(|t| t.genesis().map(|g| g.team_name.to_string()));
    Ok((name, team))
}

/// What a home may hold and still count as empty: what commands make
/// before anything is set up (the run folder, the daemon's log).
const EMPTY_HOME_HOLDS: &[&str] = &["run", "daemon.log"];

/// Refuses a home that has a key or holds anything else.
fn check_empty(home: &Home) -> Result<(), BackupError> {
    if home.key_file().exists() {
        return Err(BackupError::HomeHasKey {
            home: home.root().to_owned(),
            key: home.key_file(),
        });
    }
    let entries = match std::fs::read_dir(home.root()) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(BackupError::Io {
                what: "read",
                path: home.root().to_owned(),
                source,
            });
        }
    };
    let mut found: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !EMPTY_HOME_HOLDS.contains(&n.as_str()))
        // The empty store folder `Home::create` makes.
        .filter(|n| {
            n != "data" || std::fs::read_dir(home.data_dir()).is_ok_and(|mut d| d.next().is_some())
        })
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    found.sort();
    Err(BackupError::HomeNotEmpty {
        home: home.root().to_owned(),
        found: found.join(", "),
    })
}

/// Restores the backup `from` into `home` (missing or empty), holding
/// its daemon lock (taken by `lock`) meanwhile.
pub fn import(
    home: &Home,
    from: &Path,
    passphrase: &Passphrase,
    (now, lock): (Timestamp, Lock<'_>),
) -> Result<Restored, BackupError> {
    check_empty(home)?;
    let (existed, had_run) = (home.root().exists(), home.run_dir().exists());
    home.create()?;
    let restoring = home.root().join("data.restoring");
    // Nothing stays of a failed import: what it made is taken away again
    // (before the lock is let go).
    let undo = || {
        let _ = std::fs::remove_dir_all(&restoring);
        let _ = std::fs::remove_file(home.config_file());
        let _ = std::fs::remove_dir_all(home.data_dir());
        if !existed {
            let _ = std::fs::remove_dir_all(home.root());
        } else if !had_run {
            let _ = std::fs::remove_dir_all(home.run_dir());
        }
    };
    let guard = match lock(home) {
        Ok(g) => g,
        Err(e) => {
            undo();
            return Err(e);
        }
    };
    // Checked again under the lock: another import may have finished
    // meanwhile, and its home stays as it is.
    check_empty(home)?;
    let result = restore(home, from, passphrase, now, &restoring);
    if result.is_err() {
        undo();
    }
    drop(guard);
    result
}

fn restore(
    home: &Home,
    from: &Path,
    passphrase: &Passphrase,
    now: Timestamp,
    restoring: &Path,
) -> Result<Restored, BackupError> {
    let io = |what, path: &Path| {
        let path = path.to_owned();
        move |source| BackupError::Io { what, path, source }
    };
    let _ = std::fs::remove_dir_all(restoring);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(restoring)
            .map_err(io("create", restoring))?;
    }
    let mut store = Restoring::create(restoring)?;
    let too_new = |h: &Header| {
        if h.store_format > crate::store::FORMAT_VERSION {
            return Err(BackupError::Store(StoreError::TooNew {
                path: from.display().to_string(),
                found: h.store_format,
                supported: crate::store::FORMAT_VERSION,
            }));
        }
        Ok(())
    };
    let (header, entries) = file::read(from, passphrase, too_new, |tree, k, v| {
        if !Restoring::known(tree) {
            return Err(BackupError::Tampered {
                file: from.to_owned(),
                why: format!("it names a tree no agentmesh writes ({tree:?})"),
            });
        }
        Ok(store.put(tree, k, v)?)
    })?;
    let identity = Identity::from_key_file(&header.key).map_err(|e| BackupError::Tampered {
        file: from.to_owned(),
        why: format!("its key does not read: {e}"),
    })?;
    if identity.peer_id().to_string() != header.peer_id {
        return Err(BackupError::Tampered {
            file: from.to_owned(),
            why: "its key is not the machine it names".into(),
        });
    }
    // Above anything the backed-up machine numbered: the time now in ms
    // (it counts up from 1 by one record at a time).
    let store = store.finish(now.as_unix_millis(), restoring)?;
    let contact_seq = store.peek_contact_seq()?;
    drop(store);
    // The home's data folder (made empty by `Home::create`) is replaced.
    std::fs::remove_dir(home.data_dir()).map_err(io("replace", &home.data_dir()))?;
    std::fs::rename(restoring, home.data_dir()).map_err(io("write", &home.data_dir()))?;
    if let Some(config) = &header.config {
        crate::home::write_private(&home.config_file(), config.as_bytes())
            .map_err(io("write", &home.config_file()))?;
    }
    home.write_identity(&identity)?;
    std::fs::File::open(home.root())
        .and_then(|d| d.sync_all())
        .map_err(io("sync", home.root()))?;
    Ok(Restored {
        home: home.root().to_owned(),
        name: header.name,
        peer_id: header.peer_id,
        team: header.team,
        entries,
        with_mail: header.with_mail,
        made_at: Timestamp::from_unix_millis(header.made_at).to_string(),
        contact_seq,
    })
}
