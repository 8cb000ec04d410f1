//! [`BusStore`] in sled: broadcasts waiting for their judgment.

use sled::Transactional;
use sled::transaction::{TransactionError, TransactionalTree};

use super::{INBOX_SEQ_KEY, insert_inbox};
use crate::store::sled_codec::{by_until_key, counted, from_record, to_record};
use agentmesh_protocol::Timestamp;

use super::SledStore;
use crate::store::{
    BusStore, CountsRecord, InboxRecord, OutboxRecord, RunRecord, SessionRecord, SpentRecord,
    StoreError, TaintRecord, WakeRecord,
};

fn store_error(e: TransactionError<()>) -> StoreError {
    match e {
        TransactionError::Storage(e) => StoreError::Sled(e),
        TransactionError::Abort(()) => StoreError::Corrupt("aborted".into()),
    }
}

impl BusStore for SledStore {
    fn put_broadcasts(
        &self,
        records: &[InboxRecord],
        seen: &[(Vec<u8>, u64)],
    ) -> Result<(), StoreError> {
        (&self.broadcasts, &self.seen, &self.seen_by_until)
            .transaction(|(broadcasts, seen_tree, by_until)| {
                for r in records {
                    broadcasts.insert(r.id.as_bytes(), to_record(r))?;
                }
                for (key, until) in seen {
                    seen_tree.insert(key.as_slice(), &until.to_be_bytes())?;
                    by_until.insert(by_until_key(key, *until), &[])?;
                }
                Ok(())
            })
            .map_err(store_error)
    }

    fn broadcasts(&self) -> Result<Vec<InboxRecord>, StoreError> {
        let mut all: Vec<InboxRecord> = self
            .broadcasts
            .iter()
            .map(|kv| from_record(&kv?.1))
            .collect::<Result<_, _>>()?;
        all.sort_by_key(|r| r.received_at);
        Ok(all)
    }

    fn put_judged(
        &self,
        id: &str,
        copies: &[InboxRecord],
        counts: Option<&OutboxRecord>,
    ) -> Result<(), StoreError> {
        let last = copies.iter().map(|r| r.seq).max();
        (
            &self.broadcasts,
            &self.inbox,
            &self.inbox_ids,
            &self.held,
            &self.unread,
            &self.meta,
            &self.outbox,
        )
            .transaction(
                |(broadcasts, inbox, ids, held, unread, meta, outbox): &(
                    TransactionalTree,
                    TransactionalTree,
                    TransactionalTree,
                    TransactionalTree,
                    TransactionalTree,
                    TransactionalTree,
                    TransactionalTree,
                )| {
                    for r in copies {
                        insert_inbox([inbox, ids, held, unread], r)?;
                    }
                    if let Some(last) = last {
                        meta.insert(INBOX_SEQ_KEY, &last.to_be_bytes())?;
                    }
                    if let Some(c) = counts {
                        outbox.insert(c.id.as_bytes(), to_record(c))?;
                    }
                    broadcasts.remove(id.as_bytes())?;
                    Ok(())
                },
            )
            .map_err(store_error)
    }

    fn put_counts(&self, id: &str, counts: &CountsRecord) -> Result<(), StoreError> {
        self.counts.insert(id.as_bytes(), to_record(counts))?;
        Ok(())
    }

    fn counts(&self, id: &str) -> Result<Option<CountsRecord>, StoreError> {
        self.counts
            .get(id.as_bytes())?
            .map(|v| from_record(&v))
            .transpose()
    }

    fn prune_counts(&self, before: Timestamp) -> Result<usize, StoreError> {
        let mut gone = sled::Batch::default();
        let mut n = 0;
        for kv in counted(&self.counts, self.counts.iter()) {
            let (k, v) = kv?;
            let c: CountsRecord = from_record(&v)?;
            if c.created_at < before.as_unix_millis() {
                gone.remove(k);
                n += 1;
            }
        }
        self.counts.apply_batch(gone)?;
        Ok(n)
    }

