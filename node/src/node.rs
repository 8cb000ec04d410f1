//! The node: one task that owns the swarm and everything that changes with
//! the network (the team, the peer table, joins in progress), driven by
//! commands from the local API over a bounded channel.
//!
//! ```text
//!  api::server ──Command::Api(op, reply)──┐
//!                                         v
//!                    ┌─────────── Node::run (biased select) ──────────┐
//!                    │ 1. commands (API ops; a closed channel stops)  │
//!                    │ 2. swarm events (connections, identify, ping,  │
//!                    │    mDNS, gossip blocks, join and sync traffic) │
//!                    │ 3. tick (100 ms): join polls, expiries;         │
//!                    │    every 20 s: redials, pruning, peer records  │
//!                    └────────────────────────────────────────────────┘
//! ```
//!
//! API ops that need a network answer (joining, connecting) keep their
//! reply channel in a waiter map, keyed by the outbound request (one map
//! per protocol: request ids are numbered per protocol), and answer when
//! the response or the failure arrives; the loop itself never waits.
//!
//! Anything learned is stored before it is acted on: a block is applied to
//! a copy of the team, written and flushed, and only then becomes the team.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agentmesh_protocol::contact::{ContactRecord, SignedContact};
use agentmesh_protocol::join::{self as pjoin, Codes, JoinOffer, JoinRequest};
use agentmesh_protocol::team::{
    Admit, Block, BlockBody, BlockHash, Genesis, Revoke, Standing, TeamState,
};
use agentmesh_protocol::ticket::{Ticket, TicketError};
use agentmesh_protocol::{Identity, Multiaddr, Name, Owner, PeerId, Timestamp, Wire};
use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::request_response::{self, OutboundRequestId, ResponseChannel};
use libp2p::swarm::dial_opts::DialOpts;
use libp2p::swarm::{ConnectionId, SwarmEvent};
use libp2p::{Swarm, gossipsub, identify, mdns, ping};
use serde::Serialize;
use serde_bytes::ByteBuf;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiError, Op};
use crate::config::Settings;
use crate::limits::RateWindow;
use crate::net::behaviour::{Behaviour, BehaviourEvent, blocks_topic, stranger_score};
use crate::net::peers::{PeerTable, without_peer};
use crate::store::{AuditEntry, Store};
use crate::team::Directory;
use crate::team::desk::{CodeOutcome, Desk, DeskState};
use crate::wire::MAX_BATCH_ENVELOPES;
use crate::wire::{
    JoinMsg, JoinReply, MAX_BLOCKS_PER_SYNC, MAX_CONTACT_BYTES_PER_SYNC, MAX_CONTACTS_PER_SYNC,
    MailOutcome, MailReply, MailRequest, SyncReply, SyncRequest,
};

/// Commands waiting for the node: API requests from every attached client.
/// Small, because each client waits for its answer before asking again.
pub const COMMAND_QUEUE: usize = 64;

/// How often the node polls the founder about a join in progress and
/// expires requests. A person is waiting on the answer, so this sets how
/// long after the founder types the code the joiner sees the team code.
const TICK: Duration = Duration::from_millis(100);

/// How often a disconnected member is redialled, tickets and the audit log
/// pruned, and peer records saved.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(20);

/// How long `agentmesh connect` waits for the connection and the sync:
/// the person gets an answer well within 15 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long any request this machine sends (a mail batch, a sync step, a
/// join message) may wait for its answer before it counts as failed.
/// request-response has its own timeout ([`crate::net::behaviour::REQUEST_TIMEOUT`]),
/// but a request routed into a connection that is already gone is never
/// answered or failed by it; this deadline is the node's own.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(20);

/// The most joins this machine runs as a joiner at once.
const MAX_JOIN_SESSIONS: usize = 8;

/// Polls of the founder that may fail in a row before the join is given
/// up as unreachable. Failed polls back off to one a second.
const MAX_POLL_FAILURES: u32 = 10;

/// Times a lost `Confirm` is sent again before the join reports failure
/// (the founder answers a repeated Confirm with the same blocks).
const MAX_CONFIRM_TRIES: u32 = 5;

/// How many times a sync is tried again on another connection when the
/// one it went on closes.
const MAX_SYNC_RETRIES: u32 = 2;

/// How long a revoked machine that connects is kept, answered only with
/// refusals, before it is disconnected.
const REVOKED_GRACE: Duration = Duration::from_secs(2);

/// A revoked machine gets one grace per this long: reconnecting in a loop
/// it is disconnected at once, and its refusals can't become a flood.
pub const REVOKED_GRACE_EVERY: Duration = Duration::from_secs(600);

/// Revoked machines whose last grace is remembered, at most.
const MAX_GRACES: usize = 1024;

/// The protocol a relay lists in identify.
const RELAY_HOP: &str = "/libp2p/circuit/relay/0.2.0/hop";

pub use crate::api::Reply;

/// Inbound mail batches waiting for the mail actor's answer, at most;
/// beyond it, batches are answered `Busy` and their senders retry.
pub const MAX_INBOUND_PENDING: usize = 256;

/// How often mail or a sync from an unknown machine may make this one ask
/// a member for the team's blocks (the unknown machine may have been
/// admitted a moment ago). The unknown machine itself is never asked:
/// nothing team-derived is sent to a non-member.
pub const NEWCOMER_SYNC_EVERY: Duration = Duration::from_secs(5);

/// Requests waiting for their answers, each with the deadline after which
/// it counts as failed (see [`ANSWER_DEADLINE`]).
#[derive(Debug)]
struct Awaiting<T> {
    entries: HashMap<OutboundRequestId, (Instant, T)>,
}

impl<T> Default for Awaiting<T> {
    fn default() -> Self {
        Awaiting {
            entries: HashMap::new(),
        }
    }
}

impl<T> Awaiting<T> {
    fn insert(&mut self, id: OutboundRequestId, value: T) {
        self.entries
            .insert(id, (Instant::now() + ANSWER_DEADLINE, value));
    }

    fn remove(&mut self, id: &OutboundRequestId) -> Option<T> {
        self.entries.remove(id).map(|(_, v)| v)
    }

    /// Takes out every request whose deadline has passed.
    fn overdue(&mut self, now: Instant) -> Vec<T> {
        let ids: Vec<OutboundRequestId> = self
            .entries
            .iter()
            .filter(|(_, (deadline, _))| *deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| self.remove(id)).collect()
    }
}

/// What the API asks of the node.
#[derive(Debug)]
pub enum Command {
    /// Run `op` and answer on `reply`.
    Api {
        /// The operation.
        op: Op,
        /// Where the answer goes.
        reply: oneshot::Sender<Reply>,
    },
}

/// A batch of mail to carry to `peer`; its answer comes back as a
/// [`Delivered`] with the same `batch`.
#[derive(Debug)]
pub struct Carry {
    /// Names the batch in its answer (chosen by the mail actor).
    pub batch: u64,
    /// The recipient.
    pub peer: PeerId,
    /// The envelopes.
    pub request: MailRequest,
}

/// The answer to a [`Carry`].
#[derive(Debug)]
pub struct Delivered {
    /// The batch.
    pub batch: u64,
    /// Its outcomes, or why it did not get through.
    pub result: Result<MailReply, Undelivered>,
}

/// What the network tells the mail actor, as it happens.
#[derive(Debug)]
pub enum MailEvent {
    /// A batch from a member (or a revoked machine, to be refused with a
    /// reason); answer it with [`Handle::answer_mail`] and its `token`.
    /// The node checked the sender against the team, once: strangers'
    /// batches never get here.
    Inbound {
        /// The sending machine, as its connection authenticated it.
        peer: PeerId,
        /// Whether it was revoked (else it is a current member).
        revoked: bool,
        /// The envelopes.
        request: MailRequest,
        /// Names the batch in the answer.
        token: u64,
    },
    /// A first connection to `peer` came up: deliver its mail now.
    Connected(PeerId),
}

/// Events bound for inbound mail and connection news, at most; past it
/// inbound batches are answered busy (their senders retry) and connection
/// news is dropped (the courier's own timers cover it).
pub const MAIL_EVENTS: usize = 1024;

/// The mail actor's end of the network: what the node emits for it. The
/// node never names the mail actor: it only sends on these.
#[derive(Debug)]
pub struct MailLink {
    /// Inbound mail and connection news.
    pub events: mpsc::Receiver<MailEvent>,
    /// Answers to carried batches. Unbounded, bounded by construction:
    /// one per batch the mail actor has in flight.
    pub delivered: mpsc::UnboundedReceiver<Delivered>,
}

/// Why a mail batch got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// Whether it may have reached the recipient (it went out on a
    /// connection), as opposed to never leaving (no connection could be
    /// made).
    pub reached: bool,
    /// What happened.
    pub why: String,
}

impl Undelivered {
    /// A batch that never left this machine.
    pub fn never_left(why: impl Into<String>) -> Self {
        Undelivered {
            reached: false,
            why: why.into(),
        }
    }
}

/// The node's ends of a [`MailLink`] and [`Handle`], for unit tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct TestEnds {
    /// Where inbound mail goes in.
    pub events: mpsc::Sender<MailEvent>,
    /// What the mail actor answers.
    pub answers: mpsc::Receiver<(u64, MailReply)>,
    /// What it carries.
    pub carried: mpsc::UnboundedReceiver<Carry>,
    /// Where carried batches are answered.
    pub delivered: mpsc::UnboundedSender<Delivered>,
}

/// A cloneable handle to the node.
#[derive(Debug, Clone)]
pub struct Handle {
    tx: mpsc::Sender<Command>,
    answers: mpsc::Sender<(u64, MailReply)>,
    /// Unbounded, bounded by construction: the mail actor keeps a few
    /// batches on their way per recipient.
    carry: mpsc::UnboundedSender<Carry>,
}

impl Handle {
    /// Runs `op` on the node.
    pub async fn request(&self, op: Op) -> Reply {
        let (reply, rx) = oneshot::channel();
        let gone = || {
            Err(ApiError::new(
                "shutting_down",
                "the daemon is shutting down",
            ))
        };
        if self.tx.send(Command::Api { op, reply }).await.is_err() {
            return gone();
        }
        rx.await.unwrap_or_else(|_| gone())
    }

    /// Hands a batch to the node to carry; its answer comes back on the
    /// [`MailLink`]. False if the node has stopped.
    pub fn carry(&self, carry: Carry) -> bool {
        self.carry.send(carry).is_ok()
    }

    /// A handle and link for the mail actor's unit tests, with the ends
    /// the node would hold.
    #[cfg(test)]
    pub(crate) fn for_tests() -> (Handle, MailLink, TestEnds) {
        let (tx, _) = mpsc::channel(1);
        let (answers, answers_rx) = mpsc::channel(16);
        let (carry, carried) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::channel(16);
        let (delivered_tx, delivered) = mpsc::unbounded_channel();
        (
            Handle { tx, answers, carry },
            MailLink { events, delivered },
            TestEnds {
                events: events_tx,
                answers: answers_rx,
                carried,
                delivered: delivered_tx,
            },
        )
    }

    /// Answers an inbound mail batch (the mail actor, once it is durable).
    /// Never blocks: the channel holds one slot per pending batch.
    pub fn answer_mail(&self, token: u64, reply: MailReply) {
        if self.answers.try_send((token, reply)).is_err() {
            tracing::warn!("dropping a mail acknowledgement; the sender will retry");
        }
    }
}

fn ok<T: Serialize>(value: T) -> Reply {
    Ok(serde_json::to_value(value).expect("API results always serialise"))
}

fn err<T>(code: &str, message: impl Into<String>) -> Result<T, ApiError> {
    Err(ApiError::new(code, message))
}

fn send(reply: oneshot::Sender<Reply>, value: Reply) {
    // A client that hung up does not want its answer; nothing to do.
    let _ = reply.send(value);
}

/// The current time as the protocol counts it (see [`crate::clock`]).
pub fn now() -> Timestamp {
    crate::clock::now()
}

