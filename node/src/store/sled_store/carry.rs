//! What a carrier holds, in sled: each envelope's record in `carried`,
//! its bytes in `carried_bytes`, under the same key. Loading reads only
//! the records, so a carrier holding 256 MiB starts without reading it.

use super::SledStore;
use crate::store::sled_codec::{counted, from_record, to_record, tx_error};
use crate::store::{CarriedRecord, CarryStore, StoreError};

/// Carried envelopes deleted in one transaction, at most (64 KiB
/// each at most: 4 MiB read at once).
const DELETED_AT_ONCE: usize = 64;

impl CarryStore for SledStore {
    fn put_carried(&self, held: &[(CarriedRecord, Vec<u8>)]) -> Result<(), StoreError> {
        let (mut records, mut bytes) = (sled::Batch::default(), sled::Batch::default());
        for (r, envelope) in held {
            records.insert(r.key(), to_record(r));
            bytes.insert(r.key(), envelope.as_slice());
        }
        self.carried_both(&records, &bytes)
    }

    fn carried(&self) -> Result<Vec<CarriedRecord>, StoreError> {
        counted(&self.carried, self.carried.iter())
            .map(|kv| from_record(&kv?.1))
            .collect()
    }

    fn carried_envelope(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.carried_bytes.get(key)?.map(|v| v.to_vec()))
    }

    fn delete_carried(&self, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        // A transaction reads what it removes and keeps it until it
        // commits: a few envelopes at a time, not a sweep's 256 MiB.
        for chunk in keys.chunks(DELETED_AT_ONCE) {
            let mut batch = sled::Batch::default();
            for k in chunk {
                batch.remove(k.as_slice());
            }
            self.carried_both(&batch, &batch)?;
        }
        Ok(())
    }
}

impl SledStore {
    /// Applies `records` and `bytes` in one transaction: a record never
    /// names bytes that are gone, and no bytes outlive their record.
    fn carried_both(&self, records: &sled::Batch, bytes: &sled::Batch) -> Result<(), StoreError> {
        use sled::Transactional;
        (&self.carried, &self.carried_bytes)
            .transaction(|(r, b)| {
                r.apply_batch(records)?;
                b.apply_batch(bytes)?;
                Ok(())
            })
            .map_err(tx_error)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;
    use crate::store::testing::reopen;

    #[test]
    fn carried_envelopes_survive_a_reopen_and_go_when_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let r = |id: &str| CarriedRecord {
            recipient: "bob".into(),
            sender: "alice".into(),
            id: id.into(),
            size: 3,
            sent_at: 1,
            stored_at: 1,
            expires_at: 2,
        };
        {
            let s = reopen(dir.path()).unwrap();
            s.put_carried(&[(r("aa"), vec![1, 2, 3]), (r("bb"), vec![4, 5, 6])])
                .unwrap();
            s.sync().unwrap();
        }
        let s = reopen(dir.path()).unwrap();
        assert_eq!(s.carried().unwrap(), vec![r("aa"), r("bb")]);
        assert_eq!(
            s.carried_envelope(&r("bb").key()).unwrap(),
            Some(vec![4, 5, 6])
        );
        s.delete_carried(&[r("aa").key()]).unwrap();
        assert_eq!(s.carried().unwrap(), vec![r("bb")]);
        assert_eq!(s.carried_envelope(&r("aa").key()).unwrap(), None);
    }
}
