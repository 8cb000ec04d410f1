//! The typed client of the local API: the one way every command talks to
//! the daemon.
//!
//! A [`Client`] makes one call at a time and keeps the events that arrive
//! meanwhile. [`Client::split`] turns it into a request half and an event
//! half, so one process (the MCP server) can wait for events while it
//! makes calls:
//!
//! ```text
//!  Requests::call ── (op, answer) ──┐                    ┌── responses, by id ──> answer
//!                                   v                    │
//!                      the connection's task: frames out and in
//!                                                        └── events (bounded; a full
//!                                                            queue turns into `lagged`) ──> Events::next
//! ```

use std::path::PathBuf;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

use crate::api::{
    self, API_VERSION, ApiError, ClientFrame, DaemonFrame, MAX_FRAME_BYTES, MailOp, Op, PostOp,
    Request, Who, ops,
};
use crate::codes::ErrorCode;
use crate::frames::{Line, LineCodec};
use crate::home::Home;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No daemon is listening on the home's socket.
    #[error(
        "the agentmesh daemon is not running (nothing is listening on {socket}); start it with `agentmesh up`"
    )]
    NotRunning {
        /// The socket that was tried.
        socket: PathBuf,
    },
    /// The daemon answered the request with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The daemon refused a frame, or answered something unexpected.
    #[error("the daemon answered unexpectedly: {0}")]
    Protocol(String),
    /// The connection failed midway.
    #[error("the connection to the daemon failed: {0}")]
    Io(String),
}

impl ClientError {
    /// The API error code, when the daemon answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Api(e) => Some(e.code),
            _ => None,
        }
    }
}

/// An attached connection to the daemon.
#[derive(Debug)]
pub struct Client {
    framed: Framed<UnixStream, LineCodec>,
    next_id: u64,
    /// Events that arrived while a call waited for its answer.
    pending: std::collections::VecDeque<api::Event>,
    /// Events dropped from `pending` (how many, and the last message seq
    /// read before them), reported by the next `next_event`.
    lost: Option<(u64, u64)>,
    /// The newest message seq `next_event` returned.
    yielded_seq: u64,
    /// The daemon's PeerId.
    pub peer_id: String,
    /// The daemon's machine name.
    pub name: String,
    /// The newest message seq in the daemon's inbox when this client
    /// attached (see [`DaemonFrame::Attached`]).
    pub attached_seq: u64,
    /// Attached for requests only: how to connect again (the daemon
    /// closes such a connection after [`api::REQUEST_IDLE`] without a
    /// request), and when it last asked.
    again: Option<(Home, Who, tokio::time::Instant)>,
    /// Idle this long, it connects again before a call.
    stale_after: std::time::Duration,
}

impl Client {
    /// Connects to the daemon of `home` and attaches as `who`, to no
    /// mailbox, for requests only: it is sent no events (its
    /// [`Client::next_event`] never returns one), and it may take the
    /// client slots the daemon keeps free for such clients, so a command or
    /// a hook gets in however many event clients are attached.
    /// A command that waits for a person between calls (a prompt) may
    /// make its next call after the daemon closed the idle connection:
    /// it connects again first, as it does when the daemon says `idle`.
    pub async fn connect(home: &Home, who: Who) -> Result<Client, ClientError> {
        let mut c = Client::open(home, who.clone(), None, None, false, false).await?;
        c.again = Some((home.clone(), who, tokio::time::Instant::now()));
        Ok(c)
    }

    /// Connects and attaches as `who` to `mailbox` (`None`: every mailbox),
    /// for events and requests; with `after_seq`, the daemon first replays
    /// the stored messages after it as events.
    pub async fn attach(
        home: &Home,
        who: Who,
        mailbox: Option<String>,
        after_seq: Option<u64>,
    ) -> Result<Client, ClientError> {
        Client::open(home, who, mailbox, after_seq, true, false).await
    }

    /// [`Client::attach`], with `folders` events too (a folder allowed or
    /// denied: an MCP server that keeps its folder's mailbox asks again).
    pub async fn attach_with_folders(
        home: &Home,
        who: Who,
        mailbox: Option<String>,
    ) -> Result<Client, ClientError> {
        Client::open(home, who, mailbox, None, true, true).await
    }

