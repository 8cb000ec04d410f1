//! The local API server: the Unix socket every client attaches to.
//!
//! The socket lives in `HOME/run` (mode 0700) and accepts only processes of
//! the daemon's own user, checked with the socket's peer credentials. That
//! is the whole of its access control: every process of that user is
//! trusted alike (docs/security.md). Each connection is served by its own
//! task; requests go to the node over its bounded command channel.
//!
//! A connection has [`ATTACH_TIMEOUT`] to send its `attach` frame. Until it
//! does it holds no client slot: at most [`MAX_CLIENTS`] clients are
//! attached, and at most [`MAX_UNATTACHED`] connections wait to attach;
//! past that the oldest waiting one is told `busy` and closed, so idle
//! sockets can never lock a well-behaved client out. A client that finds
//! every slot taken is told `busy` too, never reset without a word.
//!
//! Clients are told apart by what they asked for, never by who they claim
//! to be: one that attached for events (`watch`, an MCP server: long-lived)
//! may take at most [`MAX_EVENT_CLIENTS`] slots, so [`RESERVED_FOR_REQUESTS`]
//! stay free for clients that attached for requests only (`"events":
//! false`: a command, a hook, there for milliseconds). One of those that
//! sends no request for [`REQUEST_IDLE`] is told `idle` and closed, so
//! idle ones can't hold the reserved slots either (the typed client
//! connects again by itself). However many agent sessions are attached,
//! `status`, `send` and hooks still get in.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinSet;
use tokio_util::codec::Framed;
use tokio_util::sync::CancellationToken;

use crate::api::{
    API_VERSION, ApiError, ClientFrame, DaemonFrame, Event, MAX_FRAME_BYTES, NetOp, Op, SocketOp,
    Status, Who, WhoKind, answer, ops,
};
use crate::codes::ErrorCode;
use crate::frames::{Line, LineCodec, parse_strict};
use crate::mail::MailHandle;
use crate::net::{Handle, NodeOp};
use tokio::sync::broadcast;

/// The most clients attached at once, of both kinds. Each costs a task,
/// two small buffers and a file descriptor (tens of KiB in all): a machine
/// running hundreds of agent sessions (one connection each) fits, and a
/// runaway script opening connections in a loop hits this instead of
/// exhausting file descriptors.
pub const MAX_CLIENTS: usize = 1024;

/// Client slots only clients attached for requests only may take: a
/// command or a hook holds its slot for milliseconds, so 64 at once is
/// more than a machine's sessions reach at one turn boundary, and with
/// every other slot held by long-lived clients they still get in.
pub const RESERVED_FOR_REQUESTS: usize = 64;

/// The most clients attached for events at once (`watch`, MCP servers):
/// every slot but the reserved ones.
pub const MAX_EVENT_CLIENTS: usize = MAX_CLIENTS - RESERVED_FOR_REQUESTS;

/// How long a new connection may take to send its `attach` frame. Clients
/// send it at once; this only frees what idle sockets hold.
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::api::REQUEST_IDLE;

/// Connections waiting to attach, at most; past it the oldest is closed
/// with a `busy` frame. Each costs a task and a file descriptor.
pub const MAX_UNATTACHED: usize = 1024;

/// After a failed `accept` (out of file descriptors, most likely), the
/// listener waits this long before the next, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long client connections get to write what they have when the
/// daemon stops.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

/// A failed `accept` is logged at most this often.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// Connections that have not attached yet, oldest first, each with the
/// way to tell it to make room.
#[derive(Debug, Default)]
struct Unattached {
    next: u64,
    queue: VecDeque<(u64, oneshot::Sender<()>)>,
}

impl Unattached {
    /// Registers a new connection; evicts the oldest past
    /// [`MAX_UNATTACHED`].
    fn register(&mut self) -> (u64, oneshot::Receiver<()>) {
        if self.queue.len() >= MAX_UNATTACHED
            && let Some((_, evict)) = self.queue.pop_front()
        {
            let _ = evict.send(());
        }
        self.next += 1;
        let (tx, rx) = oneshot::channel();
        self.queue.push_back((self.next, tx));
        (self.next, rx)
    }

    fn remove(&mut self, id: u64) {
        self.queue.retain(|(i, _)| *i != id);
    }
}

