//! Pages: how stored mail is shown, and how much of it fits one answer.

use serde::Serialize;

use crate::api::{
    ApiError, InboxPage, MessageState, MessageView, OutboxView, StateView, rfc3339_ms,
};
use crate::store::{InboxRecord, MailStore, OutboxRecord, OutboxStatus, StateRecord};

/// Messages in one `inbox` page, at most.
pub const MAX_INBOX_PAGE: usize = 1000;
/// Stored messages one `inbox` call looks at, at most: a filter that
/// matches little (`--unread`, `--mailbox`) answers a short page and where
/// to go on, instead of reading a whole large inbox while delivery waits.
pub const MAX_INBOX_SCAN: usize = 5 * MAX_INBOX_PAGE;
/// Bytes of messages in one page, about: pages must fit one API frame
/// (1 MiB).
pub(in crate::mail) const MAX_PAGE_BYTES: usize = 640 * 1024;

/// How many bytes `value` takes in a JSON answer, escapes included: a
/// body of quotes or control characters grows up to six times, and a page
/// sized by raw length could outgrow the 1 MiB frame.
pub(in crate::mail) fn json_size<T: Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        // The separator between rows, and room to spare.
        Ok(()) => count.0 + 16,
        Err(_) => MAX_PAGE_BYTES,
    }
}

