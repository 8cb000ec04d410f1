//! How the sled store encodes what it keeps: records as CBOR, the trees
//! the migrations name, the unread index's entries, and sled's
//! transaction errors as the store's.

use serde::{Deserialize, Serialize};

use super::{InboxRecord, StoreError};

/// Trees the migrations rewrite.
pub(super) const SEEN_BY_UNTIL: &str = "seen_by_until";
pub(super) const UNREAD: &str = "inbox_unread";

/// Whether `r` belongs in the unread index: delivered, and not read.
pub(super) fn is_unread(r: &InboxRecord) -> bool {
    r.read_at.is_none() && r.held.is_none()
}

/// The unread index's value: the mailbox, empty for the owner's (a
/// mailbox name is never empty).
pub(super) fn unread_value(r: &InboxRecord) -> &[u8] {
    r.mailbox.as_deref().unwrap_or("").as_bytes()
}

/// A dedup record's key in the expiry index: until (BE) ‖ its key.
pub(super) fn by_until_key(key: &[u8], until: u64) -> Vec<u8> {
    [&until.to_be_bytes()[..], key].concat()
}

/// The dedup record (key, until) of every message `inbox` holds, whatever
/// its window: the records format 4 kept, and a backup without mail
/// carries.
pub(super) fn inbox_dedup(inbox: &sled::Tree) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
    let mut out = vec![];
    for kv in counted(inbox, inbox.iter()) {
        let r: InboxRecord = from_record(&kv?.1)?;
        out.extend(r.dedup_after(agentmesh_protocol::Timestamp::from_unix_millis(0)));
    }
    Ok(out)
}

/// A message id's key in the id indices (`inbox_ids`,
/// `outbox_done_ids`): its 16 bytes, not its 32 hex characters. sled keeps
/// a key of 22 bytes or less inside its node, with no allocation of its
/// own, and an index of random ids has every leaf in use. An id that is
/// not a message id's hex keeps its text.
pub(super) fn id_key(id: &str) -> Vec<u8> {
    match agentmesh_protocol::envelope::MessageId::parse(id) {
        Some(m) => m.0.to_vec(),
        None => id.as_bytes().to_vec(),
    }
}

/// The id an [`id_key`] stands for.
pub(super) fn key_id(key: &[u8]) -> String {
    match <[u8; 16]>::try_from(key) {
        Ok(bytes) => agentmesh_protocol::envelope::MessageId(bytes).to_string(),
        Err(_) => String::from_utf8_lossy(key).into_owned(),
    }
}

/// The id keys starting with the lowercase hex `prefix` (4 to 31
/// characters), at most `limit`: its whole bytes as a prefix, and an odd
/// last character as a range of the next byte.
pub(super) fn id_keys_starting(
    tree: &sled::Tree,
    prefix: &str,
    limit: usize,
) -> sled::Result<Vec<String>> {
    let whole = prefix.len() / 2 * 2;
    let Ok(bytes) = data_encoding::HEXLOWER.decode(&prefix.as_bytes()[..whole]) else {
        return Ok(vec![]);
    };
    let last = prefix[whole..]
        .chars()
        .next()
        .and_then(|c| c.to_digit(16))
        .map(|n| n as u8);
    let from = [&bytes[..], last.map(|n| n << 4).as_slice()].concat();
    let mut out = vec![];
    for key in tree.range(from..).keys() {
        let key = key?;
        let within = key.starts_with(&bytes)
            && last.is_none_or(|n| key.get(bytes.len()).is_some_and(|b| b >> 4 == n));
        if !within || out.len() == limit {
            break;
        }
        if key.len() == 16 {
            out.push(key_id(&key));
        }
    }
    Ok(out)
}

/// A transaction's error as the store's (none of ours aborts).
pub(super) fn tx_error(e: sled::transaction::TransactionError<()>) -> StoreError {
    match e {
        sled::transaction::TransactionError::Storage(e) => StoreError::Sled(e),
        sled::transaction::TransactionError::Abort(()) => StoreError::Corrupt("aborted".into()),
    }
}

/// A record as stored: CBOR.
pub(super) fn to_record<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("store records always serialise");
    out
}

