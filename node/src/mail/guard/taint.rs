//! Taint: a mark that a session has read text written by others, which
//! travels with everything it sends, so a stranger's words can't be
//! laundered through a trusted session into an action nobody approved.
//!
//! ```text
//!  agentmesh taint MAILBOX ── marked (its person: the session reads issues,
//!                             chat, web pages) ── until `taint MAILBOX --off`
//!  tainted mail into MAILBOX's inbox ── caught ── until its person speaks
//!                             (hop_reset: the UserPromptSubmit hook, `send`
//!                             typed at a terminal), or `taint MAILBOX --off`
//!  marked or caught ── its sends carry `taint`; `set_profile` refused;
//!                      what is injected into it is warned
//! ```
//!
//! Unlike a hop, a taint is kept in the store: a restart must not wash
//! it. The owner's mailbox (`@MACHINE`) catches taint like any other: an
//! agent session may serve it (`agentmesh mcp --mailbox @`), and what it
//! passes on must not come out clean. Its person is not hindered: what
//! they type at a terminal, or send from the web page, is their speaking,
//! which clears what it caught first.

use std::collections::BTreeMap;

use agentmesh_protocol::Timestamp;

use crate::api::ApiError;
use crate::codes::ErrorCode;
use crate::store::{Caught, Store, StoreError, TaintRecord};

/// The tainted mailboxes (at most one record per mailbox this machine
/// has: mailboxes are bounded by folder consent; the owner's is `@`).
#[derive(Debug, Default)]
pub(in crate::mail) struct Taints {
    records: BTreeMap<String, TaintRecord>,
}

/// What a change of taint did, for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::mail) enum Change {
    /// Nothing changed.
    None,
    /// The mailbox is tainted now and was not before.
    Tainted,
    /// The mailbox was tainted and is clean now.
    Cleared,
}

/// The record key of `mailbox`: its name, or `@` for the owner's (a
/// name no folder's mailbox can have).
fn key(mailbox: Option<&str>) -> &str {
    mailbox.unwrap_or("@")
}

impl Taints {
    /// The stored taints.
    pub(in crate::mail) fn load(store: &dyn Store) -> Result<Taints, StoreError> {
        Ok(Taints {
            records: store
                .taints()?
                .into_iter()
                .map(|r| (r.mailbox.clone(), r))
                .collect(),
        })
    }

    /// Whether what `mailbox` sends carries taint.
    pub(in crate::mail) fn is_tainted(&self, mailbox: Option<&str>) -> bool {
        self.record(mailbox)
            .is_some_and(|r| r.marked || r.caught.is_some())
    }

    /// `mailbox`'s record, if it has one.
    pub(in crate::mail) fn record(&self, mailbox: Option<&str>) -> Option<&TaintRecord> {
        self.records.get(key(mailbox))
    }

    /// `mailbox` received tainted mail `id` from `from` at `now`: caught,
    /// durably, unless it already was.
    pub(in crate::mail) fn caught(
        &mut self,
        store: &dyn Store,
        mailbox: Option<&str>,
        from: &str,
        id: &str,
        now: Timestamp,
    ) -> Result<Change, StoreError> {
        let m = key(mailbox);
        let was = self.is_tainted(mailbox);
        let mut r = self.records.get(m).cloned().unwrap_or_else(|| clean(m));
        if r.caught.is_some() {
            return Ok(Change::None);
        }
        r.caught = Some(Caught {
            at: now.as_unix_millis(),
            from: from.to_owned(),
            id: id.to_owned(),
        });
        self.put(store, r)?;
        Ok(if was { Change::None } else { Change::Tainted })
    }

    /// `mailbox`'s person spoke: what it caught is gone (its person's mark
    /// stays).
    pub(in crate::mail) fn person_spoke(
        &mut self,
        store: &dyn Store,
        mailbox: Option<&str>,
    ) -> Result<Change, StoreError> {
        let Some(r) = self.record(mailbox).cloned() else {
            return Ok(Change::None);
        };
        if r.caught.is_none() {
            return Ok(Change::None);
        }
        let r = TaintRecord { caught: None, ..r };
        let now_clean = !r.marked;
        self.put(store, r)?;
        Ok(if now_clean {
            Change::Cleared
        } else {
            Change::None
        })
    }

