//! This machine's mailboxes as the directory shows them: each one's
//! profile, goal and preset (stored), and its status (who is attached,
//! and when a hook or tool call was last seen). Owned by the mail actor,
//! which sees every attach and request; what it publishes
//! ([`LocalDirectory`]) the team signs into this machine's directory
//! record ([`crate::team::records`]).
//!
//! ```text
//!  server ── Presence (a session attached / detached) ──┐
//!  every request of an agent's client ── active ────────┤── Profiles ── watch<LocalDirectory> ──> team
//!  profile set / set_profile ── set (bounds, store) ────┘
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use agentmesh_protocol::Timestamp;
use agentmesh_protocol::directory::{MAX_DIRECTORY_MAILBOXES, MAX_GOAL_BYTES, MAX_PROFILE_BYTES};
use tokio::sync::watch;

use crate::api::{self, ApiError};
use crate::api::{Preset, SessionStatus as Status};
use crate::codes::ErrorCode;
use crate::store::{ProfileRecord, Store, StoreError};
use crate::team::records::{LocalDirectory, LocalMailbox};

/// How long after a hook or tool call a mailbox with a session attached
/// counts as `working`.
pub(in crate::mail) const WORKING_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// A session attaching to or leaving a mailbox (`None`: the owner's).
#[derive(Debug, Clone)]
pub struct Presence {
    /// The mailbox.
    pub mailbox: Option<String>,
    /// Attached (true) or gone (false).
    pub attached: bool,
}

/// What `profile_set` changes: each field given replaces its value.
#[derive(Debug, Default)]
pub(in crate::mail) struct Text {
    /// The profile.
    pub profile: Option<String>,
    /// The goal.
    pub goal: Option<String>,
    /// The preset.
    pub preset: Option<Preset>,
}

/// The profiles, and who is attached where.
#[derive(Debug)]
pub struct Profiles {
    records: BTreeMap<String, ProfileRecord>,
    attached: HashMap<String, usize>,
    last_active: HashMap<String, Timestamp>,
    default_preset: Preset,
    tx: watch::Sender<Arc<LocalDirectory>>,
}

/// The key of a mailbox: its name, or empty for the owner's.
fn key(mailbox: Option<&str>) -> String {
    mailbox.unwrap_or_default().to_owned()
}

impl Profiles {
    /// The stored profiles; publishes on `tx`.
    pub fn load(
        store: &dyn Store,
        default_preset: Preset,
        tx: watch::Sender<Arc<LocalDirectory>>,
    ) -> Result<Profiles, StoreError> {
        let records = store
            .profiles()?
            .into_iter()
            .map(|r| (r.mailbox.clone(), r))
            .collect();
        Ok(Profiles {
            records,
            attached: HashMap::new(),
            last_active: HashMap::new(),
            default_preset,
            tx,
        })
    }

