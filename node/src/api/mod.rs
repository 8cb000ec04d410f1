//! The local API: what clients and the daemon say over the Unix socket.
//!
//! Newline-delimited JSON, one frame per line, in both directions. Every
//! client (the CLI, the MCP server, hooks, `watch`) opens the socket and
//! sends the same first frame, `attach`; then `request` frames, each
//! answered by a `response` with the same `id`.
//!
//! ```text
//! client                                   daemon
//!   {"type":"attach","version":1,"who":{"kind":"human","name":"ada"}}
//!                                          {"type":"attached","version":1,"peer_id":"12D3…","name":"ada-laptop"}
//!   {"type":"request","id":1,"op":"status"}
//!                                          {"type":"response","id":1,"ok":true,"result":{…}}
//!   {"type":"request","id":2,"op":"revoke","args":{"name":"old-box"}}
//!                                          {"type":"response","id":2,"ok":false,"error":{"code":"not_admin","message":"…"}}
//!   not json
//!                                          {"type":"error","code":"malformed_frame","message":"…"}
//! ```
//!
//! A client that only makes requests (a command, a hook) adds
//! `"events":false` to its `attach`: it is sent no events, and it may use
//! the client slots kept for such clients. A refused `attach` is answered
//! with an `error` frame (`busy`, `version_mismatch`, `bad_mailbox`…).
//!
//! A malformed or unknown frame gets an `error` frame naming the problem and
//! the connection stays usable. `who` is shown as claimed, never trusted:
//! rights come from how a client connected (the socket admits only the
//! daemon's own user), not from what it says it is.

use crate::codes::ErrorCode;
use serde::{Deserialize, Serialize};

mod answers;
mod bus;
pub mod ops;
mod sent;
mod views;
mod wake;
mod words;
pub use answers::*;
pub use bus::*;
pub use ops::{
    BusOp, ConsentOp, GuardOp, MailOp, NetOp, Op, PostOp, Request, SocketOp, TeamOp, WakeOp,
};
pub use sent::*;
pub use views::*;
pub use wake::*;
pub use words::*;

/// The API version this build speaks. `attach` with another is refused
/// with both versions named.
pub const API_VERSION: u32 = 1;

/// Events the daemon buffers for an attached client (and a split client
/// for its reader); a client further behind than this gets `lagged` and
/// catches up with `after_seq`.
pub const EVENT_QUEUE: usize = 1024;