    /// A person marks `mailbox` tainted (`on`), or clears it whole: its
    /// mark and what it caught.
    pub(in crate::mail) fn mark(
        &mut self,
        store: &dyn Store,
        mailbox: Option<&str>,
        on: bool,
    ) -> Result<Change, ApiError> {
        let m = key(mailbox);
        let was = self.is_tainted(mailbox);
        let r = if on {
            TaintRecord {
                marked: true,
                ..self.records.get(m).cloned().unwrap_or_else(|| clean(m))
            }
        } else {
            clean(m)
        };
        self.put(store, r)?;
        Ok(match (was, on) {
            (false, true) => Change::Tainted,
            (true, false) => Change::Cleared,
            _ => Change::None,
        })
    }

    fn put(&mut self, store: &dyn Store, r: TaintRecord) -> Result<(), StoreError> {
        store.put_taint(&r)?;
        if r.marked || r.caught.is_some() {
            self.records.insert(r.mailbox.clone(), r);
        } else {
            self.records.remove(&r.mailbox);
        }
        Ok(())
    }
}

fn clean(mailbox: &str) -> TaintRecord {
    TaintRecord {
        mailbox: mailbox.to_owned(),
        marked: false,
        caught: None,
    }
}

/// The refusal of `set_profile` from a tainted mailbox.
pub(in crate::mail) fn profile_refused(mailbox: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Tainted,
        format!(
            "not changed: profiles reach other sessions; a session that read untrusted text can't change its own. {mailbox} is tainted (it received mail from a session that read text others wrote, or its person marked it); its person's next prompt clears what it received, and `agentmesh taint {mailbox} --off` at a terminal clears it whole"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BusStore, SledStore};

    #[test]
    fn caught_until_the_person_speaks_marked_until_cleared_and_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1024 * 1024).unwrap();
        let now = Timestamp::from_unix_millis(1_800_000_000_000);
        let mut t = Taints::load(&store).unwrap();
        assert!(!t.is_tainted(Some("a")));
        assert_eq!(
            t.caught(&store, Some("a"), "x@m", "id1", now).unwrap(),
            Change::Tainted
        );
        // A second tainted message changes nothing; the first is named.
        assert_eq!(
            t.caught(&store, Some("a"), "y@m", "id2", now).unwrap(),
            Change::None
        );
        assert_eq!(
            t.record(Some("a")).unwrap().caught.as_ref().unwrap().id,
            "id1"
        );
        // The owner's mailbox catches it too (an agent may serve it),
        // and its person speaking clears it.
        assert_eq!(
            t.caught(&store, None, "x@m", "id3", now).unwrap(),
            Change::Tainted
        );
        assert!(t.is_tainted(None));
        assert!(Taints::load(&store).unwrap().is_tainted(None));
        assert_eq!(t.person_spoke(&store, None).unwrap(), Change::Cleared);
        assert!(!t.is_tainted(None));
        assert_eq!(t.mark(&store, None, true).unwrap(), Change::Tainted);
        assert_eq!(t.mark(&store, None, false).unwrap(), Change::Cleared);
        // Kept across a restart.
        let mut t = Taints::load(&store).unwrap();
        assert!(t.is_tainted(Some("a")));
        assert_eq!(t.person_spoke(&store, Some("a")).unwrap(), Change::Cleared);
        assert!(!t.is_tainted(Some("a")));
        // A mark outlives the person speaking; --off clears it whole.
        assert_eq!(t.mark(&store, Some("b"), true).unwrap(), Change::Tainted);
        t.caught(&store, Some("b"), "x@m", "id4", now).unwrap();
        assert_eq!(t.person_spoke(&store, Some("b")).unwrap(), Change::None);
        assert!(t.is_tainted(Some("b")));
        assert!(Taints::load(&store).unwrap().is_tainted(Some("b")));
        assert_eq!(t.mark(&store, Some("b"), false).unwrap(), Change::Cleared);
        assert!(!Taints::load(&store).unwrap().is_tainted(Some("b")));
        assert!(store.taints().unwrap().is_empty());
    }
}
