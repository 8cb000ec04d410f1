//! Messaging: the mailroom (sending), the courier (delivering), the inbox
//! (receiving), consent, and the fan-out to attached clients. One task, the
//! mail actor, owns all of it; the node actor only carries its batches over
//! the network.
//!
//! ```text
//!  client ── send ──> mailroom: resolve, seal, write outbox ──┐
//!                                                             v
//!                     Flusher (one fsync for every writer waiting) ── then: answer the id,
//!                                                             │          hand it to the courier
//!  courier: per recipient, batches ── node ── /agentmesh/mail/1 ──> their inbox
//!           retries with backoff, at once when the peer connects
//!
//!  node ── inbound batch ──> inbox: member? signature? fresh? new? opens?
//!                            consent (folder opted in, other owner held,
//!                            paused held, held cap), write inbox + dedup
//!                            records atomically ── Flusher ── then: ack, and
//!                            fan out events to attached clients
//! ```
//!
//! Accepted means durable: a sender gets its message id only after the
//! sealed envelope is flushed to the outbox, and a receiver acknowledges
//! only after the message and its dedup record are flushed, so a message is
//! never lost and, with the dedup records (kept until the envelope's expiry
//! plus the clock skew), never delivered twice. Flushes are shared: every
//! writer waiting when a flush starts is covered by it (group commit).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agentmesh_protocol::envelope::{Body, Envelope, Header, Kind, MessageId, Opened};
use agentmesh_protocol::team::Standing;
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{Identity, Name, PeerId, Timestamp, Wire};
use serde::Serialize;
use serde_bytes::ByteBuf;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::api::Reply;
use crate::api::{self, ApiError, Event, MessageView, Op, Who, WhoKind};
use crate::clock::now;
use crate::limits::RateWindow;
use crate::net::{Carry, Delivered, Handle, MailEvent, MailLink, Undelivered};
use crate::store::{
    AuditEntry, FolderBinding, GroupCommit, InboxRecord, OutboxRecord, OutboxStatus, Store, Writes,
};
use crate::team::Directory;
use crate::wire::{MAX_BATCH_BYTES, MAX_BATCH_ENVELOPES, MailOutcome, MailReply, MailRequest};

/// Messages held for approval from one machine, at most. Beyond it, its
/// mail is refused with a reason it sees, so an unvetted sender cannot fill
/// the disk.
pub const MAX_HELD_PER_SENDER: usize = 100;
/// Held mail nobody approved is dropped after this long.
pub const HELD_EXPIRY: Duration = Duration::from_secs(8 * 24 * 3600);
/// Read mail is dropped this long after it was read.
pub const READ_EXPIRY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Delivered or failed outbox records are dropped this long after sending.
pub const OUTBOX_KEEP: Duration = Duration::from_secs(30 * 24 * 3600);
/// Delivered and failed messages `outbox` lists, at most (the newest).
pub const MAX_OUTBOX_LISTED: usize = 1000;
/// Messages waiting in the outbox at once, at most; `send` refuses beyond.
pub const MAX_OUTBOX: usize = 100_000;
/// Batches on their way to one recipient at once: while it stores one,
/// the next is already opening.
pub const MAX_IN_FLIGHT: usize = 2;
/// Events buffered for attached clients; a client further behind than
/// this gets `lagged` and catches up with `after_seq`.
pub const EVENT_QUEUE: usize = 1024;
/// Requests waiting for the mail actor.
pub const MAIL_QUEUE: usize = 1024;
/// The first retry of an undelivered batch waits this long, doubling.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Retries never wait longer than this.
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How often retention runs (and after every clock move in test builds).
const RETENTION_EVERY: Duration = Duration::from_secs(600);
/// Messages in one `inbox` page, at most.
pub const MAX_INBOX_PAGE: usize = 1000;
/// Stored messages one `inbox` call looks at, at most: a filter that
/// matches little (`--unread`, `--mailbox`) answers a short page and where
/// to go on, instead of reading a whole large inbox while delivery waits.
pub const MAX_INBOX_SCAN: usize = 5 * MAX_INBOX_PAGE;
/// Bytes of messages in one `inbox` page, about: pages must fit one API
/// frame (1 MiB).
const MAX_PAGE_BYTES: usize = 640 * 1024;

/// Audit entries `audit` lists, at most (the newest).
pub const MAX_AUDIT_LISTED: usize = 1000;

/// The shortest message id prefix accepted where an id is asked for.
pub const MIN_ID_PREFIX: usize = 4;

/// A reason a remote machine gives is cut to this many characters.
const MAX_REMOTE_REASON: usize = 300;

/// Refusals of one kind from one machine audited one by one per window:
/// the first; the rest of the window is one summary entry with a count,
/// so a member sending garbage (or a revoked machine retrying) can't turn
/// each envelope into a disk write.
pub const REFUSALS_AUDITED_PER_WINDOW: u32 = 1;
/// The window of [`REFUSALS_AUDITED_PER_WINDOW`].
pub const REFUSAL_AUDIT_WINDOW: Duration = Duration::from_secs(60);
/// (machine, reason) pairs whose refusals are counted at once; a pair past
/// it is counted in one tally. Members times the few reasons there are.
const MAX_REFUSAL_KEYS: usize = 4096;

/// How many bytes `value` takes in a JSON answer, escapes included: a
/// body of quotes or control characters grows up to six times, and a page
/// sized by raw length could outgrow the 1 MiB frame.
fn json_size<T: Serialize>(value: &T) -> usize {
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
fn within_page<T>(mut rows: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<T> {
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

/// `mailbox@machine`, or `@machine` for the owner's mailbox.
pub fn address(mailbox: Option<&str>, machine: &str) -> String {
    format!("{}@{machine}", mailbox.unwrap_or(""))
}

/// What reaches the mail actor from clients.
#[derive(Debug)]
pub enum MailIn {
    /// A client's request.
    Api {
        /// Who the client attached as.
        who: Who,
        /// The mailbox it attached to.
        mailbox: Option<String>,
        /// The operation.
        op: Op,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
    },
}

/// Work that waits for durable storage.
#[derive(Debug)]
pub enum AfterFlush {
    /// Answer a `send` and hand the message to the courier.
    Sent {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// The message.
        record: Box<OutboxRecord>,
    },
    /// Acknowledge an inbound batch, then tell clients.
    Received {
        /// The batch.
        token: u64,
        /// Its outcomes.
        reply: MailReply,
        /// Events for attached clients.
        events: Vec<Event>,
    },
    /// Answer a client, then tell clients.
    Answer {
        /// The client's answer.
        reply: oneshot::Sender<Reply>,
        /// It.
        value: Reply,
        /// Events for attached clients.
        events: Vec<Event>,
    },
}

/// What `status` shows of the mailroom, published by the mail actor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MailSummary {
    /// Inbound mail is paused.
    pub paused: bool,
    /// Messages held for approval.
    pub held: usize,
    /// Messages in the outbox not yet delivered.
    pub outbox_waiting: usize,
}

/// A cloneable handle to the mail actor.
#[derive(Debug, Clone)]
pub struct MailHandle {
    tx: mpsc::Sender<MailIn>,
    events: broadcast::Sender<Event>,
    newest: Arc<std::sync::atomic::AtomicU64>,
    summary: watch::Receiver<MailSummary>,
}

impl MailHandle {
    /// Runs a mail op for a client attached as `who` to `mailbox`.
    pub async fn request(&self, who: Who, mailbox: Option<String>, op: Op) -> Reply {
        let (reply, rx) = oneshot::channel();
        let gone = || {
            Err(ApiError::new(
                "shutting_down",
                "the daemon is shutting down",
            ))
        };
        if self
            .tx
            .send(MailIn::Api {
                who,
                mailbox,
                op,
                reply,
            })
            .await
            .is_err()
        {
            return gone();
        }
        rx.await.unwrap_or_else(|_| gone())
    }

    /// What `status` shows of the mailroom, as of now.
    pub fn summary(&self) -> MailSummary {
        *self.summary.borrow()
    }

    /// The seq of the newest message in the inbox.
    pub fn last_seq(&self) -> u64 {
        self.newest.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Subscribes to events for attached clients.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }
}

/// One recipient's queue in the courier.
#[derive(Debug, Default)]
struct PeerQueue {
    pending: VecDeque<String>,
    /// Batches on their way.
    in_flight: usize,
    /// The ids in those batches.
    sending: HashSet<String>,
    attempt: u32,
    next_try: Option<Instant>,
}

/// The mail actor.
pub struct Mail {
    me: Identity,
    store: Arc<dyn Store>,
    dir: watch::Receiver<Arc<Directory>>,
    node: Handle,
    link: MailLink,
    commit: GroupCommit,
    /// What waited for a flush, handed back once it is durable.
    flushed: mpsc::UnboundedReceiver<AfterFlush>,
    /// The other end, which each job's `then` sends on.
    flushed_tx: mpsc::UnboundedSender<AfterFlush>,
    events: broadcast::Sender<Event>,
    rx: mpsc::Receiver<MailIn>,
    /// Batches on their way, by the id they were carried under.
    batches: HashMap<u64, (PeerId, Vec<String>)>,
    next_batch: u64,
    lifetime: Duration,
    audit_retention: Duration,
    /// Undelivered outbox records, by id.
    outbox: HashMap<String, OutboxRecord>,
    queues: HashMap<PeerId, PeerQueue>,
    next_seq: u64,
    newest: Arc<std::sync::atomic::AtomicU64>,
    held_from: HashMap<String, usize>,
    /// Writes for the next flush.
    pending: std::cell::RefCell<Writes>,
    folders: HashMap<String, FolderBinding>,
    trusted: HashSet<String>,
    paused: bool,
    last_retention: Instant,
    /// Refusals audited, per (machine, code), per window.
    refusals: std::cell::RefCell<RateWindow<(PeerId, String)>>,
    /// Recipients whose last attempt could not connect at all.
    offline: HashSet<PeerId>,
    /// What `status` shows, published.
    summary: watch::Sender<MailSummary>,
}

impl std::fmt::Debug for Mail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mail").finish_non_exhaustive()
    }
}

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000).min(253_402_300_799);
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .to_string()
}

