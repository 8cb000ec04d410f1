//! The mailroom: a client's `send` becomes a sealed envelope in an outbox
//! record, audited as `accepted`. The actor answers with its id once the
//! record is durable, then hands it to the courier.

use std::time::Duration;

use agentmesh_protocol::envelope::{Body, Header, Kind, MessageId};
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::{Identity, Name, Wire};
use sha2::{Digest, Sha256};

use super::{Ctx, hex};
use crate::api::{ApiError, Who, err};
use crate::audit::AuditEvent;
use crate::codes;
use crate::store::{AuditEntry, OutboxRecord, OutboxStatus};

/// Messages waiting in the outbox at once, at most; `send` refuses beyond.
pub const MAX_OUTBOX: usize = 100_000;

/// `mailbox@machine`, or `@machine` for the owner's mailbox.
pub fn address(mailbox: Option<&str>, machine: &str) -> String {
    format!("{}@{machine}", mailbox.unwrap_or(""))
}

/// Parses `MAILBOX@MACHINE` or `@MACHINE`.
pub fn parse_address(to: &str) -> Result<(Option<Name>, Name), ApiError> {
    let Some((mailbox, machine)) = to.rsplit_once('@') else {
        return err(
            codes::BAD_ADDRESS,
            format!(
                "{to:?} is not an address; write MAILBOX@MACHINE, or @MACHINE for the machine's owner"
            ),
        );
    };
    let machine = Name::parse("machine name", machine)
        .map_err(|e| ApiError::new(codes::BAD_ADDRESS, e.to_string()))?;
    let mailbox = if mailbox.is_empty() {
        None
    } else {
        Some(mailbox_name(mailbox)?)
    };
    Ok((mailbox, machine))
}

/// A mailbox name, or the `bad_mailbox` error a client sees.
pub(super) fn mailbox_name(m: &str) -> Result<Name, ApiError> {
    Name::parse("mailbox name", m).map_err(|e| ApiError::new(codes::BAD_MAILBOX, e.to_string()))
}

/// A client's `send`.
#[derive(Debug)]
pub(super) struct SendRequest<'a> {
    /// Who sends.
    pub who: &'a Who,
    /// The mailbox the client attached to.
    pub attached: Option<String>,
    /// `MAILBOX@MACHINE` or `@MACHINE`.
    pub to: &'a str,
    /// The message.
    pub text: String,
    /// An `ask` rather than a `tell`.
    pub ask: bool,
    /// The full id of the received message answered.
    pub reply_to: Option<String>,
    /// The mailbox it is sent from (else the attached one).
    pub from_mailbox: Option<String>,
}

/// Seals what clients send.
#[derive(Debug)]
pub(super) struct Mailroom {
    me: Identity,
    /// How long a message stays deliverable.
    lifetime: Duration,
}

impl Mailroom {
    pub(super) fn new(me: Identity, lifetime: Duration) -> Mailroom {
        Mailroom { me, lifetime }
    }

