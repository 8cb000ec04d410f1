//! The operations a client may request: one struct each, named by the
//! answer it gets ([`Request::Answer`]), grouped by who serves it.
//!
//! ```text
//! Op ─┬─ Net(NetOp)        the network's loop: status, peers, connect, shutdown, config
//!     ├─ Socket(SocketOp)  the socket server itself: the web page's address
//!     ├─ Team(TeamOp)      the team part (inside the network's loop)
//!     └─ Mail(MailOp) ─┬─ Post(PostOp)        a letter's life
//!                      ├─ Consent(ConsentOp)  folders, trust, pause, held mail
//!                      ├─ Guard(GuardOp)      hops, taint (the test clock)
//!                      ├─ Bus(BusOp)          profiles, broadcasts, the bus's log
//!                      └─ Wake(WakeOp)        wake settings, runs, sessions
//! ```
//!
//! On the socket an op is `{"op":"send","args":{…}}` as it always was: the
//! groups are only how the daemon routes it, and each owner matches its
//! own enum whole.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

mod bus;
mod consent;
mod guard;
mod net;
mod post;
mod team;
mod wake;
pub use bus::*;
pub use consent::*;
pub use guard::*;
pub use net::*;
pub use post::*;
pub use team::*;
pub use wake::*;

/// A request a client may make, and the answer it gets.
pub trait Request: Sized {
    /// What the daemon answers it with.
    type Answer: Serialize + DeserializeOwned + std::marker::Send + std::fmt::Debug + 'static;
    /// It, as the op the socket carries.
    fn into_op(self) -> Op;
}

/// Defines each request's answer and the op it is.
macro_rules! requests {
    ($($req:ident => $answer:ty = $wrap:expr;)+) => {$(
        impl $crate::api::ops::Request for $req {
            type Answer = $answer;
            fn into_op(self) -> $crate::api::ops::Op {
                $crate::api::ops::Op::from(($wrap)(self))
            }
        }
    )+};
}
pub(crate) use requests;

/// The operations a client may request, by who serves them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Op {
    /// The network's loop.
    Net(NetOp),
    /// The socket server itself.
    Socket(SocketOp),
    /// The team part.
    Team(TeamOp),
    /// The mail actor.
    Mail(MailOp),
}

/// The mail actor's operations, by wing.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum MailOp {
    /// A letter's life: send, the inbox, the outbox, receipts, `take`.
    Post(PostOp),
    /// Folders, trust, pause, held mail and its approval.
    Consent(ConsentOp),
    /// Hops and taint.
    Guard(GuardOp),
    /// Profiles, broadcasts, the bus's log and stats.
    Bus(BusOp),
    /// Wake settings, runs, sessions.
    Wake(WakeOp),
}

impl MailOp {
    /// Whether its answer may wait on something outside the daemon (a
    /// send that waits for its recipient's first answer): the server
    /// answers the client's later requests meanwhile.
    pub fn waits(&self) -> bool {
        matches!(
            self,
            MailOp::Post(PostOp::Send(Send {
                wait_first_answer_ms: Some(_),
                ..
            }))
        )
    }
}

macro_rules! into_op {
    ($($group:ident => $wrap:expr;)+) => {$(
        impl From<$group> for Op {
            fn from(op: $group) -> Op {
                ($wrap)(op)
            }
        }
    )+};
}

into_op! {
    NetOp => Op::Net;
    SocketOp => Op::Socket;
    TeamOp => Op::Team;
    MailOp => Op::Mail;
    PostOp => |o| Op::Mail(MailOp::Post(o));
    ConsentOp => |o| Op::Mail(MailOp::Consent(o));
    GuardOp => |o| Op::Mail(MailOp::Guard(o));
    BusOp => |o| Op::Mail(MailOp::Bus(o));
    WakeOp => |o| Op::Mail(MailOp::Wake(o));
}

/// Reads an op's fields into JSON, for its group to read.
struct Fields;

impl<'de> serde::de::Visitor<'de> for Fields {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object with \"op\" and \"args\"")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
            fields.insert(k, v);
        }
        Ok(serde_json::Value::Object(fields))
    }
}

/// How serde words an op it does not know (the server answers
/// `unknown_op` on it).
const UNKNOWN: &str = "unknown variant";

