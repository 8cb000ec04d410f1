//! The audit log in sled: the entries one flush writes share a record.

use agentmesh_protocol::Timestamp;

use super::SledStore;
use crate::store::sled_codec::{counted, from_record, to_record};
use crate::store::{AuditEntry, AuditStore, StoreError};

/// Audit entries one flush writes share a record, this many at most: the
/// key of the first (time ‖ sled's monotonic id), the entries in time
/// order. A sled record costs the daemon memory as long as it is kept,
/// and a busy machine writes several entries a message. Records much
/// larger than a message's make larger pages, which sled keeps and
/// rewrites whole: 256 entries a record (about 75 KiB) held 4 MiB more on
/// a receiver of 100,000 messages than 8 (about 2.4 KiB, a message's size).
const AUDIT_PER_RECORD: usize = 8;

/// The entries of one record span this long at most (from the first's
/// time, ms): a flush's entries further apart (entries kept while the
/// group commit's queue was full) go into records of their own. So a
/// record keyed before `t - AUDIT_SPAN_MS` holds nothing at `t` or after,
/// and a read by time looks that far past its bound, no further.
const AUDIT_SPAN_MS: u64 = 1_000;

/// The entries of an audit record: a list (format 5), or one entry (as
/// format 4 and older wrote them).
fn audit_entries(bytes: &[u8]) -> Result<Vec<AuditEntry>, StoreError> {
    // CBOR's major type 4 is an array; an entry is a map (type 5).
    match bytes.first() {
        Some(b) if b >> 5 == 4 => from_record(bytes),
        _ => Ok(vec![from_record(bytes)?]),
    }
}