fn rfc3339(t: Timestamp) -> String {
    // Saturates rather than overflows on absurd (but signed) timestamps.
    let secs = (t.as_unix_millis() / 1000).min(253_402_300_799); // 9999-12-31
    humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .to_string()
}

fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut b);
    b
}

fn bufs<'a>(items: impl Iterator<Item = &'a [u8]>) -> Vec<ByteBuf> {
    items.map(|b| ByteBuf::from(b.to_vec())).collect()
}

/// How long a join whose ticket addresses failed waits for mDNS to find
/// the founder on the local network.
const MDNS_JOIN_WAIT: Duration = Duration::from_secs(10);

fn founder_unreachable(why: &str) -> Reply {
    err(
        "founder_unreachable",
        format!(
            "{why}; check that the ticket's addresses are reachable from here and the founder's daemon is running"
        ),
    )
}

const NOT_IN_TEAM: &str = "this machine is not in a team; create one with `agentmesh team create NAME` or join one with `agentmesh join TICKET` (the owner defaults to your login name; `--owner` names another)";

/// A join this machine is making.
#[derive(Debug)]
struct JoinSession {
    founder: PeerId,
    addrs: Vec<Multiaddr>,
    request: JoinRequest,
    offer: Option<JoinOffer>,
    codes: Option<Codes>,
    state: JoinPhase,
    in_flight: bool,
    next_poll: Instant,
    poll_failures: u32,
    confirm_tries: u32,
    /// When the join started.
    started: Instant,
    /// The `join` call still waiting for the founder's first answer, kept
    /// while mDNS may yet find the founder after the ticket's addresses
    /// failed.
    awaiting_mdns: Option<oneshot::Sender<Reply>>,
}

#[derive(Debug, Clone, PartialEq)]
enum JoinPhase {
    Offering,
    Waiting,
    Approved,
    Confirming,
    Joined(api::TeamRef),
    Refused(String),
    Declined,
}

impl JoinPhase {
    fn finished(&self) -> bool {
        matches!(
            self,
            JoinPhase::Joined(_) | JoinPhase::Refused(_) | JoinPhase::Declined
        )
    }
}

/// What a join request's answer is for.
#[derive(Debug)]
enum JoinWaiter {
    Start(u64, oneshot::Sender<Reply>),
    Poll(u64),
    Confirm(u64, oneshot::Sender<Reply>),
    Decline(u64, oneshot::Sender<Reply>),
}

/// An `agentmesh connect` waiting for its connection or its sync.
#[derive(Debug)]
struct ConnectWait {
    addr: Multiaddr,
    peer: Option<PeerId>,
    dial: Option<ConnectionId>,
    /// Whether that dial has connected.
    dial_up: bool,
    reply: oneshot::Sender<Reply>,
    deadline: Instant,
    syncing: bool,
}

impl ConnectWait {
    /// Whether this connect's own dial is still on its way: a sync that
    /// failed on another connection (one the peer's restart left behind,
    /// or the loser of a simultaneous dial) waits for it instead of
    /// failing.
    fn own_dial_pending(&self) -> bool {
        self.dial.is_some() && !self.dial_up
    }
}

/// The node.
pub struct Node {
    swarm: Swarm<Behaviour>,
    me: Identity,
    settings: Settings,
    store: Arc<dyn Store>,
    team: Option<TeamState>,
    peers: PeerTable,
    desk: Desk,
    joins: BTreeMap<u64, JoinSession>,
    next_join: u64,
    join_waiting: Awaiting<JoinWaiter>,
    sync_waiting: Awaiting<PeerId>,
    /// Syncs tried again because the connection they went on closed (a
    /// peer that restarted leaves a dying connection behind for a moment);
    /// at most [`MAX_SYNC_RETRIES`] each, forgotten when the sync ends.
    sync_retries: HashMap<PeerId, u32>,
    connects: Vec<ConnectWait>,
    /// Joins admitted, answered once the first sync with their founder
    /// ends (successfully or not: it has a deadline).
    joined_waiting: Vec<(PeerId, u64, oneshot::Sender<Reply>)>,
    /// Peers with a sync in flight, and the blocks it brought so far.
    syncing: HashMap<PeerId, usize>,
    resync: HashSet<PeerId>,
    /// Peers whose last fetch left blocks to fetch (over
    /// [`MAX_BLOCKS_PER_SYNC`]): synced again only if that round brought
    /// blocks, so a member naming hashes it never sends can't loop.
    more_to_fetch: HashSet<PeerId>,
    /// Where the next sync starts in the members' contact records.
    contact_rotation: usize,
    listen_addrs: Vec<Multiaddr>,
    contact: Option<SignedContact>,
    contact_addrs: Vec<Multiaddr>,
    last_maintenance: Instant,
    commands: mpsc::Receiver<Command>,
    answers: mpsc::Receiver<(u64, MailReply)>,
    carry: mpsc::UnboundedReceiver<Carry>,
    stopping: bool,
    mail_events: mpsc::Sender<MailEvent>,
    delivered: mpsc::UnboundedSender<Delivered>,
    directory: watch::Sender<Arc<Directory>>,
    mail_waiting: Awaiting<u64>,
    inbound: HashMap<u64, ResponseChannel<MailReply>>,
    next_token: u64,
    /// When mail or a sync from a machine this one does not know last made
    /// it ask a member for blocks: a just-admitted member is known a moment
    /// later.
    newcomer_sync: Option<Instant>,
    /// Revoked machines to disconnect, and when.
    disconnecting: Vec<(PeerId, Instant)>,
    /// When each revoked machine last had its grace.
    graces: RateWindow<PeerId>,
    /// When the node started: the zero of its rate windows.
    started: Instant,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("peer_id", &self.me.peer_id())
            .finish_non_exhaustive()
    }
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// An address could not be listened on.
    #[error(
        "cannot listen on {addr}: {reason}; pick another with --listen or `listen` in config.toml"
    )]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
}

