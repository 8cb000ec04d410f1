//! `not_for_me`: a session says a broadcast delivered to it was not for
//! it, and why; the note, with the start of the broadcast's text, is kept
//! against its mailbox (the last [`crate::api::MAX_NOTES`]) and lowers the
//! judge's probability for broadcasts like it.

use crate::api::MAX_NOTED_TEXT;
use crate::api::{self, ApiError};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;
use crate::mail::{Ctx, address};
use crate::store::AuditEntry;
use agentmesh_judge as judge;

/// The note `note` of mailbox `mailbox` about broadcast `id`, kept
/// (with the start of the broadcast's text) and audited (its size, never
/// its text).
pub(in crate::mail) fn note_for(
    profiles: &mut crate::mail::bus::profiles::Profiles,
    mailbox: Option<String>,
    id: &str,
    note: String,
    ctx: &mut Ctx<'_>,
) -> Result<api::NotForMeView, ApiError> {
    let note = note.trim().to_owned();
    if note.len() > api::MAX_NOTE_BYTES {
        return api::err(
            ErrorCode::TooLarge,
            format!(
                "the note is {} bytes, over the limit of {} bytes; say in a sentence why it was not for this session",
                note.len(),
                api::MAX_NOTE_BYTES
            ),
        );
    }
    let id = crate::mail::post::ops::full_id(ctx.store, id)?;
    let here = address(mailbox.as_deref(), &ctx.dir.my_name);
    let record = match ctx.store.inbox_get(&id)? {
        Some(r) if r.mailbox == mailbox => r,
        _ => {
            return api::err(
                ErrorCode::UnknownMessage,
                format!("mailbox {here} received no message with id {id}"),
            );
        }
    };
    if record.kind != api::MessageKind::Broadcast {
        return api::err(
            ErrorCode::NotABroadcast,
            format!(
                "message {id} is a {}, not a broadcast; not_for_me teaches the broadcast judge, and only broadcasts are judged",
                record.kind
            ),
        );
    }
    let size = note.len();
    let mut end = record.text.len().min(MAX_NOTED_TEXT);
    while !record.text.is_char_boundary(end) {
        end -= 1;
    }
    let kept = crate::store::NoteRecord {
        at: ctx.now.wall.as_unix_millis(),
        id: id.clone(),
        note,
        broadcast: record.text[..end].to_owned(),
    };
    let notes = profiles.add_note(ctx.store, mailbox.as_deref(), kept)?;
    ctx.log.record(
        AuditEvent::NotForMe,
        ctx.now.wall,
        AuditEntry {
            peer: Some(record.from_peer.clone()),
            sender: Some(record.from.clone()),
            recipient: Some(here.clone()),
            message_id: Some(id.clone()),
            body_sha256: Some(record.body_sha256.clone()),
            detail: format!(
                "a note of {size} bytes kept ({notes} now; the judge reads the last {})",
                judge::NOTES_READ
            ),
            ..AuditEntry::default()
        },
    );
    Ok(api::NotForMeView {
        id,
        address: here,
        notes,
    })
}
