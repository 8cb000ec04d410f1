//! The home directory: where one node keeps everything.
//!
//! ```text
//! HOME/                 0700
//!   config.toml         the configuration (optional; defaults otherwise)
//!   identity.key        the machine's keys, 0600
//!   data/               the store (sled), opened only by the daemon
//!   run/                0700: agentmesh.sock, daemon.lock, daemon.pid, and
//!                       stopped-by-down while a person's `agentmesh down` holds
//!   daemon.log          what `agentmesh up` writes the daemon's log to
//! ```
//!
//! The home is `--home DIR`, else `$AGENTMESH_HOME`, else the platform's
//! data directory (`~/.local/share/agentmesh` on Linux), so several nodes can
//! run on one machine with different homes.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agentmesh_protocol::Identity;

/// The environment variable that names the home when `--home` is not given.
pub const HOME_ENV: &str = "AGENTMESH_HOME";

/// Agent sessions a stopped-by-down record remembers having told, at
/// most: a session id is at most 128 bytes, so the record stays under
/// 40 KiB however many sessions a person runs before `agentmesh up`. A
/// session forgotten past this is told once more, which is harmless.
const MAX_TOLD: usize = 256;

/// The longest Unix socket path Linux accepts (`sun_path` is 108 bytes with
/// its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Why the home cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeError {
    /// No home was given and the platform has no data directory.
    #[error("cannot find a home directory for agentmesh; pass --home DIR or set {HOME_ENV}")]
    NoHome,
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The key file is readable or writable by other users.
    #[error(
        "the key file {path} has mode {mode:o}, so other users can read it; run `chmod 600 {path}`"
    )]
    KeyFileExposed {
        /// The key file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// The key file does not hold a key.
    #[error(
        "the key file {path} is not valid: {reason}; move it away and run `agentmesh init` for a new identity"
    )]
    BadKeyFile {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A directory of the home can be written by other users.
    #[error(
        "{path} can be written by other users (mode {mode:o}), who could replace the daemon's files; run `chmod go-w {path}`, or use a private directory with --home"
    )]
    WritableByOthers {
        /// The directory.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A directory of the home belongs to another user.
    #[error("{path} belongs to another user (uid {uid}); use a directory of your own with --home")]
    NotOwned {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// A path of the home is not a directory.
    #[error("{path} is not a directory; remove it or use another --home")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The socket path is longer than Unix sockets allow.
    #[error(
        "the socket path {path} is {len} bytes, over the {MAX_SOCKET_PATH}-byte limit of Unix sockets; use a shorter --home"
    )]
    SocketPathTooLong {
        /// The socket path.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
}

