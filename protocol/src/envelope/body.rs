//! What an envelope carries, sealed: the body (who wrote it, its
//! mailboxes, the text, attachments), and the counts a receiving machine
//! reports of a broadcast.

use super::*;

/// Whether a client is a person or an agent, as it claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhoKind {
    /// A person at a terminal.
    Human,
    /// An AI agent session.
    Agent,
}

impl WhoKind {
    /// `human` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            WhoKind::Human => "human",
            WhoKind::Agent => "agent",
        }
    }
}

/// The sender's identity stamp: who wrote the message, as claimed by the
/// client that sent it. Shown with every message; never verified beyond the
/// machine's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// Person or agent.
    pub kind: WhoKind,
    /// The person's or agent's name.
    pub name: String,
    /// The agent session, if any.
    pub session_id: Option<String>,
    /// What the session is working on, if it said.
    pub task: Option<String>,
}

impl Who {
    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(match self.kind {
                WhoKind::Human => 0,
                WhoKind::Agent => 1,
            }),
            Value::Text(self.name.clone()),
            cbor::opt_text(self.session_id.as_deref()),
            cbor::opt_text(self.task.as_deref()),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::new("who", value, 4)?;
        let kind = match f.uint("kind", 1)? {
            0 => WhoKind::Human,
            _ => WhoKind::Agent,
        };
        let name = f.text("name", MAX_WHO_NAME)?;
        let session_id = f.opt_text("session_id", MAX_SESSION_ID)?;
        // Both are shown to people: one line each, as an owner's name.
        for (field, text) in [("name", Some(&name)), ("session_id", session_id.as_ref())] {
            if let Some(problem) = text.and_then(|t| crate::names::one_line_problem(t)) {
                return Err(f.error(field, problem));
            }
        }
        Ok(Who {
            kind,
            name,
            session_id,
            task: f.opt_text("task", MAX_TASK)?,
        })
    }
}

/// A small file carried with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// A file name, for display.
    pub name: String,
    /// Its media type, e.g. `text/x-diff`.
    pub media_type: String,
    /// The contents.
    pub data: Vec<u8>,
}

/// What the seal hides: who wrote the message, between which mailboxes,
/// and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The sender's identity stamp.
    pub who: Who,
    /// The sending mailbox (`None`: the machine's owner).
    pub from_mailbox: Option<Name>,
    /// The receiving mailbox (`None`: the machine's owner).
    pub to_mailbox: Option<Name>,
    /// The message.
    pub text: String,
    /// At most [`MAX_ATTACHMENTS`] small attachments.
    pub attachments: Vec<Attachment>,
}

impl Wire for Body {
    const WHAT: &'static str = "envelope body";
    const MAX_BYTES: usize = MAX_BODY_BYTES;

    fn to_value(&self) -> Value {
        Value::Array(vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            self.who.to_value(),
            cbor::opt_text(self.from_mailbox.as_ref().map(Name::as_str)),
            cbor::opt_text(self.to_mailbox.as_ref().map(Name::as_str)),
            Value::Text(self.text.clone()),
            Value::Array(
                self.attachments
                    .iter()
                    .map(|a| {
                        Value::Array(vec![
                            Value::Text(a.name.clone()),
                            Value::Text(a.media_type.clone()),
                            Value::Bytes(a.data.clone()),
                        ])
                    })
                    .collect(),
            ),
        ])
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::versioned(Self::WHAT, value, 6)?;
        let who = Who::from_value(f.value("who")?)?;
        let from_mailbox = opt_name(&mut f, "from_mailbox")?;
        let to_mailbox = opt_name(&mut f, "to_mailbox")?;
        let text = f.text("text", MAX_BODY_BYTES)?;
        let attachments = f
            .list("attachments", MAX_ATTACHMENTS)?
            .into_iter()
            .map(|v| {
                let mut a = Fields::new("attachment", v, 3)?;
                Ok(Attachment {
                    name: a.text("name", MAX_ATTACHMENT_LABEL)?,
                    media_type: a.text("media_type", MAX_ATTACHMENT_LABEL)?,
                    data: a.bytes("data", MAX_BODY_BYTES)?,
                })
            })
            .collect::<Result<_, DecodeError>>()?;
        Ok(Body {
            who,
            from_mailbox,
            to_mailbox,
            text,
            attachments,
        })
    }
}

/// The media type of the one attachment a [`Kind::Counts`] body carries.
pub const COUNTS_MEDIA_TYPE: &str = "application/vnd.agentmesh.counts+cbor";