    async fn open(
        home: &Home,
        who: Who,
        mailbox: Option<String>,
        after_seq: Option<u64>,
        events: bool,
        folders: bool,
    ) -> Result<Client, ClientError> {
        let socket = home.socket();
        let stream = UnixStream::connect(&socket)
            .await
            .map_err(|_| ClientError::NotRunning {
                socket: socket.clone(),
            })?;
        let mut framed = Framed::new(stream, LineCodec::new(MAX_FRAME_BYTES));
        let attach = ClientFrame::Attach {
            version: API_VERSION,
            who,
            mailbox,
            after_seq,
            events,
            folders,
        };
        send(&mut framed, &attach).await?;
        match recv(&mut framed).await? {
            DaemonFrame::Attached {
                peer_id,
                name,
                last_seq,
                ..
            } => Ok(Client {
                attached_seq: last_seq,
                framed,
                next_id: 0,
                pending: std::collections::VecDeque::new(),
                lost: None,
                yielded_seq: after_seq.unwrap_or(0),
                peer_id,
                name,
                again: None,
                stale_after: api::REQUEST_IDLE.saturating_sub(std::time::Duration::from_secs(1)),
            }),
            // A refusal (`busy`, `version_mismatch`, `bad_mailbox`…) keeps
            // its code: the caller says what it means and what to do.
            DaemonFrame::Error { code, message } => {
                Err(ClientError::Api(ApiError { code, message }))
            }
            other => Err(ClientError::Protocol(format!("{other:?}"))),
        }
    }

    /// Makes request `r`; its answer.
    pub async fn call<R: Request>(&mut self, r: R) -> Result<R::Answer, ClientError> {
        self.call_as(r.into_op()).await
    }

    /// Runs `op` and reads its result as `T`: what [`Client::call`] does,
    /// for a caller that reads an answer as something else than its
    /// request names (a test of what the socket carries).
    pub async fn call_as<T: DeserializeOwned>(&mut self, op: Op) -> Result<T, ClientError> {
        too_large(&op)?;
        // Idle for about as long as the daemon keeps such a connection:
        // a new one, rather than a request it may close unread.
        let stale = self.stale_after;
        if self
            .again
            .as_ref()
            .is_some_and(|(_, _, at)| at.elapsed() >= stale)
        {
            self.reconnect().await?;
        }
        let retry = self.again.is_some().then(|| op.clone());
        match (self.call_once(op).await, retry) {
            // Closed as idle before the request was read: it did not run,
            // so it is sent again, once, on a new connection. The daemon
            // says `idle` when the request reached a connection it was
            // closing; one that was closed already refuses the write.
            (Err(Failed::Unsent(_) | Failed::Idle(_)), Some(op)) => {
                self.reconnect().await?;
                self.call_once(op).await.map_err(Failed::into_error)
            }
            (other, _) => other.map_err(Failed::into_error),
        }
    }

    /// How long this client (attached for requests only) may idle before
    /// it connects again ahead of a call; by default a second short of
    /// the daemon's [`api::REQUEST_IDLE`]. (A test sets it long, to see
    /// the daemon close it and the call still go.)
    #[doc(hidden)]
    pub fn connect_again_after(&mut self, idle: std::time::Duration) {
        self.stale_after = idle;
    }

    /// Connects again, for requests only, as the same client.
    async fn reconnect(&mut self) -> Result<(), ClientError> {
        let Some((home, who, at)) = self.again.take() else {
            return Ok(());
        };
        match Client::connect(&home, who.clone()).await {
            Ok(fresh) => {
                self.framed = fresh.framed;
                self.attached_seq = fresh.attached_seq;
                self.again = fresh.again;
                Ok(())
            }
            Err(e) => {
                // Still the same client: it may try again at its next call.
                self.again = Some((home, who, at));
                Err(e)
            }
        }
    }

    async fn call_once<T: DeserializeOwned>(&mut self, op: Op) -> Result<T, Failed> {
        self.next_id += 1;
        let id = self.next_id;
        send(&mut self.framed, &ClientFrame::Request { id, op })
            .await
            .map_err(Failed::Unsent)?;
        let answered = self.answer::<T>(id).await;
        // The daemon's idle time starts once it has answered.
        if let Some((_, _, at)) = &mut self.again {
            *at = tokio::time::Instant::now();
        }
        answered.map_err(|e| match e {
            ClientError::Api(a) if a.code == ErrorCode::Idle => Failed::Idle(ClientError::Api(a)),
            e => Failed::Other(e),
        })
    }