impl Node {
    /// A node over `swarm`, with its team and peers loaded from `store`.
    /// Returns the node and a handle to it.
    pub fn new(
        mut swarm: Swarm<Behaviour>,
        me: Identity,
        settings: Settings,
        store: Arc<dyn Store>,
    ) -> Result<(Node, Handle, MailLink), NodeError> {
        for addr in &settings.listen {
            swarm
                .listen_on(addr.clone())
                .map_err(|e| NodeError::Listen {
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        let team = load_team(store.as_ref())?;
        // Records of machines outside the team (older versions kept
        // anything that claimed to be a relay) are dropped.
        let mut records = store.peers()?;
        records.retain(|r| {
            let keep = r
                .peer_id
                .parse::<PeerId>()
                .is_ok_and(|p| team.as_ref().is_some_and(|t| t.member(&p).is_some()));
            if !keep && let Err(e) = store.delete_peer(&r.peer_id) {
                tracing::warn!(error = %e, "cannot forget a stranger's peer record");
            }
            keep
        });
        let peers = PeerTable::from_records(records);
        for (peer, bytes) in store.contacts()? {
            if let Ok(c) = SignedContact::from_bytes(&bytes) {
                for a in c.record().addrs.iter().chain(&c.record().relays) {
                    swarm.add_peer_address(peer, a.clone());
                }
            }
        }
        let (tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let (answers_tx, answers) = mpsc::channel(MAX_INBOUND_PENDING);
        let (carry_tx, carry) = mpsc::unbounded_channel();
        let (mail_events, events) = mpsc::channel(MAIL_EVENTS);
        let (delivered, delivered_rx) = mpsc::unbounded_channel();
        let (directory, _) = watch::channel(Arc::new(Directory::default()));
        let mut node = Node {
            swarm,
            me,
            settings,
            store,
            team,
            peers,
            desk: Desk::default(),
            joins: BTreeMap::new(),
            next_join: 0,
            join_waiting: Awaiting::default(),
            sync_waiting: Awaiting::default(),
            sync_retries: HashMap::new(),
            connects: vec![],
            joined_waiting: vec![],
            syncing: HashMap::new(),
            resync: HashSet::new(),
            more_to_fetch: HashSet::new(),
            contact_rotation: 0,
            listen_addrs: vec![],
            contact: None,
            contact_addrs: vec![],
            last_maintenance: Instant::now(),
            commands,
            answers,
            carry,
            stopping: false,
            mail_events,
            delivered,
            directory,
            mail_waiting: Awaiting::default(),
            inbound: HashMap::new(),
            newcomer_sync: None,
            next_token: 0,
            disconnecting: vec![],
            graces: RateWindow::new(REVOKED_GRACE_EVERY, 1, MAX_GRACES),
            started: Instant::now(),
        };
        node.activate_team(None);
        Ok((
            node,
            Handle {
                tx,
                answers: answers_tx,
                carry: carry_tx,
            },
            MailLink {
                events,
                delivered: delivered_rx,
            },
        ))
    }

    /// The team directory the mail actor reads, kept current by the node.
    pub fn directory(&self) -> watch::Receiver<Arc<Directory>> {
        self.directory.subscribe()
    }

    fn publish_directory(&self) {
        let d = Directory::of(
            self.me.peer_id(),
            self.settings.name.as_str(),
            self.team.as_ref(),
        );
        self.directory.send_replace(Arc::new(d));
    }

    /// Runs until `cancel` fires, a `shutdown` op (which fires it), or
    /// until every handle is dropped.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.redial_members();
        while !self.stopping {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                cmd = self.commands.recv() => match cmd {
                    None => break,
                    Some(Command::Api { op, reply }) => self.handle_op(op, reply),
                },
                Some(carry) = self.carry.recv() => self.deliver(carry),
                Some((token, reply)) = self.answers.recv() => {
                    if let Some(channel) = self.inbound.remove(&token) {
                        let _ = self.swarm.behaviour_mut().mail.send_response(channel, reply);
                    }
                },
                event = self.swarm.select_next_some() => self.handle_event(event),
                _ = tick.tick() => self.housekeeping(),
            }
        }
        cancel.cancel();
        self.save_peers();
        tracing::info!("node stopped");
    }

    fn audit(&self, event: &str, peer: Option<&PeerId>, detail: impl Into<String>) {
        let entry = AuditEntry {
            at: now().as_unix_millis(),
            event: event.into(),
            peer: peer.map(ToString::to_string),
            detail: detail.into(),
            ..AuditEntry::default()
        };
        if let Err(e) = self.store.audit(&entry) {
            tracing::error!(error = %e, "cannot write the audit log");
        }
    }

    /// Whether a peer's record is worth keeping across restarts: the team's
    /// machines only. A peer that says it is a relay is not believed into
    /// the store (relays a person configures come with the relay issue),
    /// so fresh PeerIds can't grow it.
    fn worth_keeping(&self, peer: &PeerId) -> bool {
        self.team.as_ref().is_some_and(|t| t.member(peer).is_some())
    }

    fn save_peer(&self, peer: &PeerId) {
        if !self.worth_keeping(peer) {
            return;
        }
        if let Some(rec) = self.peers.record(peer)
            && let Err(e) = self.store.put_peer(&rec)
        {
            tracing::warn!(error = %e, "cannot save a peer record");
        }
    }

    fn save_peers(&self) {
        for peer in self.peers.known() {
            self.save_peer(&peer);
        }
    }

    fn is_member(&self, peer: &PeerId) -> bool {
        self.team.as_ref().is_some_and(|t| t.is_member(peer))
    }

    fn is_revoked(&self, peer: &PeerId) -> bool {
        self.team.as_ref().is_some_and(|t| t.is_revoked(peer))
    }

    fn am_member(&self) -> bool {
        self.is_member(&self.me.peer_id())
    }

    fn am_admin(&self) -> bool {
        self.team
            .as_ref()
            .and_then(|t| t.member(&self.me.peer_id()))
            .is_some_and(|m| m.admin && m.standing == Standing::Current)
    }

    // ----- team ---------------------------------------------------------

    /// Subscribes to the team's topic (leaving `old`'s) and applies
    /// membership to every connection. Called at start and whenever the
    /// team is replaced.
    fn activate_team(&mut self, old: Option<&TeamState>) {
        // One topic for every team: subscribed while in one.
        let topic = blocks_topic();
        if old.is_some() && self.team.is_none() {
            let _ = self.swarm.behaviour_mut().gossipsub.unsubscribe(&topic);
        }
        if self.team.is_some()
            && let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic)
        {
            tracing::warn!(error = %e, "cannot subscribe to the blocks topic");
        }
        self.apply_membership();
    }

    /// Members score 0, are explicit gossip peers and bypass the limits on
    /// strangers' connections; everyone else scores as a stranger, is not an
    /// explicit peer and counts against those limits (connected or not);
    /// revoked machines are disconnected.
    fn apply_membership(&mut self) {
        let standings: Vec<(PeerId, bool)> = self
            .team
            .iter()
            .flat_map(|t| t.members())
            .map(|m| (m.peer, m.standing == Standing::Current))
            .collect();
        for (peer, current) in standings {
            let b = self.swarm.behaviour_mut();
            if current {
                b.limits.bypass_peer_id(&peer);
            } else {
                b.limits.remove_peer_id(&peer);
                b.gossipsub.remove_explicit_peer(&peer);
            }
        }
        let connected: Vec<PeerId> = self.peers.connected().copied().collect();
        for peer in connected {
            self.apply_membership_to(&peer);
        }
        self.publish_directory();
    }

    fn apply_membership_to(&mut self, peer: &PeerId) {
        let member = self.is_member(peer) && self.am_member();
        let revoked = self.is_revoked(peer);
        let gossip = &mut self.swarm.behaviour_mut().gossipsub;
        if member {
            gossip.set_application_score(peer, 0.0);
            gossip.add_explicit_peer(peer);
        } else {
            gossip.set_application_score(peer, stranger_score());
            gossip.remove_explicit_peer(peer);
        }
        if revoked && !self.disconnecting.iter().any(|(p, _)| p == peer) {
            if self.graces.check(peer, self.started.elapsed()) {
                // Not at once: for a moment it is answered on every
                // protocol with why it is refused, so its queued mail fails
                // with a reason instead of retrying until it expires.
                tracing::debug!(%peer, "disconnecting a revoked machine after its grace");
                self.disconnecting
                    .push((*peer, Instant::now() + REVOKED_GRACE));
            } else if self.peers.is_connected(peer) {
                // It had its grace moments ago: no second one.
                let _ = self.swarm.disconnect_peer_id(*peer);
            }
        }
    }

    /// Applies blocks to a copy of the team, stores the new ones, and only
    /// then makes the copy the team. Returns how many were new.
    fn merge_blocks(&mut self, blocks: Vec<Block>) -> usize {
        let Some(team) = &self.team else {
            return 0;
        };
        let mut next = team.clone();
        let before = team.hashes();
        for b in blocks {
            if let Err(e) = next.apply(b.clone()) {
                // Debug: a member gossiping junk must not fill the log.
                tracing::debug!(block = %b.hash(), error = %e, "refused a team block");
            }
        }
        let added: Vec<Block> = next
            .blocks()
            .filter(|b| !before.contains(&b.hash()))
            .cloned()
            .collect();
        if added.is_empty() {
            return 0;
        }
        let pairs: Vec<(BlockHash, &[u8])> = added.iter().map(|b| (b.hash(), b.bytes())).collect();
        if let Err(e) = self.store.put_blocks(&next.id(), &pairs) {
            tracing::error!(error = %e, "cannot store team blocks; not applying them");
            return 0;
        }
        self.team = Some(next);
        for b in &added {
            match b.body() {
                BlockBody::Revoke(r) => self.audit(
                    "revoked",
                    Some(&r.peer),
                    format!("learned; revoked by {}", r.revoked_by),
                ),
                BlockBody::Admit(a) => self.audit(
                    "admitted",
                    Some(&a.peer),
                    format!("learned; {} ({})", a.name, a.owner),
                ),
                BlockBody::Genesis(_) => {}
            }
        }
        self.apply_membership();
        added.len()
    }

    /// Signs a block, stores it, then adds it to the team and spreads it.
    fn add_own_block(&mut self, body: BlockBody) -> Result<Block, ApiError> {
        let block =
            Block::sign(body, &self.me).map_err(|e| ApiError::new("internal", e.to_string()))?;
        let team = self
            .team
            .as_ref()
            .ok_or_else(|| ApiError::new("not_in_team", NOT_IN_TEAM))?;
        let mut next = team.clone();
        next.apply(block.clone())
            .map_err(|e| ApiError::new("refused", e.to_string()))?;
        self.store
            .put_blocks(&next.id(), &[(block.hash(), block.bytes())])
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        let topic = blocks_topic();
        self.team = Some(next);
        if let Err(e) = self
            .swarm
            .behaviour_mut()
            .gossipsub
            .publish(topic, block.bytes().to_vec())
        {
            tracing::debug!(error = %e, "gossip publish did not go out; sync will carry the block");
        }
        self.apply_membership();
        self.announce();
        Ok(block)
    }

    /// Starts a sync with every connected member: each compares digests,
    /// and a member that lacks blocks pulls them.
    fn announce(&mut self) {
        let members: Vec<PeerId> = self
            .peers
            .connected()
            .filter(|p| self.is_member(p))
            .copied()
            .collect();
        for p in members {
            self.start_sync(p);
        }
    }

    fn team_view(&self) -> Reply {
        let Some(team) = &self.team else {
            return err("not_in_team", NOT_IN_TEAM);
        };
        let Some(g) = team.genesis() else {
            return err("not_in_team", NOT_IN_TEAM);
        };
        ok(api::TeamView {
            team_id: team.id().to_string(),
            name: g.team_name.to_string(),
            founder: g.founder.to_string(),
            founder_name: g.founder_name.to_string(),
            members: self.member_views(team),
        })
    }

    /// Every machine `team` admitted, admins first, then by name.
    fn member_views(&self, team: &TeamState) -> Vec<api::MemberView> {
        let me = self.me.peer_id();
        let mut members: Vec<api::MemberView> = team
            .members()
            .map(|m| api::MemberView {
                name: m.name.to_string(),
                owner: m.owner.to_string(),
                peer_id: m.peer.to_string(),
                admitted_at: rfc3339(m.admitted_at),
                revoked: m.standing == Standing::Revoked,
                admin: m.admin,
                standing: match m.standing {
                    Standing::Current => "current",
                    Standing::Revoked => "revoked",
                    Standing::NameTaken => "name_taken",
                }
                .into(),
                this_machine: m.peer == me,
            })
            .collect();
        members.sort_by(|a, b| (!a.admin, &a.name).cmp(&(!b.admin, &b.name)));
        members
    }

    fn team_ref(&self) -> Option<api::TeamRef> {
        let t = self.team.as_ref()?;
        Some(api::TeamRef {
            team_id: t.id().to_string(),
            name: t.genesis()?.team_name.to_string(),
        })
    }

    /// Replaces the team with `state`: stores it and points at it first,
    /// then forgets the old one.
    fn replace_team(&mut self, state: TeamState) -> Result<(), ApiError> {
        let pairs: Vec<(BlockHash, &[u8])> =
            state.blocks().map(|b| (b.hash(), b.bytes())).collect();
        self.store
            .put_blocks(&state.id(), &pairs)
            .and_then(|()| self.store.set_team(Some(state.id())))
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        let old = self.team.replace(state);
        if let Some(old) = &old
            && Some(old.id()) != self.team.as_ref().map(TeamState::id)
        {
            let _ = self.store.delete_team(&old.id());
        }
        self.activate_team(old.as_ref());
        Ok(())
    }

    // ----- contact records ------------------------------------------------

    /// Addresses worth telling others: concrete, dialable listen and
    /// external addresses, non-loopback first.
    fn advertised_addrs(&self) -> Vec<Multiaddr> {
        let mut addrs: Vec<Multiaddr> = self
            .listen_addrs
            .iter()
            .chain(self.swarm.external_addresses())
            .filter(|a| !is_unspecified(a) && !is_link_local(a))
            .cloned()
            .collect();
        addrs.sort_by_key(is_loopback);
        addrs.dedup();
        addrs
    }

    /// This machine's contact record, remade when its addresses change.
    fn my_contact(&mut self) -> Option<&SignedContact> {
        let mut addrs = self.advertised_addrs();
        addrs.truncate(agentmesh_protocol::contact::MAX_CONTACT_ADDRS);
        if self.contact.is_none() || addrs != self.contact_addrs {
            let seq = match self.store.next_contact_seq() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot number a contact record");
                    return self.contact.as_ref();
                }
            };
            let record = ContactRecord {
                peer: self.me.peer_id(),
                seq,
                addrs: addrs.clone(),
                relays: vec![],
                at: now(),
            };
            self.contact = SignedContact::sign(record, &self.me).ok();
            self.contact_addrs = addrs;
        }
        self.contact.as_ref()
    }

    /// The contact records a sync message carries: this machine's, and the
    /// latest held for each current member, so a member that moved is found
    /// through whichever member heard from it last.
    fn contacts_to_share(&mut self) -> Vec<ByteBuf> {
        let mut out: Vec<ByteBuf> = self
            .my_contact()
            .map(|c| ByteBuf::from(c.bytes().to_vec()))
            .into_iter()
            .collect();
        let me = self.me.peer_id();
        let members: Vec<PeerId> = self
            .team
            .iter()
            .flat_map(|t| t.members())
            .filter(|m| m.standing == Standing::Current && m.peer != me)
            .map(|m| m.peer)
            .collect();
        // Within the bytes one message may carry; when they don't all fit,
        // each sync starts further along, so every record travels in turn.
        let mut bytes = out.iter().map(|b| b.len()).sum::<usize>();
        let n = members.len().max(1);
        let start = self.contact_rotation % n;
        self.contact_rotation = self.contact_rotation.wrapping_add(1);
        for peer in members.iter().cycle().skip(start).take(members.len()) {
            if out.len() >= MAX_CONTACTS_PER_SYNC {
                break;
            }
            if let Ok(Some(record)) = self.store.contact(peer) {
                if bytes + record.len() > MAX_CONTACT_BYTES_PER_SYNC {
                    break;
                }
                bytes += record.len();
                out.push(ByteBuf::from(record));
            }
        }
        out
    }

    fn take_contacts(&mut self, contacts: &[ByteBuf]) {
        for bytes in contacts.iter().take(MAX_CONTACTS_PER_SYNC) {
            let Ok(contact) = SignedContact::from_bytes(bytes) else {
                tracing::debug!("ignoring a contact record that does not verify");
                continue;
            };
            let peer = contact.record().peer;
            if peer == self.me.peer_id() || !self.is_member(&peer) {
                continue;
            }
            let newer = self
                .store
                .contact(&peer)
                .ok()
                .flatten()
                .and_then(|b| SignedContact::from_bytes(&b).ok())
                .is_none_or(|old| contact.supersedes(&old));
            if !newer {
                continue;
            }
            if let Err(e) = self.store.put_contact(&peer, contact.bytes()) {
                tracing::warn!(error = %e, "cannot store a contact record");
                continue;
            }
            for a in contact
                .record()
                .addrs
                .iter()
                .chain(&contact.record().relays)
            {
                self.peers.add_addr(peer, a);
                self.swarm.add_peer_address(peer, a.clone());
            }
        }
    }

    // ----- sync -----------------------------------------------------------

    fn start_sync(&mut self, peer: PeerId) {
        let Some(team) = &self.team else {
            return;
        };
        if self.syncing.contains_key(&peer) {
            self.resync.insert(peer);
            return;
        }
        let (id, digest) = (team.id(), team.digest());
        let request = SyncRequest::Digest {
            team: id.0.to_vec(),
            digest: digest.to_vec(),
            contacts: self.contacts_to_share(),
        };
        self.syncing.insert(peer, 0);
        self.send_sync(peer, request);
    }

    /// The addresses the peer table knows for `peer`, to dial it with.
    fn known_addrs(&self, peer: &PeerId) -> Vec<Multiaddr> {
        self.peers
            .get(peer)
            .map(|e| e.addrs.clone())
            .unwrap_or_default()
    }

    /// Sends a sync step to `peer`. The one place sync requests leave this
    /// machine, so the one place that checks they go only to members: a
    /// sync carries the team id, the digest and contact records.
    fn send_sync(&mut self, peer: PeerId, request: SyncRequest) {
        if !self.is_member(&peer) {
            return self.sync_done(peer, Err("it is not a member of the team".into()));
        }
        let addrs = self.known_addrs(&peer);
        let id = self
            .swarm
            .behaviour_mut()
            .sync
            .send_request_with_addresses(&peer, request, addrs);
        self.sync_waiting.insert(id, peer);
    }

    /// A sync step to `peer` failed (`why`). One that went on a connection
    /// that closed is tried again while another connection is up: the
    /// closed one was left over from before the peer restarted.
    fn sync_failed(&mut self, peer: PeerId, why: String, connection_closed: bool) {
        tracing::debug!(%peer, %why, "sync failed");
        let retries = self.sync_retries.entry(peer).or_default();
        if connection_closed && *retries < MAX_SYNC_RETRIES && self.swarm.is_connected(&peer) {
            *retries += 1;
            let added = self.syncing.remove(&peer).unwrap_or(0);
            self.start_sync(peer);
            // Only if it did start (it ends at once for a non-member).
            if let Some(n) = self.syncing.get_mut(&peer) {
                *n = added;
            }
            return;
        }
        self.sync_done(
            peer,
            Err(format!(
                "{why} (if this machine was revoked, members refuse it)"
            )),
        );
    }

    /// Ends the sync with `peer`, answering any `connect` waiting on it.
    fn sync_done(&mut self, peer: PeerId, outcome: Result<(), String>) {
        self.sync_retries.remove(&peer);
        let added = self.syncing.remove(&peer).unwrap_or(0);
        self.finish_connects(&peer, added, outcome);
        let more = self.more_to_fetch.remove(&peer) && added > 0;
        if (self.resync.remove(&peer) || more) && self.is_member(&peer) {
            self.start_sync(peer);
        }
        if !self.syncing.contains_key(&peer) {
            let (done, waiting) = std::mem::take(&mut self.joined_waiting)
                .into_iter()
                .partition(|(founder, _, _)| *founder == peer);
            self.joined_waiting = waiting;
            for (_, join, reply) in done {
                send(reply, self.join_state(join));
            }
        }
    }

    fn handle_sync_request(
        &mut self,
        peer: PeerId,
        request: SyncRequest,
        channel: ResponseChannel<SyncReply>,
    ) {
        let reply = self.sync_reply(&peer, request);
        if let SyncReply::Refused(why) = &reply {
            tracing::debug!(%peer, reason = %why, "refused a sync request");
        }
        let _ = self
            .swarm
            .behaviour_mut()
            .sync
            .send_response(channel, reply);
    }

    /// Members get answers; nobody else does. This machine answers even if
    /// it has left the team, so members can fetch its leaving block.
    fn sync_reply(&mut self, peer: &PeerId, request: SyncRequest) -> SyncReply {
        let Some(team) = &self.team else {
            return SyncReply::Refused("not a member of this machine's team".into());
        };
        let asked = match &request {
            SyncRequest::Digest { team, .. } | SyncRequest::Fetch { team, .. } => team,
        };
        if asked[..] != team.id().0 || !team.is_member(peer) {
            let why = if team.is_revoked(peer) {
                "this machine was revoked from the team"
            } else {
                "not a member of this machine's team"
            };
            if asked[..] == team.id().0 && !team.is_revoked(peer) {
                // It knows the team: perhaps admitted a moment ago.
                self.newcomer_hint();
            }
            return SyncReply::Refused(why.into());
        }
        match request {
            SyncRequest::Digest {
                digest, contacts, ..
            } => {
                let same = digest[..] == team.digest();
                let hashes = bufs(team.hashes().iter().map(|h| &h.0[..]));
                self.take_contacts(&contacts);
                let contacts = self.contacts_to_share();
                if same {
                    SyncReply::InSync { contacts }
                } else {
                    // They may hold blocks this machine lacks: pull too.
                    self.start_sync(*peer);
                    SyncReply::Have { hashes, contacts }
                }
            }
            SyncRequest::Fetch { hashes, .. } => {
                let wanted: HashSet<&[u8]> = hashes
                    .iter()
                    .take(MAX_BLOCKS_PER_SYNC)
                    .map(|h| h.as_slice())
                    .collect();
                let blocks = bufs(
                    team.blocks()
                        .filter(|b| wanted.contains(&b.hash().0[..]))
                        .map(Block::bytes),
                );
                SyncReply::Blocks { blocks }
            }
        }
    }

    fn handle_sync_reply(&mut self, peer: PeerId, reply: SyncReply) {
        match reply {
            SyncReply::InSync { contacts } => {
                self.take_contacts(&contacts);
                self.sync_done(peer, Ok(()));
            }
            SyncReply::Have { hashes, contacts } => {
                self.take_contacts(&contacts);
                self.fetch_missing(peer, &hashes);
            }
            SyncReply::Blocks { blocks } => {
                let blocks: Vec<Block> = blocks
                    .iter()
                    .filter_map(|b| Block::from_bytes(b).ok())
                    .collect();
                let added = self.merge_blocks(blocks);
                if added > 0 {
                    tracing::info!(%peer, added, "synced team blocks");
                }
                *self.syncing.entry(peer).or_default() += added;
                self.sync_done(peer, Ok(()));
            }
            SyncReply::Refused(why) => {
                tracing::info!(%peer, reason = %why, "sync refused");
                self.sync_done(peer, Err(why));
            }
        }
    }

    fn fetch_missing(&mut self, peer: PeerId, theirs: &[ByteBuf]) {
        let Some(team) = &self.team else {
            return self.sync_done(peer, Ok(()));
        };
        let mine = team.hashes();
        let mut missing: Vec<ByteBuf> = theirs
            .iter()
            .filter(|h| {
                <[u8; 32]>::try_from(h.as_slice()).is_ok_and(|h| !mine.contains(&BlockHash(h)))
            })
            .cloned()
            .collect();
        if missing.is_empty() {
            return self.sync_done(peer, Ok(()));
        }
        if missing.len() > MAX_BLOCKS_PER_SYNC {
            // Another round, once these are in, compares digests again.
            missing.truncate(MAX_BLOCKS_PER_SYNC);
            self.more_to_fetch.insert(peer);
        }
        let request = SyncRequest::Fetch {
            team: team.id().0.to_vec(),
            hashes: missing,
        };
        self.send_sync(peer, request);
    }

    // ----- connect --------------------------------------------------------

    fn finish_connects(&mut self, peer: &PeerId, added: usize, outcome: Result<(), String>) {
        let membership = self.membership(peer);
        let mut i = 0;
        while i < self.connects.len() {
            if outcome.is_err()
                && self.connects[i].peer == Some(*peer)
                && self.connects[i].own_dial_pending()
            {
                // Synced again once its own connection is up.
                self.connects[i].syncing = false;
                i += 1;
                continue;
            }
            if self.connects[i].peer == Some(*peer) && self.connects[i].syncing {
                let c = self.connects.swap_remove(i);
                send(
                    c.reply,
                    match &outcome {
                        Ok(()) => ok(api::Connected {
                            peer_id: peer.to_string(),
                            membership: membership.clone(),
                            new_blocks: added,
                        }),
                        Err(why) => err("refused", format!("{peer} refused to sync: {why}")),
                    },
                );
            } else {
                i += 1;
            }
        }
    }

    fn membership(&self, peer: &PeerId) -> String {
        if self.is_revoked(peer) {
            "revoked"
        } else if self.is_member(peer) {
            "member"
        } else if self.peers.get(peer).is_some_and(|e| e.relay) {
            "relay"
        } else {
            "stranger"
        }
        .into()
    }

    fn connection_up(&mut self, peer: PeerId, remote: &Multiaddr, connection: ConnectionId) {
        let mut i = 0;
        while i < self.connects.len() {
            if self.connects[i].dial == Some(connection) {
                self.connects[i].dial_up = true;
            }
            let c = &self.connects[i];
            let matches = !c.syncing
                && (c.peer == Some(peer)
                    || c.dial == Some(connection)
                    || (c.peer.is_none() && without_peer(&c.addr) == without_peer(remote)));
            if !matches {
                i += 1;
                continue;
            }
            if self.is_revoked(&peer) {
                let c = self.connects.swap_remove(i);
                send(
                    c.reply,
                    err(
                        "revoked",
                        format!("{peer} was revoked from the team; this machine refuses it"),
                    ),
                );
            } else if self.is_member(&peer) {
                let c = &mut self.connects[i];
                c.peer = Some(peer);
                c.syncing = true;
                i += 1;
                self.start_sync(peer);
            } else {
                let c = self.connects.swap_remove(i);
                send(
                    c.reply,
                    ok(api::Connected {
                        peer_id: peer.to_string(),
                        membership: self.membership(&peer),
                        new_blocks: 0,
                    }),
                );
            }
        }
    }

    fn fail_connects(&mut self, matches: impl Fn(&ConnectWait) -> bool, why: &str) {
        let mut i = 0;
        while i < self.connects.len() {
            if matches(&self.connects[i]) {
                let c = self.connects.swap_remove(i);
                send(c.reply, err("connect_failed", format!("{}: {why}", c.addr)));
            } else {
                i += 1;
            }
        }
    }

    // ----- swarm events ---------------------------------------------------

    fn handle_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => {
                tracing::info!("listening on {address}/p2p/{}", self.me.peer_id());
                self.listen_addrs.push(address);
            }
            SwarmEvent::ExpiredListenAddr { address, .. } => {
                self.listen_addrs.retain(|a| a != &address);
            }
            SwarmEvent::ConnectionEstablished {
                peer_id,
                connection_id,
                endpoint,
                num_established,
                ..
            } => {
                let remote = endpoint.get_remote_address().clone();
                if endpoint.is_dialer() {
                    self.peers.add_addr(peer_id, &remote);
                }
                let e = self.peers.entry(peer_id);
                e.connections.insert(connection_id, remote.clone());
                e.last_seen = Some(SystemTime::now());
                self.apply_membership_to(&peer_id);
                if num_established.get() == 1 && self.is_member(&peer_id) {
                    self.start_sync(peer_id);
                    // A hint; the courier's own timers cover a full queue.
                    let _ = self.mail_events.try_send(MailEvent::Connected(peer_id));
                }
                self.connection_up(peer_id, &remote, connection_id);
            }
            SwarmEvent::ConnectionClosed {
                peer_id,
                connection_id,
                num_established,
                ..
            } => {
                let e = self.peers.entry(peer_id);
                e.connections.remove(&connection_id);
                e.last_seen = Some(SystemTime::now());
                if num_established == 0 {
                    self.save_peer(&peer_id);
                    for c in &mut self.connects {
                        if c.peer == Some(peer_id) && c.own_dial_pending() {
                            c.syncing = false;
                        }
                    }
                    // A connect still dialling waits for its own dial: the
                    // connection that closed may be one left over from
                    // before the peer restarted.
                    self.fail_connects(
                        |c| {
                            c.dial == Some(connection_id)
                                || (c.peer == Some(peer_id) && !c.own_dial_pending())
                        },
                        "the peer closed the connection (if this machine was revoked, members refuse it)",
                    );
                }
            }
            SwarmEvent::OutgoingConnectionError {
                peer_id,
                connection_id,
                error,
                ..
            } => {
                tracing::debug!(?peer_id, %error, "dial failed");
                let why = error.to_string();
                // A connect whose own dial reached the machine but was
                // closed because this machine already has as many
                // connections to it as it keeps, syncs over those. Any
                // other failure fails the connect: it never reports
                // success for an address it could not dial.
                let reached = matches!(
                    &error,
                    libp2p::swarm::DialError::Denied { cause }
                        if cause.downcast_ref::<libp2p::connection_limits::Exceeded>().is_some()
                );
                let fallback: Vec<PeerId> = self
                    .connects
                    .iter_mut()
                    .filter(|c| reached && c.dial == Some(connection_id))
                    .filter_map(|c| {
                        let p = c.peer?;
                        self.swarm.is_connected(&p).then(|| {
                            c.dial_up = true;
                            p
                        })
                    })
                    .collect();
                for p in fallback {
                    let addr = self
                        .connects
                        .iter()
                        .find(|c| c.dial == Some(connection_id))
                        .map(|c| c.addr.clone());
                    if let Some(addr) = addr {
                        self.connection_up(p, &addr, connection_id);
                    }
                }
                // Only the connect whose dial this was fails: other dials to
                // the machine (its old addresses, a courier's) failing leave
                // a connect's own dial to go on.
                let why = match peer_id.filter(|p| self.swarm.is_connected(p)) {
                    Some(_) => format!(
                        "{why} (the machine is connected another way, which `agentmesh peers` shows; this address is not how to reach it)"
                    ),
                    None => why,
                };
                self.fail_connects(|c| c.dial == Some(connection_id) && !c.dial_up, &why);
            }
            SwarmEvent::Behaviour(event) => self.handle_behaviour(event),
            _ => {}
        }
    }

    fn handle_behaviour(&mut self, event: BehaviourEvent) {
        match event {
            BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. }) => {
                let relay = info.protocols.iter().any(|p| p.as_ref() == RELAY_HOP);
                self.peers.entry(peer_id).relay = relay;
                for a in &info.listen_addrs {
                    if !is_unspecified(a) && !is_link_local(a) {
                        self.peers.add_addr(peer_id, a);
                    }
                }
            }
            BehaviourEvent::Ping(ping::Event {
                peer,
                result: Ok(rtt),
                ..
            }) => {
                self.peers.entry(peer).rtt = Some(rtt);
            }
            BehaviourEvent::Mdns(mdns::Event::Discovered(found)) => {
                for (peer, addr) in found {
                    if peer == self.me.peer_id() {
                        continue;
                    }
                    tracing::debug!(%peer, %addr, "found on the local network");
                    self.peers.add_addr(peer, &addr);
                    self.swarm.add_peer_address(peer, addr);
                    if self.is_member(&peer) && !self.peers.is_connected(&peer) {
                        self.dial(peer);
                    }
                    self.retry_joins_found_by_mdns(peer);
                }
            }
            BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message,
                ..
            }) => {
                let from_member = message.source.is_some_and(|s| self.is_member(&s));
                if !from_member || !self.is_member(&propagation_source) {
                    return;
                }
                match Block::from_bytes(&message.data) {
                    Ok(block) => {
                        self.merge_blocks(vec![block]);
                    }
                    Err(e) => tracing::warn!(error = %e, "a gossiped block does not decode"),
                }
            }
            BehaviourEvent::Join(event) => self.handle_join_event(event),
            BehaviourEvent::Mail(event) => self.handle_mail_event(event),
            BehaviourEvent::Sync(event) => match event {
                request_response::Event::Message { peer, message, .. } => match message {
                    request_response::Message::Request {
                        request, channel, ..
                    } => self.handle_sync_request(peer, request, channel),
                    request_response::Message::Response {
                        request_id,
                        response,
                    } => {
                        if let Some(peer) = self.sync_waiting.remove(&request_id) {
                            self.handle_sync_reply(peer, response);
                        }
                    }
                },
                request_response::Event::OutboundFailure {
                    request_id, error, ..
                } => {
                    if let Some(peer) = self.sync_waiting.remove(&request_id) {
                        if breaks_protocol(&error) {
                            // An answer too large or not decodable: the
                            // connection is closed rather than left with a
                            // half-read stream; the member may reconnect.
                            tracing::info!(%peer, %error, "a sync answer broke the protocol; disconnecting");
                            let _ = self.swarm.disconnect_peer_id(peer);
                        }
                        let closed = !breaks_protocol(&error)
                            && matches!(
                                error,
                                request_response::OutboundFailure::ConnectionClosed
                                    | request_response::OutboundFailure::Io(_)
                            );
                        self.sync_failed(peer, error.to_string(), closed);
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn deliver(&mut self, carry: Carry) {
        let Carry {
            batch,
            peer,
            request,
        } = carry;
        let addrs = self.known_addrs(&peer);
        let id = self
            .swarm
            .behaviour_mut()
            .mail
            .send_request_with_addresses(&peer, request, addrs);
        self.mail_waiting.insert(id, batch);
    }

    fn answer_carried(&self, batch: u64, result: Result<MailReply, Undelivered>) {
        // The mail actor gone means the daemon is stopping.
        let _ = self.delivered.send(Delivered { batch, result });
    }

    fn handle_mail_event(&mut self, event: request_response::Event<MailRequest, MailReply>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let busy = |n: usize| MailReply {
                        outcomes: vec![MailOutcome::Busy; n],
                    };
                    let n = request.envelopes.len();
                    if n > MAX_BATCH_ENVELOPES {
                        // No courier of ours sends this; a short reply
                        // costs nothing and the sender sees the mismatch.
                        tracing::debug!(%peer, n, "refused an oversized mail batch");
                        let _ = self
                            .swarm
                            .behaviour_mut()
                            .mail
                            .send_response(channel, MailReply { outcomes: vec![] });
                        return;
                    }
                    if !self.is_member(&peer) && !self.is_revoked(&peer) {
                        // Unknown here: a stranger, or a member admitted a
                        // moment ago whose admission has not arrived. Busy
                        // lets the second retry; the stranger gets nothing
                        // stored, audited or opened. Asking a member for
                        // blocks (at most every few seconds) teaches this
                        // machine about a real newcomer.
                        let _ = self
                            .swarm
                            .behaviour_mut()
                            .mail
                            .send_response(channel, busy(n));
                        self.newcomer_hint();
                        return;
                    }
                    if self.inbound.len() >= MAX_INBOUND_PENDING {
                        let _ = self
                            .swarm
                            .behaviour_mut()
                            .mail
                            .send_response(channel, busy(n));
                        return;
                    }
                    self.next_token += 1;
                    let token = self.next_token;
                    let event = MailEvent::Inbound {
                        peer,
                        revoked: self.is_revoked(&peer),
                        request,
                        token,
                    };
                    if self.mail_events.try_send(event).is_ok() {
                        self.inbound.insert(token, channel);
                    } else {
                        let _ = self
                            .swarm
                            .behaviour_mut()
                            .mail
                            .send_response(channel, busy(n));
                    }
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(batch) = self.mail_waiting.remove(&request_id) {
                        self.answer_carried(batch, Ok(response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(batch) = self.mail_waiting.remove(&request_id) {
                    // No connection, or one that does not speak mail: it
                    // never left.
                    let reached = !matches!(
                        error,
                        request_response::OutboundFailure::DialFailure
                            | request_response::OutboundFailure::UnsupportedProtocols
                    );
                    let why = error.to_string();
                    self.answer_carried(batch, Err(Undelivered { reached, why }));
                }
            }
            request_response::Event::InboundFailure { .. } => {
                // The sender saw the failure too and will retry; any token
                // left behind is answered into the void and removed then.
            }
            _ => {}
        }
    }

    fn dial(&mut self, peer: PeerId) {
        let addrs = self.known_addrs(&peer);
        let opts = DialOpts::peer_id(peer)
            .addresses(addrs)
            .extend_addresses_through_behaviour()
            .build();
        if let Err(e) = self.swarm.dial(opts) {
            tracing::debug!(%peer, error = %e, "cannot dial");
        }
    }

    /// A machine this one does not know sent mail or a sync naming the
    /// team: it may have been admitted a moment ago. Asks one connected
    /// member (an admin first: it signed the admission) for the team's
    /// blocks, at most once per [`NEWCOMER_SYNC_EVERY`] whatever the
    /// number of unknown machines. The unknown machine is never asked.
    fn newcomer_hint(&mut self) {
        let Some(team) = &self.team else {
            return;
        };
        let now = Instant::now();
        if self
            .newcomer_sync
            .is_some_and(|t| now.duration_since(t) < NEWCOMER_SYNC_EVERY)
        {
            return;
        }
        let me = self.me.peer_id();
        let mut connected: Vec<(bool, PeerId)> = team
            .members()
            .filter(|m| m.standing == Standing::Current && m.peer != me)
            .filter(|m| self.peers.is_connected(&m.peer))
            .map(|m| (!m.admin, m.peer))
            .collect();
        connected.sort();
        if let Some((_, peer)) = connected.first() {
            self.newcomer_sync = Some(now);
            self.start_sync(*peer);
        }
    }

    fn redial_members(&mut self) {
        let Some(team) = &self.team else {
            return;
        };
        if !self.am_member() {
            return;
        }
        let me = self.me.peer_id();
        let lost: Vec<PeerId> = team
            .members()
            .filter(|m| m.standing == Standing::Current && m.peer != me)
            .map(|m| m.peer)
            .filter(|p| !self.peers.is_connected(p))
            .collect();
        for p in lost {
            self.dial(p);
        }
    }

    /// Fails every request whose answer is overdue: a request routed into
    /// a connection that died unseen would otherwise wait for ever.
    fn expire_requests(&mut self, now: Instant) {
        let late = format!("no answer within {}s", ANSWER_DEADLINE.as_secs());
        for batch in self.mail_waiting.overdue(now) {
            // Sent on a connection that may have been dead all along: it
            // may or may not have arrived.
            let why = late.clone();
            self.answer_carried(batch, Err(Undelivered { reached: true, why }));
        }
        for peer in self.sync_waiting.overdue(now) {
            self.sync_failed(peer, late.clone(), false);
        }
        for waiter in self.join_waiting.overdue(now) {
            self.join_failed(waiter, format!("the founder gave {late}"));
        }
    }

    fn housekeeping(&mut self) {
        let now_i = Instant::now();
        self.expire_requests(now_i);
        if self.peers.len() > crate::net::peers::MAX_PEERS {
            self.peers.trim(self.team.as_ref());
        }
        let due: Vec<PeerId> = self
            .disconnecting
            .iter()
            .filter(|(_, at)| *at <= now_i)
            .map(|(p, _)| *p)
            .collect();
        self.disconnecting.retain(|(_, at)| *at > now_i);
        for p in due {
            if self.is_revoked(&p) {
                let _ = self.swarm.disconnect_peer_id(p);
            }
        }
        for id in self.desk.expire(now_i, self.settings.request_ttl) {
            self.audit("join_expired", None, format!("request {id} expired"));
        }
        let polls: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, s)| s.state == JoinPhase::Waiting && !s.in_flight && s.next_poll <= now_i)
            .map(|(id, _)| *id)
            .collect();
        for id in polls {
            self.send_join(id, JoinMsg::Poll);
        }
        let lost: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, s)| s.awaiting_mdns.is_some() && s.started.elapsed() >= MDNS_JOIN_WAIT)
            .map(|(id, _)| *id)
            .collect();
        for join in lost {
            if let Some(reply) = self.joins.remove(&join).and_then(|s| s.awaiting_mdns) {
                send(
                    reply,
                    founder_unreachable(&format!(
                        "could not reach the founder at the ticket's addresses, nor find it on the local network within {}s",
                        MDNS_JOIN_WAIT.as_secs()
                    )),
                );
            }
        }
        let expired: Vec<usize> = (0..self.connects.len())
            .filter(|i| self.connects[*i].deadline <= now_i)
            .collect();
        for i in expired.into_iter().rev() {
            let c = self.connects.swap_remove(i);
            send(
                c.reply,
                err(
                    "connect_failed",
                    format!(
                        "{}: no answer within {}s",
                        c.addr,
                        CONNECT_TIMEOUT.as_secs()
                    ),
                ),
            );
        }
        if now_i.duration_since(self.last_maintenance) >= MAINTENANCE_EVERY {
            self.last_maintenance = now_i;
            // Graces that are over free their slots.
            self.graces.closed(self.started.elapsed());
            self.redial_members();
            let _ = self.store.prune_tickets(now());
            let _ = self
                .store
                .prune_audit(now().saturating_sub(self.settings.audit_retention));
            self.peers.expire(now_i, self.team.as_ref());
            self.save_peers();
        }
    }

    // ----- join: joiner side ----------------------------------------------

    fn send_join(&mut self, join: u64, msg: fn(Vec<u8>) -> JoinMsg) {
        let Some(s) = self.joins.get_mut(&join) else {
            return;
        };
        s.in_flight = true;
        let m = msg(s.request.nonce.to_vec());
        let (founder, addrs) = (s.founder, s.addrs.clone());
        let id = self
            .swarm
            .behaviour_mut()
            .join
            .send_request_with_addresses(&founder, m, addrs);
        self.join_waiting.insert(id, JoinWaiter::Poll(join));
    }

    /// Sends again the join requests whose founder mDNS just found.
    fn retry_joins_found_by_mdns(&mut self, founder: PeerId) {
        let waiting: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, s)| s.founder == founder && s.awaiting_mdns.is_some())
            .map(|(id, _)| *id)
            .collect();
        for join in waiting {
            let Some(s) = self.joins.get_mut(&join) else {
                continue;
            };
            let Some(reply) = s.awaiting_mdns.take() else {
                continue;
            };
            s.in_flight = true;
            let request = JoinMsg::Request(s.request.to_bytes());
            let id = self
                .swarm
                .behaviour_mut()
                .join
                .send_request(&founder, request);
            self.join_waiting.insert(id, JoinWaiter::Start(join, reply));
        }
    }

    fn join_state(&self, join: u64) -> Reply {
        let Some(s) = self.joins.get(&join) else {
            return err(
                "unknown_join",
                "no join with that id (it may have finished long ago)",
            );
        };
        let team_code = match s.state {
            JoinPhase::Approved | JoinPhase::Confirming => s.codes.map(|c| c.team.to_string()),
            _ => None,
        };
        let (state, reason, team) = match &s.state {
            JoinPhase::Offering | JoinPhase::Waiting => ("waiting", None, None),
            JoinPhase::Approved | JoinPhase::Confirming => ("approved", None, None),
            JoinPhase::Joined(t) => ("joined", None, Some(t.clone())),
            JoinPhase::Refused(r) => ("refused", Some(r.clone()), None),
            JoinPhase::Declined => ("declined", None, None),
        };
        ok(api::JoinState {
            state: state.into(),
            team_code,
            reason,
            team,
        })
    }

    fn join_start(&mut self, ticket: &str, name: &str, owner: &str, reply: oneshot::Sender<Reply>) {
        let ticket = match Ticket::parse(ticket, now()) {
            Ok(t) => t,
            Err(e @ TicketError::Expired { .. }) => {
                return send(reply, err("ticket_expired", e.to_string()));
            }
            Err(e) => return send(reply, err("bad_ticket", e.to_string())),
        };
        if self.am_member() {
            return send(
                reply,
                err(
                    "already_in_team",
                    "this machine is already in a team; a machine belongs to one team",
                ),
            );
        }
        let name = match Name::parse("machine name", name) {
            Ok(n) => n,
            Err(e) => return send(reply, err("bad_name", e.to_string())),
        };
        let owner = match Owner::parse(owner) {
            Ok(o) => o,
            Err(e) => return send(reply, err("bad_owner", e.to_string())),
        };
        if ticket.founder == self.me.peer_id() {
            return send(
                reply,
                err(
                    "bad_ticket",
                    "this ticket was made by this machine; run `agentmesh join` on the machine that should join",
                ),
            );
        }
        // Finished joins make room; joins still running count.
        self.joins.retain(|_, s| !s.state.finished());
        if self.joins.len() >= MAX_JOIN_SESSIONS {
            return send(
                reply,
                err(
                    "busy",
                    format!(
                        "{MAX_JOIN_SESSIONS} joins are already in progress; finish or abandon one first"
                    ),
                ),
            );
        }
        let request = JoinRequest {
            ticket_nonce: ticket.nonce,
            joiner: self.me.peer_id(),
            x25519: self.me.x25519_public(),
            name,
            owner,
            nonce: random16(),
        };
        for a in &ticket.addrs {
            self.peers.add_addr(ticket.founder, a);
            self.swarm.add_peer_address(ticket.founder, a.clone());
        }
        self.next_join += 1;
        let join = self.next_join;
        let bytes = request.to_bytes();
        self.joins.insert(
            join,
            JoinSession {
                founder: ticket.founder,
                addrs: ticket.addrs.clone(),
                request,
                offer: None,
                codes: None,
                state: JoinPhase::Offering,
                in_flight: true,
                next_poll: Instant::now(),
                poll_failures: 0,
                confirm_tries: 0,
                started: Instant::now(),
                awaiting_mdns: None,
            },
        );
        let id = self.swarm.behaviour_mut().join.send_request_with_addresses(
            &ticket.founder,
            JoinMsg::Request(bytes),
            ticket.addrs,
        );
        self.join_waiting.insert(id, JoinWaiter::Start(join, reply));
    }

    fn join_confirm(&mut self, join: u64, accept: bool, reply: oneshot::Sender<Reply>) {
        let Some(s) = self.joins.get_mut(&join) else {
            return send(
                reply,
                err("unknown_join", "no join in progress with that id"),
            );
        };
        if s.state != JoinPhase::Approved {
            return send(
                reply,
                err(
                    "not_approved",
                    "the founder has not accepted the pairing code yet",
                ),
            );
        }
        s.state = if accept {
            JoinPhase::Confirming
        } else {
            JoinPhase::Declined
        };
        self.send_confirm(join, accept, reply);
    }

    fn send_confirm(&mut self, join: u64, accept: bool, reply: oneshot::Sender<Reply>) {
        let Some(s) = self.joins.get_mut(&join) else {
            return send(reply, err("unknown_join", "the join was cancelled"));
        };
        s.confirm_tries += 1;
        let nonce = s.request.nonce.to_vec();
        let (founder, addrs) = (s.founder, s.addrs.clone());
        let msg = if accept {
            JoinMsg::Confirm(nonce)
        } else {
            JoinMsg::Decline(nonce)
        };
        let id = self
            .swarm
            .behaviour_mut()
            .join
            .send_request_with_addresses(&founder, msg, addrs);
        let waiter = if accept {
            JoinWaiter::Confirm(join, reply)
        } else {
            JoinWaiter::Decline(join, reply)
        };
        self.join_waiting.insert(id, waiter);
    }

    fn handle_join_event(&mut self, event: request_response::Event<JoinMsg, JoinReply>) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let reply = self.founder_answer(peer, request);
                    let _ = self
                        .swarm
                        .behaviour_mut()
                        .join
                        .send_response(channel, reply);
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(w) = self.join_waiting.remove(&request_id) {
                        self.joiner_answer(w, response);
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(w) = self.join_waiting.remove(&request_id) {
                    self.join_failed(w, format!("could not reach the founder: {error}"));
                }
            }
            _ => {}
        }
    }

    /// A join message got no answer (`why`): retry, wait for mDNS, or
    /// give up, as its step allows.
    fn join_failed(&mut self, waiter: JoinWaiter, why: String) {
        match waiter {
            JoinWaiter::Start(join, reply) => {
                let wait = self.settings.mdns
                    && self
                        .joins
                        .get(&join)
                        .is_some_and(|s| s.started.elapsed() < MDNS_JOIN_WAIT);
                if let (true, Some(s)) = (wait, self.joins.get_mut(&join)) {
                    // The ticket's addresses failed; the founder may
                    // still turn up on the local network.
                    tracing::info!(
                        "the ticket's addresses failed; looking for the founder with mDNS"
                    );
                    s.in_flight = false;
                    s.awaiting_mdns = Some(reply);
                } else {
                    self.joins.remove(&join);
                    send(reply, founder_unreachable(&why));
                }
            }
            JoinWaiter::Poll(join) => {
                if let Some(s) = self.joins.get_mut(&join) {
                    s.in_flight = false;
                    s.poll_failures += 1;
                    s.next_poll = Instant::now() + Duration::from_secs(1);
                    if s.poll_failures >= MAX_POLL_FAILURES {
                        s.state = JoinPhase::Refused(format!(
                            "{why}, {MAX_POLL_FAILURES} times in a row; start again with a new ticket when the founder is back"
                        ));
                    }
                }
            }
            JoinWaiter::Confirm(join, reply) => {
                // The founder may have admitted us and the answer
                // got lost; it answers a repeated Confirm the same.
                let again = self
                    .joins
                    .get(&join)
                    .is_some_and(|s| s.confirm_tries < MAX_CONFIRM_TRIES);
                if again {
                    self.send_confirm(join, true, reply);
                } else {
                    if let Some(s) = self.joins.get_mut(&join) {
                        s.state = JoinPhase::Refused(why.clone());
                    }
                    send(reply, err("founder_unreachable", why));
                }
            }
            JoinWaiter::Decline(join, reply) => send(reply, self.join_state(join)),
        }
    }

    fn joiner_answer(&mut self, waiter: JoinWaiter, response: JoinReply) {
        match waiter {
            JoinWaiter::Start(join, reply) => {
                let result = self.on_offer(join, response);
                if result.is_err() {
                    self.joins.remove(&join);
                }
                send(reply, result);
            }
            JoinWaiter::Poll(join) => {
                let Some(s) = self.joins.get_mut(&join) else {
                    return;
                };
                s.in_flight = false;
                s.poll_failures = 0;
                match response {
                    JoinReply::Approved if s.state == JoinPhase::Waiting => {
                        s.state = JoinPhase::Approved
                    }
                    JoinReply::Refused(r) => s.state = JoinPhase::Refused(r),
                    _ => {}
                }
            }
            JoinWaiter::Confirm(join, reply) => {
                let result = match response {
                    JoinReply::Admitted(blocks) => self.install_team(join, blocks),
                    JoinReply::Refused(r) => {
                        if let Some(s) = self.joins.get_mut(&join) {
                            s.state = JoinPhase::Refused(r.clone());
                        }
                        err("join_refused", r)
                    }
                    other => err(
                        "protocol",
                        format!("unexpected answer from the founder: {other:?}"),
                    ),
                };
                match result {
                    // Admitted: answered once the first sync with the
                    // founder brought the rest of the team's blocks (the
                    // admission carried only the Genesis and the Admit),
                    // so `team show` right after `join` lists everyone.
                    Ok(()) => match self.joins.get(&join).map(|s| s.founder) {
                        Some(founder) if self.syncing.contains_key(&founder) => {
                            self.joined_waiting.push((founder, join, reply));
                        }
                        _ => send(reply, self.join_state(join)),
                    },
                    Err(e) => send(reply, Err(e)),
                }
            }
            JoinWaiter::Decline(join, reply) => send(reply, self.join_state(join)),
        }
    }

    fn on_offer(&mut self, join: u64, response: JoinReply) -> Reply {
        let offer = match response {
            JoinReply::Offer(bytes) => JoinOffer::from_bytes(&bytes).map_err(|e| {
                ApiError::new("protocol", format!("the founder's offer is malformed: {e}"))
            })?,
            JoinReply::Refused(why) => {
                return err("join_refused", format!("the founder refused: {why}"));
            }
            other => {
                return err(
                    "protocol",
                    format!("unexpected answer from the founder: {other:?}"),
                );
            }
        };
        let s = self
            .joins
            .get_mut(&join)
            .ok_or_else(|| ApiError::new("unknown_join", "the join was cancelled"))?;
        if offer.founder != s.founder {
            return err(
                "protocol",
                "the offer names another founder than the ticket",
            );
        }
        let codes = pjoin::codes(&s.request, &offer);
        s.codes = Some(codes);
        s.state = JoinPhase::Waiting;
        s.in_flight = false;
        let started = api::JoinStarted {
            join_id: join,
            pairing_code: codes.pairing.to_string(),
            team_name: offer.team_name.to_string(),
            founder: offer.founder.to_string(),
        };
        s.offer = Some(offer);
        ok(started)
    }

    /// Checks the blocks the founder sent and, if they make this machine a
    /// member of the team it was offered, exactly as it asked, stores them
    /// and joins.
    fn install_team(&mut self, join: u64, blocks: Vec<ByteBuf>) -> Result<(), ApiError> {
        let s = self
            .joins
            .get(&join)
            .ok_or_else(|| ApiError::new("unknown_join", "the join was cancelled"))?;
        let offer = s
            .offer
            .clone()
            .ok_or_else(|| ApiError::new("protocol", "no offer"))?;
        let mut state = TeamState::new(offer.team);
        for b in &blocks {
            let block = Block::from_bytes(b).map_err(|e| {
                ApiError::new("protocol", format!("the founder sent a bad block: {e}"))
            })?;
            state.apply(block).map_err(|e| {
                ApiError::new(
                    "protocol",
                    format!("the founder sent a block the team refuses: {e}"),
                )
            })?;
        }
        let me = self.me.peer_id();
        let good = state
            .genesis()
            .is_some_and(|g| g.founder == offer.founder && g.team_name == offer.team_name)
            && state.member(&me).is_some_and(|m| {
                m.standing == Standing::Current
                    && m.x25519 == s.request.x25519
                    && m.name == s.request.name
                    && m.owner == s.request.owner
            });
        if !good {
            return err(
                "protocol",
                "the founder's blocks do not admit this machine as it asked",
            );
        }
        self.replace_team(state)?;
        self.audit(
            "joined",
            Some(&offer.founder),
            format!("joined team {}", offer.team_name),
        );
        let team = self
            .team_ref()
            .ok_or_else(|| ApiError::new("internal", "team vanished"))?;
        if let Some(s) = self.joins.get_mut(&join) {
            s.state = JoinPhase::Joined(team);
        }
        self.announce();
        Ok(())
    }

    // ----- join: founder side ---------------------------------------------

    fn founder_answer(&mut self, peer: PeerId, msg: JoinMsg) -> JoinReply {
        let refused = |why: &str| JoinReply::Refused(why.into());
        match msg {
            JoinMsg::Request(bytes) => {
                if !self
                    .desk
                    .allow(peer, Instant::now(), self.settings.max_per_peer_per_minute)
                {
                    // Not audited: a flood must not turn into disk writes.
                    return refused("too many join requests from this machine; wait a minute");
                }
                let reply = self.open_request(peer, &bytes);
                if let JoinReply::Refused(why) = &reply {
                    // Debug: anyone can cause these, with fresh identities.
                    tracing::debug!(%peer, reason = %why, "refused a join request");
                }
                reply
            }
            JoinMsg::Poll(nonce) => match self.desk.find(&peer, &nonce) {
                None => refused(
                    "no such join request (it may have expired); start again with a new ticket",
                ),
                Some(r) => match &r.state {
                    DeskState::Waiting => JoinReply::Waiting,
                    DeskState::Approved | DeskState::Admitted => JoinReply::Approved,
                    DeskState::Declined => refused("declined"),
                    DeskState::Cancelled(why) => JoinReply::Refused(why.clone()),
                },
            },
            JoinMsg::Confirm(nonce) => self.admit(peer, &nonce),
            JoinMsg::Decline(nonce) => {
                if let Some(id) = self
                    .desk
                    .find(&peer, &nonce)
                    .filter(|r| r.state == DeskState::Approved)
                    .map(|r| r.id)
                {
                    self.desk.settle(id, DeskState::Declined, Instant::now());
                    self.audit(
                        "join_declined",
                        Some(&peer),
                        "the joiner said the team codes differ",
                    );
                }
                JoinReply::Done
            }
        }
    }

    /// The checks a join request must pass, in an order that tells a
    /// machine without a valid ticket nothing about the team.
    fn open_request(&mut self, peer: PeerId, bytes: &[u8]) -> JoinReply {
        let refused = |why: String| JoinReply::Refused(why);
        let request = match JoinRequest::from_bytes(bytes) {
            Ok(r) => r,
            Err(e) => return refused(format!("the request is malformed: {e}")),
        };
        if request.joiner != peer {
            return refused("the request names another machine than the one sending it".into());
        }
        match self.store.ticket(&request.ticket_nonce) {
            Ok(Some(expires)) if expires >= now() => {}
            Ok(Some(_)) => {
                return refused(
                    "the ticket expired; ask the founder for a new one (agentmesh invite)".into(),
                );
            }
            Ok(None) => {
                return refused("the ticket is unknown or was already used; ask the founder for a new one (agentmesh invite)".into());
            }
            Err(e) => return refused(format!("the founder's store failed: {e}")),
        }
        let Some(team) = &self.team else {
            return refused("this machine is not in a team".into());
        };
        if !self.am_admin() {
            return refused("this machine cannot admit machines to its team".into());
        }
        match team.member(&peer).map(|m| m.standing) {
            Some(Standing::Revoked) => {
                return refused("this machine was revoked from the team and cannot rejoin with the same key; a new key is a new machine".into());
            }
            Some(_) => return refused("this machine was already admitted to the team".into()),
            None => {}
        }
        if team.by_name(request.name.as_str()).is_some()
            || self.desk.name_pending(&request.name, &peer)
        {
            return refused(format!(
                "the name {} is taken in this team; join with another --name",
                request.name
            ));
        }
        if self.desk.open_count(Some(&peer)) >= self.settings.max_pending {
            return refused(
                "the founder has too many join requests waiting; try again later".into(),
            );
        }
        match self.store.take_ticket(&request.ticket_nonce) {
            Ok(Some(_)) => {}
            Ok(None) => return refused("the ticket was just used by another request".into()),
            Err(e) => return refused(format!("the founder's store failed: {e}")),
        }
        let genesis = team
            .genesis()
            .expect("a team with an admin has its genesis");
        // Drawn only now that the whole request has arrived: the order the
        // pairing code's strength rests on (docs/protocol.md §7.5).
        let offer = JoinOffer {
            team: team.id(),
            team_name: genesis.team_name.clone(),
            founder: self.me.peer_id(),
            nonce: random16(),
        };
        let codes = pjoin::codes(&request, &offer);
        let detail = format!("{} (owner {}) asks to join", request.name, request.owner);
        let offer_bytes = offer.to_bytes();
        self.desk.file(peer, request, offer, codes, Instant::now());
        self.audit("join_requested", Some(&peer), detail);
        JoinReply::Offer(offer_bytes)
    }

    /// What an admission carries: the Genesis and `peer`'s Admit, a few
    /// KiB whatever the team's size. The new member syncs the rest.
    fn admission_blocks(&self, peer: &PeerId) -> Vec<ByteBuf> {
        let Some(team) = &self.team else {
            return vec![];
        };
        let genesis = team
            .blocks()
            .find(|b| matches!(b.body(), BlockBody::Genesis(_)));
        let admit = team
            .blocks()
            .find(|b| matches!(b.body(), BlockBody::Admit(a) if a.peer == *peer));
        bufs(genesis.into_iter().chain(admit).map(Block::bytes))
    }

    /// The joiner confirmed the team code: sign its Admit. A repeated
    /// Confirm (its answer was lost) gets the same blocks again.
    fn admit(&mut self, peer: PeerId, nonce: &[u8]) -> JoinReply {
        let Some(r) = self.desk.find(&peer, nonce) else {
            return JoinReply::Refused("no such join request".into());
        };
        match r.state {
            DeskState::Approved => {}
            DeskState::Admitted => return JoinReply::Admitted(self.admission_blocks(&peer)),
            _ => {
                return JoinReply::Refused("the founder has not accepted the pairing code".into());
            }
        }
        let (id, request) = (r.id, r.request.clone());
        let Some(team) = &self.team else {
            return JoinReply::Refused("this machine is no longer in a team".into());
        };
        if team.by_name(request.name.as_str()).is_some() {
            self.desk.settle(
                id,
                DeskState::Cancelled(format!(
                    "the name {} was taken meanwhile; join with another --name",
                    request.name
                )),
                Instant::now(),
            );
            return JoinReply::Refused(format!("the name {} was taken meanwhile", request.name));
        }
        let body = BlockBody::Admit(Admit {
            team: team.id(),
            peer,
            x25519: request.x25519,
            name: request.name.clone(),
            owner: request.owner.clone(),
            admitted_by: self.me.peer_id(),
            at: now(),
        });
        match self.add_own_block(body) {
            Ok(_) => {
                self.desk.settle(id, DeskState::Admitted, Instant::now());
                self.audit(
                    "admitted",
                    Some(&peer),
                    format!("{} (owner {})", request.name, request.owner),
                );
                JoinReply::Admitted(self.admission_blocks(&peer))
            }
            Err(e) => JoinReply::Refused(e.message),
        }
    }

    // ----- API ops --------------------------------------------------------

    fn handle_op(&mut self, op: Op, reply: oneshot::Sender<Reply>) {
        let answer = match op {
            Op::Status => self.status(),
            Op::Peers { after, limit } => ok(self.peers.page(
                &self.me.peer_id(),
                self.team.as_ref(),
                after.as_ref(),
                limit,
            )),
            Op::TeamShow => self.team_view(),
            Op::TeamCreate { name, owner } => self.team_create(&name, &owner),
            Op::TeamLeave => self.team_leave(),
            Op::Invite { ttl_secs } => self.invite(ttl_secs),
            Op::JoinStart {
                ticket,
                name,
                owner,
            } => return self.join_start(&ticket, &name, &owner, reply),
            Op::JoinStatus { join_id } => self.join_state(join_id),
            Op::JoinConfirm { join_id, accept } => {
                return self.join_confirm(join_id, accept, reply);
            }
            Op::AdmitList => self.admit_list(),
            Op::AdmitCode { request_id, code } => self.admit_code(request_id, &code),
            Op::AdmitStatus { request_id } => self.admit_status(request_id),
            Op::AdmitReject { request_id } => self.admit_reject(request_id),
            Op::Revoke { name } => self.revoke(&name),
            Op::Connect { addr } => return self.connect(&addr, reply),
            Op::Shutdown => {
                self.stopping = true;
                ok(serde_json::json!({}))
            }
            Op::ConfigShow => ok(serde_json::json!({
                "config": self.settings.config,
                "toml": self.settings.config.to_toml(),
            })),
            _ => err("internal", "a mail operation reached the network node"),
        };
        send(reply, answer);
    }

    fn status(&self) -> Reply {
        let reachability = if self.swarm.external_addresses().next().is_some() {
            "public"
        } else {
            "unknown"
        };
        let me = self.me.peer_id();
        let standing = self
            .team
            .as_ref()
            .and_then(|t| t.member(&me))
            .map(|m| (m.name.to_string(), m.standing));
        let (name, team_standing) = match standing {
            Some((name, s)) => (name, Some(s)),
            None => (self.settings.name.to_string(), None),
        };
        ok(api::Status {
            peer_id: me.to_string(),
            name,
            team: self.team_ref(),
            team_standing: team_standing.map(|s| {
                match s {
                    Standing::Current => "member",
                    Standing::Revoked => "revoked",
                    Standing::NameTaken => "name_taken",
                }
                .into()
            }),
            listen_addrs: self.listen_addrs.iter().map(ToString::to_string).collect(),
            external_addrs: self
                .swarm
                .external_addresses()
                .map(ToString::to_string)
                .collect(),
            reachability: reachability.into(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            connected_peers: self.peers.connected().count(),
            // The mailroom's part is filled in by the server.
            paused: false,
            held: 0,
            outbox_waiting: 0,
            test_build: crate::clock::TEST_BUILD,
        })
    }

    fn team_create(&mut self, name: &str, owner: &str) -> Reply {
        if self.am_member() {
            return err(
                "already_in_team",
                "this machine is already in a team; a machine belongs to one team",
            );
        }
        let team_name =
            Name::parse("team name", name).map_err(|e| ApiError::new("bad_name", e.to_string()))?;
        let owner = Owner::parse(owner).map_err(|e| ApiError::new("bad_owner", e.to_string()))?;
        let genesis = Block::sign(
            BlockBody::Genesis(Genesis {
                team_name,
                founder: self.me.peer_id(),
                founder_x25519: self.me.x25519_public(),
                founder_name: self.settings.name.clone(),
                founder_owner: owner,
                admins: vec![self.me.peer_id()],
                created_at: now(),
                nonce: random16(),
            }),
            &self.me,
        )
        .map_err(|e| ApiError::new("internal", e.to_string()))?;
        let state = TeamState::from_genesis(genesis)
            .map_err(|e| ApiError::new("internal", e.to_string()))?;
        self.replace_team(state)?;
        self.audit("team_created", None, format!("team {name}"));
        self.team_view()
    }

    fn team_leave(&mut self) -> Reply {
        if !self.am_member() {
            return err("not_in_team", NOT_IN_TEAM);
        }
        if self.am_admin() {
            return err(
                "admin_cannot_leave",
                "the founder cannot leave its team: admins can't be revoked; to end the team, stop using it",
            );
        }
        let team = self
            .team
            .as_ref()
            .map(TeamState::id)
            .ok_or_else(|| ApiError::new("not_in_team", NOT_IN_TEAM))?;
        let me = self.me.peer_id();
        self.add_own_block(BlockBody::Revoke(Revoke {
            team,
            peer: me,
            revoked_by: me,
            at: now(),
        }))?;
        self.audit("left", Some(&me), "this machine left its team");
        ok(serde_json::json!({ "left": team.to_string() }))
    }

    fn invite(&mut self, ttl_secs: Option<u64>) -> Reply {
        if !self.am_admin() {
            return if self.am_member() {
                err("not_admin", "only the team's founder can invite machines")
            } else {
                err("not_in_team", NOT_IN_TEAM)
            };
        }
        let ttl = ttl_secs.map_or(self.settings.invite_ttl, Duration::from_secs);
        if ttl > self.settings.max_invite_ttl || ttl.is_zero() {
            return err(
                "bad_ttl",
                format!(
                    "--ttl must be between 1s and {} (join.max_invite_ttl in config.toml)",
                    humantime::format_duration(self.settings.max_invite_ttl)
                ),
            );
        }
        let mut addrs = self.advertised_addrs();
        addrs.truncate(agentmesh_protocol::ticket::MAX_TICKET_ADDRS);
        if addrs.is_empty() {
            return err(
                "no_addresses",
                "this machine is not listening on any address yet; check `agentmesh status`",
            );
        }
        let nonce = random16();
        let expires_at = now().saturating_add(ttl);
        self.store
            .put_ticket(&nonce, expires_at)
            .map_err(|e| ApiError::new("store", e.to_string()))?;
        let ticket = Ticket {
            founder: self.me.peer_id(),
            addrs,
            nonce,
            expires_at,
        };
        self.audit(
            "invited",
            None,
            format!("ticket valid until {}", rfc3339(expires_at)),
        );
        ok(api::Invite {
            ticket: ticket.to_string(),
            expires_at: rfc3339(expires_at),
        })
    }

    fn admit_list(&self) -> Reply {
        if !self.am_admin() {
            return err("not_admin", "only the team's founder can admit machines");
        }
        let mut views = self.desk.views(Instant::now());
        if let Some(team) = &self.team {
            let members = self.member_views(team);
            for v in &mut views {
                v.name_was = members
                    .iter()
                    .find(|m| m.name == v.name && m.standing != "current")
                    .cloned();
            }
        }
        ok(views)
    }

    fn admit_code(&mut self, id: u64, code: &str) -> Reply {
        if !self.am_admin() {
            return err("not_admin", "only the team's founder can admit machines");
        }
        let (name, peer) = match self.desk.get(id) {
            Some(r) => (r.request.name.to_string(), Some(r.peer)),
            None => (String::new(), None),
        };
        match self.desk.check_code(id, code, Instant::now()) {
            CodeOutcome::Matched(team) => ok(api::AdmitApproved {
                team_code: team.to_string(),
            }),
            CodeOutcome::Wrong(left) => {
                self.audit("wrong_code", peer.as_ref(), format!("{left} tries left"));
                err(
                    "wrong_code",
                    format!(
                        "that is not the code {name} shows; {left} {} left",
                        if left == 1 { "try" } else { "tries" }
                    ),
                )
            }
            CodeOutcome::Cancelled => {
                self.audit("join_cancelled", peer.as_ref(), "three wrong codes");
                err(
                    "request_cancelled",
                    format!(
                        "that was the third wrong code: the request from {name} is cancelled; if the codes really differ, someone may be in the middle"
                    ),
                )
            }
            CodeOutcome::NotACode(why) => err("not_a_code", why),
            CodeOutcome::Unknown => err("unknown_request", "no waiting join request with that id"),
        }
    }

    fn admit_status(&mut self, id: u64) -> Reply {
        let Some(r) = self.desk.get(id) else {
            return err("unknown_request", "no join request with that id");
        };
        let (state, reason) = match &r.state {
            DeskState::Waiting => ("waiting", None),
            DeskState::Approved => ("awaiting_confirmation", None),
            DeskState::Admitted => ("admitted", None),
            DeskState::Declined => ("declined", None),
            DeskState::Cancelled(why) => ("cancelled", Some(why.clone())),
        };
        ok(api::AdmitState {
            state: state.into(),
            reason,
        })
    }

    fn admit_reject(&mut self, id: u64) -> Reply {
        if !self.am_admin() {
            return err("not_admin", "only the team's founder can admit machines");
        }
        let Some(peer) = self.desk.get(id).map(|r| r.peer) else {
            return err("unknown_request", "no join request with that id");
        };
        self.desk.settle(
            id,
            DeskState::Cancelled("the founder refused the request".into()),
            Instant::now(),
        );
        self.audit("join_rejected", Some(&peer), "refused by the founder");
        ok(serde_json::json!({}))
    }

    fn revoke(&mut self, name: &str) -> Reply {
        if !self.am_admin() {
            return if self.am_member() {
                err(
                    "not_admin",
                    "only the team's founder can revoke machines; to leave, run `agentmesh team leave`",
                )
            } else {
                err("not_in_team", NOT_IN_TEAM)
            };
        }
        let Some(team) = &self.team else {
            return err("not_in_team", NOT_IN_TEAM);
        };
        // The current holder of the name; a name can also be held by a
        // machine whose Admit lost a conflict (name_taken): that one is
        // revoked by name only if no current member holds it.
        let holder = team.by_name(name).or_else(|| {
            team.members()
                .find(|m| m.name.as_str() == name && m.standing == Standing::NameTaken)
        });
        let Some(member) = holder else {
            let known = team
                .members()
                .filter(|m| m.standing == Standing::Current)
                .map(|m| m.name.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return err(
                "unknown_member",
                format!("no current member is named {name:?}; members: {known}"),
            );
        };
        if member.admin {
            return err(
                "admin",
                "the founder cannot be revoked; a lost founder key means founding a new team",
            );
        }
        let (peer, id) = (member.peer, team.id());
        self.add_own_block(BlockBody::Revoke(Revoke {
            team: id,
            peer,
            revoked_by: self.me.peer_id(),
            at: now(),
        }))?;
        self.audit("revoked", Some(&peer), format!("{name} revoked here"));
        ok(serde_json::json!({ "revoked": peer.to_string(), "name": name }))
    }

    fn connect(&mut self, addr: &str, reply: oneshot::Sender<Reply>) {
        let addr: Multiaddr = match addr.parse() {
            Ok(a) => a,
            Err(e) => {
                return send(
                    reply,
                    err("bad_address", format!("{addr:?} is not a multiaddr ({e})")),
                );
            }
        };
        let peer = match addr.iter().last() {
            Some(Protocol::P2p(p)) => Some(p),
            _ => None,
        };
        if peer == Some(self.me.peer_id()) {
            return send(
                reply,
                err("bad_address", "that is this machine's own address"),
            );
        }
        let mut wait = ConnectWait {
            addr: addr.clone(),
            peer,
            dial: None,
            dial_up: false,
            reply,
            deadline: Instant::now() + CONNECT_TIMEOUT,
            syncing: false,
        };
        // Dialled even when a connection to the machine is up: that one may
        // be left over from before the machine restarted, and the person
        // asked for this address.
        let opts = match peer {
            // Always: the person asked for this address, even if a dial to
            // older addresses of the same machine is still pending.
            Some(p) => DialOpts::peer_id(p)
                .condition(libp2p::swarm::dial_opts::PeerCondition::Always)
                .addresses(vec![without_peer(&addr)])
                .build(),
            None => DialOpts::unknown_peer_id().address(addr.clone()).build(),
        };
        wait.dial = Some(opts.connection_id());
        if let Err(e) = self.swarm.dial(opts) {
            return send(
                wait.reply,
                err("connect_failed", format!("cannot dial {addr}: {e}")),
            );
        }
        self.connects.push(wait);
    }
}

/// The team this machine's store records, with every stored block applied.
pub fn load_team(store: &dyn Store) -> Result<Option<TeamState>, crate::store::StoreError> {
    let Some(id) = store.team()? else {
        return Ok(None);
    };
    let mut state = TeamState::new(id);
    for bytes in store.blocks(&id)? {
        match Block::from_bytes(&bytes) {
            Ok(b) => {
                let _ = state.apply(b);
            }
            Err(e) => tracing::warn!(error = %e, "ignoring a damaged stored block"),
        }
    }
    Ok(Some(state))
}

/// Whether a request failed because the answer broke the protocol (over
/// its size limit, or not decodable), as the codec reports it.
fn breaks_protocol(error: &request_response::OutboundFailure) -> bool {
    matches!(error, request_response::OutboundFailure::Io(e) if e.kind() == std::io::ErrorKind::InvalidData)
}

fn is_unspecified(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_unspecified(),
        Protocol::Ip6(ip) => ip.is_unspecified(),
        _ => false,
    })
}