/// A connection's place among those waiting to attach, given up when it
/// attaches or goes.
struct Waiting {
    id: u64,
    registry: Arc<Mutex<Unattached>>,
    evicted: oneshot::Receiver<()>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(mut r) = self.registry.lock() {
            r.remove(self.id);
        }
    }
}

/// Binds the socket at `path`, replacing a stale one (the caller holds the
/// daemon lock, so no live daemon owns it).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves clients until `cancel` fires; every client connection is a
/// task of this one, aborted with it.
pub async fn serve(
    listener: UnixListener,
    node: Handle,
    mail: MailHandle,
    (name, peer_id): (String, String),
    (ui, backups): (crate::ui::Door, crate::backup::Source),
    cancel: CancellationToken,
) {
    let own = Arc::new(Own { ui, backups });
    let uid = nix::unistd::geteuid().as_raw();
    let slots = Slots {
        all: Arc::new(Semaphore::new(MAX_CLIENTS)),
        events: Arc::new(Semaphore::new(MAX_EVENT_CLIENTS)),
    };
    let registry = Arc::new(Mutex::new(Unattached::default()));
    let mut last_warning: Option<Instant> = None;
    let mut clients = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                // Answers already on their way (the `shutdown` one among
                // them) get a moment to be written before the clients go.
                let _ = tokio::time::timeout(CLOSE_GRACE, async {
                    while clients.join_next().await.is_some() {}
                })
                .await;
                return;
            }
            Some(_) = clients.join_next(), if !clients.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                if last_warning.is_none_or(|t| t.elapsed() >= ACCEPT_WARN_EVERY) {
                    tracing::warn!(error = %e, "accepting a client failed; retrying");
                    last_warning = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let waiting = {
            let Ok(mut r) = registry.lock() else {
                return;
            };
            let (id, evicted) = r.register();
            Waiting {
                id,
                registry: registry.clone(),
                evicted,
            }
        };
        let (node, mail, name, peer_id, slots, own) = (
            node.clone(),
            mail.clone(),
            name.clone(),
            peer_id.clone(),
            slots.clone(),
            own.clone(),
        );
        clients.spawn(async move {
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == uid => {
                    let client = Client {
                        node,
                        mail,
                        name,
                        peer_id,
                        attached: None,
                        last_seq: 0,
                        slots,
                        slot: None,
                        event_slot: None,
                        session: None,
                        own,
                        later: None,
                    };
                    client.serve(stream, waiting).await;
                }
                Ok(cred) => {
                    tracing::warn!(uid = cred.uid(), "refused a client of another user");
                    let mut framed = Framed::new(stream, LineCodec::new(MAX_FRAME_BYTES));
                    let _ = send(
                        &mut framed,
                        &DaemonFrame::Error {
                            code: ErrorCode::Forbidden,
                            message: "this daemon serves only its own user".into(),
                        },
                    )
                    .await;
                }
                Err(e) => tracing::warn!(error = %e, "cannot read a client's credentials"),
            }
        });
    }
}

/// A frame to send before closing the connection.
struct Closing(DaemonFrame);

/// The client slots: every attached client holds one of `all`; one
/// attached for events holds one of `events` too.
#[derive(Clone)]
struct Slots {
    all: Arc<Semaphore>,
    events: Arc<Semaphore>,
}

/// What a client attached as.
#[derive(Debug, Clone)]
struct Attached {
    who: Who,
    mailbox: Option<String>,
    /// Attached to `@`: the machine owner's own mailbox, only.
    owner_only: bool,
    /// It asked for `folders` events.
    folders: bool,
}

/// What the socket server answers itself, not its owners.
struct Own {
    /// Where the web page is, and its sign-in tickets (`ui`).
    ui: crate::ui::Door,
    /// The home and store a backup is made of (`backup_export`).
    backups: crate::backup::Source,
}

/// One client connection.
struct Client {
    node: Handle,
    mail: MailHandle,
    name: String,
    peer_id: String,
    attached: Option<Attached>,
    /// The last message seq sent to this client, for `lagged`.
    last_seq: u64,
    /// The client slots.
    slots: Slots,
    /// This client's slot, once attached.
    slot: Option<OwnedSemaphorePermit>,
    /// Its slot among the event clients, while it is attached for events.
    event_slot: Option<OwnedSemaphorePermit>,
    /// An agent's session attached for events to a mailbox: the directory
    /// shows the mailbox attached while it lives.
    session: Option<crate::mail::SessionGuard>,
    /// What the server answers itself.
    own: Arc<Own>,
    /// A request whose answer waits (see [`Op::waits`]), handed to the
    /// mail actor by the last frame: answered when it comes, while later
    /// requests are.
    later: Option<(u64, Later)>,
}

