//! What setup wrote, so `--uninstall` can put it back, and the file
//! operations around it: reading, writing in place of a file atomically,
//! diffs.
//!
//! ```text
//! AGENTMESH_HOME/setup/           0700
//!   file-<id>.json                0600: one record per file agentmesh edited
//!   mcp-<id>.json                 0600: a `claude mcp add` agentmesh ran
//!   declined-<agent>              `agentmesh up` asked, and the answer was no
//! ```
//!
//! A file record keeps the file's bytes from before agentmesh first edited
//! it (config files can hold other servers' tokens, hence 0600), the hash
//! of what agentmesh last wrote, and the entries it wrote ([`Entry`]).
//! Uninstall restores the bytes only while the file still hashes to that:
//! otherwise someone else has edited it since, and only the recorded
//! entries are taken out. An `mcp-` record keeps the command line of the
//! `claude mcp add` setup ran, which is how setup knows that registration
//! is its own.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use agentmesh_node::home::Home;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Entry, Kind};
use crate::term;

/// The records' format; a record of another version is ignored as
/// unreadable rather than misread. 2: file records list the entries setup
/// wrote (version 1 did not, and setup took any entry running agentmesh
/// for its own).
const RECORD_VERSION: u32 = 2;

/// How many symbolic links in a row setup follows to find the file to
/// edit: Linux's own limit (MAXSYMLINKS), past which it reports a loop.
const MAX_LINKS: usize = 40;

/// What agentmesh knows about one file it edited.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct FileRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The file (symbolic links resolved).
    pub path: PathBuf,
    /// What the file is, so uninstall knows how to take agentmesh's
    /// entries out of it.
    pub kind: Kind,
    /// Whether the file existed before agentmesh first wrote it.
    pub existed: bool,
    /// Its bytes then (base64), empty if it did not exist.
    pub original: String,
    /// SHA-256 (hex) of the bytes agentmesh last wrote.
    pub written_sha256: String,
    /// False once someone else's edits were found in the file and
    /// agentmesh wrote over them: restoring `original` would lose them.
    pub byte_exact: bool,
    /// The folders agentmesh created for the file, outermost first.
    pub created_dirs: Vec<PathBuf>,
    /// The setups that put entries in it (`claude:user`,
    /// `codex:project:/dir`): a file two setups share is restored when the
    /// last one is removed.
    pub owners: Vec<String>,
    /// The entries setup wrote in it: the only ones a later run touches.
    pub entries: Vec<Entry>,
}

impl FileRecord {
    /// A record of a file before agentmesh writes it.
    pub fn new(path: &Path, kind: Kind, before: Option<&[u8]>, owner: &str) -> FileRecord {
        FileRecord {
            version: RECORD_VERSION,
            path: path.to_owned(),
            kind,
            existed: before.is_some(),
            original: data_encoding::BASE64.encode(before.unwrap_or_default()),
            written_sha256: String::new(),
            byte_exact: true,
            created_dirs: vec![],
            owners: vec![owner.to_owned()],
            entries: vec![],
        }
    }

    /// The file's bytes before agentmesh.
    pub fn original_bytes(&self) -> anyhow::Result<Vec<u8>> {
        data_encoding::BASE64
            .decode(self.original.as_bytes())
            .with_context(|| {
                format!(
                    "agentmesh's record of {} is damaged; remove agentmesh's entries from it by hand",
                    self.path.display()
                )
            })
    }

    /// Whether `bytes` are what agentmesh last wrote.
    pub fn wrote(&self, bytes: Option<&[u8]>) -> bool {
        bytes.is_some_and(|b| sha256_hex(b) == self.written_sha256)
    }
}

/// A `claude mcp add` agentmesh ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct McpRecord {
    /// [`RECORD_VERSION`].
    pub version: u32,
    /// The file Claude Code keeps the registration in (`~/.claude.json`).
    pub config: PathBuf,
    /// The scope it was added with.
    pub scope: String,
    /// The server's command and arguments.
    pub command: Vec<String>,
}

/// The records under one agentmesh home.
#[derive(Debug)]
pub(super) struct Records {
    home: Home,
    dir: PathBuf,
}

impl Records {
    /// The records of `home`.
    pub fn of(home: &Home) -> Records {
        Records {
            home: home.clone(),
            dir: home.root().join("setup"),
        }
    }

    fn file_path(&self, path: &Path) -> PathBuf {
        self.dir.join(format!(
            "file-{}.json",
            id(path.as_os_str().as_encoded_bytes())
        ))
    }

    fn mcp_path(&self, config: &Path) -> PathBuf {
        self.dir.join(format!(
            "mcp-{}.json",
            id(config.as_os_str().as_encoded_bytes())
        ))
    }

    fn declined_path(&self, agent: &str) -> PathBuf {
        self.dir.join(format!("declined-{agent}"))
    }

    /// The record of `path`, if agentmesh edited it.
    pub fn file(&self, path: &Path) -> anyhow::Result<Option<FileRecord>> {
        let record: Option<FileRecord> = load(&self.file_path(path))?;
        Ok(record.filter(|r| r.version == RECORD_VERSION && r.path == path))
    }

