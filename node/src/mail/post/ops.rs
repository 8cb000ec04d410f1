//! The mail API's reading ops and the approval desk: ids as clients give
//! them, `read`, `outbox`, `held`, `audit`, `approve` and `reject`. Each
//! takes the parts it reads; the actor routes to them.

use std::collections::HashSet;

use crate::api::{ApiError, Event, Resolution, ResolvedView, Who, err};
use crate::codes::ErrorCode;
use crate::store::{InboxRecord, MailStore, OutboxRecord, OutboxStatus, Store};

use crate::mail::consent::{Consent, Release, held_records};
use crate::mail::ctx::Seqs;
use crate::mail::post::courier::Courier;
use crate::mail::post::pages::{first_page, json_size, outbox_view, view, within_page};
use crate::mail::post::unread::Unread;
use crate::mail::{Ctx, Now, peer_of};
use crate::team::Directory;

/// Delivered and failed messages `outbox` lists, at most (the newest).
pub const MAX_OUTBOX_LISTED: usize = 1000;
/// The shortest message id prefix accepted where an id is asked for.
pub const MIN_ID_PREFIX: usize = 4;

/// The received message id `given` names: the whole id, or a unique
/// prefix of at least [`MIN_ID_PREFIX`] characters, as git takes them.
pub(in crate::mail) fn full_id(store: &dyn MailStore, given: &str) -> Result<String, ApiError> {
    let given = given.trim().to_ascii_lowercase();
    if given.len() == 32 {
        return Ok(given);
    }
    if given.len() < MIN_ID_PREFIX || !given.chars().all(|c| c.is_ascii_hexdigit()) {
        return err(
            ErrorCode::BadId,
            format!(
                "{given:?} is not a message id; give the id, or at least its first {MIN_ID_PREFIX} characters, as `agentmesh inbox` shows it"
            ),
        );
    }
    let found = store.inbox_ids_starting(&given, 6)?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => err(
            ErrorCode::UnknownMessage,
            format!("no received message has an id starting with {given}"),
        ),
        several => err(
            ErrorCode::AmbiguousId,
            format!(
                "{} received messages have ids starting with {given} ({}…); give more of the id",
                if several.len() > 5 {
                    "more than 5".to_owned()
                } else {
                    several.len().to_string()
                },
                several
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// `read ID`: the message, marked read. The answer, to give once the mark
/// is durable; an error at once if the mark could not be written.
pub(in crate::mail) fn read(
    store: &dyn MailStore,
    id: &str,
    unread: &mut Unread,
    now: Now,
) -> Result<
    (
        Result<crate::api::MessageView, ApiError>,
        Option<InboxRecord>,
    ),
    ApiError,
> {
    let answer = match store.inbox_get(id) {
        Ok(Some(mut r)) if r.held.is_none() => {
            let mut newly = None;
            if r.read_at.is_none() {
                r.read_at = Some(now.wall.as_unix_millis());
                store.update_inbox(std::slice::from_ref(&r))?;
                unread.remove(r.mailbox.as_deref(), r.seq);
                newly = Some(r.clone());
            }
            return Ok((Ok(view(&r)), newly));
        }
        Ok(Some(_)) => err(
            ErrorCode::Held,
            format!("message {id} is held for approval; see `agentmesh held`"),
        ),
        Ok(None) => err(
            ErrorCode::UnknownMessage,
            format!("no received message has id {id}"),
        ),
        Err(e) => Err(e.into()),
    };
    Ok((answer, None))
}

/// `outbox`: what is still on its way, current in memory (attempts,
/// status), and the newest of what is done.
pub(in crate::mail) fn outbox_list(
    courier: &Courier,
    ctx: &Ctx<'_>,
) -> Result<Vec<crate::api::OutboxView>, ApiError> {
    let all = sent_records(courier, ctx)?;
    let views: Vec<_> = all.iter().map(|r| sent_view(r, courier, ctx)).collect();
    Ok(within_page(views, json_size))
}

/// `message_status ID`: one sent message, by its id or a unique prefix of
/// it among those `outbox` lists.
pub(in crate::mail) fn message_status(
    courier: &Courier,
    id: &str,
    ctx: &Ctx<'_>,
) -> Result<crate::api::OutboxView, ApiError> {
    let given = id.trim().to_ascii_lowercase();
    let found = match ctx.store.outbox_get(&given)? {
        Some(r) if r.id.len() == given.len() => vec![r],
        _ if given.len() < MIN_ID_PREFIX || !given.chars().all(|c| c.is_ascii_hexdigit()) => {
            return err(
                ErrorCode::BadId,
                format!(
                    "{given:?} is not a message id; give the id `send` printed, or at least its first {MIN_ID_PREFIX} characters"
                ),
            );
        }
        _ => sent_records(courier, ctx)?
            .into_iter()
            .filter(|r| r.id.starts_with(&given))
            .collect(),
    };
    // What is on its way is current in memory (attempts, reason).
    let current = |r: OutboxRecord| {
        courier
            .listed()
            .find(|l| l.id == r.id)
            .cloned()
            .unwrap_or(r)
    };
    match <[OutboxRecord; 1]>::try_from(found) {
        Ok([r]) => Ok(sent_view(&current(r), courier, ctx)),
        Err(v) if v.is_empty() => err(
            ErrorCode::UnknownMessage,
            format!(
                "no sent message has an id starting with {given}; `agentmesh outbox` lists them"
            ),
        ),
        Err(v) => err(
            ErrorCode::AmbiguousId,
            format!(
                "{} sent messages have ids starting with {given}; give more of the id",
                v.len()
            ),
        ),
    }
}

/// What `outbox` lists, oldest first: what is on its way (from memory)
/// and the newest of what is done. Counts and receipts are this
/// machine's reports, not mail anyone sent.
fn sent_records(courier: &Courier, ctx: &Ctx<'_>) -> Result<Vec<OutboxRecord>, ApiError> {
    let report = |r: &OutboxRecord| {
        matches!(
            r.kind,
            crate::api::MessageKind::Counts | crate::api::MessageKind::Receipt
        )
    };
    let mut all: Vec<OutboxRecord> = courier.listed().filter(|r| !report(r)).cloned().collect();
    let known: HashSet<String> = all.iter().map(|r| r.id.clone()).collect();
    all.extend(
        ctx.store
            .outbox_done(MAX_OUTBOX_LISTED)?
            .into_iter()
            .filter(|r| !known.contains(&r.id) && !report(r)),
    );
    all.sort_by_key(|r| r.created_at);
    Ok(all)
}

/// What the machine a broadcast copy `r` went to reported of it, once it
/// did (`None` for anything else); `me` is this machine's name.
pub(in crate::mail) fn counts_of(
    store: &dyn Store,
    r: &OutboxRecord,
    me: &str,
) -> Option<crate::api::CountsView> {
    if r.kind != crate::api::MessageKind::Broadcast {
        return None;
    }
    let reported = store.counts(&r.id).ok().flatten()?.reported?;
    let mut c = crate::api::CountsView {
        delivered: reported.delivered,
        dropped: reported.dropped,
        skipped: reported.skipped,
        reason: reported.reason,
        words: String::new(),
    };
    let machine = r.to.rsplit('@').next().unwrap_or_default();
    c.words = c.sentence(machine, me);
    Some(c)
}

/// `outbox` read from the store of a home whose daemon is not running:
/// what is on its way and the newest of what is done, oldest first,
/// without what only a running courier knows (retries, offline).
pub(in crate::mail) fn stored_outbox(
    store: &dyn Store,
    me: &str,
    now: agentmesh_protocol::Timestamp,
) -> Result<Vec<crate::api::OutboxView>, ApiError> {
    let report = |r: &OutboxRecord| {
        matches!(
            r.kind,
            crate::api::MessageKind::Counts | crate::api::MessageKind::Receipt
        )
    };
    let mut all: Vec<OutboxRecord> = store.outbox()?;
    let known: HashSet<String> = all.iter().map(|r| r.id.clone()).collect();
    let done = store.outbox_done(MAX_OUTBOX_LISTED)?;
    all.extend(done.into_iter().filter(|r| !known.contains(&r.id)));
    all.retain(|r| !report(r));
    all.sort_by_key(|r| r.created_at);
    Ok(all
        .iter()
        .map(|r| {
            let mut v = outbox_view(r, now, me);
            v.counts = counts_of(store, r, me);
            v
        })
        .collect())
}

/// A sent message as `outbox` shows it, with what the courier and the
/// directory add.
pub(in crate::mail) fn sent_view(
    r: &OutboxRecord,
    courier: &Courier,
    ctx: &Ctx<'_>,
) -> crate::api::OutboxView {
    let mut v = outbox_view(r, ctx.now.wall, &ctx.dir.my_name);
    v.counts = counts_of(ctx.store, r, &ctx.dir.my_name);
    let peer = peer_of(&r.to_peer);
    v.to_owner = peer
        .and_then(|p| ctx.dir.machines.get(&p))
        .map(|m| m.owner.clone());
    if matches!(r.status, OutboxStatus::Queued | OutboxStatus::Sent) {
        v.offline = peer.is_some_and(|p| courier.offline(&p));
        v.retry_in_ms = peer
            .and_then(|p| courier.retry_in(&p, &r.id, ctx.now.mono))
            .map(|d| d.as_millis() as u64);
    }
    v
}

/// `held`: the oldest first (they expire first). What does not fit one
/// page shows once these are decided.
pub(in crate::mail) fn held_list(
    store: &dyn MailStore,
    dir: &Directory,
) -> Result<Vec<crate::api::MessageView>, ApiError> {
    let views = held_records(store)?
        .iter()
        .map(|r| {
            let mut v = view(r);
            v.sender_gone = sender_gone(dir, &r.from_peer);
            v
        })
        .collect();
    Ok(first_page(views, json_size))
}

/// `left` or `revoked` if the machine `peer` is no longer a member of the
/// team (mail it sent before is its old key's, whoever has its name now).
pub(in crate::mail) fn sender_gone(dir: &Directory, peer: &str) -> Option<String> {
    let m = dir.machines.get(&peer.parse().ok()?)?;
    (m.standing == agentmesh_protocol::team::Standing::Revoked)
        .then(|| if m.left { "left" } else { "revoked" }.to_owned())
}

/// `audit`: the newest entries that fit one page.
pub(in crate::mail) fn audit_list(
    store: &dyn Store,
    now: Now,
    since_secs: Option<u64>,
) -> Result<Vec<crate::api::AuditView>, ApiError> {
    crate::audit::list(store, now.wall, since_secs, |entries| {
        within_page(entries, |e| json_size(e) + 100)
    })
}

/// Audit entries `bus log` looks through, at most (the newest).
pub const MAX_BUS_LOG_SCAN: usize = 20_000;

/// `bus log`: the bus's decisions among the newest audit entries (a
/// filtered view of the audit log), only `mailbox`'s if given, the newest
/// that fit one page.
pub(in crate::mail) fn bus_log(
    store: &dyn Store,
    now: Now,
    since_secs: Option<u64>,
    mailbox: Option<&str>,
) -> Result<crate::api::BusLogView, ApiError> {
    let since = since_secs.map_or(agentmesh_protocol::Timestamp::from_unix_millis(0), |s| {
        now.wall.saturating_sub(std::time::Duration::from_secs(s))
    });
    let entries: Vec<crate::api::BusLogEntry> = store
        .audit_since(since, MAX_BUS_LOG_SCAN)?
        .into_iter()
        .filter_map(|e| {
            let event = crate::api::BusEvent::of(&e.event)?;
            if mailbox.is_some_and(|m| e.recipient.as_deref() != Some(m)) {
                return None;
            }
            let j = e.judged;
            Some(crate::api::BusLogEntry {
                at: crate::api::rfc3339_ms(e.at),
                event,
                mailbox: e.recipient,
                sender: e.sender,
                id: e.message_id,
                body_sha256: e.body_sha256,
                score: j.as_ref().and_then(|j| j.score),
                preset: j.as_ref().map(|j| j.preset),
                threshold: j.as_ref().map(|j| j.threshold),
                judge: j.as_ref().map(|j| j.judge.clone()),
                stage: j.as_ref().and_then(|j| j.stage.clone()),
                why: j.as_ref().and_then(|j| j.why.clone()),
                error: j.and_then(|j| j.error),
                skipped: e.skipped.map(|s| s.count),
                reason: e.skipped.and_then(|s| s.reason),
                detail: e.detail,
            })
        })
        .collect();
    Ok(crate::api::BusLogView {
        entries: within_page(entries, json_size),
    })
}

/// What a person decides about a held message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::mail) enum Decision {
    /// Deliver it.
    Approve,
    /// Drop it, with a reason (empty: none).
    Reject(String),
}

/// Approves or rejects the held message `id`. The first answer wins;
/// others are told it was already decided. The answer, and the events to
/// announce once it is durable.
pub(in crate::mail) fn resolve(
    who: &Who,
    id: &str,
    decision: Decision,
    consent: &mut Consent,
    seqs: &mut Seqs,
    ctx: &mut Ctx<'_>,
) -> Result<(ResolvedView, Vec<Event>), ApiError> {
    let record: InboxRecord = match ctx.store.inbox_get(id)? {
        Some(r) if r.held.is_some() => r,
        Some(_) => {
            return err(
                ErrorCode::NotHeld,
                format!("message {id} is not held (it may have been decided already)"),
            );
        }
        None => {
            return err(
                ErrorCode::UnknownMessage,
                format!("no held message has id {id} (it may have been rejected already)"),
            );
        }
    };
    let id = record.id.clone();
    if decision == Decision::Approve
        && let Some(gone) = sender_gone(ctx.dir, &record.from_peer)
    {
        let machine =
            ctx.dir
                .machines
                .get(
                    &record.from_peer.parse().map_err(|_| {
                        ApiError::new(ErrorCode::Store, "a stored sender is damaged")
                    })?,
                )
                .map(|m| m.name.clone())
                .unwrap_or_default();
        let how = if gone == "left" {
            "it left the team"
        } else {
            "the founder revoked it"
        };
        return err(
            ErrorCode::SenderRevoked,
            format!(
                "message {id} came from {machine}'s old key ({}), which is no longer a member ({how}); a machine named {machine} now is another key, so this can't be approved as its mail. Reject it: `agentmesh reject {id}`",
                record.from_peer
            ),
        );
    }
    let (outcome, events) = match decision {
        Decision::Approve => (
            Resolution::Approved,
            consent.release(record, Release::Approved(who), seqs, ctx)?,
        ),
        Decision::Reject(reason) => (
            Resolution::Rejected,
            consent.reject(&record, who, &reason, ctx)?,
        ),
    };
    let id = id.to_owned();
    Ok((ResolvedView { id, outcome }, events))
}