/// An answer that comes later.
type Later = std::pin::Pin<Box<dyn Future<Output = crate::api::Reply> + Send>>;

/// Requests of one client whose answers wait at once, at most; past it a
/// waiting request is answered in turn.
const MAX_LATER: usize = 16;

type Conn = Framed<UnixStream, LineCodec>;

async fn send(framed: &mut Conn, frame: &DaemonFrame) -> Result<(), std::io::Error> {
    framed
        .send(serde_json::to_string(frame).expect("daemon frames always serialise"))
        .await
}

/// The response to request `id`.
fn response(id: u64, answer: crate::api::Reply) -> DaemonFrame {
    match answer {
        Ok(result) => DaemonFrame::Response {
            id,
            ok: true,
            result: Some(result.to_json()),
            error: None,
        },
        Err(error) => DaemonFrame::Response {
            id,
            ok: false,
            result: None,
            error: Some(error),
        },
    }
}

fn frame_error(code: ErrorCode, message: impl Into<String>) -> DaemonFrame {
    DaemonFrame::Error {
        code,
        message: message.into(),
    }
}

/// Reads one line into a frame, or says exactly what is wrong with it
/// (the error frame the client is sent).
pub fn parse_frame(line: &str) -> Result<ClientFrame, DaemonFrame> {
    let value: serde_json::Value = parse_strict(line).map_err(|e| {
        frame_error(
            ErrorCode::MalformedFrame,
            format!("the frame is not JSON ({e}); send one JSON object per line"),
        )
    })?;
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    match kind.as_deref() {
        None => Err(frame_error(
            ErrorCode::MalformedFrame,
            "the frame has no \"type\"; it must be \"attach\" or \"request\"",
        )),
        Some("attach" | "request") => serde_json::from_value(value.clone())
            .or_else(|e| {
                // An op whose arguments all have defaults may leave them
                // out: `{"op":"peers"}` is `{"op":"peers","args":{}}`.
                if kind.as_deref() == Some("request")
                    && value.get("op").is_some()
                    && value.get("args").is_none()
                {
                    let mut with_args = value;
                    with_args["args"] = serde_json::Value::Object(Default::default());
                    serde_json::from_value(with_args).map_err(|_| e)
                } else {
                    Err(e)
                }
            })
            .map_err(|e| {
                let msg = e.to_string();
                if kind.as_deref() == Some("request") && msg.contains("unknown variant") {
                    frame_error(ErrorCode::UnknownOp, format!("unknown operation: {msg}"))
                } else {
                    frame_error(
                        ErrorCode::MalformedFrame,
                        format!("the {} frame is invalid: {msg}", kind.unwrap_or_default()),
                    )
                }
            }),
        Some(other) => Err(frame_error(
            ErrorCode::UnknownFrame,
            format!("unknown frame type {other:?}; it must be \"attach\" or \"request\""),
        )),
    }
}