fn ok<T: Serialize>(value: T) -> Reply {
    Ok(serde_json::to_value(value).expect("API results always serialise"))
}

fn err<T>(code: &str, message: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::new(code, message))
}

fn refused(code: &str, reason: impl Into<String>) -> MailOutcome {
    let mut reason: String = reason.into();
    if reason.len() > crate::wire::MAX_REASON_BYTES {
        let mut cut = crate::wire::MAX_REASON_BYTES;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    MailOutcome::Refused {
        code: code.into(),
        reason,
    }
}

/// The calendar clock as a duration, for rate windows: tests move it.
fn calendar() -> Duration {
    Duration::from_millis(now().as_unix_millis())
}

/// Parses `MAILBOX@MACHINE` or `@MACHINE`.
pub fn parse_address(to: &str) -> Result<(Option<Name>, Name), ApiError> {
    let Some((mailbox, machine)) = to.rsplit_once('@') else {
        return err(
            "bad_address",
            format!(
                "{to:?} is not an address; write MAILBOX@MACHINE, or @MACHINE for the machine's owner"
            ),
        );
    };
    let machine = Name::parse("machine name", machine)
        .map_err(|e| ApiError::new("bad_address", e.to_string()))?;
    let mailbox = if mailbox.is_empty() {
        None
    } else {
        Some(
            Name::parse("mailbox name", mailbox)
                .map_err(|e| ApiError::new("bad_mailbox", e.to_string()))?,
        )
    };
    Ok((mailbox, machine))
}

/// Whether the courier gives up on `r`: past its expiry and the clock skew
/// a receiver allows. Until then a receiver still takes it, or answers
/// Duplicate if an earlier attempt whose answer was lost got there.
fn past_sending(r: &OutboxRecord, now_ms: u64) -> bool {
    let skew = MAX_CLOCK_SKEW.as_millis() as u64;
    r.expires_at.saturating_add(skew) < now_ms
}

/// One page of `inbox`: messages after `after` matching the filter, at
/// most `limit`, that fit one answer, looking at no more than
/// [`MAX_INBOX_SCAN`] stored messages; `next_after_seq` says where to go
/// on (it may follow an empty page when the scan stopped first).
fn inbox_page(
    store: &dyn Store,
    mailbox: Option<&str>,
    unread: bool,
    after: u64,
    limit: usize,
) -> Result<api::InboxPage, ApiError> {
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
        let page = store
            .inbox_after(cursor, MAX_INBOX_PAGE)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
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
    Ok(api::InboxPage {
        messages: out,
        next_after_seq,
    })
}

/// Who decided, for the audit log: `human ada`, `agent claude`.
fn who_label(who: &Who) -> String {
    let kind = match who.kind {
        WhoKind::Human => "human",
        WhoKind::Agent => "agent",
    };
    format!("{kind} {}", who.name)
}

/// A record's body hash for the audit log, if it has one.
fn sha(hash: &str) -> Option<String> {
    (!hash.is_empty()).then(|| hash.to_owned())
}

fn view(r: &InboxRecord) -> MessageView {
    MessageView {
        id: r.id.clone(),
        seq: r.seq,
        from: r.from.clone(),
        who: r.who.clone(),
        kind: r.kind.clone(),
        thread: r.thread.clone(),
        in_reply_to: r.in_reply_to.clone(),
        text: r.text.clone(),
        received_at: rfc3339(r.received_at),
        read: r.read_at.is_some(),
        mailbox: r.mailbox.clone(),
        held: r.held.clone(),
        from_owner: r.from_owner.clone(),
        hop: r.hop,
        taint: r.taint,
    }
}

fn outbox_view(r: &OutboxRecord) -> api::OutboxView {
    api::OutboxView {
        id: r.id.clone(),
        to: r.to.clone(),
        kind: r.kind.clone(),
        status: match r.status {
            OutboxStatus::Queued => "queued",
            OutboxStatus::Sent => "sent",
            OutboxStatus::Delivered => "delivered",
            OutboxStatus::Failed => "failed",
        }
        .into(),
        reason: r.reason.clone(),
        held: r.held,
        attempts: r.attempts,
        created_at: rfc3339(r.created_at),
        retry_in_ms: None,
        offline: false,
        to_owner: None,
    }
}

impl Mail {
    /// Starts the mail actor; returns its handle.
    pub fn start(
        me: Identity,
        store: Arc<dyn Store>,
        dir: watch::Receiver<Arc<Directory>>,
        (node, link): (Handle, MailLink),
        commit: GroupCommit,
        (lifetime, audit_retention): (Duration, Duration),
        cancel: CancellationToken,
    ) -> Result<(MailHandle, impl Future<Output = ()> + use<>), crate::store::StoreError> {
        let (tx, rx) = mpsc::channel(MAIL_QUEUE);
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        let (flushed_tx, flushed) = mpsc::unbounded_channel();
        let first_seq = store.last_inbox_seq()?;
        let (summary_tx, summary) = watch::channel(MailSummary::default());
        let newest = Arc::new(std::sync::atomic::AtomicU64::new(first_seq));
        let mut mail = Mail {
            me,
            dir,
            node,
            link,
            commit,
            flushed,
            flushed_tx,
            events: events.clone(),
            rx,
            batches: HashMap::new(),
            next_batch: 0,
            lifetime,
            audit_retention,
            outbox: HashMap::new(),
            queues: HashMap::new(),
            next_seq: first_seq,
            newest: newest.clone(),
            held_from: HashMap::new(),
            pending: std::cell::RefCell::default(),
            folders: store
                .folders()?
                .into_iter()
                .map(|f| (f.mailbox.clone(), f))
                .collect(),
            trusted: store.trusted()?.into_iter().collect(),
            paused: store.paused()?,
            last_retention: Instant::now(),
            refusals: std::cell::RefCell::new(RateWindow::new(
                REFUSAL_AUDIT_WINDOW,
                REFUSALS_AUDITED_PER_WINDOW,
                MAX_REFUSAL_KEYS,
            )),
            offline: HashSet::new(),
            summary: summary_tx,
            store,
        };
        mail.load()?;
        mail.publish_summary();
        let task = mail.run(cancel);
        Ok((
            MailHandle {
                tx,
                events,
                newest,
                summary,
            },
            task,
        ))
    }

    /// Loads undelivered mail into the courier and counts held mail.
    fn load(&mut self) -> Result<(), crate::store::StoreError> {
        for r in self.store.outbox()? {
            if matches!(r.status, OutboxStatus::Queued | OutboxStatus::Sent)
                && let Ok(peer) = r.to_peer.parse::<PeerId>()
            {
                self.queues
                    .entry(peer)
                    .or_default()
                    .pending
                    .push_back(r.id.clone());
                // Without its envelope: that stays on disk until it is sent.
                self.outbox.insert(r.id.clone(), r);
            }
        }
        for (_, from) in self.store.held_index()? {
            *self.held_from.entry(from).or_default() += 1;
        }
        Ok(())
    }

    /// Runs until its inbox or the network's link closes, or `cancel`
    /// fires.
    async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                // The actor holds a sender itself: this never closes.
                Some(done) = self.flushed.recv() => self.after_flush(done),
                delivered = self.link.delivered.recv() => match delivered {
                    None => break,
                    Some(d) => self.on_delivered(d),
                },
                event = self.link.events.recv() => match event {
                    None => break,
                    Some(e) => self.on_event(e),
                },
                msg = self.rx.recv() => match msg {
                    None => break,
                    Some(MailIn::Api { who, mailbox, op, reply }) => self.api(who, mailbox, op, reply),
                },
                _ = tick.tick() => self.tick(),
            }
            self.write_pending();
            self.publish_summary();
        }
    }

    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn directory(&self) -> Arc<Directory> {
        self.dir.borrow().clone()
    }

    /// Records a decision; written with the next flush.
    fn audit(&self, entry: AuditEntry) {
        self.pending.borrow_mut().audit.push(AuditEntry {
            at: now().as_unix_millis(),
            ..entry
        });
    }

    /// Runs `work` once everything written so far is durable.
    fn after(&self, work: AfterFlush) {
        let writes = self.pending.take();
        let back = self.flushed_tx.clone();
        self.commit.submit(
            writes,
            Some(Box::new(move || {
                // The actor gone means the daemon is stopping.
                let _ = back.send(work);
            })),
        );
    }

    /// Hands pending writes to the flusher even if nothing waits for them.
    fn write_pending(&self) {
        if !self.pending.borrow().is_empty() {
            let writes = self.pending.take();
            self.commit.submit(writes, None);
        }
    }

    fn emit(&self, events: Vec<Event>) {
        for e in events {
            let seq = match &e {
                Event::Message { message } => Some(message.seq),
                _ => None,
            };
            // No attached client is not an error.
            let _ = self.events.send(e);
            // Advanced only once the message is stored and announced: a
            // client attaching "from now on" must not skip a message whose
            // event is still to come.
            if let Some(seq) = seq {
                self.newest
                    .fetch_max(seq, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    fn on_event(&mut self, event: MailEvent) {
        match event {
            MailEvent::Inbound {
                peer,
                request,
                token,
                ..
            } => self.receive(peer, request, token),
            MailEvent::Connected(peer) => {
                self.offline.remove(&peer);
                if let Some(q) = self.queues.get_mut(&peer) {
                    q.attempt = 0;
                    q.next_try = None;
                }
                self.dispatch(peer);
            }
        }
    }

    fn on_delivered(&mut self, d: Delivered) {
        if let Some((peer, ids)) = self.batches.remove(&d.batch) {
            self.delivered(peer, ids, d.result);
        }
    }

    fn publish_summary(&self) {
        let now = MailSummary {
            paused: self.paused,
            held: self.held_from.values().sum(),
            outbox_waiting: self.outbox.len(),
        };
        self.summary.send_if_modified(|s| {
            let changed = *s != now;
            *s = now;
            changed
        });
    }

    fn after_flush(&mut self, work: AfterFlush) {
        match work {
            AfterFlush::Sent { reply, record } => {
                let _ = reply.send(ok(serde_json::json!({ "id": record.id })));
                let Ok(peer) = record.to_peer.parse::<PeerId>() else {
                    return;
                };
                self.queues
                    .entry(peer)
                    .or_default()
                    .pending
                    .push_back(record.id.clone());
                // The envelope stays on disk (it is there now) until it is
                // sent: memory holds what schedules delivery, not the mail.
                self.outbox.insert(
                    record.id.clone(),
                    OutboxRecord {
                        envelope: vec![],
                        ..*record
                    },
                );
                self.dispatch(peer);
            }
            AfterFlush::Received {
                token,
                reply,
                events,
            } => {
                self.node.answer_mail(token, reply);
                self.emit(events);
            }
            AfterFlush::Answer {
                reply,
                value,
                events,
            } => {
                let _ = reply.send(value);
                self.emit(events);
            }
        }
    }

    // ----- sending --------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        who: &Who,
        attached: Option<String>,
        to: &str,
        text: String,
        ask: bool,
        reply_to: Option<String>,
        from_mailbox: Option<String>,
    ) -> Result<Box<OutboxRecord>, ApiError> {
        let dir = self.directory();
        let Some(team) = dir.team.filter(|_| dir.member) else {
            return err(
                "not_in_team",
                "this machine is not in a team; create one with `agentmesh team create` or join one with `agentmesh join`",
            );
        };
        if self.outbox.len() >= MAX_OUTBOX {
            return err(
                "outbox_full",
                format!(
                    "{MAX_OUTBOX} messages are waiting to be delivered; wait for them, or check `agentmesh outbox`"
                ),
            );
        }
        let (mailbox, machine) = parse_address(to)?;
        let Some((peer, target)) = dir.current(machine.as_str()) else {
            let revoked = dir
                .machines
                .values()
                .any(|m| m.name == machine.as_str() && m.standing == Standing::Revoked);
            return if revoked {
                err(
                    "revoked_recipient",
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
                    "unknown_recipient",
                    format!(
                        "no machine named {machine} in the team; members: {}",
                        names.join(", ")
                    ),
                )
            };
        };
        if dir.me == Some(peer) {
            return err(
                "own_machine",
                format!(
                    "{machine} is this machine; agentmesh carries messages between machines, so name another member"
                ),
            );
        }
        let from_mailbox = match from_mailbox.or(attached) {
            Some(m) => Some(
                Name::parse("mailbox name", &m)
                    .map_err(|e| ApiError::new("bad_mailbox", e.to_string()))?,
            ),
            None => None,
        };
        let sent_at = now();
        let id = MessageId::random(&mut rand::rng());
        let (kind, thread, in_reply_to, hop) = match reply_to {
            Some(rid) => {
                let original = self
                    .store
                    .inbox_get(&rid)
                    .map_err(|e| ApiError::new("store", e.to_string()))?
                    .ok_or_else(|| {
                        ApiError::new(
                            "unknown_message",
                            format!("no received message has id {rid}"),
                        )
                    })?;
                let parse = |h: &str| {
                    MessageId::parse(h)
                        .ok_or_else(|| ApiError::new("store", "a stored id is damaged"))
                };
                (
                    Kind::Reply,
                    parse(&original.thread)?,
                    Some(parse(&original.id)?),
                    original.hop,
                )
            }
            None => (if ask { Kind::Ask } else { Kind::Tell }, id, None, 0),
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
        let body = Body {
            who: agentmesh_protocol::Who {
                kind: match who.kind {
                    WhoKind::Human => agentmesh_protocol::WhoKind::Human,
                    WhoKind::Agent => agentmesh_protocol::WhoKind::Agent,
                },
                name: who.name.clone(),
                session_id: who.session_id.clone(),
                task: who.task.clone(),
            },
            from_mailbox: from_mailbox.clone(),
            to_mailbox: mailbox.clone(),
            text,
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
                "bad_who",
                "the attached client's who is too long (name 64, session_id 128, task 256 bytes)",
            );
        }
        let envelope =
            agentmesh_protocol::seal(&self.me, &target.x25519, &header, &body, &mut rand::rng())
                .map_err(|e| ApiError::new("too_large", e.to_string()))?;
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
        self.pending.borrow_mut().outbox.push(record.clone());
        self.audit(AuditEntry {
            event: "accepted".into(),
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
        });
        Ok(Box::new(record))
    }

    // ----- the courier ----------------------------------------------------

    /// Sends batches to `peer` while fewer than [`MAX_IN_FLIGHT`] are on
    /// their way and its backoff has passed.
    fn dispatch(&mut self, peer: PeerId) {
        while self.dispatch_one(peer) {}
    }

    fn dispatch_one(&mut self, peer: PeerId) -> bool {
        let Some(q) = self.queues.get_mut(&peer) else {
            return false;
        };
        if q.in_flight >= MAX_IN_FLIGHT || q.next_try.is_some_and(|t| t > Instant::now()) {
            return false;
        }
        let dir = self.directory();
        if let Some(m) = dir
            .machines
            .get(&peer)
            .filter(|m| m.standing == Standing::Revoked)
        {
            // Revoked after the mail was queued: it would be refused, and
            // the revoked machine must not get it anyway.
            let reason = format!(
                "{} was revoked from the team before the message reached it",
                m.name
            );
            self.fail_queued(peer, &reason);
            return false;
        }
        let Some(q) = self.queues.get_mut(&peer) else {
            return false;
        };
        let mut ids = vec![];
        let mut envelopes = vec![];
        let mut missing = vec![];
        let mut expired = vec![];
        let mut gone = HashSet::new();
        let mut bytes = 0;
        let now_ms = now().as_unix_millis();
        for id in &q.pending {
            if q.sending.contains(id) {
                continue;
            }
            let Some(r) = self.outbox.get(id) else {
                gone.insert(id.clone());
                continue;
            };
            // Past its expiry (offline for longer than its lifetime, or
            // loaded after a long stop): failed, never sent late.
            if past_sending(r, now_ms) {
                gone.insert(id.clone());
                expired.push(id.clone());
                continue;
            }
            if ids.len() == MAX_BATCH_ENVELOPES {
                break;
            }
            let envelope = match self.store.outbox_envelope(id) {
                Ok(Some(e)) => e,
                Ok(None) => {
                    gone.insert(id.clone());
                    missing.push(id.clone());
                    continue;
                }
                Err(e) => {
                    // Sent later: the store may recover, and the mail is
                    // still there to send.
                    tracing::warn!(error = %e, "reading an envelope from the outbox failed");
                    q.next_try = Some(Instant::now() + BACKOFF_MIN);
                    break;
                }
            };
            if bytes + envelope.len() > MAX_BATCH_BYTES && !ids.is_empty() {
                break;
            }
            bytes += envelope.len();
            ids.push(id.clone());
            envelopes.push(ByteBuf::from(envelope));
        }
        if !gone.is_empty() {
            q.pending.retain(|id| !gone.contains(id));
        }
        self.expire_outbox(expired);
        // Never expected: the record is written before it is queued. Failed
        // visibly rather than retried for ever.
        self.fail_ids(
            peer,
            missing,
            "its sealed envelope is missing from the store",
        );
        self.send_batch(peer, ids, envelopes)
    }

    /// Puts one batch on its way to `peer`.
    fn send_batch(&mut self, peer: PeerId, ids: Vec<String>, envelopes: Vec<ByteBuf>) -> bool {
        let Some(q) = self.queues.get_mut(&peer) else {
            return false;
        };
        if ids.is_empty() {
            if q.pending.is_empty() && q.in_flight == 0 {
                self.queues.remove(&peer);
            }
            return false;
        }
        q.in_flight += 1;
        q.sending.extend(ids.iter().cloned());
        for id in &ids {
            if let Some(r) = self.outbox.get_mut(id) {
                // Kept in memory only (the outbox list reads it from here):
                // writing every attempt would double the store's work.
                r.attempts += 1;
            }
        }
        self.next_batch += 1;
        let batch = self.next_batch;
        let carry = Carry {
            batch,
            peer,
            request: MailRequest { envelopes },
        };
        if self.node.carry(carry) {
            self.batches.insert(batch, (peer, ids));
        } else {
            let gone = Undelivered::never_left("the daemon is shutting down");
            self.delivered(peer, ids, Err(gone));
            return false;
        }
        true
    }

    /// Fails undelivered mail whose lifetime is over (the caller drops the
    /// ids from their queues).
    fn expire_outbox(&mut self, ids: Vec<String>) {
        self.fail_records(ids, "expired", None, "undelivered message expired", |r| {
            if r.attempts == 0 {
                "expired before the recipient could be reached".into()
            } else {
                "expired without the recipient confirming it (an earlier attempt may have reached it)"
                    .into()
            }
        });
    }

    /// Fails every queued message for `peer` not already on its way, with
    /// `reason`, visibly: in the outbox, the audit log and as events.
    fn fail_queued(&mut self, peer: PeerId, reason: &str) {
        let Some(q) = self.queues.get_mut(&peer) else {
            return;
        };
        let ids: Vec<String> = q
            .pending
            .iter()
            .filter(|id| !q.sending.contains(*id))
            .cloned()
            .collect();
        q.pending.retain(|id| q.sending.contains(id));
        if q.pending.is_empty() && q.in_flight == 0 {
            self.queues.remove(&peer);
        }
        self.fail_ids(peer, ids, reason);
    }

    /// Fails the outbox records `ids` (already out of their queue) with
    /// `reason`.
    fn fail_ids(&mut self, peer: PeerId, ids: Vec<String>, reason: &str) {
        self.fail_records(ids, "failed", Some(peer), reason, |_| reason.to_owned());
    }

    /// Takes the records `ids` off the courier as failed, with the reason
    /// `reason_of` gives each, audited as `event` with `detail`: visible in
    /// the outbox and the audit log.
    fn fail_records(
        &mut self,
        ids: Vec<String>,
        event: &str,
        peer: Option<PeerId>,
        detail: &str,
        reason_of: impl Fn(&OutboxRecord) -> String,
    ) {
        let mut changed = vec![];
        for id in ids {
            if let Some(mut r) = self.outbox.remove(&id) {
                r.status = OutboxStatus::Failed;
                r.reason = Some(reason_of(&r));
                r.envelope = vec![];
                self.audit(AuditEntry {
                    event: event.into(),
                    peer: peer.map(|p| p.to_string()),
                    recipient: Some(r.to.clone()),
                    message_id: Some(r.id.clone()),
                    body_sha256: sha(&r.body_sha256),
                    detail: detail.to_owned(),
                    ..AuditEntry::default()
                });
                changed.push(r);
            }
        }
        self.pending.borrow_mut().outbox.extend(changed);
    }

    fn delivered(
        &mut self,
        peer: PeerId,
        ids: Vec<String>,
        result: Result<MailReply, Undelivered>,
    ) {
        let dir = self.directory();
        // `sent` means an attempt went out on a connection (answered, or
        // lost on the way); mail that never left (no connection could be
        // made) stays `queued`. Audited once, when it first goes out.
        let reached = result.as_ref().map_or_else(|u| u.reached, |_| true);
        if reached {
            self.offline.remove(&peer);
        } else {
            self.offline.insert(peer);
        }
        if reached {
            let mut first_sent = vec![];
            for id in &ids {
                if let Some(r) = self.outbox.get_mut(id)
                    && r.status == OutboxStatus::Queued
                {
                    r.status = OutboxStatus::Sent;
                    first_sent.push(AuditEntry {
                        event: "sent".into(),
                        peer: Some(peer.to_string()),
                        recipient: Some(r.to.clone()),
                        message_id: Some(r.id.clone()),
                        body_sha256: sha(&r.body_sha256),
                        detail: "handed to the recipient".into(),
                        ..AuditEntry::default()
                    });
                }
            }
            for entry in first_sent {
                self.audit(entry);
            }
        }
        let mut changed = vec![];
        let transport_error = match result {
            Ok(reply) if reply.outcomes.len() == ids.len() => {
                let mut busy = false;
                for (id, outcome) in ids.iter().zip(reply.outcomes) {
                    let Some(r) = self.outbox.get_mut(id) else {
                        continue;
                    };
                    match outcome {
                        MailOutcome::Accepted { held } => {
                            r.status = OutboxStatus::Delivered;
                            r.held = held;
                            r.reason = None;
                        }
                        MailOutcome::Duplicate => {
                            r.status = OutboxStatus::Delivered;
                            r.reason = None;
                        }
                        MailOutcome::Refused { code, reason } => {
                            r.status = OutboxStatus::Failed;
                            let cut = |t: &str, n: usize| t.chars().take(n).collect::<String>();
                            r.reason = Some(format!(
                                "{} refused it ({}): {}",
                                dir.name_of(&peer),
                                cut(&code, 40),
                                cut(&reason, MAX_REMOTE_REASON)
                            ));
                        }
                        MailOutcome::Busy => {
                            busy = true;
                            continue;
                        }
                    }
                    changed.push(r.clone());
                }
                busy.then(|| "the recipient is busy".to_owned())
            }
            Ok(_) => Some("the recipient answered a different number of outcomes".to_owned()),
            Err(e) if e.reached => Some(e.why),
            Err(e) => Some(format!(
                "{} is offline: no connection could be made ({})",
                dir.name_of(&peer),
                e.why
            )),
        };
        for r in &changed {
            self.outbox.remove(&r.id);
            let (event, detail) = match r.status {
                OutboxStatus::Delivered if r.held => (
                    "delivered",
                    "delivered; held for its owner's approval".to_owned(),
                ),
                OutboxStatus::Delivered => ("delivered", "delivered".to_owned()),
                _ => ("failed", r.reason.clone().unwrap_or_default()),
            };
            self.audit(AuditEntry {
                event: event.into(),
                peer: Some(peer.to_string()),
                recipient: Some(r.to.clone()),
                message_id: Some(r.id.clone()),
                body_sha256: sha(&r.body_sha256),
                detail,
                ..AuditEntry::default()
            });
        }
        if !changed.is_empty() {
            // A delivered or refused message needs its envelope no more.
            for r in &mut changed {
                r.envelope = vec![];
            }
            self.pending.borrow_mut().outbox.extend(changed);
        }
        if transport_error.is_some() {
            // Retention leaves mail on its way alone; what expired while
            // this attempt was out fails now, not at the next sweep.
            let now_ms = now().as_unix_millis();
            let expired: Vec<String> = ids
                .iter()
                .filter(|id| {
                    self.outbox
                        .get(*id)
                        .is_some_and(|r| past_sending(r, now_ms))
                })
                .cloned()
                .collect();
            self.expire_outbox(expired);
        }
        let Some(q) = self.queues.get_mut(&peer) else {
            return;
        };
        q.in_flight = q.in_flight.saturating_sub(1);
        for id in &ids {
            q.sending.remove(id);
        }
        q.pending.retain(|id| self.outbox.contains_key(id));
        match transport_error {
            None => {
                q.attempt = 0;
                q.next_try = None;
            }
            Some(why) => {
                let wait = BACKOFF_MIN
                    .saturating_mul(1 << q.attempt.min(16))
                    .min(BACKOFF_MAX);
                q.attempt += 1;
                q.next_try = Some(Instant::now() + wait);
                tracing::debug!(%peer, reason = %why, retry_in = ?wait, "delivery failed");
                // In memory only, like the attempt count: rewriting every
                // queued message on every retry to an offline machine
                // would cost a store write per message per retry.
                let reason = format!("last attempt: {why}");
                for id in &q.pending {
                    if let Some(r) = self.outbox.get_mut(id) {
                        r.reason = Some(reason.clone());
                    }
                }
            }
        }
        self.dispatch(peer);
    }

    // ----- receiving ------------------------------------------------------

    fn receive(&mut self, peer: PeerId, request: MailRequest, token: u64) {
        let dir = self.directory();
        let now = now();
        let mut outcomes = vec![];
        let mut records = vec![];
        let mut seen = vec![];
        let mut events = vec![];
        let mut batch_seen: HashSet<Vec<u8>> = HashSet::new();
        let audit_before = self.pending.borrow().audit.len();
        for bytes in request.envelopes.iter().take(MAX_BATCH_ENVELOPES) {
            let outcome = self.receive_one(
                &dir,
                peer,
                bytes,
                now,
                &mut batch_seen,
                &mut records,
                &mut seen,
                &mut events,
            );
            outcomes.push(outcome);
        }
        for _ in request.envelopes.iter().skip(MAX_BATCH_ENVELOPES) {
            outcomes.push(refused(
                "batch_too_large",
                format!("a batch carries at most {MAX_BATCH_ENVELOPES} envelopes"),
            ));
        }
        if !records.is_empty()
            && let Err(e) = self.store.put_inbox(&records, &seen)
        {
            tracing::error!(error = %e, "cannot store received mail");
            // Nothing stored: tell the sender to try again later.
            for (o, _) in outcomes.iter_mut().zip(0..) {
                if matches!(o, MailOutcome::Accepted { .. }) {
                    *o = MailOutcome::Busy;
                }
            }
            events.clear();
            // Nothing was received after all: the audit says so only when
            // the retry lands. Refusals in this batch stand.
            let mut pending = self.pending.borrow_mut();
            let mut i = 0;
            pending.audit.retain(|a| {
                i += 1;
                i <= audit_before || !matches!(a.event.as_str(), "received" | "held")
            });
            drop(pending);
            for r in &records {
                if r.held.is_some()
                    && let Some(n) = self.held_from.get_mut(&r.from_peer)
                {
                    *n = n.saturating_sub(1);
                }
            }
        }
        self.after(AfterFlush::Received {
            token,
            reply: MailReply { outcomes },
            events,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_one(
        &mut self,
        dir: &Directory,
        peer: PeerId,
        bytes: &[u8],
        now: Timestamp,
        batch_seen: &mut HashSet<Vec<u8>>,
        records: &mut Vec<InboxRecord>,
        seen: &mut Vec<(Vec<u8>, u64)>,
        events: &mut Vec<Event>,
    ) -> MailOutcome {
        let refuse = |this: &Self, code: &str, reason: String, id: Option<String>| {
            // Audited, but not one entry per envelope of a flood: the
            // first of its kind per window, then a count (see `tick`).
            let key = (peer, code.to_owned());
            if this.refusals.borrow_mut().check(&key, calendar()) {
                this.audit(AuditEntry {
                    event: "refused".into(),
                    peer: Some(peer.to_string()),
                    sender: Some(address(None, &dir.name_of(&peer))),
                    message_id: id,
                    detail: format!("{code}: {reason}"),
                    ..AuditEntry::default()
                });
            }
            refused(code, reason)
        };
        let envelope = match Envelope::from_wire(bytes) {
            Ok(e) => e,
            Err(e) => return refuse(self, e.name(), e.to_string(), None),
        };
        let h = &envelope.header;
        let id = h.id.to_string();
        if h.from != peer {
            return refuse(
                self,
                "sender_mismatch",
                "the envelope names another sender than the connection".into(),
                Some(id),
            );
        }
        match dir.machines.get(&peer).map(|m| m.standing) {
            Some(Standing::Current) => {}
            Some(Standing::Revoked) => {
                return refuse(
                    self,
                    "revoked",
                    "the sender was revoked from the team".into(),
                    Some(id),
                );
            }
            _ => {
                // The node refuses strangers before their mail gets here;
                // this directory is a moment behind the node's, so the
                // sender was admitted just now. It retries.
                return MailOutcome::Busy;
            }
        }
        if !dir.member || dir.team != Some(h.team) {
            return refuse(
                self,
                "not_a_member",
                "this machine is not a member of the sender's team".into(),
                Some(id),
            );
        }
        // Past its expiry and the allowed skew the dedup record may be gone:
        // an envelope that old is refused as expired before anything is
        // looked up, so a late replay never lands and never reads as new.
        if now > h.expires_at.saturating_add(MAX_CLOCK_SKEW) {
            let e = agentmesh_protocol::envelope::OpenError::Expired {
                expires_at: h.expires_at,
                now,
            };
            return refuse(self, e.name(), e.to_string(), Some(id));
        }
        let key = [peer.to_bytes(), h.id.0.to_vec()].concat();
        // A store that cannot answer is not an answer of "new": the sender
        // tries again later.
        let Ok(seen_before) = self.store.seen(&key) else {
            return MailOutcome::Busy;
        };
        if batch_seen.contains(&key) || seen_before {
            return MailOutcome::Duplicate;
        }
        let Ok(id_in_inbox) = self.store.inbox_has(&id) else {
            return MailOutcome::Busy;
        };
        // Ids are random; one another sender already used would make
        // `read ID` ambiguous, so it is refused (the sender makes a new one).
        if records.iter().any(|r| r.id == id) || id_in_inbox {
            return refuse(
                self,
                "id_taken",
                "another message here already has this id".into(),
                Some(id),
            );
        }
        let Opened { header, body } = match envelope.open(&self.me, now) {
            Ok(o) => o,
            Err(e) => return refuse(self, e.name(), e.to_string(), Some(id)),
        };
        let from_machine = dir.name_of(&peer);
        let sender = address(body.from_mailbox.as_ref().map(Name::as_str), &from_machine);
        let recipient = address(body.to_mailbox.as_ref().map(Name::as_str), &dir.my_name);
        let body_sha256 = hex(&Sha256::digest(body.to_bytes()));
        // Consent.
        if let Some(m) = &body.to_mailbox {
            match self.folders.get(m.as_str()) {
                None => {
                    return refuse(
                        self,
                        "no_mailbox",
                        format!(
                            "there is no mailbox {m} on {}; its owner can make one with `agentmesh allow FOLDER --mailbox {m}`",
                            dir.my_name
                        ),
                        Some(id),
                    );
                }
                Some(b) if !b.allowed => {
                    return refuse(
                        self,
                        "folder_not_allowed",
                        format!("the folder of mailbox {m} is not opted in to receiving"),
                        Some(id),
                    );
                }
                Some(_) => {}
            }
        }
        let other_owner = dir
            .machines
            .get(&peer)
            .is_some_and(|m| m.owner != dir.my_owner);
        let held = if self.paused {
            Some("paused")
        } else if other_owner && !self.trusted.contains(&peer.to_string()) {
            Some("other_owner")
        } else {
            None
        };
        if held.is_some() {
            let n = self.held_from.entry(peer.to_string()).or_default();
            if *n >= MAX_HELD_PER_SENDER && held == Some("paused") {
                // A pause holds, it does not refuse: the sender keeps the
                // mail and tries again after the pause.
                return MailOutcome::Busy;
            }
            if *n >= MAX_HELD_PER_SENDER {
                return refuse(
                    self,
                    "held_full",
                    format!(
                        "{MAX_HELD_PER_SENDER} messages from you already wait for {}'s approval; wait until they are approved or expire",
                        dir.my_owner
                    ),
                    Some(id),
                );
            }
            *n += 1;
        }
        let record = InboxRecord {
            seq: self.take_seq(),
            id: id.clone(),
            from_peer: peer.to_string(),
            from: sender.clone(),
            from_owner: dir.machines.get(&peer).map(|m| m.owner.clone()),
            mailbox: body.to_mailbox.as_ref().map(ToString::to_string),
            who: Who {
                kind: match body.who.kind {
                    agentmesh_protocol::WhoKind::Human => WhoKind::Human,
                    agentmesh_protocol::WhoKind::Agent => WhoKind::Agent,
                },
                name: body.who.name.clone(),
                session_id: body.who.session_id.clone(),
                task: body.who.task.clone(),
            },
            kind: header.kind.as_str().into(),
            thread: header.thread.to_string(),
            in_reply_to: header.in_reply_to.map(|m| m.to_string()),
            hop: header.hop,
            taint: header.taint,
            text: body.text,
            received_at: now.as_unix_millis(),
            expires_at: header.expires_at.as_unix_millis(),
            read_at: None,
            held: held.map(str::to_owned),
            body_sha256: body_sha256.clone(),
        };
        let until = header
            .expires_at
            .saturating_add(MAX_CLOCK_SKEW)
            .as_unix_millis();
        self.audit(AuditEntry {
            event: if held.is_some() { "held" } else { "received" }.into(),
            peer: Some(peer.to_string()),
            sender: Some(sender),
            recipient: Some(recipient),
            message_id: Some(id),
            body_sha256: Some(body_sha256),
            detail: held.map_or_else(
                || format!("{} delivered to the inbox", record.kind),
                |h| format!("held: {h}"),
            ),
            ..AuditEntry::default()
        });
        events.push(if held.is_some() {
            Event::Held {
                message: view(&record),
            }
        } else {
            Event::Message {
                message: view(&record),
            }
        });
        batch_seen.insert(key.clone());
        seen.push((key, until));
        records.push(record);
        MailOutcome::Accepted {
            held: held.is_some(),
        }
    }

    // ----- the API --------------------------------------------------------

    fn api(&mut self, who: Who, mailbox: Option<String>, op: Op, reply: oneshot::Sender<Reply>) {
        let answer = match op {
            Op::Send {
                to,
                text,
                ask,
                reply_to,
                from_mailbox,
            } => match reply_to
                .map(|r| self.full_id(&r))
                .transpose()
                .and_then(|reply_to| {
                    self.send(&who, mailbox, &to, text, ask, reply_to, from_mailbox)
                }) {
                Ok(record) => return self.after(AfterFlush::Sent { reply, record }),
                Err(e) => Err(e),
            },
            Op::Inbox {
                mailbox,
                unread,
                after_seq,
                limit,
            } => self.inbox(
                mailbox.as_deref(),
                unread,
                after_seq.unwrap_or(0),
                limit.unwrap_or(MAX_INBOX_PAGE),
            ),
            Op::Read { id } => match self.full_id(&id) {
                Ok(id) => return self.read(&id, reply),
                Err(e) => Err(e),
            },
            Op::Outbox => self.outbox_list(),
            Op::Held => self.held_list(),
            Op::Approve { id } => match self.full_id(&id) {
                Ok(id) => return self.resolve(&who, &id, None, reply),
                Err(e) => Err(e),
            },
            Op::Reject { id, reason } => match self.full_id(&id) {
                Ok(id) => {
                    let reason = reason.unwrap_or_default();
                    return self.resolve(&who, &id, Some(&reason), reply);
                }
                Err(e) => Err(e),
            },
            // Consent decisions are audited, and answered once the entry
            // is durable.
            Op::Trust { machine } => {
                let answer = self.trust(&machine);
                if let Ok(v) = &answer {
                    self.decided(
                        &who,
                        "trust",
                        v["peer_id"].as_str().map(str::to_owned),
                        format!("mail from {machine} is no longer held"),
                    );
                }
                return self.answer_durably(reply, answer);
            }
            Op::Allow { path, mailbox } => {
                let answer = self.allow(&path, mailbox.as_deref(), true);
                return self.folder_decided(&who, "allow", reply, answer);
            }
            Op::Deny { path, mailbox } => {
                let answer = self.allow(&path, mailbox.as_deref(), false);
                return self.folder_decided(&who, "deny", reply, answer);
            }
            Op::Mailboxes => {
                let mut rows: Vec<&FolderBinding> = self.folders.values().collect();
                rows.sort_by(|a, b| a.mailbox.cmp(&b.mailbox));
                ok(rows
                    .iter()
                    .map(|b| serde_json::json!({ "mailbox": b.mailbox, "path": b.path, "allowed": b.allowed }))
                    .collect::<Vec<_>>())
            }
            Op::Pause => {
                let answer = self.set_paused(true);
                if answer.is_ok() {
                    self.decided(
                        &who,
                        "pause",
                        None,
                        "inbound mail is held until resume".into(),
                    );
                }
                return self.answer_durably(reply, answer);
            }
            Op::Resume => return self.resume(&who, reply),
            Op::Audit { since_secs } => self.audit_list(since_secs),
            #[cfg(feature = "test-clock")]
            Op::ClockAdvance { secs } => {
                crate::clock::advance(Duration::from_secs(secs));
                self.retention();
                ok(serde_json::json!({ "offset_secs": crate::clock::offset().as_secs() }))
            }
            _ => err("internal", "not a mail operation"),
        };
        let _ = reply.send(answer);
    }

    /// The received message id `given` names: the whole id, or a unique
    /// prefix of at least [`MIN_ID_PREFIX`] characters, as git takes them.
    fn full_id(&self, given: &str) -> Result<String, ApiError> {
        let given = given.trim().to_ascii_lowercase();
        if given.len() == 32 {
            return Ok(given);
        }
        if given.len() < MIN_ID_PREFIX || !given.chars().all(|c| c.is_ascii_hexdigit()) {
            return err(
                "bad_id",
                format!(
                    "{given:?} is not a message id; give the id, or at least its first {MIN_ID_PREFIX} characters, as `agentmesh inbox` shows it"
                ),
            );
        }
        let found = self
            .store
            .inbox_ids_starting(&given, 6)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => err(
                "unknown_message",
                format!("no received message has an id starting with {given}"),
            ),
            several => err(
                "ambiguous_id",
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

    /// Audits a person's (or an agent's) decision, naming who made it.
    fn decided(&self, who: &Who, event: &str, peer: Option<String>, detail: String) {
        self.audit(AuditEntry {
            event: event.into(),
            peer,
            detail: format!("{detail} (by {})", who_label(who)),
            ..AuditEntry::default()
        });
    }

    /// Audits an `allow` or `deny` that succeeded, then answers durably.
    fn folder_decided(&self, who: &Who, event: &str, reply: oneshot::Sender<Reply>, answer: Reply) {
        if let Ok(v) = &answer {
            let (path, mailbox) = (
                v["path"].as_str().unwrap_or_default(),
                v["mailbox"].as_str().unwrap_or_default(),
            );
            let detail = if event == "allow" {
                format!("{path} receives as mailbox {mailbox}")
            } else {
                format!("{path} (mailbox {mailbox}) no longer receives")
            };
            self.decided(who, event, None, detail);
        }
        self.answer_durably(reply, answer);
    }

    /// Answers once everything written so far, audit entries included, is
    /// durable.
    fn answer_durably(&self, reply: oneshot::Sender<Reply>, value: Reply) {
        self.after(AfterFlush::Answer {
            reply,
            value,
            events: vec![],
        });
    }

    fn inbox(&self, mailbox: Option<&str>, unread: bool, after: u64, limit: usize) -> Reply {
        ok(inbox_page(
            self.store.as_ref(),
            mailbox,
            unread,
            after,
            limit,
        )?)
    }

    fn read(&mut self, id: &str, reply: oneshot::Sender<Reply>) {
        let answer = match self.store.inbox_get(id) {
            Ok(Some(mut r)) if r.held.is_none() => {
                if r.read_at.is_none() {
                    r.read_at = Some(now().as_unix_millis());
                    if let Err(e) = self.store.update_inbox(std::slice::from_ref(&r)) {
                        let _ = reply.send(err("store", e.to_string()));
                        return;
                    }
                }
                ok(view(&r))
            }
            Ok(Some(_)) => err(
                "held",
                format!("message {id} is held for approval; see `agentmesh held`"),
            ),
            Ok(None) => err(
                "unknown_message",
                format!("no received message has id {id}"),
            ),
            Err(e) => err("store", e.to_string()),
        };
        self.after(AfterFlush::Answer {
            reply,
            value: answer,
            events: vec![],
        });
    }

    fn outbox_list(&self) -> Reply {
        // What is still on its way is current in memory (attempts, status);
        // of what is done, the newest.
        let mut all: Vec<OutboxRecord> = self.outbox.values().cloned().collect();
        all.extend(
            self.store
                .outbox_done(MAX_OUTBOX_LISTED)
                .map_err(|e| ApiError::new("store", e.to_string()))?,
        );
        all.sort_by_key(|r| r.created_at);
        let now_i = Instant::now();
        let dir = self.directory();
        let all: Vec<_> = all
            .iter()
            .map(|r| {
                let mut v = outbox_view(r);
                let peer = r.to_peer.parse::<PeerId>().ok();
                v.to_owner = peer
                    .and_then(|p| dir.machines.get(&p))
                    .map(|m| m.owner.clone());
                if matches!(r.status, OutboxStatus::Queued | OutboxStatus::Sent) {
                    v.offline = peer.is_some_and(|p| self.offline.contains(&p));
                    v.retry_in_ms = peer
                        .and_then(|p| self.queues.get(&p))
                        .filter(|q| !q.sending.contains(&r.id))
                        .and_then(|q| q.next_try)
                        .map(|t| t.saturating_duration_since(now_i).as_millis() as u64);
                }
                v
            })
            .collect();
        ok(within_page(all, json_size))
    }

    fn held_records(&self) -> Result<Vec<InboxRecord>, ApiError> {
        let store = |e: crate::store::StoreError| ApiError::new("store", e.to_string());
        let mut out = vec![];
        for (seq, _) in self.store.held_index().map_err(store)? {
            if let Some(r) = self.store.inbox_at(seq).map_err(store)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    fn held_list(&self) -> Reply {
        // The oldest first: they expire first. What does not fit one page
        // shows once these are decided.
        let mut bytes = 0;
        let mut out = vec![];
        for r in self.held_records()? {
            let v = view(&r);
            bytes += json_size(&v);
            if bytes > MAX_PAGE_BYTES && !out.is_empty() {
                break;
            }
            out.push(v);
        }
        ok(out)
    }

    /// Approves or rejects a held message. The first answer wins; others
    /// are told it was already decided.
    /// `rejected` is the reason of a rejection (empty: none given), `None`
    /// an approval.
    fn resolve(
        &mut self,
        who: &Who,
        id: &str,
        rejected: Option<&str>,
        reply: oneshot::Sender<Reply>,
    ) {
        let approve = rejected.is_none();
        let record = match self.store.inbox_get(id) {
            Ok(Some(r)) if r.held.is_some() => r,
            Ok(Some(_)) => {
                let _ = reply.send(err(
                    "not_held",
                    format!("message {id} is not held (it may have been decided already)"),
                ));
                return;
            }
            Ok(None) => {
                let _ = reply.send(err(
                    "unknown_message",
                    format!("no held message has id {id} (it may have been rejected already)"),
                ));
                return;
            }
            Err(e) => {
                let _ = reply.send(err("store", e.to_string()));
                return;
            }
        };
        let mut events = vec![];
        let result = if approve {
            // Delivered now: it takes its place at the end of the inbox.
            let mut r = record.clone();
            r.held = None;
            r.seq = self.take_seq();
            events.push(Event::Message { message: view(&r) });
            self.store.move_inbox(record.seq, &r)
        } else {
            self.store.delete_inbox(&[record.seq])
        };
        if let Err(e) = result {
            let _ = reply.send(err("store", e.to_string()));
            return;
        }
        if let Some(n) = self.held_from.get_mut(&record.from_peer) {
            *n = n.saturating_sub(1);
        }
        let outcome = if approve { "approved" } else { "rejected" };
        self.audit(AuditEntry {
            event: outcome.into(),
            peer: Some(record.from_peer.clone()),
            sender: Some(record.from.clone()),
            message_id: Some(record.id.clone()),
            body_sha256: Some(record.body_sha256.clone()),
            detail: {
                let by = format!("held message {outcome} by {}", who_label(who));
                match rejected.map(str::trim).filter(|r| !r.is_empty()) {
                    Some(r) => format!(
                        "{by}: {}",
                        r.chars().take(MAX_REMOTE_REASON).collect::<String>()
                    ),
                    None => by,
                }
            },
            ..AuditEntry::default()
        });
        events.push(Event::Resolved {
            id: record.id.clone(),
            outcome: outcome.into(),
        });
        self.after(AfterFlush::Answer {
            reply,
            value: ok(serde_json::json!({ "id": record.id, "outcome": outcome })),
            events,
        });
    }

    fn trust(&mut self, machine: &str) -> Reply {
        let dir = self.directory();
        let Some((peer, _)) = dir.current(machine) else {
            return err(
                "unknown_machine",
                format!("no current member is named {machine}"),
            );
        };
        self.store
            .put_trusted(&peer.to_string())
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        self.trusted.insert(peer.to_string());
        ok(serde_json::json!({ "trusted": machine, "peer_id": peer.to_string() }))
    }

    fn allow(&mut self, path: &str, mailbox: Option<&str>, allowed: bool) -> Reply {
        if !allowed && let Some(b) = self.binding_named(path, mailbox) {
            // Denying works by the path as it was allowed, or by mailbox
            // name, even once the folder is gone.
            let mut b = b.clone();
            b.allowed = false;
            self.store
                .put_folder(&b)
                .map_err(|e| ApiError::new("store", e.to_string()))?;
            self.folders.insert(b.mailbox.clone(), b.clone());
            return ok(
                serde_json::json!({ "mailbox": b.mailbox, "path": b.path, "allowed": b.allowed }),
            );
        }
        if !allowed && path.is_empty() {
            return err(
                "not_bound",
                format!(
                    "no mailbox is named {}; `agentmesh mailboxes` lists them",
                    mailbox.unwrap_or_default()
                ),
            );
        }
        let path = PathBuf::from(path);
        let path = std::fs::canonicalize(&path).map_err(|e| {
            ApiError::new(
                "bad_path",
                format!("{}: {e}; give an existing folder", path.display()),
            )
        })?;
        if !path.is_dir() {
            return err("bad_path", format!("{} is not a folder", path.display()));
        }
        let path_text = path.display().to_string();
        let existing = self.folders.values().find(|f| f.path == path_text).cloned();
        let binding = match (existing, allowed) {
            (Some(mut b), _) => {
                if let Some(m) = mailbox
                    && m != b.mailbox
                {
                    return err(
                        "bound",
                        format!("{path_text} is already bound to mailbox {}", b.mailbox),
                    );
                }
                b.allowed = allowed;
                b
            }
            (None, false) => {
                return err(
                    "not_bound",
                    format!("{path_text} was never opted in; nothing to deny"),
                );
            }
            (None, true) => {
                let name = match mailbox {
                    Some(m) => Name::parse("mailbox name", m)
                        .map_err(|e| ApiError::new("bad_mailbox", e.to_string()))?,
                    None => crate::config::fold_name(
                        &path
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ),
                };
                if let Some(other) = self.folders.get(name.as_str()) {
                    return err(
                        "mailbox_taken",
                        format!(
                            "mailbox {name} is already bound to {}; choose another with --mailbox",
                            other.path
                        ),
                    );
                }
                FolderBinding {
                    mailbox: name.to_string(),
                    path: path_text,
                    allowed: true,
                }
            }
        };
        self.store
            .put_folder(&binding)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        self.folders
            .insert(binding.mailbox.clone(), binding.clone());
        ok(
            serde_json::json!({ "mailbox": binding.mailbox, "path": binding.path, "allowed": binding.allowed }),
        )
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

    fn set_paused(&mut self, paused: bool) -> Reply {
        self.store
            .set_paused(paused)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        self.paused = paused;
        ok(serde_json::json!({ "paused": paused }))
    }

    /// Resumes delivery, and delivers what `pause` held.
    fn resume(&mut self, who: &Who, reply: oneshot::Sender<Reply>) {
        if let Err(e) = self.set_paused(false) {
            let _ = reply.send(Err(e));
            return;
        }
        let dir = self.directory();
        let mut released = vec![];
        let mut events = vec![];
        let mut still_held = 0;
        match self.held_records() {
            Ok(held) => {
                for mut r in held
                    .into_iter()
                    .filter(|r| r.held.as_deref() == Some("paused"))
                {
                    // Pausing held everything; resuming releases only what
                    // would have been delivered had there been no pause.
                    if let Some(why) = self.still_held(&dir, &r) {
                        r.held = Some(why.into());
                        if let Err(e) = self.store.update_inbox(std::slice::from_ref(&r)) {
                            let _ = reply.send(err("store", e.to_string()));
                            return;
                        }
                        still_held += 1;
                        self.audit(AuditEntry {
                            event: "held".into(),
                            peer: Some(r.from_peer.clone()),
                            sender: Some(r.from.clone()),
                            message_id: Some(r.id.clone()),
                            body_sha256: Some(r.body_sha256.clone()),
                            detail: format!(
                                "held: {why} (it was held by pause; resume left it held)"
                            ),
                            ..AuditEntry::default()
                        });
                        events.push(Event::Held { message: view(&r) });
                        continue;
                    }
                    let old_seq = r.seq;
                    r.held = None;
                    r.seq = self.take_seq();
                    if let Err(e) = self.store.move_inbox(old_seq, &r) {
                        let _ = reply.send(err("store", e.to_string()));
                        return;
                    }
                    if let Some(n) = self.held_from.get_mut(&r.from_peer) {
                        *n = n.saturating_sub(1);
                    }
                    self.audit(AuditEntry {
                        event: "released".into(),
                        peer: Some(r.from_peer.clone()),
                        sender: Some(r.from.clone()),
                        message_id: Some(r.id.clone()),
                        body_sha256: Some(r.body_sha256.clone()),
                        detail: format!(
                            "held by pause, delivered to the inbox by resume (by {})",
                            who_label(who)
                        ),
                        ..AuditEntry::default()
                    });
                    events.push(Event::Message { message: view(&r) });
                    events.push(Event::Resolved {
                        id: r.id.clone(),
                        outcome: "approved".into(),
                    });
                    released.push(r);
                }
            }
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        }
        self.decided(
            who,
            "resume",
            None,
            format!(
                "inbound mail is delivered again; {} held message(s) released, {still_held} still held",
                released.len()
            ),
        );
        self.after(AfterFlush::Answer {
            reply,
            value: ok(serde_json::json!({
                "paused": false,
                "released": released.len(),
                "still_held": still_held,
            })),
            events,
        });
    }

    /// Why a message held by `pause` must stay held after `resume`: its
    /// sender's owner is another person not trusted, or its mailbox was
    /// denied or removed meanwhile.
    fn still_held(&self, dir: &Directory, r: &InboxRecord) -> Option<&'static str> {
        if let Some(m) = &r.mailbox
            && !self.folders.get(m.as_str()).is_some_and(|b| b.allowed)
        {
            return Some("folder_not_allowed");
        }
        let other_owner = PeerId::from_str(&r.from_peer)
            .ok()
            .and_then(|p| dir.machines.get(&p))
            .is_none_or(|m| m.owner != dir.my_owner);
        (other_owner && !self.trusted.contains(&r.from_peer)).then_some("other_owner")
    }

    fn audit_list(&self, since_secs: Option<u64>) -> Reply {
        let since = since_secs.map_or(Timestamp::from_unix_millis(0), |s| {
            now().saturating_sub(Duration::from_secs(s))
        });
        let entries = self
            .store
            .audit_since(since, MAX_AUDIT_LISTED)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        ok(within_page(entries, |e| json_size(e) + 100)
            .into_iter()
            .map(|e| api::AuditView {
                at: rfc3339(e.at),
                event: e.event,
                peer: e.peer,
                sender: e.sender,
                recipient: e.recipient,
                id: e.message_id,
                body_sha256: e.body_sha256,
                detail: e.detail,
            })
            .collect::<Vec<_>>())
    }

    // ----- time -----------------------------------------------------------

    fn tick(&mut self) {
        let now_i = Instant::now();
        let due: Vec<PeerId> = self
            .queues
            .iter()
            .filter(|(_, q)| {
                // A queue with nothing scheduled but mail waiting (loaded at
                // start-up, or its last batch answered busy for some) is
                // due too: nothing else would wake it.
                q.in_flight < MAX_IN_FLIGHT
                    && q.pending.len() > q.sending.len()
                    && q.next_try.is_none_or(|t| t <= now_i)
            })
            .map(|(p, _)| *p)
            .collect();
        for p in due {
            self.dispatch(p);
        }
        if now_i.duration_since(self.last_retention) >= RETENTION_EVERY {
            self.retention();
        }
        self.audit_refusal_counts();
        self.shrink();
        self.publish_summary();
        self.write_pending();
    }

    /// One entry for each (machine, reason) whose refusals in a window
    /// that just ended were counted rather than audited one by one.
    fn audit_refusal_counts(&mut self) {
        let (closed, overflow) = self.refusals.borrow_mut().closed(calendar());
        if closed.is_empty() && overflow == 0 {
            return;
        }
        let dir = self.directory();
        let secs = REFUSAL_AUDIT_WINDOW.as_secs();
        for ((peer, code), n) in closed {
            self.audit(AuditEntry {
                event: "refused".into(),
                peer: Some(peer.to_string()),
                sender: Some(address(None, &dir.name_of(&peer))),
                detail: format!(
                    "{code}: {n} more refused like it from this machine within {secs}s (counted, not audited one by one)"
                ),
                ..AuditEntry::default()
            });
        }
        if overflow > 0 {
            self.audit(AuditEntry {
                event: "refused".into(),
                detail: format!(
                    "{overflow} more envelopes refused from machines past the first {MAX_REFUSAL_KEYS} counted within {secs}s"
                ),
                ..AuditEntry::default()
            });
        }
    }

    /// Gives back what a burst grew: maps and queues keep their capacity
    /// after they empty, so a daemon that once queued 100,000 messages
    /// would otherwise hold their table for good.
    fn shrink(&mut self) {
        fn roomy(len: usize, capacity: usize) -> bool {
            capacity > 1024 && len < capacity / 4
        }
        if roomy(self.outbox.len(), self.outbox.capacity()) {
            self.outbox.shrink_to(self.outbox.len() * 2);
        }
        for q in self.queues.values_mut() {
            if roomy(q.pending.len(), q.pending.capacity()) {
                q.pending.shrink_to(q.pending.len() * 2);
            }
            if roomy(q.sending.len(), q.sending.capacity()) {
                q.sending.shrink_to(q.sending.len() * 2);
            }
        }
    }

    /// Expires undeliverable outbox mail, held and read mail, and dedup
    /// records whose window has passed.
    pub fn retention(&mut self) {
        self.last_retention = Instant::now();
        let now = now();
        // Undelivered mail past its expiry fails, visibly.
        // Mail on its way is left to its answer: it may be delivered.
        let sending: HashSet<&String> = self.queues.values().flat_map(|q| &q.sending).collect();
        let expired: Vec<String> = self
            .outbox
            .values()
            .filter(|r| past_sending(r, now.as_unix_millis()) && !sending.contains(&r.id))
            .map(|r| r.id.clone())
            .collect();
        self.expire_outbox(expired);
        for q in self.queues.values_mut() {
            q.pending.retain(|id| self.outbox.contains_key(id));
        }
        let _ = self
            .store
            .prune_outbox_done(now.saturating_sub(OUTBOX_KEEP));
        // Held mail nobody approved, and read mail, expire. Both are found
        // through indices, so retention never reads the whole inbox.
        let mut gone = vec![];
        let mut events = vec![];
        let held_limit = now.saturating_sub(HELD_EXPIRY).as_unix_millis();
        for r in self.held_records().unwrap_or_default() {
            if r.received_at < held_limit {
                if let Some(n) = self.held_from.get_mut(&r.from_peer) {
                    *n = n.saturating_sub(1);
                }
                self.audit(AuditEntry {
                    event: "expired".into(),
                    peer: Some(r.from_peer.clone()),
                    sender: Some(r.from.clone()),
                    message_id: Some(r.id.clone()),
                    body_sha256: Some(r.body_sha256.clone()),
                    detail: "held message expired unapproved".into(),
                    ..AuditEntry::default()
                });
                events.push(Event::Resolved {
                    id: r.id.clone(),
                    outcome: "expired".into(),
                });
                gone.push(r.seq);
            }
        }
        gone.extend(
            self.store
                .read_before(now.saturating_sub(READ_EXPIRY))
                .unwrap_or_default(),
        );
        let _ = self.store.delete_inbox(&gone);
        let _ = self.store.prune_seen(now);
        // The one owner of retention: the audit log and tickets too.
        crate::audit::prune(self.store.as_ref(), now, self.audit_retention);
        let _ = self.store.prune_tickets(now);
        self.emit(events);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;
    use crate::store::SledStore;
    use crate::store::testing::Flaky;
    use crate::store::{AuditStore, MailStore};
    use crate::team::Machine;
    use agentmesh_protocol::team::TeamId;

    fn record(seq: u64, unread: bool) -> InboxRecord {
        InboxRecord {
            seq,
            id: format!("{seq:032x}"),
            from_peer: "12D3KooWtest".into(),
            from: "@alpha".into(),
            from_owner: None,
            mailbox: None,
            who: Who {
                kind: WhoKind::Agent,
                name: "codex".into(),
                session_id: None,
                task: None,
            },
            kind: "tell".into(),
            thread: format!("{seq:032x}"),
            in_reply_to: None,
            hop: 0,
            taint: false,
            text: format!("message {seq}"),
            received_at: 1,
            expires_at: u64::MAX,
            read_at: (!unread).then_some(2),
            held: None,
            body_sha256: String::new(),
        }
    }

    /// Every page of `inbox` from the start, as the CLI reads them.
    fn read_all(store: &dyn Store, unread: bool, limit: usize) -> (Vec<u64>, usize) {
        let (mut after, mut seqs, mut calls) = (0, vec![], 0);
        loop {
            let page = inbox_page(store, None, unread, after, limit).unwrap();
            calls += 1;
            seqs.extend(page.messages.iter().map(|m| m.seq));
            match page.next_after_seq {
                Some(next) => {
                    assert!(next > after, "the cursor must move on");
                    after = next;
                }
                None => return (seqs, calls),
            }
        }
    }

    #[test]
    fn inbox_pages_go_on_past_a_bounded_scan_and_miss_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        // 12,345 messages, every 1,000th unread.
        let records: Vec<InboxRecord> = (1..=12_345)
            .map(|seq| record(seq, seq % 1000 == 0))
            .collect();
        store.put_inbox(&records, &[]).unwrap();
        // A filter that matches little: each call looks at no more than
        // 5,000 messages, answers what it found and where to go on, and
        // nothing is missed or repeated.
        let (unread, calls) = read_all(&store, true, MAX_INBOX_PAGE);
        assert_eq!(unread, (1..=12).map(|i| i * 1000).collect::<Vec<_>>());
        assert!(calls >= 12_345 / MAX_INBOX_SCAN, "{calls} calls");
        // No filter, small pages: every message once, in order.
        let (all, _) = read_all(&store, false, 700);
        assert_eq!(all, (1..=12_345).collect::<Vec<_>>());
    }

    /// Sends `envelope` from `peer` to the mail actor; its one outcome.
    async fn deliver(
        events: &mpsc::Sender<MailEvent>,
        answers: &mut mpsc::Receiver<(u64, MailReply)>,
        peer: PeerId,
        envelope: &[u8],
    ) -> MailOutcome {
        events
            .send(MailEvent::Inbound {
                peer,
                revoked: false,
                request: MailRequest {
                    envelopes: vec![ByteBuf::from(envelope.to_vec())],
                },
                token: 7,
            })
            .await
            .unwrap();
        let (token, reply) = answers.recv().await.unwrap();
        assert_eq!(token, 7);
        reply.outcomes.into_iter().next().unwrap()
    }

    #[tokio::test]
    async fn a_store_that_fails_answers_busy_and_audits_nothing_it_did_not_keep() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Flaky::new(SledStore::open(dir.path(), 1 << 20).unwrap()));
        store.fail_put_inbox(true);
        let mut rng = rand::rng();
        let (me, alpha) = (Identity::generate(&mut rng), Identity::generate(&mut rng));
        let team = TeamId([3; 32]);
        let machine = |name: &str, id: &Identity| Machine {
            name: name.into(),
            owner: "Ada".into(),
            x25519: id.x25519_public(),
            standing: Standing::Current,
        };
        let dir_value = Directory {
            me: Some(me.peer_id()),
            team: Some(team),
            my_name: "bravo".into(),
            my_owner: "Ada".into(),
            member: true,
            machines: [
                (me.peer_id(), machine("bravo", &me)),
                (alpha.peer_id(), machine("alpha", &alpha)),
            ]
            .into_iter()
            .collect(),
        };
        let (_dir_tx, dir_rx) = watch::channel(Arc::new(dir_value));
        let (node, link, mut ends) = Handle::for_tests();
        let (commit, _flusher) = GroupCommit::start(store.clone());
        let (_mail, task) = Mail::start(
            me.clone(),
            store.clone(),
            dir_rx,
            (node, link),
            commit,
            (
                Duration::from_secs(3600),
                Duration::from_secs(90 * 24 * 3600),
            ),
            CancellationToken::new(),
        )
        .unwrap();
        let _task = tokio::spawn(task);
        let sent_at = now();
        let id = MessageId::random(&mut rng);
        let header = Header {
            id,
            team,
            from: alpha.peer_id(),
            to: me.peer_id(),
            kind: Kind::Tell,
            in_reply_to: None,
            thread: id,
            hop: 0,
            taint: false,
            sent_at,
            expires_at: sent_at.saturating_add(Duration::from_secs(3600)),
        };
        let body = Body {
            who: agentmesh_protocol::Who {
                kind: agentmesh_protocol::WhoKind::Agent,
                name: "codex".into(),
                session_id: None,
                task: None,
            },
            from_mailbox: None,
            to_mailbox: None,
            text: "hello".into(),
            attachments: vec![],
        };
        let envelope =
            agentmesh_protocol::seal(&alpha, &me.x25519_public(), &header, &body, &mut rng)
                .unwrap()
                .to_wire();
        let received = |store: &Flaky| {
            store
                .audit_since(Timestamp::from_unix_millis(0), 100)
                .unwrap()
                .iter()
                .filter(|e| e.event == "received")
                .count()
        };

        // The inbox write fails: busy, nothing stored, nothing audited.
        let outcome = deliver(&ends.events, &mut ends.answers, alpha.peer_id(), &envelope).await;
        assert_eq!(outcome, MailOutcome::Busy);
        assert_eq!(received(&store), 0);
        assert!(store.inbox_after(0, 10).unwrap().is_empty());

        // The retry lands once, and is audited once.
        store.fail_put_inbox(false);
        let outcome = deliver(&ends.events, &mut ends.answers, alpha.peer_id(), &envelope).await;
        assert_eq!(outcome, MailOutcome::Accepted { held: false });
        assert_eq!(received(&store), 1);

        // A dedup lookup that fails is not "new": busy, not stored again.
        store.fail_seen(true);
        let outcome = deliver(&ends.events, &mut ends.answers, alpha.peer_id(), &envelope).await;
        assert_eq!(outcome, MailOutcome::Busy);
        assert_eq!(store.inbox_after(0, 10).unwrap().len(), 1);

        // And once it answers again, a duplicate.
        store.fail_seen(false);
        let outcome = deliver(&ends.events, &mut ends.answers, alpha.peer_id(), &envelope).await;
        assert_eq!(outcome, MailOutcome::Duplicate);
        assert_eq!(received(&store), 1);
    }

    /// A send is carried by the node as a batch, with no task of its own;
    /// the batch's answer, which comes back on the link, delivers it.
    #[tokio::test]
    async fn a_send_is_carried_and_its_answer_delivers_it() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
        let mut rng = rand::rng();
        let (me, alpha) = (Identity::generate(&mut rng), Identity::generate(&mut rng));
        let machine = |name: &str, id: &Identity| Machine {
            name: name.into(),
            owner: "Ada".into(),
            x25519: id.x25519_public(),
            standing: Standing::Current,
        };
        let directory = Directory {
            me: Some(me.peer_id()),
            team: Some(TeamId([3; 32])),
            my_name: "bravo".into(),
            my_owner: "Ada".into(),
            member: true,
            machines: [
                (me.peer_id(), machine("bravo", &me)),
                (alpha.peer_id(), machine("alpha", &alpha)),
            ]
            .into_iter()
            .collect(),
        };
        let (_dir_tx, dir_rx) = watch::channel(Arc::new(directory));
        let (node, link, mut ends) = Handle::for_tests();
        let (commit, _flusher) = GroupCommit::start(store.clone());
        let (mail, task) = Mail::start(
            me,
            store.clone(),
            dir_rx,
            (node, link),
            commit,
            (
                Duration::from_secs(3600),
                Duration::from_secs(90 * 24 * 3600),
            ),
            CancellationToken::new(),
        )
        .unwrap();
        let _task = tokio::spawn(task);
        let who = Who {
            kind: WhoKind::Human,
            name: "ada".into(),
            session_id: None,
            task: None,
        };
        let send = Op::Send {
            to: "@alpha".into(),
            text: "hello".into(),
            ask: false,
            reply_to: None,
            from_mailbox: None,
        };
        let id = mail.request(who.clone(), None, send).await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let carried = ends.carried.recv().await.unwrap();
        assert_eq!(carried.peer, alpha.peer_id());
        assert_eq!(carried.request.envelopes.len(), 1);
        let status = |v: serde_json::Value| {
            v[0]["status"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_owned()
        };
        let outbox = mail.request(who.clone(), None, Op::Outbox).await.unwrap();
        assert_eq!(status(outbox), "queued", "no answer yet");
        ends.delivered
            .send(Delivered {
                batch: carried.batch,
                result: Ok(MailReply {
                    outcomes: vec![MailOutcome::Accepted { held: false }],
                }),
            })
            .unwrap();
        // Delivered once the answer is handled; polled, it is a queue.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let outbox = mail.request(who.clone(), None, Op::Outbox).await.unwrap();
            // Between the courier's memory and the store's flush the
            // list can be empty for a moment.
            if outbox[0]["status"].as_str() == Some("delivered") {
                assert_eq!(outbox[0]["id"], id.as_str());
                break;
            }
            assert!(Instant::now() < deadline, "not delivered: {outbox}");
            tokio::task::yield_now().await;
        }
        assert!(ends.carried.try_recv().is_err(), "carried once");
    }
}