/// The newest rows of `rows` (oldest first) that fit one answer page.
pub(in crate::mail) fn within_page<T>(mut rows: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<T> {
    let mut bytes = 0;
    let mut keep = 0;
    for r in rows.iter().rev() {
        bytes += size(r);
        if bytes > MAX_PAGE_BYTES && keep > 0 {
            break;
        }
        keep += 1;
    }
    rows.drain(..rows.len() - keep);
    rows
}

/// The oldest rows of `rows` that fit one answer page.
pub(in crate::mail) fn first_page<T>(rows: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<T> {
    let mut bytes = 0;
    let mut out = vec![];
    for r in rows {
        bytes += size(&r);
        if bytes > MAX_PAGE_BYTES && !out.is_empty() {
            break;
        }
        out.push(r);
    }
    out
}

/// One page of `inbox`: messages after `after` matching the filter, at
/// most `limit`, that fit one answer, looking at no more than
/// [`MAX_INBOX_SCAN`] stored messages; `next_after_seq` says where to go
/// on (it may follow an empty page when the scan stopped first).
pub(in crate::mail) fn inbox_page(
    store: &dyn MailStore,
    mailbox: Option<&str>,
    unread: bool,
    after: u64,
    limit: usize,
) -> Result<InboxPage, ApiError> {
    let limit = limit.clamp(1, MAX_INBOX_PAGE);
    let want_owner = mailbox == Some("@");
    let mut out = vec![];
    let mut cursor = after;
    let mut more = false;
    let mut bytes = 0;
    let mut scanned = 0;
    'pages: loop {
        if scanned >= MAX_INBOX_SCAN {
            // The caller goes on from here.
            more = true;
            break;
        }
        let page = store.inbox_after(cursor, MAX_INBOX_PAGE)?;
        let Some(last) = page.last() else { break };
        let last_seq = last.seq;
        scanned += page.len();
        for r in page {
            let matches = r.held.is_none()
                && (!unread || r.read_at.is_none())
                && match mailbox {
                    None => true,
                    Some(_) if want_owner => r.mailbox.is_none(),
                    Some(m) => r.mailbox.as_deref() == Some(m),
                };
            if matches {
                // A page must fit one API frame (1 MiB) with room to spare.
                let v = view(&r);
                let size = json_size(&v);
                if out.len() == limit || (bytes + size > MAX_PAGE_BYTES && !out.is_empty()) {
                    more = true;
                    cursor = out.last().map_or(cursor, |m: &MessageView| m.seq);
                    break 'pages;
                }
                bytes += size;
                out.push(v);
            }
        }
        cursor = last_seq;
    }
    let next_after_seq = more.then_some(cursor);
    Ok(InboxPage {
        messages: out,
        next_after_seq,
    })
}

/// A received message as clients see it.
pub(in crate::mail) fn view(r: &InboxRecord) -> MessageView {
    MessageView {
        id: r.id.clone(),
        seq: r.seq,
        from: r.from.clone(),
        who: r.who.clone(),
        kind: r.kind,
        thread: r.thread.clone(),
        in_reply_to: r.in_reply_to.clone(),
        text: r.text.clone(),
        received_at: rfc3339_ms(r.received_at),
        sent_at: r.sent_at.map(rfc3339_ms),
        read: r.read_at.is_some(),
        mailbox: r.mailbox.clone(),
        held: r.held,
        from_owner: r.from_owner.clone(),
        hop: r.hop,
        taint: r.taint,
        from_peer: r.from_peer.clone(),
        sender_gone: None,
    }
}

/// A sent message as `outbox` shows it, before what only the courier
/// knows (retry, offline) and the directory (owner) are added. Its
/// status is the latest state, but a deferral whose time passed is over:
/// then it is the state before it. Each state names the machine that
/// decided it ([`decided_by`]); `me` is this machine's name.
pub(in crate::mail) fn outbox_view(
    r: &OutboxRecord,
    now: agentmesh_protocol::Timestamp,
    me: &str,
) -> OutboxView {
    let states = if r.states.is_empty() {
        legacy_states(r)
    } else {
        r.states.clone()
    };
    let now_ms = now.as_unix_millis();
    let mut status = states.last().map_or(MessageState::Queued, |s| s.state);
    let mut deferred_until = None;
    if status == MessageState::Deferred {
        let until = states.last().and_then(|s| s.until).or(r.deferred_until);
        match until.filter(|t| *t > now_ms) {
            Some(t) => deferred_until = Some(rfc3339_ms(t)),
            None => {
                status = states
                    .iter()
                    .rev()
                    .nth(1)
                    .map_or(MessageState::Delivered, |s| s.state)
            }
        }
    }
    OutboxView {
        id: r.id.clone(),
        to: r.to.clone(),
        kind: r.kind,
        thread: r.copy.as_ref().map(|c| c.thread.clone()),
        in_reply_to: r.copy.as_ref().and_then(|c| c.in_reply_to.clone()),
        text: r.copy.as_ref().map(|c| c.text.clone()),
        status,
        states: states
            .iter()
            .map(|s| StateView {
                state: s.state,
                at: rfc3339_ms(s.at),
                reason: s.reason.clone(),
                code: s.code.clone(),
                until: s.until.map(rfc3339_ms),
                by: decided_by(s, r, me),
            })
            .collect(),
        carrier: r.carrier.clone(),
        deferred_until,
        reason: r.reason.clone(),
        held: r.held,
        attempts: r.attempts,
        created_at: rfc3339_ms(r.created_at),
        retry_in_ms: None,
        offline: false,
        to_owner: None,
        counts: None,
    }
}

/// The machine that decided state `s` of `r`: the carrier for `carried`
/// (as recorded; a carrier only carries), this machine for `queued` and
/// `failed`, the recipient's machine for everything it reported.
pub(in crate::mail) fn decided_by(s: &StateRecord, r: &OutboxRecord, me: &str) -> Option<String> {
    match s.state {
        MessageState::Carried => s.by.clone(),
        MessageState::Queued | MessageState::Failed => Some(me.to_owned()),
        MessageState::Delivered
        | MessageState::Held
        | MessageState::Approved
        | MessageState::Rejected
        | MessageState::Deferred
        | MessageState::Read
        | MessageState::Refused => {
            let machine = r.to.rsplit_once('@').map_or(r.to.as_str(), |(_, m)| m);
            (!machine.is_empty()).then(|| machine.to_owned())
        }
    }
}

fn deferred_state(at: u64) -> StateRecord {
    StateRecord {
        state: MessageState::Deferred,
        at,
        reason: None,
        code: None,
        until: None,
        by: None,
    }
}

/// The states of a record written before states were kept, from what it
/// kept.
fn legacy_states(r: &OutboxRecord) -> Vec<StateRecord> {
    let at = r.created_at;
    let mut out = OutboxRecord {
        states: vec![],
        envelope: vec![],
        ..r.clone()
    };
    out.note(MessageState::Queued, at, None);
    match r.status {
        OutboxStatus::Queued | OutboxStatus::Sent => {}
        OutboxStatus::Delivered if r.held => {
            out.note(MessageState::Held, at, None);
        }
        OutboxStatus::Delivered => {
            out.note(MessageState::Delivered, at, None);
            if r.deferred_until.is_some() {
                out.note_record(StateRecord {
                    until: r.deferred_until,
                    by: None,
                    ..deferred_state(at)
                });
            }
        }
        OutboxStatus::Failed => {
            out.note(MessageState::Failed, at, r.reason.clone());
        }
    }
    out.states
}