    /// Reads frames until the answer to request `id`.
    async fn answer<T: DeserializeOwned>(&mut self, id: u64) -> Result<T, ClientError> {
        loop {
            match recv(&mut self.framed).await? {
                DaemonFrame::Response {
                    id: got,
                    ok,
                    result,
                    error,
                } if got == id => {
                    return serde_json::from_value(result_of(ok, result, error)?)
                        .map_err(|e| ClientError::Protocol(e.to_string()));
                }
                DaemonFrame::Error { code, message } => {
                    return Err(ClientError::Api(ApiError { code, message }));
                }
                // Kept for `next_event`, bounded like the daemon's queue.
                DaemonFrame::Event { event } => {
                    if self.pending.len() == api::EVENT_QUEUE {
                        // Dropped, but not silently: the next event this
                        // client reads says how many were missed and from
                        // where to catch up, as the daemon's own does.
                        let dropped = self.pending.pop_front();
                        let (missed, after_seq) = self.lost.unwrap_or_else(|| {
                            // Caught up to what was read, or (attached
                            // "from now on", nothing read yet) to just
                            // before the first message dropped.
                            let before = match &dropped {
                                Some(api::Event::Message { message }) if self.yielded_seq == 0 => {
                                    message.seq.saturating_sub(1)
                                }
                                _ => self.yielded_seq,
                            };
                            (0, before)
                        });
                        self.lost = Some((missed + 1, after_seq));
                    }
                    self.pending.push_back(*event);
                }
                // Responses to other requests are not ours.
                _ => continue,
            }
        }
    }

    /// `status`.
    pub async fn status(&mut self) -> Result<api::Status, ClientError> {
        self.call(ops::Status).await
    }

    /// Every row of the peer table, gathered page by page.
    pub async fn peers(&mut self) -> Result<Vec<api::PeerRow>, ClientError> {
        let mut rows = vec![];
        let mut after = None;
        loop {
            let page: api::PeersPage = self.call(ops::Peers { after, limit: None }).await?;
            rows.extend(page.peers);
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(rows),
            }
        }
    }

    /// The next event pushed to this client, including those that arrived
    /// while [`Client::call`] waited for an answer.
    pub async fn next_event(&mut self) -> Result<api::Event, ClientError> {
        if let Some((missed, after_seq)) = self.lost.take() {
            return Ok(api::Event::Lagged { missed, after_seq });
        }
        let event = match self.pending.pop_front() {
            Some(e) => e,
            None => loop {
                if let DaemonFrame::Event { event } = recv(&mut self.framed).await? {
                    break *event;
                }
            },
        };
        if let api::Event::Message { message } = &event {
            self.yielded_seq = self.yielded_seq.max(message.seq);
        }
        Ok(event)
    }
}

/// A message too large (or empty) is said here, before the text is
/// escaped into a frame whose own limit would give a less useful answer.
fn too_large(op: &Op) -> Result<(), ClientError> {
    if let Op::Mail(MailOp::Post(PostOp::Send(ops::Send { text, .. }))) = op {
        api::check_text(text).map_err(ClientError::Api)?;
    }
    Ok(())
}

/// How one try of a call failed: whether the request can have run.
#[derive(Debug)]
enum Failed {
    /// It was never written: the connection was closed already.
    Unsent(ClientError),
    /// The daemon closed the connection as idle before reading it.
    Idle(ClientError),
    /// Anything else (it may have run).
    Other(ClientError),
}

impl Failed {
    fn into_error(self) -> ClientError {
        match self {
            Failed::Unsent(e) | Failed::Idle(e) | Failed::Other(e) => e,
        }
    }
}

/// A response frame as a call's result.
fn result_of(
    ok: bool,
    result: Option<serde_json::Value>,
    error: Option<ApiError>,
) -> Result<serde_json::Value, ClientError> {
    if ok {
        Ok(result.unwrap_or(serde_json::Value::Null))
    } else {
        Err(ClientError::Api(error.unwrap_or_else(|| {
            ApiError::new(ErrorCode::Unknown, "the daemon gave no reason")
        })))
    }
}

async fn send(
    framed: &mut Framed<UnixStream, LineCodec>,
    frame: &ClientFrame,
) -> Result<(), ClientError> {
    framed
        .send(serde_json::to_string(frame).expect("client frames always serialise"))
        .await
        .map_err(|e| ClientError::Io(e.to_string()))
}