    /// Every file record one setup (an owner) shares in.
    pub fn files_of(&self, owner: &str) -> anyhow::Result<Vec<FileRecord>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e).context(format!("cannot read {}", self.dir.display())),
        };
        let mut out = vec![];
        for entry in entries {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !(name.starts_with("file-") && name.ends_with(".json")) {
                continue;
            }
            if let Some(r) = load::<FileRecord>(&path)?
                && r.version == RECORD_VERSION
                && r.owners.iter().any(|o| o == owner)
            {
                out.push(r);
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Saves the record of a file.
    pub fn save_file(&self, record: &FileRecord) -> anyhow::Result<()> {
        self.save(&self.file_path(&record.path), record)
    }

    /// Forgets the record of a file.
    pub fn forget_file(&self, path: &Path) -> anyhow::Result<()> {
        remove_if_exists(&self.file_path(path))
    }

    /// The `claude mcp add` agentmesh ran for `config`, if any.
    pub fn mcp(&self, config: &Path) -> anyhow::Result<Option<McpRecord>> {
        let record: Option<McpRecord> = load(&self.mcp_path(config))?;
        Ok(record.filter(|r| r.version == RECORD_VERSION && r.config == config))
    }

    /// Notes a `claude mcp add`.
    pub fn save_mcp(&self, config: &Path, scope: &str, command: &[String]) -> anyhow::Result<()> {
        let record = McpRecord {
            version: RECORD_VERSION,
            config: config.to_owned(),
            scope: scope.to_owned(),
            command: command.to_vec(),
        };
        self.save(&self.mcp_path(config), &record)
    }

    /// Forgets a `claude mcp add` (after `claude mcp remove`).
    pub fn forget_mcp(&self, config: &Path) -> anyhow::Result<()> {
        remove_if_exists(&self.mcp_path(config))
    }

    /// Whether `agentmesh up` was told not to set up `agent`.
    pub fn declined(&self, agent: &str) -> bool {
        self.declined_path(agent).exists()
    }

    /// Remembers that `agentmesh up` was told not to set up `agent`.
    pub fn decline(&self, agent: &str) -> anyhow::Result<()> {
        self.save(&self.declined_path(agent), &serde_json::json!({}))
    }

    /// Forgets a refusal (setup was run after all).
    pub fn undecline(&self, agent: &str) -> anyhow::Result<()> {
        remove_if_exists(&self.declined_path(agent))
    }

    fn save(&self, path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
        // The home is private and checked the way the daemon checks it.
        self.home.create()?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .with_context(|| format!("cannot create {}", self.dir.display()))?;
        let mut text = serde_json::to_vec_pretty(value)?;
        text.push(b'\n');
        write_atomic(path, &text, Some(0o600))
    }
}

/// A short name for a path: the first 128 bits of its SHA-256.
fn id(bytes: &[u8]) -> String {
    sha256_hex(bytes)[..32].to_owned()
}

/// SHA-256 in lowercase hex.
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(&Sha256::digest(bytes))
}

fn load<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<Option<T>> {
    match fs::read(path) {
        // A record that no longer parses is as good as none: uninstall
        // then falls back to taking agentmesh's entries out.
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context(format!("cannot read {}", path.display())),
    }
}

fn remove_if_exists(path: &Path) -> anyhow::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(e).context(format!("cannot remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// The path edits go to. A symbolic link (dotfiles kept elsewhere) is
/// followed, so the link stays a link: to its file, or, if that does not
/// exist yet, to where the link points, provided that folder exists
/// (setup does not create folders where a link points; it refuses).
pub(super) fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    let mut p = path.to_owned();
    let mut linked = false;
    for _ in 0..=MAX_LINKS {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to =
                    fs::read_link(&p).with_context(|| format!("cannot read {}", p.display()))?;
                p = p.parent().map_or_else(|| to.clone(), |d| d.join(&to));
                linked = true;
            }
            Ok(_) => {
                return fs::canonicalize(&p)
                    .with_context(|| format!("cannot resolve {}", p.display()));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return if linked {
                    link_to_nothing(path, &p)
                } else {
                    refuse_dangling_folder(path)?;
                    Ok(p)
                };
            }
            Err(e) => return Err(e).context(format!("cannot read {}", p.display())),
        }
    }
    Err(term::cli_error(
        "bad_agent_config",
        format!(
            "{} is a chain of more than {MAX_LINKS} symbolic links (a loop?); fix the links, then run this again. Nothing was changed",
            path.display()
        ),
    ))
}

/// Where a link to a file that does not exist has setup write: the file it
/// names, in a folder that must exist.
fn link_to_nothing(link: &Path, target: &Path) -> anyhow::Result<PathBuf> {
    let folder = target.parent().unwrap_or(Path::new("/"));
    match (fs::canonicalize(folder), target.file_name()) {
        (Ok(dir), Some(name)) if dir.is_dir() => Ok(dir.join(name)),
        _ => Err(term::cli_error(
            "bad_agent_config",
            format!(
                "{} is a symbolic link to {}, in a folder that does not exist; create {} (or remove the link), then run this again. Nothing was changed",
                link.display(),
                target.display(),
                folder.display()
            ),
        )),
    }
}

