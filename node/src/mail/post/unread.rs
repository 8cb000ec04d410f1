//! Unread mail by mailbox: what an agent's session has not seen yet.
//!
//! ```text
//!  store's unread index ── load ──> Unread (seqs by mailbox, in memory)
//!  message delivered (received, local, released) ── add
//!  read / taken (check_inbox, a hook's injection) ── remove, read_at written
//! ```
//!
//! `take` is how a session sees its mail: the oldest unread messages of one
//! mailbox, marked read in the same actor step, so two hooks of one
//! session racing each other never inject a message twice. A channel
//! notification marks nothing: a message stays unread until `take` returns
//! it.

use std::collections::{BTreeSet, HashMap};

use crate::store::{InboxRecord, MailStore, StoreError};

use crate::mail::Now;
use crate::mail::post::pages::{MAX_PAGE_BYTES, json_size, view};

/// Messages one `take` returns at most (and by default).
pub const MAX_TAKE: usize = 50;

/// What a wake run would show of a mailbox's unread mail.
#[derive(Debug, Default)]
pub(in crate::mail) struct ForRun {
    /// The oldest unread untainted messages.
    pub(in crate::mail) shown: Vec<InboxRecord>,
    /// Unread tainted messages passed over.
    pub(in crate::mail) tainted: usize,
    /// The newest of them.
    pub(in crate::mail) newest_tainted: Option<InboxRecord>,
}

/// The unread seqs of every mailbox (`None`: the owner's).
#[derive(Debug, Default)]
pub(in crate::mail) struct Unread {
    by_mailbox: HashMap<Option<String>, BTreeSet<u64>>,
}

impl Unread {
    /// What the store's index says is unread.
    pub(in crate::mail) fn load(store: &dyn MailStore) -> Result<Unread, StoreError> {
        let mut u = Unread::default();
        for (seq, mailbox) in store.unread_index()? {
            u.add(mailbox.as_deref(), seq);
        }
        Ok(u)
    }

    /// A message was delivered to `mailbox`.
    pub(in crate::mail) fn add(&mut self, mailbox: Option<&str>, seq: u64) {
        self.by_mailbox
            .entry(mailbox.map(str::to_owned))
            .or_default()
            .insert(seq);
    }

    /// A message of `mailbox` was read.
    pub(in crate::mail) fn remove(&mut self, mailbox: Option<&str>, seq: u64) {
        let key = mailbox.map(str::to_owned);
        if let Some(set) = self.by_mailbox.get_mut(&key) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_mailbox.remove(&key);
            }
        }
    }

    /// Unread messages in `mailbox`.
    pub(in crate::mail) fn count(&self, mailbox: Option<&str>) -> usize {
        self.by_mailbox
            .get(&mailbox.map(str::to_owned))
            .map_or(0, BTreeSet::len)
    }

    /// What a wake run of `mailbox` would show: its oldest unread
    /// untainted messages, at most `show`, looking at no more than `scan`
    /// unread messages (tainted mail at the head does not hide the rest);
    /// and the tainted ones it passed (how many, the newest). Marks
    /// nothing.
    pub(in crate::mail) fn for_run(
        &mut self,
        store: &dyn MailStore,
        mailbox: &str,
        (show, scan): (usize, usize),
    ) -> Result<ForRun, StoreError> {
        let key = Some(mailbox.to_owned());
        let seqs: Vec<u64> = self
            .by_mailbox
            .get(&key)
            .map(|s| s.iter().take(scan).copied().collect())
            .unwrap_or_default();
        let mut out = ForRun::default();
        for seq in seqs {
            match store.inbox_at(seq)? {
                Some(r) if r.read_at.is_none() && r.held.is_none() => {
                    if r.taint {
                        out.tainted += 1;
                        out.newest_tainted = Some(r);
                    } else if out.shown.len() < show {
                        out.shown.push(r);
                    }
                }
                // Read some other way, or gone.
                _ => self.remove(Some(mailbox), seq),
            }
        }
        Ok(out)
    }

    /// Marks the messages `seqs` of `mailbox` read at `now` (those still
    /// unread); the ones it marked.
    pub(in crate::mail) fn mark_read(
        &mut self,
        store: &dyn MailStore,
        mailbox: &str,
        seqs: &[u64],
        now: agentmesh_protocol::Timestamp,
    ) -> Result<Vec<InboxRecord>, StoreError> {
        let mut records = vec![];
        for seq in seqs {
            if let Some(mut r) = store.inbox_at(*seq)?.filter(|r| r.read_at.is_none()) {
                r.read_at = Some(now.as_unix_millis());
                records.push(r);
            }
        }
        store.update_inbox(&records)?;
        for r in &records {
            self.remove(Some(mailbox), r.seq);
        }
        Ok(records)
    }

    /// The oldest unread messages of `mailbox`, at most `limit` and about
    /// `max_bytes` of JSON (at least one; one answer's worth at most);
    /// marked read (and written) unless `peek`. A seq the index names but
    /// the store no longer has is dropped from the index.
    pub(in crate::mail) fn take(
        &mut self,
        store: &dyn MailStore,
        mailbox: Option<&str>,
        (limit, max_bytes): (usize, Option<usize>),
        peek: bool,
        now: Now,
    ) -> Result<Vec<InboxRecord>, StoreError> {
        let limit = limit.clamp(1, MAX_TAKE);
        let budget = max_bytes.map_or(MAX_PAGE_BYTES, |b| b.min(MAX_PAGE_BYTES));
        let seqs: Vec<u64> = self
            .by_mailbox
            .get(&mailbox.map(str::to_owned))
            .map(|s| s.iter().take(limit).copied().collect())
            .unwrap_or_default();
        let mut records = vec![];
        for seq in seqs {
            match store.inbox_at(seq)? {
                Some(r) if r.read_at.is_none() && r.held.is_none() => records.push(r),
                // Read some other way, or gone.
                _ => self.remove(mailbox, seq),
            }
        }
        let mut bytes = 0;
        let fit = records
            .iter()
            .take_while(|r| {
                bytes += json_size(&view(r));
                bytes <= budget
            })
            .count()
            .max(1);
        records.truncate(fit);
        if !peek {
            for r in &mut records {
                r.read_at = Some(now.wall.as_unix_millis());
            }
            store.update_inbox(&records)?;
            for r in &records {
                self.remove(mailbox, r.seq);
            }
        }
        Ok(records)
    }
}