    fn taints(&self) -> Result<Vec<TaintRecord>, StoreError> {
        self.consent
            .scan_prefix(TAINT_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_taint(&self, record: &TaintRecord) -> Result<(), StoreError> {
        let key = [TAINT_PREFIX, record.mailbox.as_bytes()].concat();
        if record.marked || record.caught.is_some() {
            self.consent.insert(key, to_record(record))?;
        } else {
            self.consent.remove(key)?;
        }
        self.sync()
    }

    fn wakes(&self) -> Result<Vec<WakeRecord>, StoreError> {
        self.consent
            .scan_prefix(WAKE_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_wake(&self, mailbox: &str, record: Option<&WakeRecord>) -> Result<(), StoreError> {
        let key = [WAKE_PREFIX, mailbox.as_bytes()].concat();
        match record {
            Some(r) => self.consent.insert(key, to_record(r))?,
            None => self.consent.remove(key)?,
        };
        self.sync()
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.consent
            .scan_prefix(SESSION_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_session(&self, record: &SessionRecord, forget: bool) -> Result<(), StoreError> {
        let key = [
            SESSION_PREFIX,
            record.mailbox.as_bytes(),
            b"\0",
            record.agent.name().as_bytes(),
            b"\0",
            record.id.as_bytes(),
        ]
        .concat();
        if forget {
            self.consent.remove(key)?;
        } else {
            self.consent.insert(key, to_record(record))?;
        }
        self.sync()
    }

    fn runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        self.consent
            .scan_prefix(RUN_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_run(&self, record: &RunRecord, forget: bool) -> Result<(), StoreError> {
        let key = [RUN_PREFIX, record.id.as_bytes()].concat();
        if forget {
            self.consent.remove(key)?;
        } else {
            self.consent.insert(key, to_record(record))?;
        }
        self.sync()
    }

    fn spent(&self) -> Result<Vec<SpentRecord>, StoreError> {
        self.consent
            .scan_prefix(SPENT_PREFIX)
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn put_spent(&self, record: &SpentRecord) -> Result<(), StoreError> {
        let key = [SPENT_PREFIX, record.mailbox.as_bytes()].concat();
        self.consent.insert(key, to_record(record))?;
        self.sync()
    }

    fn quiet_reads(&self) -> Result<Vec<String>, StoreError> {
        self.consent
            .scan_prefix(QUIET_READ_PREFIX)
            .map(|kv| {
                let k = kv?.0;
                String::from_utf8(k[QUIET_READ_PREFIX.len()..].to_vec())
                    .map_err(|_| StoreError::Corrupt("a quiet-read mailbox name".into()))
            })
            .collect()
    }

    fn put_quiet_read(&self, mailbox: &str, quiet: bool) -> Result<(), StoreError> {
        let key = [QUIET_READ_PREFIX, mailbox.as_bytes()].concat();
        if quiet {
            self.consent.insert(key, &[])?;
        } else {
            self.consent.remove(key)?;
        }
        self.sync()
    }
}

/// The consent tree's keys of mailboxes whose read receipts are off.
const QUIET_READ_PREFIX: &[u8] = b"quiet_read/";
/// The consent tree's keys of mailboxes' taints.
const TAINT_PREFIX: &[u8] = b"taint/";
/// The consent tree's keys of mailboxes' wake settings.
const WAKE_PREFIX: &[u8] = b"wake/";
/// The consent tree's keys of sessions hooks reported (mailbox, agent and
/// session id, each ended by a NUL but the last).
const SESSION_PREFIX: &[u8] = b"session/";
/// The consent tree's keys of wake runs (by run id).
const RUN_PREFIX: &[u8] = b"run/";
/// The consent tree's keys of what mailboxes spent of their daily wake
/// budgets (one record per mailbox: today's).
const SPENT_PREFIX: &[u8] = b"spent/";
