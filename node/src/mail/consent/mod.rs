//! Consent: which folders receive (as mailboxes), which machines' mail is
//! not held, whether inbound mail is paused, and the mail held for
//! approval.
//!
//! ```text
//!  allow / deny / trust / pause ── store (durable) ── audited decision
//!  inbox verdict ── decide ── deliver / hold (paused, other_owner) / refuse
//!  resume ── decide again for what pause held ── release / stay held
//!  approve ── release          reject ── delete
//! ```
//!
//! [`Consent::decide`] is the one rule, at receive and at resume: a
//! mailbox must exist and be opted in; mail from a machine another person
//! owns is held unless that machine is trusted (so held as `other_owner`
//! even while paused: that hold outlasts the pause); a pause holds the
//! rest.
//! A sender the directory does not know is not another person's: it
//! cannot be told apart from a member admitted a moment ago, and the
//! network already checked that it is one. (Before this rule was one
//! function, `resume` counted such a sender as another owner's and kept
//! its mail held; it now releases it, as receiving would have delivered
//! it.)
//!
//! Releasing held mail is one path, [`Consent::release`], audited
//! `approved` when a person approves it and `released` when `resume` does.

pub(in crate::mail) mod mailboxes;
pub(in crate::mail) mod serve;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use agentmesh_protocol::PeerId;

use crate::api::{ApiError, Event, PausedView, Who, err};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::mail::address::mailbox_name;
use crate::mail::ctx::{Ctx, MAX_REMOTE_REASON, Seqs, peer_of, who_label};
use crate::mail::post::pages::view;
use crate::store::{AuditEntry, FolderBinding, InboxRecord, MailStore, StoreError};
use crate::team::Directory;

/// Messages held for approval from one machine, at most. Beyond it, its
/// mail is refused with a reason it sees, so an unvetted sender cannot fill
/// the disk.
pub const MAX_HELD_PER_SENDER: usize = 100;

pub use crate::api::HeldReason;

/// What consent says of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::mail) enum Decision {
    /// Into the inbox.
    Deliver,
    /// Held for approval.
    Hold(HeldReason),
    /// Its mailbox does not exist.
    NoMailbox(String),
    /// Its mailbox's folder is not opted in.
    FolderDenied(String),
}

/// Why a message cannot be held now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum NoRoom {
    /// The sender's held mail is at its cap, and a pause holds it: the
    /// sender keeps it and tries again after the pause.
    Wait,
    /// The sender's held mail is at its cap: refused.
    Full,
}

