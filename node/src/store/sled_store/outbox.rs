//! The outbox in sled: records on their way by id; delivered and failed
//! ones by when they were sent (created_at ‖ id), with an index from id
//! (its 16 bytes) to its created_at, so a receipt finds its message.

use agentmesh_protocol::Timestamp;

use super::SledStore;
use crate::store::sled_codec::{counted, from_record, id_key, to_record};
use crate::store::{OutboxRecord, OutboxStatus, StoreError};

fn done_key(created_at: u64, id: &str) -> Vec<u8> {
    [&created_at.to_be_bytes()[..], id.as_bytes()].concat()
}

impl SledStore {
    pub(super) fn put_outbox_records(&self, records: &[OutboxRecord]) -> Result<(), StoreError> {
        let (mut live, mut done, mut ids) = (
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        for r in records {
            if matches!(r.status, OutboxStatus::Delivered | OutboxStatus::Failed) {
                live.remove(r.id.as_bytes());
                ids.insert(id_key(&r.id), &r.created_at.to_be_bytes());
                done.insert(done_key(r.created_at, &r.id), to_record(r));
            } else {
                live.insert(r.id.as_bytes(), to_record(r));
            }
        }
        // Done first: a crash between the two leaves a record in both
        // trees, and loading re-sends it (the receiver drops the duplicate)
        // rather than losing it. The index before the records it names: a
        // crash between them leaves an index entry for no record, which
        // finds nothing (a small leak, never a wrong record).
        self.outbox_done_ids.apply_batch(ids)?;
        self.outbox_done.apply_batch(done)?;
        self.outbox.apply_batch(live)?;
        Ok(())
    }

    pub(super) fn outbox_record(&self, id: &str) -> Result<Option<OutboxRecord>, StoreError> {
        if let Some(v) = self.outbox.get(id.as_bytes())? {
            return from_record(&v).map(Some);
        }
        let Some(created_at) = self
            .outbox_done_ids
            .get(id_key(id))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
        else {
            return Ok(None);
        };
        self.outbox_done
            .get(done_key(u64::from_be_bytes(created_at), id))?
            .map(|v| from_record(&v))
            .transpose()
    }

    pub(super) fn outbox_live(&self) -> Result<Vec<OutboxRecord>, StoreError> {
        counted(&self.outbox, self.outbox.iter())
            .map(|kv| {
                let r: OutboxRecord = from_record(&kv?.1)?;
                Ok(OutboxRecord {
                    envelope: vec![],
                    ..r
                })
            })
            .collect()
    }

    pub(super) fn outbox_envelope_of(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self.outbox.get(id.as_bytes())? {
            Some(bytes) => Ok(Some(from_record::<OutboxRecord>(&bytes)?.envelope)),
            None => Ok(None),
        }
    }

    pub(super) fn outbox_done_newest(&self, limit: usize) -> Result<Vec<OutboxRecord>, StoreError> {
        // Counts and receipts are this machine's reports, not mail anyone
        // sent: skipped before the limit, so a machine that reads much
        // still lists what it sent.
        let report = |r: &OutboxRecord| {
            matches!(
                r.kind,
                crate::api::MessageKind::Counts | crate::api::MessageKind::Receipt
            )
        };
        let mut out = vec![];
        for kv in counted(&self.outbox_done, self.outbox_done.iter()).rev() {
            let r: OutboxRecord = from_record(&kv?.1)?;
            if !report(&r) {
                out.push(r);
                if out.len() == limit {
                    break;
                }
            }
        }
        Ok(out)
    }

    pub(super) fn prune_outbox_before(&self, before: Timestamp) -> Result<usize, StoreError> {
        let mut gone = 0;
        for kv in self
            .outbox_done
            .range(..before.as_unix_millis().to_be_bytes())
        {
            let key = kv?.0;
            // The id follows the 8 bytes of created_at.
            self.outbox_done_ids
                .remove(id_key(&String::from_utf8_lossy(&key[8..])))?;
            self.outbox_done.remove(key)?;
            gone += 1;
        }
        Ok(gone)
    }
}