pub(super) fn from_record<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, StoreError> {
    ciborium::from_reader(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// What `iter` (over `tree`) yields, each value read again with `get`.
///
/// sled 0.34 evicts from its cache only once a shard of it (one of 256)
/// has counted 64 accesses, and an iterator counts one access a leaf page,
/// however many records it reads there: a scan of a large tree left every
/// page it read in memory. Reading an inbox of 100,000 messages held
/// about 100 MiB that way, for good. A `get` counts an access to the leaf
/// and to the pages above it, so the cache evicts as the scan goes. A
/// record removed between the two reads is skipped.
pub(super) fn counted(
    tree: &sled::Tree,
    iter: sled::Iter,
) -> impl DoubleEndedIterator<Item = sled::Result<(sled::IVec, sled::IVec)>> + '_ {
    iter.keys().filter_map(move |k| match k {
        Ok(k) => tree.get(&k).transpose().map(|v| v.map(|v| (k, v))),
        Err(e) => Some(Err(e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HeldReason, MessageKind};
    use crate::store::InboxRecord;

    #[test]
    fn id_keys_are_the_ids_bytes_and_found_by_any_hex_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::open(dir.path()).unwrap();
        let tree = db.open_tree("ids").unwrap();
        let ids = [
            "abcd1000000000000000000000000000",
            "abcd2000000000000000000000000000",
            "abce0000000000000000000000000000",
            "abcf0000000000000000000000000000",
            "fff00000000000000000000000000000",
        ];
        for id in ids {
            assert_eq!(id_key(id).len(), 16);
            assert_eq!(key_id(&id_key(id)), id);
            tree.insert(id_key(id), &[]).unwrap();
        }
        // Not a message id: its text, and never found by a hex prefix.
        tree.insert(id_key("abcd-not-hex"), &[]).unwrap();
        assert_eq!(id_key("abcd-not-hex"), b"abcd-not-hex");
        let found = |p: &str, limit| id_keys_starting(&tree, p, limit).unwrap();
        assert_eq!(found("abcd", 6), ids[..2]);
        assert_eq!(found("abcd2", 6), ids[1..2]);
        assert_eq!(found("abc", 6), ids[..4]);
        assert_eq!(found("abc", 3), ids[..3]);
        assert_eq!(found("abce0", 6), ids[2..3]);
        assert_eq!(found("f", 6), ids[4..]);
        assert_eq!(found("fff0000", 6), ids[4..]);
        assert!(found("abcd3", 6).is_empty());
        assert!(found("0", 6).is_empty());
    }

    /// A message's kind and held reason are enums in the code and the
    /// same words on disk: a record written when they were strings reads
    /// as the enum, and a record written now is the words it always was
    /// (so the store needs no rewrite for them).
    #[test]
    fn kind_and_held_are_the_words_they_were_on_disk() {
        let mut record = crate::store::testing::inbox_record(1, None, false, true);
        record.kind = MessageKind::Ask;
        let bytes = to_record(&record);
        let mut value: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
        let field = |v: &ciborium::Value, name: &str| {
            v.as_map()
                .unwrap()
                .iter()
                .find(|(k, _)| k.as_text() == Some(name))
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(field(&value, "kind").as_text(), Some("ask"));
        assert_eq!(field(&value, "held").as_text(), Some("paused"));
        // An older record's words read as the enums.
        for (k, v) in value.as_map_mut().unwrap() {
            if k.as_text() == Some("held") {
                *v = ciborium::Value::Text("other_owner".into());
            }
        }
        let mut old = vec![];
        ciborium::into_writer(&value, &mut old).unwrap();
        let back: InboxRecord = from_record(&old).unwrap();
        assert_eq!(back.held, Some(HeldReason::OtherOwner));
        assert_eq!(back.kind, MessageKind::Ask);
    }

    fn tree(cache_bytes: u64, dir: &std::path::Path) -> (sled::Db, sled::Tree) {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .open()
            .unwrap();
        let tree = db.open_tree("t").unwrap();
        (db, tree)
    }

    /// `counted` yields what the iterator yields, in either direction, and
    /// skips a record removed after the iterator read its leaf.
    #[test]
    fn counted_reads_what_the_iterator_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, t) = tree(1 << 20, dir.path());
        for i in 0u32..500 {
            t.insert(i.to_be_bytes(), vec![i as u8; 40]).unwrap();
        }
        let plain: Vec<_> = t.iter().map(Result::unwrap).collect();
        let read: Vec<_> = counted(&t, t.iter()).map(Result::unwrap).collect();
        assert_eq!(read, plain);
        let back: Vec<_> = counted(&t, t.range(100u32.to_be_bytes()..))
            .rev()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back.len(), 400);
        assert_eq!(back[0].0.as_ref(), 499u32.to_be_bytes());
        assert_eq!(back[399].0.as_ref(), 100u32.to_be_bytes());
        // Removed while the scan is under way: the leaf already read
        // still holds it, `get` does not.
        let mut scan = counted(&t, t.iter());
        assert_eq!(scan.next().unwrap().unwrap().0.as_ref(), 0u32.to_be_bytes());
        t.remove(1u32.to_be_bytes()).unwrap();
        assert_eq!(scan.next().unwrap().unwrap().0.as_ref(), 2u32.to_be_bytes());
    }

    /// Set in the process [`a_full_scan_leaves_the_cache_bounded`] starts
    /// to measure in.
    const SCAN_CHILD: &str = "AGENTMESH_TEST_SCAN_CHILD";

    /// A full scan of a large tree leaves sled's cache near its capacity:
    /// the process grows by well under what the tree holds. A plain
    /// iterator grew it by about the whole tree (45 MB here), kept until
    /// the store closed.
    ///
    /// Resident memory is the process's: the scan runs in a process of
    /// its own (this test binary again, running this test alone), so no
    /// other test's memory counts, under `cargo test` as under nextest.
    #[test]
    fn a_full_scan_leaves_the_cache_bounded() {
        const RECORDS: u32 = 30_000;
        if std::env::var_os(SCAN_CHILD).is_none() {
            let name = "store::sled_codec::tests::a_full_scan_leaves_the_cache_bounded";
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads", "1"])
                .env(SCAN_CHILD, "1")
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the scan did not run: {said}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        {
            let (db, t) = tree(1 << 20, dir.path());
            let value = vec![7u8; 1500];
            for i in 0..RECORDS {
                t.insert(i.to_be_bytes(), value.as_slice()).unwrap();
            }
            db.flush().unwrap();
        }
        let (_db, t) = tree(1 << 20, dir.path());
        let before = rss_mib();
        let mut bytes = 0;
        for kv in counted(&t, t.iter()) {
            bytes += kv.unwrap().1.len();
        }
        let grown = rss_mib() - before;
        assert_eq!(bytes, RECORDS as usize * 1500);
        assert!(
            grown < 20.0,
            "a scan of {} MB grew the process by {grown:.1} MiB",
            bytes / 1_000_000
        );
    }

    fn rss_mib() -> f64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kib / 1024.0
    }
}