    /// The outbox record of `req`, sealed, its `accepted` entry recorded;
    /// `waiting` is how many messages the courier has yet to deliver.
    pub(super) fn send(
        &self,
        req: SendRequest<'_>,
        waiting: usize,
        ctx: &mut Ctx<'_>,
    ) -> Result<OutboxRecord, ApiError> {
        let dir = ctx.dir;
        let Some(team) = dir.team.filter(|_| dir.member) else {
            return err(
                codes::NOT_IN_TEAM,
                "this machine is not in a team; create one with `agentmesh team create` or join one with `agentmesh join`",
            );
        };
        if waiting >= MAX_OUTBOX {
            return err(
                codes::OUTBOX_FULL,
                format!(
                    "{MAX_OUTBOX} messages are waiting to be delivered; wait for them, or check `agentmesh outbox`"
                ),
            );
        }
        let (mailbox, machine) = parse_address(req.to)?;
        let Some((peer, target)) = dir.current(machine.as_str()) else {
            let revoked = dir
                .machines
                .values()
                .any(|m| m.name == machine.as_str() && m.standing == Standing::Revoked);
            return if revoked {
                err(
                    codes::REVOKED_RECIPIENT,
                    format!("{machine} was revoked from the team; it receives nothing"),
                )
            } else {
                let names: Vec<&str> = dir
                    .machines
                    .values()
                    .filter(|m| m.standing == Standing::Current)
                    .map(|m| m.name.as_str())
                    .collect();
                err(
                    codes::UNKNOWN_RECIPIENT,
                    format!(
                        "no machine named {machine} in the team; members: {}",
                        names.join(", ")
                    ),
                )
            };
        };
        if dir.me == Some(peer) {
            return err(
                codes::OWN_MACHINE,
                format!(
                    "{machine} is this machine; agentmesh carries messages between machines, so name another member"
                ),
            );
        }
        let from_mailbox = match req.from_mailbox.or(req.attached) {
            Some(m) => Some(mailbox_name(&m)?),
            None => None,
        };
        let sent_at = ctx.now.wall;
        let id = MessageId::random(&mut rand::rng());
        let (kind, thread, in_reply_to, hop) = match req.reply_to {
            Some(rid) => {
                let original = ctx.store.inbox_get(&rid)?.ok_or_else(|| {
                    ApiError::new(
                        codes::UNKNOWN_MESSAGE,
                        format!("no received message has id {rid}"),
                    )
                })?;
                let parse = |h: &str| {
                    MessageId::parse(h)
                        .ok_or_else(|| ApiError::new(codes::STORE, "a stored id is damaged"))
                };
                (
                    Kind::Reply,
                    parse(&original.thread)?,
                    Some(parse(&original.id)?),
                    original.hop,
                )
            }
            None => (if req.ask { Kind::Ask } else { Kind::Tell }, id, None, 0),
        };
        let header = Header {
            id,
            team,
            from: self.me.peer_id(),
            to: peer,
            kind,
            in_reply_to,
            thread,
            hop,
            taint: false,
            sent_at,
            expires_at: sent_at.saturating_add(self.lifetime),
        };
        let who = req.who;
        let body = Body {
            who: agentmesh_protocol::Who {
                kind: who.kind.into(),
                name: who.name.clone(),
                session_id: who.session_id.clone(),
                task: who.task.clone(),
            },
            from_mailbox: from_mailbox.clone(),
            to_mailbox: mailbox.clone(),
            text: req.text,
            attachments: vec![],
        };
        if who.name.len() > agentmesh_protocol::envelope::MAX_WHO_NAME
            || who
                .session_id
                .as_ref()
                .is_some_and(|s| s.len() > agentmesh_protocol::envelope::MAX_SESSION_ID)
            || who
                .task
                .as_ref()
                .is_some_and(|s| s.len() > agentmesh_protocol::envelope::MAX_TASK)
        {
            return err(
                codes::BAD_WHO,
                "the attached client's who is too long (name 64, session_id 128, task 256 bytes)",
            );
        }
        let envelope =
            agentmesh_protocol::seal(&self.me, &target.x25519, &header, &body, &mut rand::rng())
                .map_err(|e| ApiError::new(codes::TOO_LARGE, e.to_string()))?;
        let record = OutboxRecord {
            id: id.to_string(),
            to_peer: peer.to_string(),
            to: address(mailbox.as_ref().map(Name::as_str), machine.as_str()),
            kind: kind.as_str().into(),
            envelope: envelope.to_wire(),
            status: OutboxStatus::Queued,
            reason: None,
            attempts: 0,
            created_at: sent_at.as_unix_millis(),
            expires_at: header.expires_at.as_unix_millis(),
            held: false,
            body_sha256: hex(&Sha256::digest(body.to_bytes())),
        };
        ctx.log.record(
            AuditEvent::Accepted,
            ctx.now.wall,
            AuditEntry {
                peer: Some(peer.to_string()),
                sender: Some(address(
                    from_mailbox.as_ref().map(Name::as_str),
                    &dir.my_name,
                )),
                recipient: Some(record.to.clone()),
                message_id: Some(record.id.clone()),
                body_sha256: Some(record.body_sha256.clone()),
                detail: format!("{} queued for delivery", kind.as_str()),
                ..AuditEntry::default()
            },
        );
        Ok(record)
    }
}