async fn recv(framed: &mut Framed<UnixStream, LineCodec>) -> Result<DaemonFrame, ClientError> {
    let line = framed
        .next()
        .await
        .ok_or_else(|| ClientError::Io("the daemon closed the connection".into()))?
        .map_err(|e| ClientError::Io(e.to_string()))?;
    let line = match line {
        Line::Text(l) => l,
        Line::TooLarge => {
            return Err(ClientError::Protocol(format!(
                "the daemon sent a frame over {MAX_FRAME_BYTES} bytes"
            )));
        }
        Line::NotUtf8 => {
            return Err(ClientError::Protocol(
                "the daemon sent a frame that is not UTF-8".into(),
            ));
        }
    };
    serde_json::from_str(&line).map_err(|e| ClientError::Protocol(format!("{e}: {line}")))
}

/// How many calls may wait to be written at once.
const CALL_QUEUE: usize = 64;

/// Aborts the connection's task once both halves are gone.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

type Answer = tokio::sync::oneshot::Sender<Result<serde_json::Value, ClientError>>;

/// The request half of a split client: calls, from any task, at once.
#[derive(Debug, Clone)]
pub struct Requests {
    out: tokio::sync::mpsc::Sender<(Op, Answer)>,
    _task: std::sync::Arc<AbortOnDrop>,
    /// The daemon's PeerId.
    pub peer_id: String,
    /// The daemon's machine name.
    pub name: String,
}

/// The event half of a split client.
#[derive(Debug)]
pub struct Events {
    rx: tokio::sync::mpsc::Receiver<Result<api::Event, ClientError>>,
    _task: std::sync::Arc<AbortOnDrop>,
}

impl Requests {
    /// Whether the connection is gone (the daemon went, or stopped
    /// answering frames): every call on it fails.
    pub fn is_closed(&self) -> bool {
        self.out.is_closed()
    }

    /// Makes request `r`; its answer.
    pub async fn call<R: Request>(&self, r: R) -> Result<R::Answer, ClientError> {
        self.call_as(r.into_op()).await
    }