/// What `agentmesh down` leaves in the home (`run/stopped-by-down`): a
/// person stopped the daemon, so agent sessions start none (`agentmesh
/// mcp` would otherwise start one at once) until `agentmesh up` or
/// `agentmesh daemon` runs, which remove it. Its presence is the record;
/// the contents are details (a file that can't be read still counts).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoppedByDown {
    /// When, RFC 3339.
    pub at: String,
    /// The daemon `down` stopped, if one was running.
    pub pid: Option<u32>,
    /// The agent sessions whose hooks said so already (oldest first, at
    /// most `MAX_TOLD`): a hook says it once per session.
    #[serde(default)]
    pub told: Vec<String>,
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> HomeError + 'a {
    move |source| HomeError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// The paths of one node's home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// The home at `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Home { root: dir.into() }
    }

    /// The home from `--home`, `$AGENTMESH_HOME`, or the platform default.
    pub fn resolve(flag: Option<&Path>) -> Result<Self, HomeError> {
        if let Some(dir) = flag {
            return Ok(Home::at(absolute(dir)));
        }
        if let Some(dir) = std::env::var_os(HOME_ENV).filter(|d| !d.is_empty()) {
            return Ok(Home::at(absolute(Path::new(&dir))));
        }
        directories::ProjectDirs::from("", "", "agentmesh")
            .map(|d| Home::at(d.data_local_dir()))
            .ok_or(HomeError::NoHome)
    }

    /// The home directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `identity.key`.
    pub fn key_file(&self) -> PathBuf {
        self.root.join("identity.key")
    }

    /// `data/`, the store.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// `run/`, the private directory holding the socket.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }

    /// The local API socket.
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("agentmesh.sock")
    }

    /// The lock a running daemon holds.
    pub fn lock_file(&self) -> PathBuf {
        self.run_dir().join("daemon.lock")
    }

    /// The running daemon's process id.
    pub fn pid_file(&self) -> PathBuf {
        self.run_dir().join("daemon.pid")
    }

    /// The record `agentmesh down` leaves ([`StoppedByDown`]).
    pub fn stopped_file(&self) -> PathBuf {
        self.run_dir().join("stopped-by-down")
    }

    /// Records that a person stopped the daemon (`pid`, if one ran);
    /// whether it did. A home that does not exist is not made for it (a
    /// mistyped `--home` must not become a home): there is nothing there
    /// to keep down.
    pub fn record_stopped_by_down(&self, pid: Option<u32>) -> Result<bool, HomeError> {
        if !self.root.is_dir() {
            return Ok(false);
        }
        self.create()?;
        let record = StoppedByDown {
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            pid,
            told: vec![],
        };
        let path = self.stopped_file();
        write_private(&path, &serde_json::to_vec(&record).unwrap_or_default())
            .map_err(io_err("cannot write", &path))?;
        Ok(true)
    }

    /// The record `agentmesh down` left, if there is one.
    pub fn stopped_by_down(&self) -> Option<StoppedByDown> {
        match fs::read(self.stopped_file()) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            // Unreadable, but there: a person stopped it.
            Err(_) => Some(StoppedByDown::default()),
        }
    }

    /// Removes the record; whether there was one.
    pub fn clear_stopped_by_down(&self) -> Result<bool, HomeError> {
        let path = self.stopped_file();
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err("cannot remove", &path)(e)),
        }
    }

    /// Whether a hook of `session` should say that the daemon was
    /// stopped: true once per session while the record lasts (the
    /// session is noted in it, under a lock, so two hooks of one session
    /// racing say it once), false when it said so already, when there is
    /// no record, or when the record can't be written (then it stays
    /// silent rather than say it at every turn).
    pub fn tell_session_once(&self, session: &str) -> bool {
        use std::io::{Read, Seek};
        let Ok(mut f) = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.stopped_file())
        else {
            return false;
        };
        if f.lock().is_err() {
            return false;
        }
        let mut bytes = vec![];
        if f.read_to_end(&mut bytes).is_err() {
            return false;
        }
        let mut record: StoppedByDown = serde_json::from_slice(&bytes).unwrap_or_default();
        if record.told.iter().any(|s| s == session) {
            return false;
        }
        record.told.push(session.to_owned());
        let over = record.told.len().saturating_sub(MAX_TOLD);
        record.told.drain(..over);
        let Ok(bytes) = serde_json::to_vec(&record) else {
            return false;
        };
        f.set_len(0).is_ok()
            && f.rewind().is_ok()
            && f.write_all(&bytes).is_ok()
            && f.sync_all().is_ok()
    }

    /// Where `agentmesh up` sends the daemon's log.
    pub fn log_file(&self) -> PathBuf {
        self.root.join("daemon.log")
    }

    /// Creates the home and its private directories (mode 0700), as the
    /// daemon needs them. Never called by read-only commands.
    ///
    /// Only what it creates gets its mode: a directory that exists is left
    /// as it is (given the system's temp folder as its home, the daemon
    /// must not lock every other user out of it), but one that others can
    /// write to, or that belongs to another user, is refused. Its parents
    /// are not checked: a home under a world-writable temp folder is fine.
    pub fn create(&self) -> Result<(), HomeError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let me = nix::unistd::geteuid().as_raw();
        for dir in [self.root.clone(), self.run_dir(), self.data_dir()] {
            match fs::metadata(&dir) {
                Ok(meta) => {
                    if !meta.is_dir() {
                        return Err(HomeError::NotADirectory { path: dir });
                    }
                    if meta.uid() != me {
                        return Err(HomeError::NotOwned {
                            path: dir,
                            uid: meta.uid(),
                        });
                    }
                    let mode = meta.permissions().mode() & 0o7777;
                    if mode & 0o022 != 0 {
                        return Err(HomeError::WritableByOthers { path: dir, mode });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(&dir)
                        .map_err(io_err("cannot create", &dir))?;
                }
                Err(e) => return Err(io_err("cannot read", &dir)(e)),
            }
        }
        let socket = self.socket();
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(HomeError::SocketPathTooLong { path: socket, len });
        }
        Ok(())
    }

    /// Reads the identity, refusing a key file others can read.
    pub fn read_identity(&self) -> Result<Option<Identity>, HomeError> {
        let path = self.key_file();
        let meta = match fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(HomeError::KeyFileExposed { path, mode });
        }
        let bytes = fs::read(&path).map_err(io_err("cannot read", &path))?;
        Identity::from_key_file(&bytes)
            .map(Some)
            .map_err(|e| HomeError::BadKeyFile {
                path,
                reason: e.to_string(),
            })
    }

    /// Reads the identity, creating a fresh one (mode 0600) if there is none.
    /// Returns the identity and whether it was created now.
    pub fn load_or_create_identity(&self) -> Result<(Identity, bool), HomeError> {
        if let Some(id) = self.read_identity()? {
            return Ok((id, false));
        }
        fs::create_dir_all(&self.root).map_err(io_err("cannot create", &self.root))?;
        let id = Identity::generate(&mut rand::rng());
        self.write_identity(&id)?;
        Ok((id, true))
    }

    /// Writes `id` as this home's key file (`agentmesh backup import`
    /// restores one): to a temporary file with mode 0600 from the start,
    /// then renamed, so the key is never briefly readable and never
    /// half-written.
    pub fn write_identity(&self, id: &Identity) -> Result<(), HomeError> {
        let path = self.key_file();
        let tmp = self.root.join("identity.key.tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err("cannot write", &tmp))?;
        f.write_all(&id.to_key_file())
            .and_then(|()| f.sync_all())
            .map_err(io_err("cannot write", &tmp))?;
        fs::rename(&tmp, &path).map_err(io_err("cannot write", &path))?;
        Ok(())
    }

    /// Replaces the identity with a fresh one (`init --new-identity`): the
    /// new key is written beside the old, the old one is kept as
    /// `identity.key.replaced-DATE` (`2026-12-06T08-13-03Z`; 0600: the way back, by hand, if
    /// this was a mistake), then the new one takes its place. A crash in
    /// between leaves no `identity.key`, and the next start makes a fresh
    /// one: never the old key half-replaced. The new identity, and where
    /// the old key went.
    pub fn replace_identity(&self, now_secs: u64) -> Result<(Identity, PathBuf), HomeError> {
        let id = Identity::generate(&mut rand::rng());
        let path = self.key_file();
        let tmp = self.root.join("identity.key.tmp");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err("cannot write", &tmp))?;
        f.write_all(&id.to_key_file())
            .and_then(|()| f.sync_all())
            .map_err(io_err("cannot write", &tmp))?;
        // When it was replaced, readable and without colons (a file name
        // on every system): 2026-12-06T08-13-03Z.
        let stamp = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(now_secs),
        )
        .to_string()
        .replace(':', "-");
        // A name no earlier kept key has (two replacements in one second
        // must not overwrite the first).
        let kept = (0u32..)
            .map(|n| {
                let suffix = if n == 0 {
                    String::new()
                } else {
                    format!("-{n}")
                };
                self.root
                    .join(format!("identity.key.replaced-{stamp}{suffix}"))
            })
            .find(|p| !p.exists())
            .expect("some name is free");
        if path.exists() {
            fs::rename(&path, &kept).map_err(io_err("cannot move", &path))?;
        }
        fs::rename(&tmp, &path).map_err(io_err("cannot write", &path))?;
        // The renames themselves durable: after a power loss the old key
        // must not come back while the store has forgotten its team.
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(io_err("cannot sync", &self.root))?;
        Ok((id, kept))
    }
}