/// How a held message comes to be delivered.
#[derive(Debug, Clone, Copy)]
pub(in crate::mail) enum Release<'a> {
    /// A person (or agent) approved it.
    Approved(&'a Who),
    /// `resume` delivered what pause held.
    Resumed(&'a Who),
}

/// Consent's state, loaded from the store and written through on change.
#[derive(Debug, Default)]
pub(in crate::mail) struct Consent {
    /// Folder bindings, by mailbox.
    folders: HashMap<String, FolderBinding>,
    /// Machines whose mail is not held.
    trusted: HashSet<PeerId>,
    paused: bool,
    /// Messages held, per sending machine.
    held_from: HashMap<PeerId, usize>,
    /// Messages held, per receiving mailbox (`None`: the owner's): every
    /// agent's tool result shows its own.
    held_in: HashMap<Option<String>, usize>,
}

impl Consent {
    /// What the store keeps, and the held mail counted.
    pub(in crate::mail) fn load(store: &dyn MailStore) -> Result<Consent, StoreError> {
        let mut held_from: HashMap<PeerId, usize> = HashMap::new();
        let mut held_in: HashMap<Option<String>, usize> = HashMap::new();
        // Held mail is capped per sender: reading it once at start is bounded.
        for r in held_records(store)? {
            if let Some(peer) = peer_of(&r.from_peer) {
                *held_from.entry(peer).or_default() += 1;
            }
            *held_in.entry(r.mailbox.clone()).or_default() += 1;
        }
        Ok(Consent {
            folders: store
                .folders()?
                .into_iter()
                .map(|f| (f.mailbox.clone(), f))
                .collect(),
            // A record that does not parse names no machine that can send.
            trusted: store.trusted()?.iter().filter_map(|p| peer_of(p)).collect(),
            paused: store.paused()?,
            held_from,
            held_in,
        })
    }

    /// Whether inbound mail is paused.
    pub(in crate::mail) fn paused(&self) -> bool {
        self.paused
    }

    /// Messages held, from every machine.
    pub(in crate::mail) fn held_total(&self) -> usize {
        self.held_from.values().sum()
    }

    /// The one consent rule (see the module docs): what becomes of a
    /// message from `from` to `mailbox` (`None`: the owner's).
    pub(in crate::mail) fn decide(
        &self,
        from: PeerId,
        mailbox: Option<&str>,
        dir: &Directory,
    ) -> Decision {
        if let Some(m) = mailbox {
            match self.folders.get(m) {
                None => return Decision::NoMailbox(m.to_owned()),
                Some(b) if !b.allowed => return Decision::FolderDenied(m.to_owned()),
                Some(_) => {}
            }
        }
        let other_owner = dir
            .machines
            .get(&from)
            .is_some_and(|m| m.owner != dir.my_owner);
        // Held for another person's machine before held for a pause: that
        // hold outlasts the pause, so it is decided (and audited) once,
        // here, and `resume` has nothing to decide about it again.
        if other_owner && !self.trusted.contains(&from) {
            Decision::Hold(HeldReason::OtherOwner)
        } else if self.paused {
            Decision::Hold(HeldReason::Paused)
        } else {
            Decision::Deliver
        }
    }

    /// Whether one more message from `from`, held for `why`, fits beside
    /// what is held already and `also` held in the batch being decided.
    pub(in crate::mail) fn room_to_hold(
        &self,
        from: PeerId,
        why: HeldReason,
        also: usize,
    ) -> Result<(), NoRoom> {
        let held = self.held_from.get(&from).copied().unwrap_or(0) + also;
        match (held >= MAX_HELD_PER_SENDER, why) {
            (false, _) => Ok(()),
            (true, HeldReason::Paused) => Err(NoRoom::Wait),
            (true, _) => Err(NoRoom::Full),
        }
    }

    /// A message from `from` to `mailbox` is held (stored).
    pub(in crate::mail) fn count_held(&mut self, from: PeerId, mailbox: Option<&str>) {
        *self.held_from.entry(from).or_default() += 1;
        *self.held_in.entry(mailbox.map(str::to_owned)).or_default() += 1;
    }

    /// The held message `r` is held no more.
    pub(in crate::mail) fn uncount(&mut self, r: &InboxRecord) {
        if let Some(n) = peer_of(&r.from_peer).and_then(|p| self.held_from.get_mut(&p)) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = self.held_in.get_mut(&r.mailbox) {
            *n = n.saturating_sub(1);
        }
    }

    /// Messages held for `mailbox` (`None`: the owner's).
    pub(in crate::mail) fn held_in(&self, mailbox: Option<&str>) -> usize {
        self.held_in
            .get(&mailbox.map(str::to_owned))
            .copied()
            .unwrap_or(0)
    }

    /// Why a message `pause` held stays held once delivery resumed, by
    /// the rule it would have met without the pause.
    pub(in crate::mail) fn still_held(
        &self,
        r: &InboxRecord,
        dir: &Directory,
    ) -> Option<HeldReason> {
        let Some(from) = peer_of(&r.from_peer) else {
            // A damaged record names nobody to trust: it stays held.
            return Some(HeldReason::OtherOwner);
        };
        // Its key is no longer a member: its mail is not to be delivered
        // as anyone's now (the same rule as `approve`).
        if dir
            .machines
            .get(&from)
            .is_some_and(|m| m.standing == agentmesh_protocol::team::Standing::Revoked)
        {
            return Some(HeldReason::SenderRevoked);
        }
        match self.decide(from, r.mailbox.as_deref(), dir) {
            Decision::Deliver => None,
            Decision::Hold(why) => Some(why),
            Decision::NoMailbox(_) | Decision::FolderDenied(_) => {
                Some(HeldReason::FolderNotAllowed)
            }
        }
    }

    /// Delivers the held message `record`: it takes its place at the end of
    /// the inbox. The events that announce it.
    pub(in crate::mail) fn release(
        &mut self,
        record: InboxRecord,
        how: Release<'_>,
        seqs: &mut Seqs,
        ctx: &mut Ctx<'_>,
    ) -> Result<Vec<Event>, StoreError> {
        let old_seq = record.seq;
        let r = InboxRecord {
            held: None,
            seq: seqs.take(),
            ..record
        };
        ctx.store.move_inbox(old_seq, &r)?;
        self.uncount(&r);
        let (event, detail) = match how {
            Release::Approved(who) => (
                AuditEvent::Approved,
                format!("held message approved by {}", who_label(who)),
            ),
            Release::Resumed(who) => (
                AuditEvent::Released,
                format!(
                    "held by pause, delivered to the inbox by resume (by {})",
                    who_label(who)
                ),
            ),
        };
        ctx.log.record(event, ctx.now.wall, held_entry(&r, detail));
        Ok(vec![
            Event::Message { message: view(&r) },
            Event::Resolved {
                id: r.id.clone(),
                outcome: crate::api::HeldOutcome::Approved,
            },
        ])
    }

    /// Deletes the held message `record`, rejected by `who` for `reason`
    /// (empty: none given).
    pub(in crate::mail) fn reject(
        &mut self,
        record: &InboxRecord,
        who: &Who,
        reason: &str,
        ctx: &mut Ctx<'_>,
    ) -> Result<Vec<Event>, StoreError> {
        ctx.store.delete_inbox(&[record.seq], ctx.now.wall)?;
        self.uncount(record);
        let by = format!("held message rejected by {}", who_label(who));
        let detail = match reason.trim() {
            "" => by,
            r => format!(
                "{by}: {}",
                r.chars().take(MAX_REMOTE_REASON).collect::<String>()
            ),
        };
        ctx.log.record(
            AuditEvent::Rejected,
            ctx.now.wall,
            held_entry(record, detail),
        );
        Ok(vec![Event::Resolved {
            id: record.id.clone(),
            outcome: crate::api::HeldOutcome::Rejected,
        }])
    }

    /// The binding of `mailbox`, if a folder is bound to it.
    pub(in crate::mail) fn binding(&self, mailbox: &str) -> Option<&FolderBinding> {
        self.folders.get(mailbox)
    }

    /// Every mailbox a folder is bound to (opted in or out).
    pub(in crate::mail) fn bindings(&self) -> impl Iterator<Item = &FolderBinding> {
        self.folders.values()
    }

    /// `mailbox_for PATH`: the mailbox bound to the folder or its nearest
    /// bound ancestor, else the folder's base name (how the MCP server and
    /// the hooks find their mailbox). A base name that is another folder's
    /// mailbox, or that folds to nothing (`/`, a name of symbols), is no
    /// mailbox: a second clone named `api` must not read the real `api`'s
    /// mail, and unrelated folders must not share one.
    pub(in crate::mail) fn mailbox_for(
        &self,
        path: &str,
    ) -> Result<crate::api::MailboxFor, ApiError> {
        let given = std::path::Path::new(path);
        let path = std::fs::canonicalize(given)
            .or_else(|_| std::path::absolute(given))
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::BadPath,
                    format!("{path}: {e}; give a folder's path"),
                )
            })?;
        let bound = path.ancestors().find_map(|a| {
            let text = a.display().to_string();
            self.folders.values().find(|b| b.path == text)
        });
        if let Some(b) = bound {
            return Ok(crate::api::MailboxFor {
                mailbox: Some(b.mailbox.clone()),
                bound_path: Some(b.path.clone()),
                receives: b.allowed,
                not_set_up: None,
            });
        }
        let shown = path.display();
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let not_set_up = match crate::config::try_fold_name(&base) {
            // Not this folder's nor an ancestor's (those were found above).
            Some(name) => match self.folders.get(name.as_str()) {
                // A mailbox `deny` left without a folder: this one may
                // take it.
                Some(other) if other.path.is_empty() => format!(
                    "{shown} is not set up for agentmesh: its name, {name}, is a mailbox with no folder now; a person gives it this one with `agentmesh allow {shown}`, or this folder its own with `agentmesh allow {shown} --mailbox NAME`"
                ),
                Some(other) => format!(
                    "{shown} is not set up for agentmesh: its name, {name}, is the mailbox of another folder ({}); a person gives this one its own with `agentmesh allow {shown} --mailbox NAME`",
                    other.path
                ),
                None => {
                    return Ok(crate::api::MailboxFor {
                        mailbox: Some(name.to_string()),
                        bound_path: None,
                        receives: false,
                        not_set_up: None,
                    });
                }
            },
            None => format!(
                "{shown} is not set up for agentmesh: its name gives no mailbox name; a person gives it one with `agentmesh allow {shown} --mailbox NAME`"
            ),
        };
        Ok(crate::api::MailboxFor {
            mailbox: None,
            bound_path: None,
            receives: false,
            not_set_up: Some(not_set_up),
        })
    }

    // ----- the API --------------------------------------------------------

    /// `mailboxes`: every binding, by name.
    pub(in crate::mail) fn mailboxes(&self) -> Result<Vec<crate::api::BindingView>, ApiError> {
        let mut rows: Vec<&FolderBinding> = self.folders.values().collect();
        rows.sort_by(|a, b| a.mailbox.cmp(&b.mailbox));
        Ok(rows.iter().map(|b| binding_json(b)).collect::<Vec<_>>())
    }

    /// `trust MACHINE`: its mail is no longer held.
    pub(in crate::mail) fn trust(
        &mut self,
        who: &Who,
        machine: &str,
        on: bool,
        ctx: &mut Ctx<'_>,
    ) -> Result<crate::api::TrustedView, ApiError> {
        let Some((peer, _)) = ctx.dir.current(machine) else {
            return err(
                ErrorCode::UnknownMachine,
                format!("no current member is named {machine}"),
            );
        };
        if on {
            ctx.store.put_trusted(&peer.to_string())?;
            self.trusted.insert(peer);
            let detail = format!("mail from {machine} is no longer held");
            decided(who, AuditEvent::Trust, Some(peer.to_string()), detail, ctx);
        } else {
            ctx.store.remove_trusted(&peer.to_string())?;
            self.trusted.remove(&peer);
            let detail = format!("mail from {machine} is held again (what was delivered stays)");
            decided(
                who,
                AuditEvent::Untrust,
                Some(peer.to_string()),
                detail,
                ctx,
            );
        }
        Ok(crate::api::TrustedView {
            trusted: machine.to_owned(),
            peer_id: peer.to_string(),
            trusting: on,
            held: 0,
            approved: 0,
        })
    }

    /// Messages held from `peer`.
    pub(in crate::mail) fn held_from_peer(&self, peer: &PeerId) -> usize {
        self.held_from.get(peer).copied().unwrap_or_default()
    }

    /// `allow` (`allowed`) or `deny` a folder, audited when it succeeds.
    /// `allow` may move a mailbox to another folder: one `deny` freed,
    /// or (`move_bound`) one bound now.
    pub(in crate::mail) fn allow(
        &mut self,
        who: &Who,
        (path, mailbox): (&str, Option<&str>),
        (allowed, move_bound): (bool, bool),
        ctx: &mut Ctx<'_>,
    ) -> Result<crate::api::BindingView, ApiError> {
        let (b, moved_from) = if allowed {
            self.bind(path, mailbox, move_bound, ctx.store)?
        } else {
            (self.unbind(path, mailbox, ctx.store)?, None)
        };
        let (event, detail) = match (allowed, &moved_from) {
            (true, Some(from)) => (
                AuditEvent::Allow,
                format!(
                    "mailbox {} moved from {} to {}, and receives",
                    b.mailbox,
                    if from.is_empty() { "no folder" } else { from },
                    b.path
                ),
            ),
            (true, None) => (
                AuditEvent::Allow,
                format!("{} receives as mailbox {}", b.path, b.mailbox),
            ),
            (false, _) => (
                AuditEvent::Deny,
                format!("{} (mailbox {}) no longer receives", b.path, b.mailbox),
            ),
        };
        decided(who, event, None, detail, ctx);
        let mut view = binding_json(&b);
        view.moved_from = moved_from;
        Ok(view)
    }

    /// `deny`: the mailbox refuses mail and its folder is free; the
    /// mailbox keeps its name (its inbox, profile, wake settings and
    /// budget are kept under it) until `allow` gives it a folder again.
    fn unbind(
        &mut self,
        path: &str,
        mailbox: Option<&str>,
        store: &dyn MailStore,
    ) -> Result<FolderBinding, ApiError> {
        if let Some(b) = self.binding_named(path, mailbox) {
            // Denying works by the path as it was allowed, or by mailbox
            // name, even once the folder is gone.
            let b = FolderBinding {
                allowed: false,
                ..b.clone()
            };
            store.put_folder(&b)?;
            self.folders.insert(b.mailbox.clone(), b.clone());
            return Ok(b);
        }
        if path.is_empty() {
            return err(
                ErrorCode::NotBound,
                format!(
                    "no mailbox is named {}; `agentmesh mailboxes` lists them",
                    mailbox.unwrap_or_default()
                ),
            );
        }
        let path = canonical_folder(path)?;
        match self.folders.values().find(|f| f.path == path).cloned() {
            Some(mut b) => {
                b.allowed = false;
                store.put_folder(&b)?;
                self.folders.insert(b.mailbox.clone(), b.clone());
                Ok(b)
            }
            None => err(
                ErrorCode::NotBound,
                format!("{path} was never opted in; nothing to deny"),
            ),
        }
    }

    /// `allow`: the folder receives as its mailbox (the one named, else
    /// its base name). A name that is free (never bound, or denied) is
    /// bound to it, bringing the mailbox's inbox and settings; a name
    /// bound to another folder moves only with `move_bound`. Returns the
    /// binding, and the folder the mailbox moved from, if it moved.
    fn bind(
        &mut self,
        path: &str,
        mailbox: Option<&str>,
        move_bound: bool,
        store: &dyn MailStore,
    ) -> Result<(FolderBinding, Option<String>), ApiError> {
        let path_text = canonical_folder(path)?;
        let name = match mailbox {
            Some(m) => Some(mailbox_name(m)?),
            None => None,
        };
        let mut freed = None;
        if let Some(mut b) = self.folders.values().find(|f| f.path == path_text).cloned() {
            if name.as_ref().is_none_or(|n| n.as_str() == b.mailbox) {
                // Allowed again (or already).
                b.allowed = true;
                store.put_folder(&b)?;
                self.folders.insert(b.mailbox.clone(), b.clone());
                return Ok((b, None));
            }
            if b.allowed {
                return err(
                    ErrorCode::Bound,
                    format!(
                        "{path_text} is already bound to mailbox {}; `agentmesh deny {path_text}` frees it first",
                        b.mailbox
                    ),
                );
            }
            // Denied: the folder is free. Its old mailbox keeps its name,
            // with no folder, once this one is bound.
            b.path = String::new();
            freed = Some(b);
        }
        let name = match name {
            Some(n) => n,
            None => crate::config::try_fold_name(
                &std::path::Path::new(&path_text)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            )
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::BadMailbox,
                    format!(
                        "{path_text}'s name gives no mailbox name; choose one with --mailbox NAME"
                    ),
                )
            })?,
        };
        let moved_from = match self.folders.get(name.as_str()) {
            None => None,
            Some(other) if other.allowed && !move_bound => {
                return err(
                    ErrorCode::MailboxBound,
                    format!(
                        "mailbox {name} is bound to {}; `agentmesh allow {path_text} --mailbox {name} --move` moves it here (its inbox, profile and wake settings come along, and its address stays), or choose another name with --mailbox NAME",
                        other.path
                    ),
                );
            }
            Some(other) => Some(other.path.clone()),
        };
        let binding = FolderBinding {
            mailbox: name.to_string(),
            path: path_text,
            allowed: true,
        };
        if let Some(f) = &freed {
            store.put_folder(f)?;
            self.folders.insert(f.mailbox.clone(), f.clone());
        }
        store.put_folder(&binding)?;
        self.folders
            .insert(binding.mailbox.clone(), binding.clone());
        Ok((binding, moved_from))
    }

    /// The binding `deny` names without resolving the folder: by its
    /// stored path (as given, or made absolute), or by mailbox name.
    fn binding_named(&self, path: &str, mailbox: Option<&str>) -> Option<&FolderBinding> {
        let absolute = std::path::absolute(path)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        self.folders.values().find(|b| {
            mailbox.is_some_and(|m| m == b.mailbox)
                || (!path.is_empty() && (b.path == path || b.path == absolute))
        })
    }

    fn set_paused(&mut self, paused: bool, store: &dyn MailStore) -> Result<(), StoreError> {
        store.set_paused(paused)?;
        self.paused = paused;
        Ok(())
    }

    /// `pause`: inbound mail is held until `resume`.
    pub(in crate::mail) fn pause(
        &mut self,
        who: &Who,
        ctx: &mut Ctx<'_>,
    ) -> Result<PausedView, ApiError> {
        self.set_paused(true, ctx.store)?;
        let detail = "inbound mail is held until resume".to_owned();
        decided(who, AuditEvent::Pause, None, detail, ctx);
        Ok(PausedView {
            paused: true,
            released: None,
            still_held: None,
        })
    }

    /// `resume`: delivery resumes, and what `pause` held is released, but
    /// only what would have been delivered had there been no pause. The
    /// answer, and the events to announce once it is durable.
    pub(in crate::mail) fn resume(
        &mut self,
        who: &Who,
        (seqs, answers): (&mut Seqs, &crate::mail::guard::answers::Answers),
        ctx: &mut Ctx<'_>,
    ) -> Result<(PausedView, Vec<Event>), ApiError> {
        self.set_paused(false, ctx.store)?;
        let mut released: u64 = 0;
        let mut still_held = 0;
        let mut events = vec![];
        let by_pause = held_records(ctx.store)?
            .into_iter()
            .filter(|r| r.held == Some(HeldReason::Paused));
        for mut r in by_pause {
            let mut why = self.still_held(&r, ctx.dir);
            // An answer to this mailbox's own ask passes, as it would have
            // had there been no pause; its count is written before the
            // release.
            if why == Some(HeldReason::OtherOwner)
                && let Some(ask) = answers.passes_record(ctx.store, &r, ctx.now.wall)?
            {
                ctx.store.put_asks(std::slice::from_ref(&ask))?;
                why = None;
            }
            if let Some(why) = why {
                r.held = Some(why);
                ctx.store.update_inbox(std::slice::from_ref(&r))?;
                still_held += 1;
                let detail = format!(
                    "held: {} (it was held by pause; resume left it held)",
                    why.as_str()
                );
                ctx.log
                    .record(AuditEvent::Held, ctx.now.wall, held_entry(&r, detail));
                events.push(Event::Held { message: view(&r) });
                continue;
            }
            events.extend(self.release(r, Release::Resumed(who), seqs, ctx)?);
            released += 1;
        }
        let detail = format!(
            "inbound mail is delivered again; {} released, {still_held} still held",
            agentmesh_protocol::time::count(released, "held message")
        );
        decided(who, AuditEvent::Resume, None, detail, ctx);
        let value = PausedView {
            paused: false,
            released: Some(released),
            still_held: Some(still_held),
        };
        Ok((value, events))
    }
}