/// Refuses a new file under a folder that is a symbolic link to nothing
/// (setup would have to create the folder in the link's place).
fn refuse_dangling_folder(path: &Path) -> anyhow::Result<()> {
    for dir in path.ancestors().skip(1) {
        if dir.exists() {
            return Ok(());
        }
        if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
            let to = fs::read_link(dir).unwrap_or_default();
            return Err(term::cli_error(
                "bad_agent_config",
                format!(
                    "{} is a symbolic link to {}, which does not exist; create it (or remove the link), then run this again. Nothing was changed",
                    dir.display(),
                    to.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a file setup is about to change (or remove) but may not, before
/// anything is changed: one that is read-only (no write permission for
/// anyone, as `chmod a-w` leaves it, which is how a person says "don't
/// touch": even root, whom the system would let write, is refused), one
/// this user may not write, or one in a folder this user may not write
/// (files are written beside themselves and renamed into place).
pub(super) fn check_writable(path: &Path, verb: &str) -> anyhow::Result<()> {
    use rustix::fs::{Access, access};
    let refuse = |what: String| {
        term::cli_error(
            "agent_config_not_writable",
            format!(
                "{what}, so agentmesh setup can't {verb} it; make it writable, then run this again (or make the change yourself: `--dry-run` shows it). Nothing was changed"
            ),
        )
    };
    match fs::metadata(path) {
        Ok(m) if m.permissions().readonly() => {
            return Err(refuse(format!("{} is read-only", path.display())));
        }
        Ok(_) => {
            if let Err(e) = access(path, Access::WRITE_OK) {
                return Err(refuse(format!("{} is not writable ({e})", path.display())));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("cannot read {}", path.display())),
    }
    // The folder the file is written in, or the nearest one that exists
    // (setup creates the rest).
    if let Some(dir) = path.ancestors().skip(1).find(|d| d.exists())
        && let Err(e) = access(dir, Access::WRITE_OK | Access::EXEC_OK)
    {
        return Err(refuse(format!(
            "{} is in {}, which is not writable ({e})",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// A file's bytes, `None` if it does not exist.
pub(super) fn read(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context(format!("cannot read {}", path.display())),
    }
}

/// Creates the missing folders above `path`; the ones it created,
/// outermost first.
pub(super) fn create_parents(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut missing = vec![];
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        missing.push(d.to_owned());
        dir = d.parent();
    }
    missing.reverse();
    for d in &missing {
        fs::create_dir(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    Ok(missing)
}

/// Removes the folders agentmesh created, innermost first, those that are
/// empty (the agent may have put its own files there since).
pub(super) fn remove_created_dirs(mut dirs: Vec<PathBuf>) {
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.dedup();
    for d in dirs {
        let _ = fs::remove_dir(d);
    }
}

/// Writes `bytes` in place of `path` at once: a temporary file beside it,
/// renamed over it, so an agent never reads half a file. An existing
/// file's permissions are kept; `mode` is for new files.
pub(super) fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.agentmesh-{}", std::process::id()));
    let result = (|| -> io::Result<()> {
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        if let Some(mode) = mode {
            options.mode(mode);
        }
        let mut f = options.open(&tmp)?;
        if let Ok(meta) = fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("cannot write {}", path.display()))
}

/// A unified diff from `before` to `after` (`None`: no file), labelled
/// with the path.
pub(super) fn diff(path: &Path, before: Option<&[u8]>, after: Option<&[u8]>) -> String {
    let old = String::from_utf8_lossy(before.unwrap_or_default());
    let new = String::from_utf8_lossy(after.unwrap_or_default());
    let label = path.display().to_string();
    let a = if before.is_some() {
        &label
    } else {
        "/dev/null"
    };
    let b = if after.is_some() { &label } else { "/dev/null" };
    similar::TextDiff::from_lines(old.as_ref(), new.as_ref())
        .unified_diff()
        .context_radius(3)
        .header(a, b)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_names_the_file_and_shows_both_sides() {
        let d = diff(
            Path::new("/x/settings.json"),
            Some(b"a\nb\n"),
            Some(b"a\nc\n"),
        );
        assert!(
            d.starts_with("--- /x/settings.json\n+++ /x/settings.json\n"),
            "{d}"
        );
        assert!(d.contains("-b\n+c\n"), "{d}");
        let created = diff(Path::new("/x/new.json"), None, Some(b"{}\n"));
        assert!(
            created.starts_with("--- /dev/null\n+++ /x/new.json\n"),
            "{created}"
        );
    }

    #[test]
    fn parents_created_are_listed_outermost_first_and_removed_when_empty() {
        let dir = tempfile_dir();
        let file = dir.join("a/b/c.json");
        let made = create_parents(&file).unwrap();
        assert_eq!(made, vec![dir.join("a"), dir.join("a/b")]);
        remove_created_dirs(made);
        assert!(!dir.join("a").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("am-setup-unit-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        d
    }
}