/// Writes `bytes` to `path`, readable by this user only, durably.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn absolute(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned())
}

/// The person using this machine, as the CLI and the web page both name
/// them: `$USER`, else `$LOGNAME`, else the account name of the user this
/// process runs as, else `owner`; one line, at most 64 bytes.
pub fn login_name() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|n| !n.trim().is_empty())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
        })
        .map(|n| agentmesh_protocol::names::to_one_line(&n, 64))
        .unwrap_or_else(|| "owner".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        home.create().unwrap();
        let (first, created) = home.load_or_create_identity().unwrap();
        assert!(created);
        let (again, created) = home.load_or_create_identity().unwrap();
        assert!(!created);
        assert_eq!(first.peer_id(), again.peer_id());
        let mode = fs::metadata(home.key_file()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let run = fs::metadata(home.run_dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(run, 0o700);
    }

    #[test]
    fn exposed_key_file_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        home.load_or_create_identity().unwrap();
        fs::set_permissions(home.key_file(), fs::Permissions::from_mode(0o644)).unwrap();
        let e = home.read_identity().unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
    }

    #[test]
    fn an_existing_home_keeps_its_mode_and_one_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        // A home under a world-writable parent is fine; only the home
        // itself is judged.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o755)).unwrap();
        Home::at(&shared).create().unwrap();
        let mode = fs::metadata(&shared).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "an existing home is not chmodded");
        let run = fs::metadata(shared.join("run"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(run, 0o700, "what it creates is private");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        let e = Home::at(&shared).create().unwrap_err();
        assert!(matches!(e, HomeError::WritableByOthers { .. }), "{e}");
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        let fresh = dir.path().join("a/b/home");
        Home::at(&fresh).create().unwrap();
        let mode = fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn the_stopped_by_down_record_tells_each_session_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            !Home::at(dir.path().join("typo"))
                .record_stopped_by_down(None)
                .unwrap()
        );
        assert!(!dir.path().join("typo").exists(), "no home is made for it");
        let home = Home::at(dir.path());
        assert_eq!(home.stopped_by_down(), None);
        assert!(!home.tell_session_once("s1"), "no record, nothing to tell");
        home.record_stopped_by_down(Some(42)).unwrap();
        assert_eq!(home.stopped_by_down().unwrap().pid, Some(42));
        let mode = fs::metadata(home.stopped_file())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert!(home.tell_session_once("s1"));
        assert!(!home.tell_session_once("s1"));
        assert!(home.tell_session_once("s2"));
        for i in 0..MAX_TOLD + 10 {
            home.tell_session_once(&format!("many-{i}"));
        }
        assert_eq!(home.stopped_by_down().unwrap().told.len(), MAX_TOLD);
        assert!(home.clear_stopped_by_down().unwrap());
        assert!(!home.clear_stopped_by_down().unwrap());
        assert!(!home.tell_session_once("s3"));
    }

    #[test]
    fn long_socket_paths_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("x".repeat(100)));
        assert!(matches!(
            home.create(),
            Err(HomeError::SocketPathTooLong { .. })
        ));
    }
}
