//! A backup file:
//!
//! ```text
//! agentmesh backup 1\n          what it is (a file without it is another format)
//! bytes NNNNNNNNNNNNNNNNNNNN\n   the age file's length, 20 digits (a file
//!                                shorter than that was cut short)
//! AGE FILE                       age v1, one scrypt recipient; its plaintext
//!                                a sequence of CBOR items:
//!                                Header, then Tree(name) and Entry(key, value)
//!                                items, then End(entries)
//! ```
//!
//! Written to `FILE.partial` (0600) and renamed over `FILE` once whole.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_bytes::ByteBuf;

use super::{BackupError, Header, Passphrase};
use crate::store::StoreError;

/// The first line.
const MAGIC: &[u8] = b"agentmesh backup 1\n";
/// The second line's start; 20 digits and a newline follow.
const LENGTH: &[u8] = b"bytes ";
const DIGITS: usize = 20;
/// Both lines.
const PREFIX: usize = MAGIC.len() + LENGTH.len() + DIGITS + 1;
/// scrypt's work factor for a backup (N = 2^18).
const WORK_FACTOR: u8 = 18;
/// The most an import accepts (2^20: 1 GiB and some seconds): more is not
/// a file agentmesh made.
const WORK_FACTOR_MAX: u8 = 20;

/// One item of the plaintext.
#[derive(Debug, Serialize, Deserialize)]
enum Item {
    Header(Box<Header>),
    Tree(String),
    Entry(ByteBuf, ByteBuf),
    End(u64),
}

/// Why writing stopped: the file, or the store being read.
#[derive(Debug)]
pub(super) enum WriteError {
    Io(io::Error),
    Store(StoreError),
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        WriteError::Store(e)
    }
}

/// Writes `header` and the entries `entries` gives (each through the
/// callback it is handed) to `to`, encrypted to `passphrase`: the file's
/// size and the entries written.
pub(super) fn write(
    to: &Path,
    passphrase: &Passphrase,
    header: &Header,
    entries: impl FnOnce(
        &mut dyn FnMut(&str, &[u8], &[u8]) -> Result<(), WriteError>,
    ) -> Result<(), WriteError>,
) -> Result<(u64, u64), BackupError> {
    let partial = partial_path(to);
    let result = write_partial(&partial, passphrase, header, entries).and_then(|counts| {
        fs::rename(&partial, to).map_err(|source| BackupError::Io {
            what: "write",
            path: to.to_owned(),
            source,
        })?;
        Ok(counts)
    });
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    result
}

fn partial_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    to.with_file_name(name)
}

fn write_partial(
    partial: &Path,
    passphrase: &Passphrase,
    header: &Header,
    entries: impl FnOnce(
        &mut dyn FnMut(&str, &[u8], &[u8]) -> Result<(), WriteError>,
    ) -> Result<(), WriteError>,
) -> Result<(u64, u64), BackupError> {
    let io_err = |source| BackupError::Io {
        what: "write",
        path: partial.to_owned(),
        source,
    };
    // A new file of this user's alone (never one left there, nor what a
    // link there points at).
    match fs::remove_file(partial) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(e)),
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(partial)
        .map_err(io_err)?;
    file.write_all(MAGIC).map_err(io_err)?;
    file.write_all(LENGTH).map_err(io_err)?;
    file.write_all(&[b'0'; DIGITS]).map_err(io_err)?;
    file.write_all(b"\n").map_err(io_err)?;
    // A fixed work factor (2^18: about a second, 256 MiB): one a slower
    // machine importing it accepts too (up to 2^WORK_FACTOR_MAX).
    let mut recipient = age::scrypt::Recipient::new(super::secret(passphrase));
    recipient.set_work_factor(WORK_FACTOR);
    let encryptor =
        age::Encryptor::with_recipients(std::iter::once(&recipient as &dyn age::Recipient))
            .map_err(|e| io_err(io::Error::other(e.to_string())))?;
    let mut out = encryptor
        .wrap_output(BufWriter::new(file))
        .map_err(io_err)?;
    let mut count = 0u64;
    item(&mut out, &Item::Header(Box::new(header.clone()))).map_err(io_err)?;
    let mut current: Option<String> = None;
    entries(&mut |tree, k, v| {
        if current.as_deref() != Some(tree) {
            item(&mut out, &Item::Tree(tree.to_owned())).map_err(WriteError::Io)?;
            current = Some(tree.to_owned());
        }
        count += 1;
        item(
            &mut out,
            &Item::Entry(ByteBuf::from(k.to_vec()), ByteBuf::from(v.to_vec())),
        )
        .map_err(WriteError::Io)
    })
    .map_err(|e| match e {
        WriteError::Io(e) => io_err(e),
        WriteError::Store(e) => BackupError::Store(e),
    })?;
    item(&mut out, &Item::End(count)).map_err(io_err)?;
    let mut file = out
        .finish()
        .and_then(|w| w.into_inner().map_err(io::IntoInnerError::into_error))
        .map_err(io_err)?;
    let size = file.stream_position().map_err(io_err)?;
    let payload = size - PREFIX as u64;
    file.seek(SeekFrom::Start((MAGIC.len() + LENGTH.len()) as u64))
        .map_err(io_err)?;
    file.write_all(format!("{payload:0DIGITS$}").as_bytes())
        .map_err(io_err)?;
    file.sync_all().map_err(io_err)?;
    Ok((size, count))
}