/// The longest frame either side accepts, in bytes. Requests are small; a
/// team listing of a thousand machines is well under this.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// How long a client attached for requests only may send nothing before
/// the daemon closes its connection (telling it `idle`): a command or a
/// hook asks at once, and one that waits for a person (a prompt) connects
/// again when it asks next, as the typed client does by itself.
pub const REQUEST_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// Who a client says it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    /// `human` or `agent`.
    pub kind: WhoKind,
    /// The person's or agent's name.
    pub name: String,
    /// The agent session, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// What the session is working on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl Who {
    /// Whether it fits what an envelope carries and what people are shown:
    /// `name` and `session_id` one line each, with no control or invisible
    /// formatting character (the owner-name rule), and every field within
    /// the envelope's bounds. Checked when a client attaches.
    pub fn check(&self) -> Result<(), ApiError> {
        use agentmesh_protocol::envelope::{MAX_SESSION_ID, MAX_TASK, MAX_WHO_NAME};
        let long = |s: &Option<String>, max: usize| s.as_ref().is_some_and(|s| s.len() > max);
        if self.name.len() > MAX_WHO_NAME
            || long(&self.session_id, MAX_SESSION_ID)
            || long(&self.task, MAX_TASK)
        {
            return Err(ApiError::new(
                ErrorCode::BadWho,
                "who is too long (name 64, session_id 128, task 256 bytes)",
            ));
        }
        for (field, text) in [
            ("name", Some(&self.name)),
            ("session_id", self.session_id.as_ref()),
        ] {
            if let Some(problem) = text.and_then(|t| agentmesh_protocol::names::one_line_problem(t))
            {
                return Err(ApiError::new(
                    ErrorCode::BadWho,
                    format!(
                        "who.{field} is refused: {problem}; give a name of one line of plain text"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A person or an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhoKind {
    /// A person at a terminal.
    Human,
    /// An AI agent session.
    Agent,
}

impl WhoKind {
    /// The word the API and the audit log use.
    pub fn as_str(self) -> &'static str {
        match self {
            WhoKind::Human => "human",
            WhoKind::Agent => "agent",
        }
    }
}

impl From<WhoKind> for agentmesh_protocol::WhoKind {
    fn from(k: WhoKind) -> Self {
        match k {
            WhoKind::Human => agentmesh_protocol::WhoKind::Human,
            WhoKind::Agent => agentmesh_protocol::WhoKind::Agent,
        }
    }
}

impl From<agentmesh_protocol::WhoKind> for WhoKind {
    fn from(k: agentmesh_protocol::WhoKind) -> Self {
        match k {
            agentmesh_protocol::WhoKind::Human => WhoKind::Human,
            agentmesh_protocol::WhoKind::Agent => WhoKind::Agent,
        }
    }
}

/// A frame from a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// The first frame of every connection.
    Attach {
        /// [`API_VERSION`].
        version: u32,
        /// Who is attaching.
        who: Who,
        /// The mailbox to attach to (messaging; issue 4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
        /// Resume events after this sequence number (issue 4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_seq: Option<u64>,
        /// Whether the client wants events (default: yes). A client that
        /// only makes requests (a command, a hook) says `false`: it is sent
        /// no events, and it may take the client slots kept free for such
        /// clients (see `server::RESERVED_FOR_REQUESTS`).
        #[serde(default = "yes", skip_serializing_if = "is_yes")]
        events: bool,
        /// Whether the client wants `folders` events (an MCP server that
        /// keeps its folder's mailbox); default no, so that clients that
        /// don't know the event never see it.
        #[serde(default, skip_serializing_if = "is_no")]
        folders: bool,
    },
    /// A request, answered by a response with the same id.
    Request {
        /// Chosen by the client; echoed in the response.
        id: u64,
        /// What to do.
        #[serde(flatten)]
        op: Op,
    },
}

// serde helpers of the frames and ops.
fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

fn is_no(b: &bool) -> bool {
    !*b
}

/// A frame from the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DaemonFrame {
    /// The answer to `attach`.
    Attached {
        /// [`API_VERSION`].
        version: u32,
        /// This machine.
        peer_id: String,
        /// Its name.
        name: String,
        /// The newest message seq in this machine's inbox now: a client
        /// that reattaches later with `after_seq` set to it misses nothing.
        #[serde(default)]
        last_seq: u64,
    },
    /// The answer to a request.
    Response {
        /// The request's id.
        id: u64,
        /// Whether it succeeded.
        ok: bool,
        /// The result, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        /// The error, when it did not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ApiError>,
    },
    /// Something happened that an attached client should know.
    Event {
        /// What.
        event: Box<Event>,
    },
    /// A frame-level problem: the frame could not be read or is not allowed
    /// now. The connection stays usable.
    Error {
        /// A stable code, such as `malformed_frame`.
        code: ErrorCode,
        /// What went wrong and what to do.
        message: String,
    },
}

/// A request's failure: a stable code for programs, a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// A stable code: `not_in_team`, `not_admin`, `wrong_code`…
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }

    /// The daemon is stopping: the answer every part gives once its inbox
    /// has closed.
    pub fn shutting_down() -> Self {
        ApiError::new(ErrorCode::ShuttingDown, "the daemon is shutting down")
    }
}

/// Whether `text` can be a message's text, as far as the text alone
/// says: not empty (nor only whitespace: a message that says nothing is a
/// mistake, not a message), and not over what a message carries
/// ([`MAX_BODY_BYTES`](agentmesh_protocol::cbor::MAX_BODY_BYTES)). The
/// daemon checks every `send` (a text that fits alone may not fit beside
/// the rest of the body); clients check first to say so before sending.
pub fn check_text(text: &str) -> Result<(), ApiError> {
    use agentmesh_protocol::cbor::MAX_BODY_BYTES;
    if text.trim().is_empty() {
        return err(
            ErrorCode::EmptyText,
            "the message is empty (no text, or only whitespace); give it some text",
        );
    }
    if text.len() > MAX_BODY_BYTES {
        return err(ErrorCode::TooLarge, too_large_text(text.len() as u64));
    }
    Ok(())
}

/// Why a text of `len` bytes can't be sent, and what to do: `too_large`'s
/// message (as [`check_text`] gives it).
pub fn too_large_text(len: u64) -> String {
    format!(
        "the text is {len} bytes, more than one message carries ({} bytes, 64 KiB); split it into parts and send each as its own message",
        agentmesh_protocol::cbor::MAX_BODY_BYTES
    )
}

/// A request's answer inside the daemon: the typed value its handler
/// returned, serialised only at the socket's edge ([`Answer::to_json`]).
pub type Reply = Result<Answer, ApiError>;

/// A typed answer, as its handler made it.
#[derive(Debug)]
pub struct Answer(Box<dyn AnswerBody>);

/// What an answer can be: any serialisable value.
trait AnswerBody: Send + std::fmt::Debug + 'static {
    fn json(&self) -> serde_json::Result<serde_json::Value>;
    fn any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
    fn type_id_of(&self) -> std::any::TypeId;
}