/// IPv6 link-local addresses (fe80::/10) need a zone to be dialled, which
/// a multiaddr cannot carry; they are never worth advertising.
fn is_link_local(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip6(ip) => ip.is_unicast_link_local(),
        _ => false,
    })
}

fn is_loopback(a: &Multiaddr) -> bool {
    a.iter().any(|p| match p {
        Protocol::Ip4(ip) => ip.is_loopback(),
        Protocol::Ip6(ip) => ip.is_loopback(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    /// A request whose answer never comes is failed at its deadline: the
    /// node's own, since request-response never reports one routed into a
    /// connection it never saw close.
    #[test]
    fn requests_with_no_answer_are_overdue_at_their_deadline() {
        // Request ids come from a behaviour; make two.
        let mut b = request_response::Behaviour::with_codec(
            crate::net::codec::Codec::<SyncRequest, SyncReply>::new(crate::wire::SYNC_LIMITS),
            [(
                crate::net::SYNC_PROTOCOL,
                request_response::ProtocolSupport::Full,
            )],
            request_response::Config::default(),
        );
        let peer = PeerId::random();
        let req = || SyncRequest::Fetch {
            team: vec![],
            hashes: vec![],
        };
        let ids = [b.send_request(&peer, req()), b.send_request(&peer, req())];
        let mut waiting: Awaiting<&str> = Awaiting::default();
        waiting.insert(ids[0], "first");
        waiting.insert(ids[1], "second");
        assert_eq!(waiting.remove(&ids[1]), Some("second"), "answered");
        let now = Instant::now();
        assert!(waiting.overdue(now).is_empty(), "not yet");
        assert_eq!(waiting.overdue(now + ANSWER_DEADLINE), vec!["first"]);
        assert!(
            waiting.overdue(now + ANSWER_DEADLINE).is_empty(),
            "failed once"
        );
    }
}