    /// Runs `op` and reads its result as `T` (see [`Client::call_as`]).
    pub async fn call_as<T: DeserializeOwned>(&self, op: Op) -> Result<T, ClientError> {
        too_large(&op)?;
        let (answer, rx) = tokio::sync::oneshot::channel();
        let gone = || ClientError::Io("the daemon closed the connection".into());
        self.out.send((op, answer)).await.map_err(|_| gone())?;
        let value = rx.await.map_err(|_| gone())??;
        serde_json::from_value(value).map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

impl Events {
    /// The next event pushed to this client; an error once the connection
    /// is gone.
    pub async fn next(&mut self) -> Result<api::Event, ClientError> {
        self.rx
            .recv()
            .await
            .unwrap_or_else(|| Err(ClientError::Io("the daemon closed the connection".into())))
    }
}

/// Events for the event half that did not fit its queue: how many, and
/// the last message seq queued before them.
#[derive(Debug, Default)]
struct Lost {
    missed: u64,
    after_seq: u64,
    queued_seq: u64,
}

impl Lost {
    /// Queues `event`, or counts it lost; a loss is told (as `lagged`)
    /// before the next event that fits.
    fn queue(
        &mut self,
        tx: &tokio::sync::mpsc::Sender<Result<api::Event, ClientError>>,
        event: api::Event,
    ) {
        use tokio::sync::mpsc::error::TrySendError;
        if self.missed > 0 {
            let lagged = api::Event::Lagged {
                missed: self.missed,
                after_seq: self.after_seq,
            };
            match tx.try_send(Ok(lagged)) {
                Ok(()) => self.missed = 0,
                Err(TrySendError::Full(_)) => {
                    self.missed += 1;
                    return;
                }
                Err(TrySendError::Closed(_)) => return,
            }
        }
        let seq = match &event {
            api::Event::Message { message } => Some(message.seq),
            _ => None,
        };
        match tx.try_send(Ok(event)) {
            Ok(()) => {
                if let Some(seq) = seq {
                    self.queued_seq = self.queued_seq.max(seq);
                }
            }
            Err(TrySendError::Full(_)) => {
                // Caught up to what was queued, or (nothing queued yet) to
                // just before the first message lost.
                self.after_seq = match seq {
                    Some(s) if self.queued_seq == 0 => s.saturating_sub(1),
                    _ => self.queued_seq,
                };
                self.missed = 1;
            }
            Err(TrySendError::Closed(_)) => {}
        }
    }
}

impl Client {
    /// Splits the client into a request half and an event half, served by
    /// one task that ends with the connection (or once both halves are
    /// dropped). Events that arrived before are kept, in order.
    #[expect(
        clippy::disallowed_methods,
        reason = "the connection's task is owned by the two halves, which abort it when both are dropped (AbortOnDrop)"
    )]
    pub fn split(self) -> (Requests, Events) {
        let (out, mut calls) = tokio::sync::mpsc::channel::<(Op, Answer)>(CALL_QUEUE);
        let (events, rx) = tokio::sync::mpsc::channel(api::EVENT_QUEUE);
        let Client {
            mut framed,
            mut next_id,
            pending,
            lost,
            yielded_seq,
            peer_id,
            name,
            ..
        } = self;
        let task = tokio::spawn(async move {
            let mut lost_now = Lost {
                queued_seq: yielded_seq,
                ..Lost::default()
            };
            if let Some((missed, after_seq)) = lost {
                let _ = events.try_send(Ok(api::Event::Lagged { missed, after_seq }));
            }
            for e in pending {
                lost_now.queue(&events, e);
            }
            let mut waiting: std::collections::HashMap<u64, Answer> = Default::default();
            let mut calling = true;
            loop {
                tokio::select! {
                    call = calls.recv(), if calling => match call {
                        None => calling = false,
                        Some((op, answer)) => {
                            next_id += 1;
                            let frame = ClientFrame::Request { id: next_id, op };
                            match send(&mut framed, &frame).await {
                                Ok(()) => {
                                    waiting.insert(next_id, answer);
                                }
                                Err(e) => {
                                    let _ = answer.send(Err(e));
                                }
                            }
                        }
                    },
                    frame = recv(&mut framed) => match frame {
                        Ok(DaemonFrame::Response { id, ok, result, error }) => {
                            if let Some(answer) = waiting.remove(&id) {
                                let _ = answer.send(result_of(ok, result, error));
                            }
                        }
                        Ok(DaemonFrame::Event { event }) => lost_now.queue(&events, *event),
                        Ok(DaemonFrame::Error { code, message }) => {
                            // Not tied to a request id: every call waiting
                            // hears it.
                            for (_, answer) in waiting.drain() {
                                let e = ApiError { code, message: message.clone() };
                                let _ = answer.send(Err(ClientError::Api(e)));
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            for (_, answer) in waiting.drain() {
                                let _ = answer.send(Err(ClientError::Io(e.to_string())));
                            }
                            let _ = events.send(Err(e)).await;
                            return;
                        }
                    },
                }
                if !calling && waiting.is_empty() && events.is_closed() {
                    return;
                }
            }
        });
        let task = std::sync::Arc::new(AbortOnDrop(task));
        (
            Requests {
                out,
                _task: task.clone(),
                peer_id,
                name,
            },
            Events { rx, _task: task },
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    fn message(seq: u64) -> api::Event {
        let m = serde_json::json!({
            "id": format!("{seq:032x}"), "seq": seq, "from": "@alpha",
            "who": {"kind": "agent", "name": "codex"}, "kind": "tell",
            "thread": format!("{seq:032x}"), "in_reply_to": null, "text": "hi",
            "received_at": "2026-12-01T00:00:00Z", "read": false, "mailbox": null,
            "held": null, "hop": 0, "taint": false,
        });
        api::Event::Message {
            message: serde_json::from_value(m).unwrap(),
        }
    }

    /// A full event queue loses events but says so: `lagged`, with how
    /// many and where to catch up, before the next event that fits.
    #[test]
    fn a_full_event_queue_turns_into_lagged() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let mut lost = Lost::default();
        for seq in 1..=5 {
            lost.queue(&tx, message(seq));
        }
        let seqs: Vec<u64> = (0..2)
            .map(|_| match rx.try_recv().unwrap().unwrap() {
                api::Event::Message { message } => message.seq,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seqs, [1, 2]);
        lost.queue(&tx, message(6));
        match rx.try_recv().unwrap().unwrap() {
            api::Event::Lagged { missed, after_seq } => assert_eq!((missed, after_seq), (3, 2)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            rx.try_recv().unwrap().unwrap(),
            api::Event::Message { .. }
        ));
    }
}
