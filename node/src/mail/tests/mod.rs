#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::cell::RefCell;
use std::collections::HashMap;

use agentmesh_protocol::envelope::{Body, Header, Kind, MessageId};
use agentmesh_protocol::team::{Standing, TeamId};
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{Name, PeerId, Timestamp};
use serde_bytes::ByteBuf;

use super::*;
use crate::api;
use crate::api::{Event, HeldOutcome, WhoKind};
use crate::mail::consent::{Consent, Decision, HeldReason};
use crate::mail::post::courier::{BACKOFF_MAX, Carrier, Courier, PeerQueue, backoff};
use crate::mail::post::inbox::{Inbox, Sender};
use crate::mail::post::pages::inbox_page;
use crate::net::{Carry, CarryHandle, Delivered, Handle, MailEvent, Undelivered, Via};
use crate::store::OutboxRecord;
use crate::store::testing::Flaky;
use crate::store::{
    AuditEntry, AuditStore, BusStore, InboxRecord, MailStore, OutboxStatus, SledStore,
};
use crate::team::Machine;
use crate::wire::MailReply;
use crate::wire::{MAX_BATCH_BYTES, MAX_BATCH_ENVELOPES, MailOutcome, MailRequest};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

mod arrivals;
mod broadcasts;
mod carried;
mod held;
mod pruning;
mod sending;

fn record(seq: u64, unread: bool) -> InboxRecord {
    crate::store::testing::inbox_record(seq, None, !unread, false)
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

// ----- fixtures ---------------------------------------------------------

const TEAM: TeamId = TeamId([3; 32]);

fn machine(name: &str, owner: &str, id: &Identity) -> Machine {
    Machine {
        name: name.into(),
        owner: owner.into(),
        x25519: id.x25519_public(),
        standing: Standing::Current,
        left: false,
        lapsed: false,
    }
}

/// Bravo (this machine, Ada's), alpha (Ada's too) and carol (Bob's).
struct Team {
    me: Identity,
    alpha: Identity,
    carol: Identity,
    dir: Directory,
}

fn team() -> Team {
    let mut rng = rand::rng();
    let (me, alpha, carol) = (
        Identity::generate(&mut rng),
        Identity::generate(&mut rng),
        Identity::generate(&mut rng),
    );
    let dir = Directory {
        me: Some(me.peer_id()),
        team: Some(TEAM),
        my_name: "bravo".into(),
        my_owner: "Ada".into(),
        member: true,
        machines: [
            (me.peer_id(), machine("bravo", "Ada", &me)),
            (alpha.peer_id(), machine("alpha", "Ada", &alpha)),
            (carol.peer_id(), machine("carol", "Bob", &carol)),
        ]
        .into_iter()
        .collect(),
    };
    Team {
        me,
        alpha,
        carol,
        dir,
    }
}

/// A store in a temporary directory, and an audit log whose entries the
/// test reads before they are written.
struct Desk<S: Store + 'static> {
    _tmp: tempfile::TempDir,
    store: Arc<S>,
    log: AuditLog,
}

fn desk() -> Desk<SledStore> {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(tmp.path(), 1 << 20).unwrap());
    let (commit, _flusher) = GroupCommit::start(store.clone());
    Desk {
        _tmp: tmp,
        store,
        log: AuditLog::new(commit),
    }
}

fn flaky_desk() -> Desk<Flaky> {
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Flaky::new(SledStore::open(tmp.path(), 1 << 20).unwrap()));
    let (commit, _flusher) = GroupCommit::start(store.clone());
    Desk {
        _tmp: tmp,
        store,
        log: AuditLog::new(commit),
    }
}

fn at(wall_ms: u64, mono: Instant) -> Now {
    Now {
        wall: Timestamp::from_unix_millis(wall_ms),
        mono,
    }
}

/// The audit events recorded and not yet written, in order.
fn events(log: &AuditLog) -> Vec<&str> {
    log.pending().iter().map(|e| e.event.as_str()).collect()
}

fn entries<'a>(log: &'a AuditLog, event: &str) -> Vec<&'a AuditEntry> {
    log.pending().iter().filter(|e| e.event == event).collect()
}

fn ada() -> Who {
    Who {
        kind: WhoKind::Human,
        name: "ada".into(),
        session_id: None,
        task: None,
    }
}