impl<'de> Deserialize<'de> for Op {
    /// By its `op` word, as the group that has it reads it: a group that
    /// does not know the word passes it on; one that does says what is
    /// wrong with its arguments.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        use serde::de::Error;
        // As a struct of `op` and `args`: what a frame that flattens it
        // hands over (and takes from its own fields).
        let value = d.deserialize_struct("Op", &["op", "args"], Fields)?;
        let word = value.get("op").and_then(|w| w.as_str()).unwrap_or_default();
        // What serde says of an op word a group does not have (and not of
        // an argument's word, which the group that has the op says).
        let not_here = format!("{UNKNOWN} `{word}`");
        let mut known = vec![];
        macro_rules! try_group {
            ($group:ty) => {
                match <$group>::deserialize(&value) {
                    Ok(op) => return Ok(Op::from(op)),
                    Err(e) => {
                        let e = e.to_string();
                        if !e.starts_with(&not_here) {
                            return Err(D::Error::custom(e));
                        }
                        // `expected one of `a`, `b``, `expected `a` or
                        // `b``, or `expected `a``.
                        if let Some((_, names)) = e.split_once("expected ") {
                            let names = names.strip_prefix("one of ").unwrap_or(names);
                            known.push(names.replace("` or `", "`, `"));
                        }
                    }
                }
            };
        }
        try_group!(NetOp);
        try_group!(SocketOp);
        try_group!(TeamOp);
        try_group!(PostOp);
        try_group!(ConsentOp);
        try_group!(GuardOp);
        try_group!(BusOp);
        try_group!(WakeOp);
        Err(D::Error::custom(format!(
            "{not_here}, expected one of {}",
            known.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> Result<Op, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_op_reads_into_its_group_as_it_always_read() {
        assert_eq!(read(r#"{"op":"status"}"#), Ok(Status.into_op()));
        assert_eq!(
            read(r#"{"op":"revoke","args":{"name":"x"}}"#),
            Ok(Revoke { name: "x".into() }.into_op())
        );
        assert_eq!(read(r#"{"op":"held"}"#), Ok(Held.into_op()));
        let send = r#"{"op":"send","args":{"to":"@b","text":"hi"}}"#;
        let Ok(Op::Mail(MailOp::Post(PostOp::Send(s)))) = read(send) else {
            panic!("send reads as the post wing's: {:?}", read(send));
        };
        assert_eq!((s.to.as_str(), s.ask), ("@b", false));
        // And writes back as the same JSON.
        let back = serde_json::to_string(&Take::default().into_op()).unwrap();
        assert_eq!(back, r#"{"op":"take","args":{"peek":false,"stop":false}}"#);
    }

    #[test]
    fn a_wrong_op_is_named_by_the_group_that_has_it() {
        // Its arguments: the group that knows the word says what is wrong.
        let e = read(r#"{"op":"send","args":{"text":"hi"}}"#).unwrap_err();
        assert!(e.contains("missing field `to`"), "{e}");
        // A word of its arguments that is not one: said as such, by it.
        let e = read(r#"{"op":"wake_set","args":{"mailbox":"m","wake":"bogus"}}"#).unwrap_err();
        assert!(e.starts_with("unknown variant `bogus`, expected"), "{e}");
        assert!(!e.contains("`status`"), "not a list of ops: {e}");
        // A word no group knows: unknown, with every group's words.
        let e = read(r#"{"op":"teleport"}"#).unwrap_err();
        assert!(
            e.starts_with("unknown variant `teleport`, expected one of `status`"),
            "{e}"
        );
        for word in [
            "`status`",
            "`team_show`",
            "`send`",
            "`held`",
            "`taint`",
            "`broadcast`",
            "`wake_set`",
            "`ui`",
        ] {
            assert!(e.contains(word), "{word} is listed: {e}");
        }
    }

    #[test]
    fn only_a_send_that_waits_for_its_first_answer_waits() {
        let wait = |ms| Send {
            wait_first_answer_ms: ms,
            ..Send::default()
        };
        let Op::Mail(waits) = wait(Some(100)).into_op() else {
            unreachable!()
        };
        let Op::Mail(not) = wait(None).into_op() else {
            unreachable!()
        };
        assert!(waits.waits() && !not.waits());
    }
}
