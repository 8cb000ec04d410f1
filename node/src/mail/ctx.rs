//! What every part of mail reads and records into: the time as the parts
//! see it, the context lent to a part for one call, inbox seqs, and the
//! small helpers the audit entries share.

use std::sync::Arc;
use std::time::Instant;

use agentmesh_protocol::{PeerId, Timestamp};
use tokio::sync::watch;

use crate::api::Who;
use crate::audit::AuditLog;
use crate::clock::now;
use crate::store::Store;
use crate::team::Directory;

/// A reason a remote machine or a person gives is cut to this many
/// characters: enough to read, too short to flood the audit log.
pub(super) const MAX_REMOTE_REASON: usize = 300;

/// The time as the parts see it: the calendar (which test builds move) for
/// what expires, the monotonic clock for retries. Passed in, never read by
/// a part itself, so tests choose it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Now {
    pub(super) wall: Timestamp,
    pub(super) mono: Instant,
}

impl Now {
    pub(super) fn current() -> Now {
        Now {
            wall: now(),
            mono: Instant::now(),
        }
    }
}

/// What most decisions read, and where they record: lent to a part for
/// one call.
pub(super) struct Ctx<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) dir: &'a Directory,
    pub(super) log: &'a mut AuditLog,
    pub(super) now: Now,
}

/// What every part reads or records into, lent to one part per call.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) store: Arc<dyn Store>,
    pub(super) dir: watch::Receiver<Arc<Directory>>,
    /// The one writer of mail's audit entries.
    pub(super) log: AuditLog,
}

impl Shared {
    /// The team as of now (kept apart from the lent context, which
    /// borrows it).
    pub(super) fn directory(&self) -> Arc<Directory> {
        self.dir.borrow().clone()
    }

    /// The context for one call, at the current time.
    pub(super) fn lend<'a>(&'a mut self, dir: &'a Directory) -> Ctx<'a> {
        Ctx {
            store: self.store.as_ref(),
            dir,
            log: &mut self.log,
            now: Now::current(),
        }
    }
}

/// Inbox seqs: every message takes the next one (a held message delivered
/// later takes a new one, at the end of the inbox).
#[derive(Debug)]
pub(super) struct Seqs {
    last: u64,
}

impl Seqs {
    /// Seqs after `last`, the newest taken.
    pub(super) fn new(last: u64) -> Seqs {
        Seqs { last }
    }

    /// The next seq.
    pub(super) fn take(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

/// Who decided, for the audit log: `human ada`, `agent claude`.
pub(super) fn who_label(who: &Who) -> String {
    format!("{} {}", who.kind.as_str(), who.name)
}

/// A record's body hash for the audit log, if it has one.
pub(super) fn sha(hash: &str) -> Option<String> {
    (!hash.is_empty()).then(|| hash.to_owned())
}

pub(super) fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

/// A stored PeerId, parsed back; `None` for a damaged record.
pub(super) fn peer_of(text: &str) -> Option<PeerId> {
    text.parse().ok()
}