/// An envelope from `from` to `to`, sent at `sent_at` for an hour; `edit`
/// changes its header and body before it is sealed.
fn letter(
    from: &Identity,
    to: &Identity,
    sent_at: Timestamp,
    edit: impl FnOnce(&mut Header, &mut Body),
) -> Vec<u8> {
    let mut rng = rand::rng();
    let id = MessageId::random(&mut rng);
    let mut header = Header {
        id,
        team: TEAM,
        from: from.peer_id(),
        to: to.peer_id(),
        kind: Kind::Tell,
        in_reply_to: None,
        thread: id,
        hop: 0,
        taint: false,
        sent_at,
        expires_at: sent_at.saturating_add(Duration::from_secs(3600)),
    };
    let mut body = Body {
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
    edit(&mut header, &mut body);
    agentmesh_protocol::seal(from, &to.x25519_public(), &header, &body, &mut rng)
        .unwrap()
        .to_wire()
}

fn plain(from: &Identity, to: &Identity, sent_at: Timestamp) -> Vec<u8> {
    letter(from, to, sent_at, |_, _| {})
}

fn batch(envelopes: &[&[u8]]) -> MailRequest {
    MailRequest {
        envelopes: envelopes
            .iter()
            .map(|e| ByteBuf::from(e.to_vec()))
            .collect(),
    }
}

fn member(peer: PeerId) -> Sender {
    Sender {
        peer,
        revoked: false,
        carrier: false,
    }
}

const T0: u64 = 1_800_000_000_000;

// ----- the inbox verdict ------------------------------------------------

/// The outcomes of one batch, received by a fresh inbox.
fn outcomes_of(from: Sender, envelopes: &[&[u8]], t: &Team, now: Now) -> Vec<MailOutcome> {
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    inbox
        .receive(from, &batch(envelopes), &mut consent, &mut ctx)
        .0
        .outcomes
}

fn code(o: &MailOutcome) -> &str {
    match o {
        MailOutcome::Refused { code, .. } => code,
        _ => panic!("not refused: {o:?}"),
    }
}

fn events_named(log: &AuditLog, event: &str) -> usize {
    entries(log, event).len()
}

// ----- the courier ------------------------------------------------------

/// A carrier that keeps what it is handed.
#[derive(Default)]
struct Collect(RefCell<Vec<Carry>>);

impl Carrier for Collect {
    fn carry(&self, carry: Carry) -> bool {
        self.0.borrow_mut().push(carry);
        true
    }
}

impl Collect {
    fn take(&self) -> Vec<Carry> {
        std::mem::take(&mut *self.0.borrow_mut())
    }
}

fn outbox_record(n: usize, to: PeerId, envelope_bytes: usize) -> OutboxRecord {
    OutboxRecord {
        id: format!("{n:032x}"),
        to_peer: to.to_string(),
        to: "@alpha".into(),
        kind: api::MessageKind::Tell,
        envelope: vec![7; envelope_bytes],
        status: OutboxStatus::Queued,
        reason: None,
        attempts: 0,
        created_at: T0 + n as u64,
        expires_at: T0 + 3_600_000,
        held: false,
        body_sha256: "ab".repeat(32),
        deferred_until: None,
        states: vec![],
        carrier: None,
        copy: None,
    }
}

/// A courier that has `n` messages of `bytes` each for alpha.
fn loaded(d: &Desk<SledStore>, to: PeerId, n: usize, bytes: usize) -> Courier {
    let records: Vec<OutboxRecord> = (0..n).map(|i| outbox_record(i, to, bytes)).collect();
    d.store.put_outbox(&records).unwrap();
    let mut courier = Courier::default();
    courier.load(records);
    courier
}

fn answer(carry: &Carry, outcomes: Vec<MailOutcome>) -> Delivered {
    Delivered {
        batch: carry.batch,
        via: Via::Mail,
        result: Ok(MailReply { outcomes }),
    }
}

fn accepted(n: usize) -> Vec<MailOutcome> {
    vec![MailOutcome::accepted(false); n]
}

// ----- the actor --------------------------------------------------------

fn setup(
    me: Identity,
    store: Arc<dyn Store>,
    dir: Directory,
    net: CarryHandle,
    link: MailLink,
) -> MailSetup {
    // The receiver keeps the last value after its sender is gone.
    let (_, directory) = watch::channel(Arc::new(dir));
    let (commit, _flusher) = GroupCommit::start(store.clone());
    MailSetup {
        me,
        store,
        directory,
        net,
        link,
        commit,
        lifetime: Duration::from_secs(3600),
        audit_retention: Duration::from_secs(90 * 24 * 3600),
        loops: LoopRules::default(),
        replies_per_ask: crate::config::DEFAULT_REPLIES_PER_ASK,
        preset: api::Preset::Balanced,
        judge: crate::judge::JudgeWith::Builtin,
        local_directory: watch::channel(Arc::new(crate::team::records::LocalDirectory::default()))
            .0,
        wake: crate::config::WakeRules::default(),
        home: std::path::PathBuf::from("/nonexistent/home"),
        carry: crate::config::CarryRules::default(),
        cancel: CancellationToken::new(),
    }
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
            via: Via::Mail,
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