/// What a machine did with a broadcast: the body of a [`Kind::Counts`]
/// envelope, sealed to the broadcast's sender and signed like any
/// envelope. Its bytes are one attachment named `counts` of media type
/// [`COUNTS_MEDIA_TYPE`]: `[version, delivered, dropped]`, or
/// `[version, delivered, dropped, skipped, reason]` when mailboxes were
/// not judged (`reason` a [`SkipReason`] code, `null` for none known);
/// the body's text is empty. A build that knows no skips reads the short
/// form only, so the short form is sent whenever nothing was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Mailboxes it was delivered to.
    pub delivered: u32,
    /// Candidate mailboxes it was dropped for.
    pub dropped: u32,
    /// Mailboxes that were not judged at all.
    pub skipped: u32,
    /// Why (the main reason, when there were several), if any were.
    pub reason: Option<SkipReason>,
}

/// Why a machine judged a broadcast for none (or not all) of its
/// mailboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The machine holds mail from the broadcast's sender (another
    /// person's machine it does not trust).
    HeldSender,
    /// The machine's person paused inbound mail.
    Paused,
    /// The mailboxes' daily wake budgets are spent.
    Busy,
}

impl SkipReason {
    fn code(self) -> u64 {
        match self {
            SkipReason::HeldSender => 0,
            SkipReason::Paused => 1,
            SkipReason::Busy => 2,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            0 => SkipReason::HeldSender,
            1 => SkipReason::Paused,
            2 => SkipReason::Busy,
            _ => return None,
        })
    }
}

impl Wire for Counts {
    const WHAT: &'static str = "broadcast counts";
    const MAX_BYTES: usize = 64;

    fn to_value(&self) -> Value {
        let mut items = vec![
            cbor::uint(crate::PROTOCOL_VERSION),
            cbor::uint(self.delivered.into()),
            cbor::uint(self.dropped.into()),
        ];
        if self.skipped > 0 || self.reason.is_some() {
            items.push(cbor::uint(self.skipped.into()));
            items.push(match self.reason {
                Some(r) => cbor::uint(r.code()),
                None => Value::Null,
            });
        }
        Value::Array(items)
    }

    fn from_value(value: Value) -> Result<Self, DecodeError> {
        let long = matches!(&value, Value::Array(items) if items.len() == 5);
        let mut f = Fields::versioned(Self::WHAT, value, if long { 5 } else { 3 })?;
        let mut counts = Counts {
            delivered: f.uint("delivered", u32::MAX.into())? as u32,
            dropped: f.uint("dropped", u32::MAX.into())? as u32,
            ..Counts::default()
        };
        if long {
            counts.skipped = f.uint("skipped", u32::MAX.into())? as u32;
            // A reason this build does not know is a reason unknown.
            counts.reason = match f.value("reason")? {
                Value::Null => None,
                Value::Integer(i) => u64::try_from(i).ok().and_then(SkipReason::from_code),
                _ => return Err(f.error("reason", "is neither a reason code nor null")),
            };
        }
        Ok(counts)
    }
}

impl Counts {
    /// The body of a counts envelope, stamped with `who`.
    pub fn to_body(&self, who: Who) -> Body {
        report_body(who, "counts", COUNTS_MEDIA_TYPE, self.to_bytes())
    }

    /// The counts a counts envelope's body carries.
    pub fn from_body(body: &Body) -> Result<Counts, DecodeError> {
        Counts::from_bytes(report_data(body, Self::WHAT, "counts", COUNTS_MEDIA_TYPE)?)
    }
}

/// The body of a machine's report to a sender (counts, a receipt): no
/// mailboxes, no text, one attachment `name` of `media_type`.
pub(crate) fn report_body(who: Who, name: &str, media_type: &str, data: Vec<u8>) -> Body {
    Body {
        who,
        from_mailbox: None,
        to_mailbox: None,
        text: String::new(),
        attachments: vec![Attachment {
            name: name.into(),
            media_type: media_type.into(),
            data,
        }],
    }
}

/// The data of the one attachment `name` of `media_type` a report's body
/// carries; any other body is not a report of `what`.
pub(crate) fn report_data<'a>(
    body: &'a Body,
    what: &'static str,
    name: &str,
    media_type: &str,
) -> Result<&'a [u8], DecodeError> {
    match body.attachments.as_slice() {
        [a] if a.name == name && a.media_type == media_type => Ok(&a.data),
        _ => Err(DecodeError::Field {
            what,
            field: "attachments",
            problem: format!("is not one attachment named {name} of type {media_type}"),
        }),
    }
}

fn opt_name(f: &mut Fields, field: &'static str) -> Result<Option<Name>, DecodeError> {
    match f.value(field)? {
        Value::Null => Ok(None),
        v => {
            let mut one = Fields::new(field, Value::Array(vec![v]), 1)?;
            name_field(&mut one, field, "mailbox name").map(Some)
        }
    }
}
