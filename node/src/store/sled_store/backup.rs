//! The trees a backup carries (`agentmesh backup`, src/backup), and a
//! store made again from them.
//!
//! Every tree of the store is named here once, in [`SETTINGS`],
//! [`MAIL`] or [`LEFT_OUT`]; a test fails when a tree is in none, so a
//! new tree is never left out of backups by forgetting it.

use std::path::Path;

use super::{CONTACT_SEQ_KEY, DIRECTORY_SEQ_KEY, META, SledStore};
use crate::store::StoreError;
use crate::store::sled_codec::{by_until_key, counted, inbox_dedup};

/// What every backup carries: the team (its blocks, every member's
/// contact and directory record), this machine's settings (the `meta`
/// tree: its team, the relays adopted from a ticket, its record
/// numbers; the `consent` tree: folder bindings, trusted machines,
/// pause, profiles, wake settings, sessions), the peer table, and the
/// dedup windows (so a copy of a message delivered before the backup is
/// still recognised after it).
pub const SETTINGS: &[&str] = &[
    META,
    "blocks",
    "peers",
    "contacts",
    "directory",
    "consent",
    "seen",
    super::SEEN_BY_UNTIL,
];

/// What `--with-mail` adds: the inbox, the outbox, asks awaiting
/// replies, broadcasts not yet judged and their counts, what this
/// machine carries for others, and the audit log.
pub const MAIL: &[&str] = &[
    "audit",
    "outbox",
    "outbox_done",
    "outbox_done_ids",
    "inbox",
    "inbox_ids",
    "inbox_held",
    "inbox_read",
    super::UNREAD,
    "asks",
    "asks_by_expiry",
    "broadcasts",
    "broadcast_counts",
    "carried",
    "carried_bytes",
];

/// Never carried: open invitations (a restored machine makes new ones),
/// and sled's own default tree (empty).
#[cfg(test)]
const LEFT_OUT: &[&str] = &["tickets", "__sled__default"];

impl SledStore {
    /// Calls `each(tree, key, value)` for every entry of the trees a
    /// backup carries (with the mail trees if `with_mail`), tree by tree
    /// in the order above, stopping at the first error `each` gives.
    pub fn backup_entries<E: From<StoreError>>(
        &self,
        with_mail: bool,
        mut each: impl FnMut(&str, &[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mail: &[&str] = if with_mail { MAIL } else { &[] };
        // A message the inbox holds is its own dedup record. A backup
        // without the inbox carries one for it instead (retention forgets
        // those whose window is over). The inbox is read before the dedup
        // trees: a message forgotten meanwhile has its record there by
        // then (`delete_inbox` writes it first).
        let inbox_dedup = match with_mail {
            true => vec![],
            false => inbox_dedup(&self.inbox)?,
        };
        for name in SETTINGS.iter().chain(mail) {
            if *name == "seen" {
                for (key, until) in &inbox_dedup {
                    each(name, key, &until.to_be_bytes())?;
                }
            }
            if *name == super::SEEN_BY_UNTIL {
                for (key, until) in &inbox_dedup {
                    each(name, &by_until_key(key, *until), &[])?;
                }
            }
            let tree = self.db.open_tree(name).map_err(StoreError::from)?;
            for kv in counted(&tree, tree.iter()) {
                let (k, v) = kv.map_err(StoreError::from)?;
                each(name, &k, &v)?;
            }
        }
        Ok(())
    }

    /// The number this machine's next contact record will carry.
    pub fn peek_contact_seq(&self) -> Result<u64, StoreError> {
        Ok(self
            .meta
            .get(CONTACT_SEQ_KEY)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_ref()).ok())
            .map_or(0, u64::from_be_bytes)
            + 1)
    }
}

/// A store being made again from a backup's entries, in a directory of
/// its own; [`Restoring::finish`] flushes it and opens it as a store (which
/// migrates an older format and refuses a newer one).
#[derive(Debug)]
pub struct Restoring {
    db: sled::Db,
    tree: Option<(String, sled::Tree)>,
}

impl Restoring {
    /// A new, empty store in `dir`.
    pub fn create(dir: &Path) -> Result<Self, StoreError> {
        Ok(Restoring {
            // No background flusher: `finish` flushes, and a flusher
            // thread would hold the store's lock a moment after the last
            // handle is dropped.
            db: sled::Config::new().path(dir).flush_every_ms(None).open()?,
            tree: None,
        })
    }

    /// Whether a backup may name `tree` (one of the trees it carries).
    pub fn known(tree: &str) -> bool {
        SETTINGS.contains(&tree) || MAIL.contains(&tree)
    }

    /// Stores one entry of `tree`.
    pub fn put(&mut self, tree: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let t = match &self.tree {
            Some((name, t)) if name == tree => t,
            _ => {
                &self
                    .tree
                    .insert((tree.to_owned(), self.db.open_tree(tree)?))
                    .1
            }
        };
        t.insert(key, value)?;
        Ok(())
    }