impl Client {
    async fn serve(mut self, stream: UnixStream, waiting: Waiting) {
        let mut framed = Framed::new(stream, LineCodec::new(MAX_FRAME_BYTES));
        let mut events: Option<broadcast::Receiver<Event>> = None;
        let mut waiting = Some(waiting);
        let attach_by = tokio::time::sleep(ATTACH_TIMEOUT);
        tokio::pin!(attach_by);
        let idle_by = tokio::time::sleep(REQUEST_IDLE);
        tokio::pin!(idle_by);
        let mut later = futures::stream::FuturesUnordered::new();
        loop {
            if self.attached.is_some() {
                // Attached: no longer among those waiting.
                waiting = None;
            }
            let requests_only = self.attached.is_some() && events.is_none();
            let next_event = async {
                match events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            let unattached = waiting.is_some();
            let evicted = async {
                match waiting.as_mut() {
                    Some(w) => {
                        let _ = (&mut w.evicted).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Not idle while an answer is on its way.
                _ = &mut idle_by, if requests_only && later.is_empty() => {
                    let _ = send(&mut framed, &frame_error(
                        ErrorCode::Idle,
                        format!("closed after {}s without a request; a request sent meanwhile was not run: connect again and send it (clients attached for requests only are closed when idle, so idle ones can't keep commands and hooks out)", REQUEST_IDLE.as_secs()),
                    )).await;
                    return;
                }
                _ = &mut attach_by, if unattached => {
                    let _ = send(&mut framed, &frame_error(
                        ErrorCode::AttachTimeout,
                        format!("no attach frame within {}s; send attach first", ATTACH_TIMEOUT.as_secs()),
                    )).await;
                    return;
                }
                _ = evicted => {
                    let _ = send(&mut framed, &frame_error(
                        ErrorCode::Busy,
                        format!("{MAX_UNATTACHED} connections are waiting to attach; this one, the oldest, is closed; connect again and attach at once"),
                    )).await;
                    return;
                }
                Some((id, answer)) = later.next(), if !later.is_empty() => {
                    if send(&mut framed, &response(id, answer)).await.is_err() {
                        return;
                    }
                    idle_by
                        .as_mut()
                        .reset(tokio::time::Instant::now() + REQUEST_IDLE);
                }
                line = framed.next() => {
                    let Some(line) = line else { return };
                    let reply = match line {
                        Ok(Line::Text(l)) if l.trim().is_empty() => continue,
                        Ok(Line::Text(l)) => match self.frame(&l, &mut framed, &mut events, later.len() < MAX_LATER).await {
                            Ok(reply) => {
                                if let Some((id, answer)) = self.later.take() {
                                    later.push(async move { (id, answer.await) });
                                }
                                reply
                            }
                            Err(Closing(frame)) => {
                                let _ = send(&mut framed, &frame).await;
                                return;
                            }
                        },
                        Ok(Line::TooLarge) => Some(frame_error(
                            ErrorCode::FrameTooLarge,
                            format!("frames are at most {MAX_FRAME_BYTES} bytes; the frame was skipped and the connection stays open"),
                        )),
                        Ok(Line::NotUtf8) => Some(frame_error(
                            ErrorCode::MalformedFrame,
                            "the frame is not UTF-8 text; send one JSON object per line",
                        )),
                        Err(_) => return,
                    };
                    if let Some(reply) = reply
                        && send(&mut framed, &reply).await.is_err()
                    {
                        return;
                    }
                    idle_by
                        .as_mut()
                        .reset(tokio::time::Instant::now() + REQUEST_IDLE);
                }
                event = next_event => {
                    let frame = match event {
                        Ok(event) => match self.wanted(event) {
                            Some(e) => e,
                            None => continue,
                        },
                        Err(broadcast::error::RecvError::Lagged(missed)) => Event::Lagged {
                            missed,
                            after_seq: self.last_seq,
                        },
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    if send(&mut framed, &DaemonFrame::Event { event: Box::new(frame) }).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Whether this client should see `event`: messages of its mailbox (all
    /// mailboxes when it attached to none), approval prompts if it is a
    /// person, and every resolution.
    fn wanted(&mut self, event: Event) -> Option<Event> {
        let attached = self.attached.as_ref()?;
        match &event {
            Event::Message { message } => {
                if (attached.mailbox.is_some() || attached.owner_only)
                    && message.mailbox != attached.mailbox
                {
                    return None;
                }
                if message.seq <= self.last_seq {
                    return None;
                }
                self.last_seq = message.seq;
            }
            Event::Held { .. } if attached.who.kind != WhoKind::Human => return None,
            Event::Folders if !attached.folders => return None,
            _ => {}
        }
        Some(event)
    }

    /// Handles one frame; returns the frame to answer with, if any, or
    /// the last frame before closing the connection.
    /// A request whose answer waits is answered later (`self.later`) if
    /// `may_defer`.
    async fn frame(
        &mut self,
        line: &str,
        framed: &mut Conn,
        events: &mut Option<broadcast::Receiver<Event>>,
        may_defer: bool,
    ) -> Result<Option<DaemonFrame>, Closing> {
        Ok(match parse_frame(line) {
            Err(frame) => Some(frame),
            Ok(ClientFrame::Attach {
                version,
                who,
                mailbox,
                after_seq,
                events: wants_events,
                folders,
            }) => {
                if version != API_VERSION {
                    return Ok(Some(frame_error(
                        ErrorCode::VersionMismatch,
                        format!(
                            "this client speaks local API version {version}, the daemon speaks version {API_VERSION}; use the same agentmesh build for both"
                        ),
                    )));
                }
                if let Err(e) = who.check() {
                    return Ok(Some(frame_error(ErrorCode::BadWho, e.message)));
                }
                tracing::debug!(kind = ?who.kind, name = %who.name, ?mailbox, "client attached");
                let mailbox_arg_is_owner = mailbox.as_deref() == Some("@");
                let mailbox = match mailbox.as_deref() {
                    None | Some("@") => None,
                    Some(m) => match agentmesh_protocol::Name::parse("mailbox name", m) {
                        Ok(n) => Some(n.to_string()),
                        Err(e) => {
                            return Ok(Some(frame_error(ErrorCode::BadMailbox, e.to_string())));
                        }
                    },
                };
                self.take_slots(wants_events).map_err(Closing)?;
                let who_kind = who.kind;
                let session_mailbox = mailbox.clone();
                self.session = None;
                let owner_only = mailbox_arg_is_owner;
                self.attached = Some(Attached {
                    who,
                    mailbox,
                    owner_only,
                    folders,
                });
                if !wants_events {
                    *events = None;
                    let attached = DaemonFrame::Attached {
                        version: API_VERSION,
                        peer_id: self.peer_id.clone(),
                        name: self.name.clone(),
                        last_seq: self.mail.last_seq(),
                    };
                    return Ok(Some(attached));
                }
                // An agent's session (its MCP server) attached to its
                // mailbox: the directory says so while it stays.
                self.session =
                    (who_kind == WhoKind::Agent).then(|| self.mail.attach_session(session_mailbox));
                // Subscribe before replaying, so nothing falls between.
                *events = Some(self.mail.subscribe());
                let attached = DaemonFrame::Attached {
                    version: API_VERSION,
                    peer_id: self.peer_id.clone(),
                    name: self.name.clone(),
                    last_seq: self.mail.last_seq(),
                };
                if send(framed, &attached).await.is_err() {
                    return Ok(None);
                }
                // Without after_seq, only what arrives from now on.
                self.last_seq = match after_seq {
                    Some(after) => {
                        self.last_seq = after;
                        self.replay(after, framed).await;
                        self.last_seq
                    }
                    None => self.mail.last_seq(),
                };
                self.replay_held(framed).await;
                None
            }
            Ok(ClientFrame::Request { id, .. }) if self.attached.is_none() => {
                Some(DaemonFrame::Response {
                    id,
                    ok: false,
                    result: None,
                    error: Some(ApiError::new(
                        ErrorCode::NotAttached,
                        "send an attach frame before any request",
                    )),
                })
            }
            Ok(ClientFrame::Request { id, op }) => {
                // Each op to its owner: the mail actor, the network's
                // loop (which runs the team's ops too), or this server.
                let Some(a) = &self.attached else {
                    unreachable!("a request before attach is answered above")
                };
                let answer = match op {
                    Op::Socket(SocketOp::Ui) => answer::<ops::Ui>(Ok(self.own.ui.view())),
                    Op::Socket(SocketOp::BackupExport(op)) => self.own.backups.export(op).await,
                    Op::Mail(op) if may_defer && op.waits() => {
                        let answer = self.mail.submit(a.who.clone(), a.mailbox.clone(), op);
                        self.later = Some((id, Box::pin(answer.await)));
                        return Ok(None);
                    }
                    Op::Mail(op) => {
                        self.mail
                            .request(a.who.clone(), a.mailbox.clone(), op)
                            .await
                    }
                    Op::Net(NetOp::Status) => {
                        // The node's part, then the mailroom's, as typed
                        // parts of one `Status`.
                        let status = self.node.request(NodeOp::Net(NetOp::Status)).await;
                        let status = status.and_then(|s| {
                            s.take::<Status>().map_err(|_| {
                                ApiError::new(ErrorCode::Internal, "status answered another type")
                            })
                        });
                        answer::<ops::Status>(status.map(|mut s| {
                            let m = self.mail.summary();
                            s.paused = m.paused;
                            s.held = m.held;
                            s.outbox_waiting = m.outbox_waiting;
                            s.carrying = m.carrying;
                            s.wake = m.wake;
                            s
                        }))
                    }
                    Op::Net(op) => self.node.request(NodeOp::Net(op)).await,
                    Op::Team(op) => self.node.request(NodeOp::Team(op)).await,
                };
                Some(response(id, answer))
            }
        })
    }

    /// Takes the slots an attach for `events` (or for requests only)
    /// needs, keeping those this client holds already; the frame that
    /// refuses it when none is free.
    fn take_slots(&mut self, events: bool) -> Result<(), DaemonFrame> {
        if !events {
            self.event_slot = None;
        } else if self.event_slot.is_none() {
            match self.slots.events.clone().try_acquire_owned() {
                Ok(slot) => self.event_slot = Some(slot),
                Err(_) => {
                    tracing::warn!(
                        "refusing a client: {MAX_EVENT_CLIENTS} are attached for events already"
                    );
                    return Err(frame_error(
                        ErrorCode::Busy,
                        format!(
                            "{MAX_EVENT_CLIENTS} clients that receive events (`watch`, MCP servers) are attached to this daemon already; close some and try again (commands and hooks still get in: {RESERVED_FOR_REQUESTS} slots are kept for them)"
                        ),
                    ));
                }
            }
        }
        if self.slot.is_none() {
            match self.slots.all.clone().try_acquire_owned() {
                Ok(slot) => self.slot = Some(slot),
                Err(_) => {
                    self.event_slot = None;
                    tracing::warn!("refusing a client: {MAX_CLIENTS} are attached already");
                    return Err(frame_error(
                        ErrorCode::Busy,
                        format!(
                            "{MAX_CLIENTS} clients are attached to this daemon already; close some (`watch`, MCP servers, scripts holding connections) and try again"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// A person attaching sees what waits for their decision: every held
    /// message, as a prompt, whatever happened while no one watched.
    async fn replay_held(&mut self, framed: &mut Conn) {
        let Some(a) = self
            .attached
            .clone()
            .filter(|a| a.who.kind == WhoKind::Human)
        else {
            return;
        };
        let Ok(held) = self.mail.call(a.who, a.mailbox, ops::Held).await else {
            return;
        };
        for message in held {
            let frame = DaemonFrame::Event {
                event: Box::new(Event::Held { message }),
            };
            if send(framed, &frame).await.is_err() {
                return;
            }
        }
    }

    /// Sends every stored message of the attached mailbox after `after`,
    /// as events, page by page.
    async fn replay(&mut self, mut after: u64, framed: &mut Conn) {
        let Some(a) = self.attached.clone() else {
            return;
        };
        loop {
            let op = ops::Inbox {
                mailbox: if a.owner_only {
                    Some("@".into())
                } else {
                    a.mailbox.clone()
                },
                unread: false,
                after_seq: Some(after),
                limit: None,
            };
            let Ok(page) = self.mail.call(a.who.clone(), a.mailbox.clone(), op).await else {
                return;
            };
            for message in page.messages {
                self.last_seq = self.last_seq.max(message.seq);
                let frame = DaemonFrame::Event {
                    event: Box::new(Event::Message { message }),
                };
                if send(framed, &frame).await.is_err() {
                    return;
                }
            }
            match page.next_after_seq {
                Some(n) => after = n,
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_frames_are_named() {
        let code = |line: &str| match parse_frame(line) {
            Err(DaemonFrame::Error { code, .. }) => code.as_str(),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(code("hello"), "malformed_frame");
        assert_eq!(code("{}"), "malformed_frame");
        assert_eq!(code(r#"{"type":"dance"}"#), "unknown_frame");
        assert_eq!(
            code(r#"{"type":"request","id":1,"op":"fly"}"#),
            "unknown_op"
        );
        assert_eq!(
            code(r#"{"type":"request","op":"status"}"#),
            "malformed_frame"
        );
        assert_eq!(code(r#"{"type":"attach","version":1}"#), "malformed_frame");
        assert_eq!(
            code(r#"{"type":"attach","version":1,"who":{"kind":"robot","name":"r"}}"#),
            "malformed_frame"
        );
        assert!(parse_frame(r#"{"type":"request","id":1,"op":"status"}"#).is_ok());
    }
}