/// The time of an audit record's first entry, from its key.
fn audit_key_at(key: &[u8]) -> u64 {
    key.get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

impl AuditStore for SledStore {
    fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.audit_many(std::slice::from_ref(entry))
    }

    fn audit_many(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        let mut sorted: Vec<&AuditEntry> = entries.iter().collect();
        sorted.sort_by_key(|e| e.at);
        let mut batch = sled::Batch::default();
        // Records of AUDIT_PER_RECORD entries at most, spanning
        // AUDIT_SPAN_MS at most.
        let mut rest = &sorted[..];
        while let Some(first) = rest.first() {
            let n = rest
                .iter()
                .take(AUDIT_PER_RECORD)
                .take_while(|e| e.at - first.at <= AUDIT_SPAN_MS)
                .count();
            let (record, after) = rest.split_at(n);
            // The id after the time: two records of one millisecond never
            // collide.
            let id = self.db.generate_id()?;
            batch.insert(
                [first.at.to_be_bytes(), id.to_be_bytes()].concat(),
                to_record(&record),
            );
            rest = after;
        }
        self.audit.apply_batch(batch)?;
        Ok(())
    }

    fn audit_since(&self, since: Timestamp, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let since = since.as_unix_millis();
        // Newest records first. A record and every one keyed before it
        // hold nothing later than its key's time and the span: past
        // `since`, or past the `limit`-th newest entry found, the rest
        // cannot change the answer.
        let mut out: Vec<AuditEntry> = vec![];
        let mut times: Vec<u64> = vec![];
        for kv in counted(&self.audit, self.audit.iter()).rev() {
            let (k, v) = kv?;
            let horizon = audit_key_at(&k).saturating_add(AUDIT_SPAN_MS);
            if horizon < since {
                break;
            }
            if limit > 0 && out.len() >= limit {
                times.clear();
                times.extend(out.iter().map(|e| e.at));
                let (_, nth, _) = times.select_nth_unstable_by(limit - 1, |a, b| b.cmp(a));
                if horizon < *nth {
                    break;
                }
            }
            out.extend(audit_entries(&v)?.into_iter().filter(|e| e.at >= since));
        }
        out.sort_by_key(|e| e.at);
        out.drain(..out.len().saturating_sub(limit));
        Ok(out)
    }

    fn prune_audit(&self, before: Timestamp) -> Result<usize, StoreError> {
        let mut gone = 0;
        for kv in self.audit.range(..before.as_unix_millis().to_be_bytes()) {
            let (k, v) = kv?;
            let entries = audit_entries(&v)?;
            let all = entries.len();
            let keep: Vec<AuditEntry> = entries
                .into_iter()
                .filter(|e| e.at >= before.as_unix_millis())
                .collect();
            gone += all - keep.len();
            // Kept entries go into a record of their own, keyed at or
            // after `before`: past the range this walks. Written first: a
            // crash between the two shows them twice, never loses them.
            if !keep.is_empty() {
                self.audit_many(&keep)?;
            }
            self.audit.remove(k)?;
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::reopen;

    fn entry(at: u64) -> AuditEntry {
        AuditEntry {
            at,
            event: "sent".into(),
            detail: format!("entry {at}"),
            ..AuditEntry::default()
        }
    }

    #[test]
    fn the_audit_entries_of_a_flush_share_records_and_read_and_prune_as_entries() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path()).unwrap();
        // A record as format 4 wrote it: one entry, not a list.
        s.audit
            .insert(
                [5u64.to_be_bytes(), 0u64.to_be_bytes()].concat(),
                to_record(&entry(5)),
            )
            .unwrap();
        // One flush's 300 entries, out of order: records of
        // AUDIT_PER_RECORD, the last one shorter.
        let flush: Vec<AuditEntry> = (0..300).rev().map(|i| entry(1_000 + i)).collect();
        s.audit_many(&flush).unwrap();
        assert_eq!(s.audit.len(), 1 + 300usize.div_ceil(AUDIT_PER_RECORD));
        let at = |v: &[AuditEntry]| v.iter().map(|e| e.at).collect::<Vec<_>>();
        let all = s
            .audit_since(Timestamp::from_unix_millis(0), 1_000)
            .unwrap();
        assert_eq!(
            at(&all),
            std::iter::once(5).chain(1_000..1_300).collect::<Vec<_>>()
        );
        // The newest, in order, across the records' boundary.
        let newest = s.audit_since(Timestamp::from_unix_millis(0), 50).unwrap();
        assert_eq!(at(&newest), (1_250..1_300).collect::<Vec<_>>());
        let since = s
            .audit_since(Timestamp::from_unix_millis(1_290), 100)
            .unwrap();
        assert_eq!(at(&since), (1_290..1_300).collect::<Vec<_>>());
        // Pruning counts entries, splitting the record it cuts through.
        assert_eq!(
            s.prune_audit(Timestamp::from_unix_millis(1_100)).unwrap(),
            101
        );
        let left = s
            .audit_since(Timestamp::from_unix_millis(0), 1_000)
            .unwrap();
        assert_eq!(at(&left), (1_100..1_300).collect::<Vec<_>>());
        assert_eq!(left[0].detail, "entry 1100");
        assert_eq!(
            s.prune_audit(Timestamp::from_unix_millis(1_100)).unwrap(),
            0
        );
    }

    /// Records of flushes apart overlap in time (a flush's entries are
    /// stamped when they happened, and may wait): a read by time misses
    /// none of them, whatever record they are in.
    #[test]
    fn records_that_overlap_in_time_are_read_whole_at_every_bound() {
        let dir = tempfile::tempdir().unwrap();
        let s = reopen(dir.path()).unwrap();
        // One flush: 100 and 900 (one record, keyed at 100); a second: 500
        // to 510 (keyed at 500); a third, 5,000 apart: two records.
        s.audit_many(&[entry(100), entry(900)]).unwrap();
        s.audit_many(&(500..=510).map(entry).collect::<Vec<_>>())
            .unwrap();
        s.audit_many(&[entry(2_000), entry(7_000)]).unwrap();
        assert_eq!(s.audit.len(), 1 + 2 + 2, "a record spans a second at most");
        let at = |since: u64, limit: usize| {
            s.audit_since(Timestamp::from_unix_millis(since), limit)
                .unwrap()
                .iter()
                .map(|e| e.at)
                .collect::<Vec<_>>()
        };
        // 900 sits in a record keyed before 600 and before 510.
        assert_eq!(at(600, 10), [900, 2_000, 7_000]);
        assert_eq!(at(0, 3), [900, 2_000, 7_000]);
        assert_eq!(at(0, 4), [510, 900, 2_000, 7_000]);
        assert_eq!(at(0, 100).len(), 15);
        assert_eq!(at(7_001, 10), Vec::<u64>::new());
    }
}