impl<T: Serialize + Send + std::fmt::Debug + 'static> AnswerBody for T {
    fn json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::to_value(self)
    }
    fn any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
    fn type_id_of(&self) -> std::any::TypeId {
        std::any::TypeId::of::<T>()
    }
}

impl Answer {
    /// `value` as an answer.
    pub fn new<T: Serialize + Send + std::fmt::Debug + 'static>(value: T) -> Answer {
        Answer(Box::new(value))
    }

    /// It as the socket carries it.
    pub fn to_json(&self) -> serde_json::Value {
        self.0.json().expect("API results always serialise")
    }

    /// It as the type its handler made, or itself if it is another.
    pub fn take<T: 'static>(self) -> Result<T, Answer> {
        // Asked first, so a wrong guess keeps the answer whole.
        if (*self.0).type_id_of() == std::any::TypeId::of::<T>() {
            Ok(*self
                .0
                .any()
                .downcast::<T>()
                .expect("the type was just compared"))
        } else {
            Err(self)
        }
    }
}

/// A handler's typed answer to request `R`, as the daemon passes it on:
/// the compiler holds the handler to the answer `R` names.
pub fn answer<R: Request>(answer: Result<R::Answer, ApiError>) -> Reply {
    answer.map(Answer::new)
}

/// An error answer with `code` and `message`.
pub fn err<T>(code: ErrorCode, message: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::new(code, message))
}

/// A time as the API shows it: RFC 3339, to the second. Saturates rather
/// than overflows on absurd (but signed) timestamps.
pub fn rfc3339(t: agentmesh_protocol::Timestamp) -> String {
    rfc3339_ms(t.as_unix_millis())
}

/// [`rfc3339`] of Unix milliseconds, as records keep them.
pub fn rfc3339_ms(ms: u64) -> String {
    let secs = (ms / 1000).min(253_402_300_799); // 9999-12-31
    humantime::format_rfc3339_seconds(
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs),
    )
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_the_documented_shape() {
        let attach: ClientFrame = serde_json::from_str(
            r#"{"type":"attach","version":1,"who":{"kind":"agent","name":"claude","session_id":"s1"}}"#,
        )
        .unwrap();
        assert!(matches!(attach, ClientFrame::Attach { version: 1, .. }));
        let req: ClientFrame =
            serde_json::from_str(r#"{"type":"request","id":7,"op":"revoke","args":{"name":"x"}}"#)
                .unwrap();
        assert_eq!(
            req,
            ClientFrame::Request {
                id: 7,
                op: ops::Revoke { name: "x".into() }.into_op()
            }
        );
        let unit: ClientFrame =
            serde_json::from_str(r#"{"type":"request","id":1,"op":"status"}"#).unwrap();
        assert_eq!(
            unit,
            ClientFrame::Request {
                id: 1,
                op: ops::Status.into_op()
            }
        );
        let back = serde_json::to_string(&ClientFrame::Request {
            id: 1,
            op: ops::Status.into_op(),
        })
        .unwrap();
        assert_eq!(back, r#"{"type":"request","id":1,"op":"status"}"#);
    }
}