/// Writes one item.
fn item(out: &mut dyn Write, i: &Item) -> io::Result<()> {
    ciborium::into_writer(i, out).map_err(|e| match e {
        ciborium::ser::Error::Io(e) => e,
        e => io::Error::other(e.to_string()),
    })
}

/// Reads the backup `from`: its header to `header_ok`, each entry to
/// `each(tree, key, value)` (either may refuse it); its header and the
/// entries read.
pub(super) fn read(
    from: &Path,
    passphrase: &Passphrase,
    mut header_ok: impl FnMut(&Header) -> Result<(), BackupError>,
    mut each: impl FnMut(&str, &[u8], &[u8]) -> Result<(), BackupError>,
) -> Result<(Header, u64), BackupError> {
    let path = from.to_owned();
    let not_a_backup = |why: &str| BackupError::NotABackup {
        file: path.clone(),
        why: why.to_owned(),
    };
    let tampered = |why: String| BackupError::Tampered {
        file: path.clone(),
        why,
    };
    let io_err = |source| BackupError::Io {
        what: "read",
        path: path.clone(),
        source,
    };
    let mut file = File::open(from).map_err(io_err)?;
    let size = file.metadata().map_err(io_err)?.len();
    let mut prefix = Vec::with_capacity(PREFIX);
    (&mut file)
        .take(PREFIX as u64)
        .read_to_end(&mut prefix)
        .map_err(io_err)?;
    let magic = &prefix[..prefix.len().min(MAGIC.len())];
    if magic != &MAGIC[..magic.len()] {
        return Err(not_a_backup(
            if prefix.starts_with(b"age-encryption.org/") {
                "an age file, but not one agentmesh wrote"
            } else {
                "its first line is not `agentmesh backup 1`"
            },
        ));
    }
    if prefix.len() < PREFIX {
        return Err(BackupError::Truncated {
            file: path.clone(),
            have: size,
            want: PREFIX as u64,
        });
    }
    let want = std::str::from_utf8(&prefix[MAGIC.len()..])
        .ok()
        .and_then(|l| l.strip_prefix("bytes "))
        .and_then(|l| l.strip_suffix('\n'))
        .filter(|d| d.len() == DIGITS && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse::<u64>().ok())
        .ok_or_else(|| tampered("its length line does not read".into()))?;
    let have = size - PREFIX as u64;
    if have < want {
        return Err(BackupError::Truncated {
            file: path.clone(),
            have: size,
            want: want + PREFIX as u64,
        });
    }
    if have > want {
        return Err(tampered(format!("{} bytes follow its end", have - want)));
    }
    let decryptor =
        age::Decryptor::new_buffered(BufReader::new(file)).map_err(|e| age_error(e, &path))?;
    let mut identity = age::scrypt::Identity::new(super::secret(passphrase));
    identity.set_max_work_factor(WORK_FACTOR_MAX);
    let mut plain = BufReader::new(
        decryptor
            .decrypt(std::iter::once(&identity as &dyn age::Identity))
            .map_err(|e| age_error(e, &path))?,
    );
    let mut next = || -> Result<Item, BackupError> {
        ciborium::from_reader(&mut plain).map_err(|e| match e {
            ciborium::de::Error::Io(e) => age_error(age::DecryptError::Io(e), &path),
            e => tampered(format!("its contents do not decode: {e}")),
        })
    };
    let Item::Header(header) = next()? else {
        return Err(tampered("it does not start with its header".into()));
    };
    header_ok(&header)?;
    let mut tree = None;
    let mut count = 0u64;
    loop {
        match next()? {
            Item::Tree(name) => tree = Some(name),
            Item::Entry(k, v) => {
                let Some(t) = &tree else {
                    return Err(tampered("an entry comes before its tree".into()));
                };
                each(t, &k, &v)?;
                count += 1;
            }
            Item::End(n) if n == count => break,
            Item::End(n) => {
                return Err(tampered(format!("it says {n} entries and holds {count}")));
            }
            Item::Header(_) => return Err(tampered("it has two headers".into())),
        }
    }
    Ok((*header, count))
}

/// What an age error says of the file.
fn age_error(e: age::DecryptError, file: &Path) -> BackupError {
    use age::DecryptError as D;
    let file = file.to_owned();
    match e {
        D::DecryptionFailed | D::KeyDecryptionFailed => BackupError::WrongPassphrase { file },
        D::NoMatchingKeys => BackupError::NotABackup {
            file,
            why: "it is encrypted to a key, not to a passphrase".into(),
        },
        D::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => BackupError::Tampered {
            file,
            why: "its encrypted part ends early".into(),
        },
        D::Io(e) if e.kind() != io::ErrorKind::InvalidData => BackupError::Io {
            what: "read",
            path: file,
            source: e,
        },
        D::Io(_) => BackupError::Tampered {
            file,
            why: "a part of it does not decrypt".into(),
        },
        D::InvalidMac => BackupError::Tampered {
            file,
            why: "its header's MAC does not match".into(),
        },
        D::ExcessiveWork { required, target } => BackupError::Tampered {
            file,
            why: format!(
                "it asks for scrypt work 2^{required}, far more than this machine's 2^{target}"
            ),
        },
        e => BackupError::Tampered {
            file,
            why: format!("its encrypted header does not read ({e})"),
        },
    }
}