/// The held messages, oldest first, found through the store's index.
pub(in crate::mail) fn held_records(store: &dyn MailStore) -> Result<Vec<InboxRecord>, StoreError> {
    let mut out = vec![];
    for (seq, _) in store.held_index()? {
        if let Some(r) = store.inbox_at(seq)? {
            out.push(r);
        }
    }
    Ok(out)
}

/// The audit entry of a decision about the held message `r`.
pub(in crate::mail) fn held_entry(r: &InboxRecord, detail: String) -> AuditEntry {
    AuditEntry {
        peer: Some(r.from_peer.clone()),
        sender: Some(r.from.clone()),
        message_id: Some(r.id.clone()),
        body_sha256: Some(r.body_sha256.clone()),
        detail,
        ..AuditEntry::default()
    }
}

/// Audits a person's (or an agent's) decision, naming who made it.
fn decided(who: &Who, event: AuditEvent, peer: Option<String>, detail: String, ctx: &mut Ctx<'_>) {
    let detail = format!("{detail} (by {})", who_label(who));
    ctx.log.note(event, ctx.now.wall, peer, detail);
}

fn binding_json(b: &FolderBinding) -> crate::api::BindingView {
    crate::api::BindingView {
        mailbox: b.mailbox.clone(),
        path: b.path.clone(),
        allowed: b.allowed,
        moved_from: None,
    }
}

/// `path` as an existing folder's canonical path, in text.
fn canonical_folder(path: &str) -> Result<String, ApiError> {
    let path = std::fs::canonicalize(PathBuf::from(path)).map_err(|e| {
        ApiError::new(
            ErrorCode::BadPath,
            format!("{path}: {e}; give an existing folder"),
        )
    })?;
    if !path.is_dir() {
        return err(
            ErrorCode::BadPath,
            format!("{} is not a folder", path.display()),
        );
    }
    Ok(path.display().to_string())
}