    /// A session attached to, or left, a mailbox.
    pub fn presence(&mut self, p: &Presence) {
        let k = key(p.mailbox.as_deref());
        let n = self.attached.entry(k.clone()).or_default();
        if p.attached {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.attached.remove(&k);
            }
        }
    }

    /// Whether a session's MCP server is attached to `mailbox`.
    pub fn attached(&self, mailbox: Option<&str>) -> bool {
        self.attached.contains_key(&key(mailbox))
    }

    /// A hook or tool call of a session of `mailbox` was seen at `now`.
    pub fn active(&mut self, mailbox: Option<&str>, now: Timestamp) {
        self.last_active.insert(key(mailbox), now);
    }

    /// What `mailbox`'s session is doing at `now`.
    pub fn status(&self, mailbox: Option<&str>, now: Timestamp) -> Status {
        let k = key(mailbox);
        if !self.attached.contains_key(&k) {
            return Status::Offline;
        }
        let recent = self.last_active.get(&k).is_some_and(|t| {
            now.as_unix_millis().saturating_sub(t.as_unix_millis()) < WORKING_FOR.as_millis() as u64
        });
        if recent {
            Status::Working
        } else {
            Status::Idle
        }
    }

    /// Sets what is given of `mailbox`'s profile, goal and preset, durably;
    /// a text over its bound is refused, saying its size and the bound.
    pub fn set(
        &mut self,
        store: &dyn Store,
        mailbox: Option<&str>,
        profile: Option<String>,
        goal: Option<String>,
        preset: Option<Preset>,
    ) -> Result<(), ApiError> {
        for (what, text, max) in [
            ("profile", &profile, MAX_PROFILE_BYTES),
            ("goal", &goal, MAX_GOAL_BYTES),
        ] {
            if let Some(t) = text
                && t.len() > max
            {
                return api::err(
                    ErrorCode::TooLarge,
                    format!(
                        "the {what} is {} bytes, over the limit of {max} bytes; shorten it (the directory carries every mailbox's {what} to every member)",
                        t.len()
                    ),
                );
            }
        }
        let k = key(mailbox);
        let mut record = self.records.get(&k).cloned().unwrap_or(ProfileRecord {
            mailbox: k.clone(),
            ..ProfileRecord::default()
        });
        if let Some(p) = profile {
            record.profile = p.trim().to_owned();
        }
        if let Some(g) = goal {
            record.goal = g.trim().to_owned();
        }
        if preset.is_some() {
            record.preset = preset;
        }
        store.put_profile(&record)?;
        self.records.insert(k, record);
        Ok(())
    }

    /// The preset `mailbox`'s broadcasts are judged with, and whether it
    /// is the machine's default.
    pub fn preset(&self, mailbox: Option<&str>) -> (Preset, bool) {
        match self.records.get(&key(mailbox)).and_then(|r| r.preset) {
            Some(p) => (p, false),
            None => (self.default_preset, true),
        }
    }

    /// `mailbox`'s view, addressed on `machine`.
    pub fn view(&self, mailbox: Option<&str>, machine: &str, now: Timestamp) -> api::ProfileView {
        let record = self.records.get(&key(mailbox));
        let (preset, preset_is_default) = self.preset(mailbox);
        api::ProfileView {
            address: crate::mail::address(mailbox, machine),
            mailbox: mailbox.map(str::to_owned),
            profile: record.map(|r| r.profile.clone()).unwrap_or_default(),
            goal: record.map(|r| r.goal.clone()).unwrap_or_default(),
            status: self.status(mailbox, now),
            last_active: self
                .last_active
                .get(&key(mailbox))
                .map(|t| api::rfc3339(*t)),
            preset,
            preset_is_default,
            notes: record
                .map(|r| {
                    r.notes
                        .iter()
                        .map(|n| api::NoteView {
                            at: api::rfc3339(Timestamp::from_unix_millis(n.at)),
                            id: n.id.clone(),
                            note: n.note.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            wake: None,
        }
    }

    /// Publishes this machine's mailboxes (the owner's, then `names`, the
    /// opted-in ones) as of `now`, if anything changed.
    pub fn publish<'a>(&self, names: impl Iterator<Item = &'a str>, now: Timestamp) {
        let mut names: Vec<&str> = names.collect();
        names.sort_unstable();
        names.dedup();
        let entry = |m: Option<&str>| {
            let record = self.records.get(&key(m));
            LocalMailbox {
                mailbox: m.map(str::to_owned),
                profile: record.map(|r| r.profile.clone()).unwrap_or_default(),
                goal: record.map(|r| r.goal.clone()).unwrap_or_default(),
                status: self.status(m, now),
                last_active: self.last_active.get(&key(m)).copied(),
            }
        };
        let mailboxes: Vec<LocalMailbox> = std::iter::once(None)
            .chain(names.into_iter().map(Some))
            .take(MAX_DIRECTORY_MAILBOXES)
            .map(entry)
            .collect();
        let next = LocalDirectory { mailboxes };
        self.tx.send_if_modified(|old| {
            if **old == next {
                return false;
            }
            *old = Arc::new(next);
            true
        });
    }
}

impl Profiles {
    /// What the judge reads of `mailbox` at `now`.
    pub(in crate::mail) fn for_judge(&self, mailbox: Option<&str>, now: Timestamp) -> ForJudge {
        let record = self.records.get(&key(mailbox));
        ForJudge {
            profile: record.map(|r| r.profile.clone()).unwrap_or_default(),
            goal: record.map(|r| r.goal.clone()).unwrap_or_default(),
            status: self.status(mailbox, now),
            notes: record
                .map(|r| {
                    r.notes
                        .iter()
                        .map(|n| note_for_judge(&n.note, &n.broadcast))
                        .collect()
                })
                .unwrap_or_default(),
            preset: self.preset(mailbox).0,
        }
    }

    /// Keeps a `not_for_me` note of `mailbox`'s (the last
    /// [`crate::api::MAX_NOTES`]), durably; how many it has now.
    pub(in crate::mail) fn add_note(
        &mut self,
        store: &dyn Store,
        mailbox: Option<&str>,
        note: crate::store::NoteRecord,
    ) -> Result<usize, ApiError> {
        let k = key(mailbox);
        let mut record = self.records.get(&k).cloned().unwrap_or(ProfileRecord {
            mailbox: k.clone(),
            ..ProfileRecord::default()
        });
        record.notes.push(note);
        let extra = record.notes.len().saturating_sub(api::MAX_NOTES);
        record.notes.drain(..extra);
        store.put_profile(&record)?;
        let n = record.notes.len();
        self.records.insert(k, record);
        Ok(n)
    }

    /// `profile_set`: checks the mailbox exists, sets what `text` gives,
    /// audits it (sizes, never the text); the mailbox's view.
    pub(in crate::mail) fn set_op(
        &mut self,
        who: &api::Who,
        mailbox: Option<&str>,
        text: Text,
        consent: &crate::mail::consent::Consent,
        ctx: &mut crate::mail::Ctx<'_>,
    ) -> Result<api::ProfileView, ApiError> {
        if let Some(m) = mailbox {
            crate::mail::consent::mailboxes::existing(m, consent)?;
        }
        let Text {
            profile,
            goal,
            preset,
        } = text;
        let mut sizes = String::new();
        if let Some(p) = &profile {
            sizes.push_str(&format!("profile {} bytes; ", p.len()));
        }
        if let Some(g) = &goal {
            sizes.push_str(&format!("goal {} bytes; ", g.len()));
        }
        if let Some(p) = preset {
            sizes.push_str(&format!("preset {p}; "));
        }
        self.set(ctx.store, mailbox, profile, goal, preset)?;
        ctx.log.record(
            crate::audit::AuditEvent::Profile,
            ctx.now.wall,
            crate::store::AuditEntry {
                recipient: Some(crate::mail::address(mailbox, &ctx.dir.my_name)),
                detail: format!("{sizes}set by {}", crate::mail::who_label(who)),
                ..Default::default()
            },
        );
        Ok(self.view(mailbox, &ctx.dir.my_name, ctx.now.wall))
    }

    /// `profile_show`: `mailbox`'s view, or (none given) every mailbox of
    /// this machine's, the owner's first.
    pub(in crate::mail) fn show_op(
        &self,
        mailbox: Option<String>,
        consent: &crate::mail::consent::Consent,
        ctx: &crate::mail::Ctx<'_>,
    ) -> Result<api::ProfilesView, ApiError> {
        let machine = &ctx.dir.my_name;
        let mailboxes = match mailbox {
            Some(m) => {
                crate::mail::consent::mailboxes::existing(&m, consent)?;
                let m = (m != "@").then_some(m);
                vec![self.view(m.as_deref(), machine, ctx.now.wall)]
            }
            None => {
                let mut names: Vec<&str> = consent
                    .bindings()
                    .filter(|b| b.allowed)
                    .map(|b| b.mailbox.as_str())
                    .collect();
                names.sort_unstable();
                std::iter::once(None)
                    .chain(names.into_iter().map(Some))
                    .map(|m| self.view(m, machine, ctx.now.wall))
                    .collect()
            }
        };
        Ok(api::ProfilesView { mailboxes })
    }
}

/// What the judge reads of a mailbox.
#[derive(Debug)]
pub(in crate::mail) struct ForJudge {
    pub profile: String,
    pub goal: String,
    pub status: Status,
    /// Each note with the text of the broadcast it was said of.
    pub notes: Vec<String>,
    pub preset: Preset,
}

/// A note as the judge reads it: what the session said, and the start of
/// the broadcast it said it of (cut to [`crate::api::MAX_NOTED_TEXT`] when kept).
pub(in crate::mail) fn note_for_judge(note: &str, broadcast: &str) -> String {
    format!("{note}\n{broadcast}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn t(secs: u64) -> Timestamp {
        Timestamp::from_unix_millis(secs * 1000)
    }

    #[test]
    fn status_follows_attach_and_activity() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::SledStore::open(dir.path(), 1 << 20).unwrap();
        let (tx, rx) = watch::channel(Arc::new(LocalDirectory::default()));
        let mut p = Profiles::load(&store, Preset::Balanced, tx).unwrap();
        let api = Some("api");
        assert_eq!(p.status(api, t(10)), Status::Offline);
        p.presence(&Presence {
            mailbox: api.map(Into::into),
            attached: true,
        });
        assert_eq!(p.status(api, t(10)), Status::Idle);
        p.active(api, t(10));
        assert_eq!(p.status(api, t(129)), Status::Working);
        assert_eq!(p.status(api, t(130)), Status::Idle);
        p.presence(&Presence {
            mailbox: api.map(Into::into),
            attached: false,
        });
        assert_eq!(p.status(api, t(11)), Status::Offline);
        p.set(
            &store,
            api,
            Some(" rust ".into()),
            None,
            Some(Preset::Strict),
        )
        .unwrap();
        p.publish(["api"].into_iter(), t(11));
        let d = rx.borrow().clone();
        assert_eq!(d.mailboxes.len(), 2);
        assert_eq!(d.mailboxes[0].mailbox, None);
        assert_eq!(d.mailboxes[1].profile, "rust");
        assert_eq!(p.preset(api), (Preset::Strict, false));
        assert_eq!(p.preset(None), (Preset::Balanced, true));
        let e = p
            .set(&store, api, None, Some("g".repeat(257)), None)
            .unwrap_err();
        assert!(
            e.message.contains("257 bytes, over the limit of 256"),
            "{e}"
        );
        // Kept across a restart.
        let (tx, _rx) = watch::channel(Arc::new(LocalDirectory::default()));
        let p = Profiles::load(&store, Preset::Loose, tx).unwrap();
        assert_eq!(p.view(api, "m", t(1)).profile, "rust");
    }
}