    /// Numbers this machine's next contact and directory records above
    /// `at_least` and above the backup's own, so its team takes the
    /// restored machine's records over any the backed-up one made (a
    /// member keeps the record with the highest number); flushes, and
    /// opens the result as a store.
    pub fn finish(self, at_least: u64, dir: &Path) -> Result<SledStore, StoreError> {
        let meta = self.db.open_tree(META)?;
        // The inbox numbers on from its last message, whatever `meta`
        // says (a message is never numbered over another).
        if let Some((last, _)) = self.db.open_tree("inbox")?.last()?
            && let Ok(seq) = <[u8; 8]>::try_from(last.as_ref())
        {
            let last = u64::from_be_bytes(seq);
            meta.update_and_fetch(super::INBOX_SEQ_KEY, |old| {
                let n = old
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_be_bytes);
                Some(n.max(last).to_be_bytes().to_vec())
            })?;
        }
        for key in [CONTACT_SEQ_KEY, DIRECTORY_SEQ_KEY] {
            meta.update_and_fetch(key, |old| {
                let n = old
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_be_bytes);
                Some(n.saturating_add(1).max(at_least).to_be_bytes().to_vec())
            })?;
        }
        self.db.flush()?;
        drop(meta);
        drop(self.tree);
        drop(self.db);
        // sled's io threads may still hold the store's lock for a moment
        // after the last handle is gone: the lock is this process's own,
        // so wait for it (briefly) rather than fail the import.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match SledStore::open(dir, 1024 * 1024) {
                Err(StoreError::Locked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10)); // polling, with a deadline
                }
                opened => return opened,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tree a store opens is carried, carried with mail, or left
    /// out on purpose: a tree added to `SledStore::open` and not here
    /// fails this.
    #[test]
    fn every_tree_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let s = SledStore::open(dir.path(), 1024 * 1024).unwrap();
        let names: Vec<String> =
            s.db.tree_names()
                .iter()
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .collect();
        assert!(names.len() > 20, "{names:?}");
        for n in &names {
            assert!(
                Restoring::known(n) || LEFT_OUT.contains(&n.as_str()),
                "tree {n} is in no list of store/sled_store/backup.rs"
            );
        }
        for n in SETTINGS.iter().chain(MAIL) {
            assert!(names.contains(&(*n).to_owned()), "{n} is not a tree");
        }
    }

    #[test]
    fn a_backup_without_mail_carries_the_dedup_records_of_inbox_messages() {
        use crate::store::{MailStore, testing::inbox_record};
        let dir = tempfile::tempdir().unwrap();
        let from = SledStore::open(&dir.path().join("a"), 1024 * 1024).unwrap();
        let mut r = inbox_record(1, None, false, false);
        r.from_peer = agentmesh_protocol::Identity::generate(&mut rand::rng())
            .peer_id()
            .to_string();
        r.expires_at = 5_000;
        from.put_inbox(&[r.clone()], &[]).unwrap();
        let (key, until) = r
            .dedup_after(agentmesh_protocol::Timestamp::from_unix_millis(0))
            .unwrap();
        assert!(!from.seen(&key).unwrap(), "the inbox stands for it here");
        let mut to = Restoring::create(&dir.path().join("b")).unwrap();
        from.backup_entries::<StoreError>(false, |t, k, v| to.put(t, k, v))
            .unwrap();
        let restored = to.finish(0, &dir.path().join("b")).unwrap();
        assert!(restored.inbox_after(0, 10).unwrap().is_empty(), "no mail");
        assert!(restored.seen(&key).unwrap(), "but its dedup record");
        // With its place in the expiry index: retention forgets it.
        let after = agentmesh_protocol::Timestamp::from_unix_millis(until + 1);
        assert_eq!(restored.prune_seen(after).unwrap(), 1);
        assert!(!restored.seen(&key).unwrap());
    }

    #[test]
    fn restored_store_numbers_above_the_backup_and_keeps_entries() {
        use crate::store::TeamStore;
        let dir = tempfile::tempdir().unwrap();
        let from = SledStore::open(&dir.path().join("a"), 1024 * 1024).unwrap();
        for _ in 0..5 {
            from.next_contact_seq().unwrap();
        }
        from.put_relays(&["/ip4/127.0.0.1/tcp/1".into()]).unwrap();
        from.put_ticket(&[7; 16], agentmesh_protocol::Timestamp::from_unix_millis(9))
            .unwrap();
        let mut to = Restoring::create(&dir.path().join("b")).unwrap();
        let mut n = 0;
        from.backup_entries::<StoreError>(false, |t, k, v| {
            n += 1;
            to.put(t, k, v)
        })
        .unwrap();
        assert!(n >= 3, "format, contact seq and relays at least: {n}");
        let restored = to.finish(1_000, &dir.path().join("b")).unwrap();
        assert_eq!(restored.relays().unwrap(), vec!["/ip4/127.0.0.1/tcp/1"]);
        assert_eq!(restored.next_contact_seq().unwrap(), 1_001);
        assert!(restored.tickets.is_empty(), "open invitations stay out");
        // Above the backup's own number when that is the higher.
        let mut to = Restoring::create(&dir.path().join("c")).unwrap();
        from.backup_entries::<StoreError>(false, |t, k, v| to.put(t, k, v))
            .unwrap();
        let restored = to.finish(0, &dir.path().join("c")).unwrap();
        assert_eq!(restored.next_contact_seq().unwrap(), 7);
    }

    /// `finish` opens the store it just closed: sled's own threads
    /// letting go of its lock a moment late never fails a restore (CI
    /// once saw "in use by another process" here, from the import). A
    /// second handle, dropped 200 ms later by another thread, stands for
    /// them.
    #[test]
    fn a_restore_waits_for_the_stores_lock_to_be_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("r");
        let mut to = Restoring::create(&at).unwrap();
        to.put("relays", b"k", b"v").unwrap();
        let late = to.db.clone();
        let holder = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200)); // the late thread's hold
            drop(late);
        });
        let restored = to.finish(0, &at);
        holder.join().unwrap();
        assert!(restored.is_ok(), "{:?}", restored.err());
    }
}
