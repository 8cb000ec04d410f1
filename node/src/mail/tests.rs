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

mod carried;

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

#[test]
fn inbox_pages_go_on_past_a_bounded_scan_and_miss_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), 1 << 20).unwrap();
    // 12,345 messages, every 1,000th unread.
    let records: Vec<InboxRecord> = (1..=12_345)
        .map(|seq| record(seq, seq % 1000 == 0))
        .collect();
    store.put_inbox(&records, &[], &[]).unwrap();
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

// ----- fixtures ---------------------------------------------------------

const TEAM: TeamId = TeamId([3; 32]);

fn machine(name: &str, owner: &str, id: &Identity) -> Machine {
    Machine {
        name: name.into(),
        owner: owner.into(),
        x25519: id.x25519_public(),
        standing: Standing::Current,
        left: false,
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

#[test]
fn garbage_bytes_are_refused_as_undecodable() {
    let t = team();
    let now = at(T0, Instant::now());
    let o = outcomes_of(member(t.alpha.peer_id()), &[b"not an envelope"], &t, now);
    assert_eq!(code(&o[0]), "Malformed", "{o:?}");
}

#[test]
fn an_envelope_naming_another_sender_than_the_connection_is_refused() {
    let t = team();
    let now = at(T0, Instant::now());
    let e = plain(&t.alpha, &t.me, now.wall);
    // Carol's connection carries an envelope alpha signed.
    let o = outcomes_of(member(t.carol.peer_id()), &[&e], &t, now);
    assert_eq!(code(&o[0]), "sender_mismatch");
}

#[test]
fn a_revoked_sender_is_refused_by_what_the_network_said() {
    let t = team();
    let now = at(T0, Instant::now());
    let e = plain(&t.alpha, &t.me, now.wall);
    // The directory still lists alpha as current: the network's word
    // (checked once, against the team) decides.
    let revoked = Sender {
        peer: t.alpha.peer_id(),
        revoked: true,
        carrier: false,
    };
    let o = outcomes_of(revoked, &[&e], &t, now);
    assert_eq!(code(&o[0]), "revoked");
}

#[test]
fn mail_for_another_team_or_while_not_a_member_is_refused() {
    let mut t = team();
    let now = at(T0, Instant::now());
    let other = letter(&t.alpha, &t.me, now.wall, |h, _| h.team = TeamId([9; 32]));
    let o = outcomes_of(member(t.alpha.peer_id()), &[&other], &t, now);
    assert_eq!(code(&o[0]), "not_a_member");
    t.dir.member = false;
    let e = plain(&t.alpha, &t.me, now.wall);
    let o = outcomes_of(member(t.alpha.peer_id()), &[&e], &t, now);
    assert_eq!(code(&o[0]), "not_a_member");
}

#[test]
fn an_envelope_past_its_expiry_and_the_skew_is_refused() {
    let t = team();
    let sent = Timestamp::from_unix_millis(T0);
    let e = plain(&t.alpha, &t.me, sent);
    let expiry = Duration::from_secs(3600) + MAX_CLOCK_SKEW;
    // At the edge it still lands; a second later it is refused.
    let edge = at(T0 + expiry.as_millis() as u64, Instant::now());
    let o = outcomes_of(member(t.alpha.peer_id()), &[&e], &t, edge);
    assert_eq!(o[0], MailOutcome::accepted(false));
    let late = at(T0 + expiry.as_millis() as u64 + 1000, Instant::now());
    let o = outcomes_of(member(t.alpha.peer_id()), &[&e], &t, late);
    assert_eq!(code(&o[0]), "Expired");
}

#[test]
fn a_duplicate_is_answered_as_such_within_a_batch_and_across_batches() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let e = plain(&t.alpha, &t.me, now.wall);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let (first, events) = inbox.receive(
        member(t.alpha.peer_id()),
        &batch(&[&e, &e]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(
        first.outcomes,
        [MailOutcome::accepted(false), MailOutcome::Duplicate]
    );
    assert_eq!(events.len(), 1, "announced once");
    let (again, events) = inbox.receive(
        member(t.alpha.peer_id()),
        &batch(&[&e]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(again.outcomes, [MailOutcome::Duplicate]);
    assert!(events.is_empty());
    assert_eq!(d.store.inbox_after(0, 10).unwrap().len(), 1, "stored once");
    assert_eq!(events_named(&d.log, "received"), 1);
}

fn events_named(log: &AuditLog, event: &str) -> usize {
    entries(log, event).len()
}

#[test]
fn an_id_another_sender_used_is_refused() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let id = MessageId::random(&mut rand::rng());
    let from_carol = letter(&t.carol, &t.me, now.wall, |h, _| h.id = id);
    let from_alpha = letter(&t.alpha, &t.me, now.wall, |h, _| h.id = id);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let (r, _) = inbox.receive(
        member(t.carol.peer_id()),
        &batch(&[&from_carol]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    let (r, _) = inbox.receive(
        member(t.alpha.peer_id()),
        &batch(&[&from_alpha]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(code(&r.outcomes[0]), "id_taken");
}

#[test]
fn accepted_mail_is_stored_audited_and_announced_and_other_owners_mail_held() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 41);
    let mut consent = Consent::default();
    let a = plain(&t.alpha, &t.me, now.wall);
    let c = plain(&t.carol, &t.me, now.wall);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let (r, ev) = inbox.receive(
        member(t.alpha.peer_id()),
        &batch(&[&a]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(false)]);
    assert!(matches!(&ev[..], [Event::Message { message }] if message.seq == 42));
    let (r, ev) = inbox.receive(
        member(t.carol.peer_id()),
        &batch(&[&c]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    assert!(
        matches!(&ev[..], [Event::Held { message }] if message.held == Some(HeldReason::OtherOwner))
    );
    assert_eq!(consent.held_total(), 1);
    assert_eq!(events(&d.log), ["received", "held"]);
    let held = &entries(&d.log, "held")[0];
    assert_eq!(held.detail, "held: other_owner");
    assert_eq!(held.sender.as_deref(), Some("@carol"));
    assert_eq!(held.recipient.as_deref(), Some("@bravo"));
    let stored = d.store.inbox_after(0, 10).unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1].from_owner.as_deref(), Some("Bob"));
}

/// The verdict comes first: when the write fails nothing is audited as
/// received, nothing is counted as held, nothing announced, and what was
/// refused in the same batch is audited all the same.
#[test]
fn a_failed_write_audits_only_the_refusals() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = flaky_desk();
    d.store.fail_put_inbox(true);
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let c = plain(&t.carol, &t.me, now.wall);
    let mismatch = plain(&t.alpha, &t.me, now.wall);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let (r, ev) = inbox.receive(
        member(t.carol.peer_id()),
        &batch(&[&c, &mismatch]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes[0], MailOutcome::Busy);
    assert_eq!(code(&r.outcomes[1]), "sender_mismatch");
    assert!(ev.is_empty());
    assert_eq!(consent.held_total(), 0);
    assert_eq!(events(&d.log), ["refused"]);
    // The retry lands, and is counted and audited once.
    d.store.fail_put_inbox(false);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let (r, ev) = inbox.receive(
        member(t.carol.peer_id()),
        &batch(&[&c]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    assert_eq!(ev.len(), 1);
    assert_eq!(consent.held_total(), 1);
    assert_eq!(events(&d.log), ["refused", "held"]);
}

// ----- consent ----------------------------------------------------------

#[test]
fn consent_holds_paused_and_other_owners_mail_and_not_unknown_senders() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut consent = Consent::default();
    let stranger = Identity::generate(&mut rand::rng()).peer_id();
    let (alpha, carol) = (t.alpha.peer_id(), t.carol.peer_id());
    assert_eq!(consent.decide(alpha, None, &t.dir), Decision::Deliver);
    assert_eq!(
        consent.decide(carol, None, &t.dir),
        Decision::Hold(HeldReason::OtherOwner)
    );
    // A sender the directory does not know is not another owner's.
    assert_eq!(consent.decide(stranger, None, &t.dir), Decision::Deliver);
    assert_eq!(
        consent.decide(alpha, Some("docs"), &t.dir),
        Decision::NoMailbox("docs".into())
    );
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    consent.trust(&ada(), "carol", &mut ctx).unwrap();
    assert_eq!(consent.decide(carol, None, &t.dir), Decision::Deliver);
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().display().to_string();
    consent
        .allow(&ada(), &path, Some("docs"), true, &mut ctx)
        .unwrap();
    assert_eq!(
        consent.decide(alpha, Some("docs"), &t.dir),
        Decision::Deliver
    );
    consent
        .allow(&ada(), "", Some("docs"), false, &mut ctx)
        .unwrap();
    assert_eq!(
        consent.decide(alpha, Some("docs"), &t.dir),
        Decision::FolderDenied("docs".into())
    );
    consent.pause(&ada(), &mut ctx).unwrap();
    // A pause holds everything, trusted or not.
    assert_eq!(
        consent.decide(carol, None, &t.dir),
        Decision::Hold(HeldReason::Paused)
    );
    assert_eq!(
        consent.decide(stranger, None, &t.dir),
        Decision::Hold(HeldReason::Paused)
    );
    assert_eq!(events(&d.log), ["trust", "allow", "deny", "pause"]);
    // What is decided is kept.
    let loaded = Consent::load(d.store.as_ref()).unwrap();
    assert!(loaded.paused());
    assert_eq!(
        loaded.decide(alpha, Some("docs"), &t.dir),
        Decision::FolderDenied("docs".into())
    );
}

#[test]
fn the_held_cap_refuses_an_unvetted_sender_and_makes_a_paused_one_wait() {
    let t = team();
    let consent = Consent::default();
    let carol = t.carol.peer_id();
    let room = |why, also| consent.room_to_hold(carol, why, also);
    assert!(room(HeldReason::OtherOwner, MAX_HELD_PER_SENDER - 1).is_ok());
    assert_eq!(
        room(HeldReason::OtherOwner, MAX_HELD_PER_SENDER),
        Err(consent::NoRoom::Full)
    );
    assert_eq!(
        room(HeldReason::Paused, MAX_HELD_PER_SENDER),
        Err(consent::NoRoom::Wait)
    );
}

/// Resume lets pass what a pause held that answers our own ask (as it
/// would have without the pause), and keeps held, as `sender_revoked`, the
/// mail of a machine revoked since.
#[test]
fn resume_lets_answers_pass_and_keeps_a_revoked_senders_mail_held() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let asked = MessageId::random(&mut rand::rng());
    // This machine asked carol (Bob's) something, from its owner mailbox.
    inbox.answers().asked(crate::store::AskRecord {
        id: asked.to_string(),
        to_peer: t.carol.peer_id().to_string(),
        mailbox: None,
        expires_at: T0 + 3_600_000,
        answers: 0,
    });
    d.store.put_asks(&inbox.answers().take_writes()).unwrap();
    let answer = letter(&t.carol, &t.me, now.wall, |h, _| {
        h.kind = Kind::Reply;
        h.in_reply_to = Some(asked);
        h.thread = asked;
    });
    let unasked = plain(&t.carol, &t.me, now.wall);
    let from_alpha = plain(&t.alpha, &t.me, now.wall);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    consent.pause(&ada(), &mut ctx).unwrap();
    let carol = member(t.carol.peer_id());
    let (r, _) = inbox.receive(carol, &batch(&[&answer, &unasked]), &mut consent, &mut ctx);
    assert_eq!(r.outcomes, vec![MailOutcome::accepted(true); 2]);
    let alpha = member(t.alpha.peer_id());
    let (r, _) = inbox.receive(alpha, &batch(&[&from_alpha]), &mut consent, &mut ctx);
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    // Alpha leaves meanwhile.
    let mut dir = t.dir.clone();
    if let Some(m) = dir.machines.get_mut(&t.alpha.peer_id()) {
        m.standing = Standing::Revoked;
        m.left = true;
    }
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &dir,
        log: &mut d.log,
        now,
    };
    let (value, _) = consent
        .resume(&ada(), inbox.seqs_and_answers(), &mut ctx)
        .unwrap();
    assert_eq!(value.released, Some(1), "{value:?}");
    let mut held: Vec<(String, Option<String>)> = consent::held_records(d.store.as_ref())
        .unwrap()
        .into_iter()
        .map(|r| (r.from, r.held.map(|h| h.as_str().to_owned())))
        .collect();
    held.sort();
    assert_eq!(
        held,
        [
            ("@alpha".to_owned(), Some("sender_revoked".to_owned())),
            ("@carol".to_owned(), Some("other_owner".to_owned())),
        ]
    );
    // The answer was counted.
    assert_eq!(d.store.ask(&asked.to_string()).unwrap().unwrap().answers, 1);
}

/// Resume decides again, by the rule receiving uses, what pause held:
/// alpha's mail (same owner) and an unknown sender's are released; mail
/// to a mailbox denied meanwhile stays held as folder_not_allowed.
/// Carol's (another owner's) was held as other_owner when it came, pause
/// or not, so resume has nothing to decide about it: its hold is audited
/// once.
#[test]
fn resume_releases_only_what_the_consent_rule_delivers() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().display().to_string();
    let newcomer = Identity::generate(&mut rand::rng());
    let a = plain(&t.alpha, &t.me, now.wall);
    let to_docs = letter(&t.alpha, &t.me, now.wall, |_, b| {
        b.to_mailbox = Some(Name::parse("mailbox", "docs").unwrap());
    });
    let c = plain(&t.carol, &t.me, now.wall);
    let n = plain(&newcomer, &t.me, now.wall);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    consent
        .allow(&ada(), &path, Some("docs"), true, &mut ctx)
        .unwrap();
    consent.pause(&ada(), &mut ctx).unwrap();
    let alpha = member(t.alpha.peer_id());
    let (r, _) = inbox.receive(alpha, &batch(&[&a, &to_docs]), &mut consent, &mut ctx);
    assert_eq!(r.outcomes, vec![MailOutcome::accepted(true); 2]);
    let (r, _) = inbox.receive(
        member(t.carol.peer_id()),
        &batch(&[&c]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    let (r, _) = inbox.receive(
        member(newcomer.peer_id()),
        &batch(&[&n]),
        &mut consent,
        &mut ctx,
    );
    assert_eq!(r.outcomes, [MailOutcome::accepted(true)]);
    assert_eq!(consent.held_total(), 4);
    consent
        .allow(&ada(), "", Some("docs"), false, &mut ctx)
        .unwrap();

    let (value, events) = consent
        .resume(&ada(), inbox.seqs_and_answers(), &mut ctx)
        .unwrap();
    assert_eq!(value.released, Some(2), "{value:?}");
    assert_eq!(value.still_held, Some(1), "{value:?}");
    assert!(!consent.paused());
    assert_eq!(consent.held_total(), 2);
    let mut held: Vec<(String, Option<String>)> = consent::held_records(d.store.as_ref())
        .unwrap()
        .into_iter()
        .map(|r| (r.from, r.held.map(|h| h.as_str().to_owned())))
        .collect();
    held.sort();
    assert_eq!(
        held,
        [
            ("@alpha".to_owned(), Some("folder_not_allowed".to_owned())),
            ("@carol".to_owned(), Some("other_owner".to_owned())),
        ]
    );
    let delivered: Vec<u64> = d
        .store
        .inbox_after(0, 10)
        .unwrap()
        .iter()
        .filter(|r| r.held.is_none())
        .map(|r| r.seq)
        .collect();
    assert_eq!(delivered, [5, 6], "released mail takes new seqs at the end");
    let released = entries(&d.log, "released");
    assert_eq!(released.len(), 2);
    assert_eq!(
        released[0].detail,
        "held by pause, delivered to the inbox by resume (by human ada)"
    );
    let kept: Vec<&str> = entries(&d.log, "held")
        .iter()
        .map(|e| e.detail.as_str())
        .filter(|d| d.ends_with("resume left it held)"))
        .collect();
    assert_eq!(kept.len(), 1);
    let carol_held: Vec<&str> = entries(&d.log, "held")
        .iter()
        .filter(|e| e.sender.as_deref() == Some("@carol"))
        .map(|e| e.detail.as_str())
        .collect();
    assert_eq!(carol_held, ["held: other_owner"], "one decision, one entry");
    assert_eq!(
        entries(&d.log, "resume")[0].detail,
        "inbound mail is delivered again; 2 held messages released, 1 still held (by human ada)"
    );
    let announced: Vec<&str> = events
        .iter()
        .map(|e| match e {
            Event::Message { .. } => "message",
            Event::Held { .. } => "held",
            Event::Resolved { outcome, .. } if *outcome == HeldOutcome::Approved => "approved",
            _ => "other",
        })
        .collect();
    assert_eq!(announced.iter().filter(|e| **e == "message").count(), 2);
    assert_eq!(announced.iter().filter(|e| **e == "approved").count(), 2);
    assert_eq!(announced.iter().filter(|e| **e == "held").count(), 1);
}

#[test]
fn approve_releases_and_reject_deletes_and_each_decides_once() {
    let t = team();
    let now = at(T0, Instant::now());
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let (c1, c2) = (
        plain(&t.carol, &t.me, now.wall),
        plain(&t.carol, &t.me, now.wall),
    );
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now,
    };
    let carol = member(t.carol.peer_id());
    inbox.receive(carol, &batch(&[&c1, &c2]), &mut consent, &mut ctx);
    let ids: Vec<String> = ctx
        .store
        .inbox_after(0, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(consent.held_total(), 2);

    let (v, ev) = ops::resolve(
        &ada(),
        &ids[0],
        ops::Decision::Approve,
        &mut consent,
        inbox.seqs(),
        &mut ctx,
    )
    .unwrap();
    assert_eq!(v.outcome, api::Resolution::Approved);
    assert!(
        matches!(&ev[..], [Event::Message { message }, Event::Resolved { outcome, .. }]
        if message.seq == 3 && message.held.is_none() && *outcome == HeldOutcome::Approved)
    );
    let reason = ops::Decision::Reject("  not now  ".into());
    let (v, ev) = ops::resolve(
        &ada(),
        &ids[1],
        reason,
        &mut consent,
        inbox.seqs(),
        &mut ctx,
    )
    .unwrap();
    assert_eq!(v.outcome, api::Resolution::Rejected);
    assert!(
        matches!(&ev[..], [Event::Resolved { outcome, .. }] if *outcome == HeldOutcome::Rejected)
    );
    assert_eq!(consent.held_total(), 0);
    assert!(ctx.store.inbox_get(&ids[1]).unwrap().is_none());

    let again = ops::resolve(
        &ada(),
        &ids[0],
        ops::Decision::Approve,
        &mut consent,
        inbox.seqs(),
        &mut ctx,
    );
    assert_eq!(again.unwrap_err().code.as_str(), "not_held");
    let again = ops::resolve(
        &ada(),
        &ids[1],
        ops::Decision::Approve,
        &mut consent,
        inbox.seqs(),
        &mut ctx,
    );
    assert_eq!(again.unwrap_err().code.as_str(), "unknown_message");
    assert_eq!(
        entries(&d.log, "approved")[0].detail,
        "held message approved by human ada"
    );
    assert_eq!(
        entries(&d.log, "rejected")[0].detail,
        "held message rejected by human ada: not now"
    );
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

#[test]
fn batches_respect_the_in_flight_cap_and_the_batch_limits() {
    let t = team();
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    let net = Collect::default();
    let t0 = Instant::now();
    let mut courier = loaded(&d, alpha, 600, 10);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    courier.retry_due(&net, &mut ctx);
    let first = net.take();
    assert_eq!(first.len(), MAX_IN_FLIGHT);
    assert!(
        first
            .iter()
            .all(|c| c.request.envelopes.len() == MAX_BATCH_ENVELOPES)
    );
    // Nothing more while both are on their way.
    courier.retry_due(&net, &mut ctx);
    assert!(net.take().is_empty());
    // One answered: the rest goes.
    courier.delivered(
        answer(&first[0], accepted(MAX_BATCH_ENVELOPES)),
        &net,
        &mut ctx,
    );
    let next = net.take();
    assert_eq!(next.len(), 1);
    assert_eq!(
        next[0].request.envelopes.len(),
        600 - 2 * MAX_BATCH_ENVELOPES
    );
    assert_eq!(courier.waiting(), 600 - MAX_BATCH_ENVELOPES);

    // Large envelopes: a batch stops before it outgrows the byte limit.
    let mut d = desk();
    let mut courier = loaded(&d, alpha, 30, 100_000);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    courier.retry_due(&net, &mut ctx);
    let batches = net.take();
    assert_eq!(batches.len(), MAX_IN_FLIGHT);
    for b in &batches {
        let bytes: usize = b.request.envelopes.iter().map(|e| e.len()).sum();
        assert!(bytes <= MAX_BATCH_BYTES, "{bytes}");
        assert_eq!(b.request.envelopes.len(), MAX_BATCH_BYTES / 100_000);
    }

    // Reached only through a relay: one batch at a time, small enough for
    // a circuit (one 60 KB envelope a batch; a larger one alone).
    let mut d = desk();
    let mut courier = loaded(&d, alpha, 5, 60_000);
    courier.route(alpha, true);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    courier.retry_due(&net, &mut ctx);
    let batches = net.take();
    assert_eq!(batches.len(), 1, "one at a time through a relay");
    let bytes: usize = batches[0].request.envelopes.iter().map(|e| e.len()).sum();
    assert!(bytes <= crate::wire::MAX_RELAYED_BATCH_BYTES, "{bytes}");
    assert_eq!(batches[0].request.envelopes.len(), 1);
    // A direct connection again: the usual batches.
    courier.route(alpha, false);
    let mut d2 = desk();
    let mut direct = loaded(&d2, alpha, 5, 60_000);
    direct.route(alpha, false);
    let mut ctx = Ctx {
        store: d2.store.as_ref(),
        dir: &t.dir,
        log: &mut d2.log,
        now: at(T0, t0),
    };
    direct.retry_due(&net, &mut ctx);
    let batches = net.take();
    assert_eq!(batches.len(), 1, "all five fit one batch");
    assert_eq!(batches[0].request.envelopes.len(), 5);
}

#[test]
fn backoff_doubles_from_one_second_to_five_minutes() {
    let waits: Vec<u64> = (0..12).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
    assert_eq!(backoff(u32::MAX), BACKOFF_MAX);

    let t0 = Instant::now();
    let mut q = PeerQueue::default();
    let mut now = t0;
    for expected in [1, 2, 4, 8] {
        let wait = q.answered(&[], true, now).unwrap();
        assert_eq!(wait.as_secs(), expected);
        assert!(!q.open(now + wait - Duration::from_millis(1)));
        assert!(q.open(now + wait));
        now += wait;
    }
    // An answer that got through ends the backoff.
    assert_eq!(q.answered(&[], false, now), None);
    assert_eq!(q.answered(&[], true, now), Some(Duration::from_secs(1)));
    // So does a connection.
    q.answered(&[], true, now);
    q.connected();
    assert!(q.open(now));
    assert_eq!(q.answered(&[], true, now), Some(Duration::from_secs(1)));
}

#[test]
fn a_transport_error_backs_off_and_a_connection_retries_at_once() {
    let t = team();
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    let net = Collect::default();
    let t0 = Instant::now();
    let mut courier = loaded(&d, alpha, 1, 10);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    courier.retry_due(&net, &mut ctx);
    let mut carry = net.take().pop().unwrap();
    let mut now = t0;
    for wait in [1, 2, 4] {
        let lost = Delivered {
            batch: carry.batch,
            via: Via::Mail,
            result: Err(Undelivered {
                reached: true,
                why: "the connection closed".into(),
            }),
        };
        courier.delivered(lost, &net, &mut ctx);
        assert!(net.take().is_empty(), "not before the backoff");
        ctx.now = at(
            T0,
            now + Duration::from_secs(wait) - Duration::from_millis(1),
        );
        courier.retry_due(&net, &mut ctx);
        assert!(net.take().is_empty(), "not before {wait} s");
        now += Duration::from_secs(wait);
        ctx.now = at(T0, now);
        courier.retry_due(&net, &mut ctx);
        carry = net.take().pop().expect("retried after the backoff");
    }
    let lost = Delivered {
        batch: carry.batch,
        via: Via::Mail,
        result: Err(Undelivered::never_left("no route")),
    };
    courier.delivered(lost, &net, &mut ctx);
    assert!(courier.offline(&alpha));
    assert!(net.take().is_empty());
    let r = courier.undelivered().next().unwrap();
    assert_eq!(
        r.status,
        OutboxStatus::Sent,
        "an earlier attempt reached it"
    );
    assert_eq!(
        r.reason.as_deref(),
        Some("last attempt: alpha is offline: no connection could be made (no route)")
    );
    assert_eq!(r.attempts, 4);
    // A connection: at once, whatever the backoff said.
    courier.connected(alpha, &net, &mut ctx);
    assert!(!courier.offline(&alpha));
    assert_eq!(net.take().len(), 1);
    assert_eq!(events(&d.log), ["sent"], "sent is audited once");
}

#[test]
fn a_busy_answer_keeps_the_message_and_retries_it() {
    let t = team();
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    let net = Collect::default();
    let t0 = Instant::now();
    let mut courier = loaded(&d, alpha, 2, 10);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    courier.retry_due(&net, &mut ctx);
    let carry = net.take().pop().unwrap();
    let outcomes = vec![MailOutcome::accepted(false), MailOutcome::Busy];
    courier.delivered(answer(&carry, outcomes), &net, &mut ctx);
    assert_eq!(courier.waiting(), 1);
    let r = courier.undelivered().next().unwrap();
    assert_eq!(
        r.reason.as_deref(),
        Some("last attempt: the recipient is busy")
    );
    assert!(net.take().is_empty(), "a busy recipient gets a pause");
    ctx.now = at(T0, t0 + Duration::from_secs(1));
    courier.retry_due(&net, &mut ctx);
    let retry = net.take();
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].request.envelopes.len(), 1, "only what was busy");
}

#[test]
fn outcomes_map_to_delivered_and_failed() {
    let t = team();
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    let net = Collect::default();
    let mut courier = loaded(&d, alpha, 4, 10);
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, Instant::now()),
    };
    courier.retry_due(&net, &mut ctx);
    let carry = net.take().pop().unwrap();
    let outcomes = vec![
        MailOutcome::accepted(false),
        MailOutcome::accepted(true),
        MailOutcome::Duplicate,
        MailOutcome::Refused {
            code: "no_mailbox".into(),
            reason: "no mailbox docs".into(),
        },
    ];
    courier.delivered(answer(&carry, outcomes), &net, &mut ctx);
    assert_eq!(courier.waiting(), 0);
    let (writes, settle) = courier.take_writes();
    assert_eq!(settle.len(), 4, "listed until the store has them");
    assert_eq!(courier.listed().count(), 4);
    courier.settled(&settle);
    assert_eq!(courier.listed().count(), 0);
    let written: HashMap<String, OutboxRecord> =
        writes.into_iter().map(|r| (r.id.clone(), r)).collect();
    let of = |n: usize| &written[&format!("{n:032x}")];
    assert_eq!(of(0).status, OutboxStatus::Delivered);
    assert!(!of(0).held);
    assert!(of(1).held);
    assert_eq!(of(2).status, OutboxStatus::Delivered);
    assert_eq!(of(3).status, OutboxStatus::Failed);
    assert_eq!(
        of(3).reason.as_deref(),
        Some("alpha refused it (no_mailbox): no mailbox docs")
    );
    assert!(written.values().all(|r| r.envelope.is_empty()));
    assert_eq!(
        events(&d.log),
        [
            "sent",
            "sent",
            "sent",
            "sent",
            "delivered",
            "delivered",
            "delivered",
            "failed"
        ]
    );
    assert_eq!(
        entries(&d.log, "delivered")[1].detail,
        "delivered; held for its owner's approval"
    );
}

#[test]
fn mail_past_its_lifetime_fails_as_expired_instead_of_going_late() {
    let t = team();
    let mut d = desk();
    let net = Collect::default();
    let mut courier = loaded(&d, t.alpha.peer_id(), 1, 10);
    let late = T0 + 3_600_000 + MAX_CLOCK_SKEW.as_millis() as u64 + 1;
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(late, Instant::now()),
    };
    courier.retry_due(&net, &mut ctx);
    assert!(net.take().is_empty());
    assert_eq!(courier.waiting(), 0);
    let (failed, _) = courier.take_writes();
    assert_eq!(
        failed[0].reason.as_deref(),
        Some("expired before the recipient could be reached")
    );
    assert_eq!(events(&d.log), ["expired"]);
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

#[tokio::test]
async fn a_store_that_fails_answers_busy_and_audits_nothing_it_did_not_keep() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Flaky::new(SledStore::open(dir.path(), 1 << 20).unwrap()));
    store.fail_put_inbox(true);
    let t = team();
    let (net, link, mut ends) = Handle::for_tests();
    let setup = setup(t.me.clone(), store.clone(), t.dir.clone(), net, link);
    let (_mail, task) = Mail::start(setup).unwrap();
    let _task = tokio::spawn(task);
    let envelope = plain(&t.alpha, &t.me, now());
    let received = |store: &Flaky| {
        store
            .audit_since(Timestamp::from_unix_millis(0), 100)
            .unwrap()
            .iter()
            .filter(|e| e.event == "received")
            .count()
    };
    let alpha = t.alpha.peer_id();

    // The inbox write fails: busy, nothing stored, nothing audited.
    let outcome = deliver(&ends.events, &mut ends.answers, alpha, &envelope).await;
    assert_eq!(outcome, MailOutcome::Busy);
    assert_eq!(received(&store), 0);
    assert!(store.inbox_after(0, 10).unwrap().is_empty());

    // The retry lands once, and is audited once.
    store.fail_put_inbox(false);
    let outcome = deliver(&ends.events, &mut ends.answers, alpha, &envelope).await;
    assert_eq!(outcome, MailOutcome::accepted(false));
    assert_eq!(received(&store), 1);

    // A dedup lookup that fails is not "new": busy, not stored again.
    store.fail_seen(true);
    let outcome = deliver(&ends.events, &mut ends.answers, alpha, &envelope).await;
    assert_eq!(outcome, MailOutcome::Busy);
    assert_eq!(store.inbox_after(0, 10).unwrap().len(), 1);

    // And once it answers again, a duplicate.
    store.fail_seen(false);
    let outcome = deliver(&ends.events, &mut ends.answers, alpha, &envelope).await;
    assert_eq!(outcome, MailOutcome::Duplicate);
    assert_eq!(received(&store), 1);
}

/// A send is carried by the node as a batch, with no task of its own;
/// the batch's answer, which comes back on the link, delivers it.
#[tokio::test]
async fn a_send_is_carried_and_its_answer_delivers_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
    let t = team();
    let (net, link, mut ends) = Handle::for_tests();
    let setup = setup(t.me.clone(), store, t.dir.clone(), net, link);
    let (mail, task) = Mail::start(setup).unwrap();
    let _task = tokio::spawn(task);
    let send = api::ops::Send {
        to: "@alpha".into(),
        text: "hello".into(),
        ask: false,
        reply_to: None,
        from_mailbox: None,
        wait_first_answer_ms: None,
    };
    let id = mail.call(ada(), None, send).await.unwrap().id;
    let carried = ends.carried.recv().await.unwrap();
    assert_eq!(carried.peer, t.alpha.peer_id());
    assert_eq!(carried.request.envelopes.len(), 1);
    let status = |v: &[api::OutboxView]| v[0].status;
    let outbox = mail.call(ada(), None, api::ops::Outbox).await.unwrap();
    assert_eq!(status(&outbox).as_str(), "queued", "no answer yet");
    ends.delivered
        .send(Delivered {
            batch: carried.batch,
            via: Via::Mail,
            result: Ok(MailReply {
                outcomes: vec![MailOutcome::accepted(false)],
            }),
        })
        .unwrap();
    // Delivered once the answer is handled; polled, it is a queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let outbox = mail.call(ada(), None, api::ops::Outbox).await.unwrap();
        if status(&outbox).as_str() == "delivered" {
            assert_eq!(outbox[0].id, id);
            break;
        }
        assert!(Instant::now() < deadline, "not delivered: {outbox:?}");
        tokio::task::yield_now().await;
    }
    assert!(ends.carried.try_recv().is_err(), "carried once");
}

/// Retention forgets audit entries past the audit retention and unused
/// tickets past their expiry, beside mail: the one owner of all of it.
#[test]
fn retention_prunes_the_audit_log_and_tickets_too() {
    let t = team();
    let mut d = desk();
    let day = 24 * 3600 * 1000;
    let old = AuditEntry {
        at: T0 - 91 * day,
        event: "accepted".into(),
        ..AuditEntry::default()
    };
    let recent = AuditEntry {
        at: T0 - day,
        event: "accepted".into(),
        ..AuditEntry::default()
    };
    d.store.audit_many(&[old, recent]).unwrap();
    use crate::store::TeamStore;
    d.store
        .put_ticket(&[1; 16], Timestamp::from_unix_millis(T0 - 1))
        .unwrap();
    d.store
        .put_ticket(&[2; 16], Timestamp::from_unix_millis(T0 + day))
        .unwrap();
    let t0 = Instant::now();
    let mut retention = retention::Retention::new(Duration::from_secs(90 * 24 * 3600), t0);
    assert!(
        !retention.due(t0),
        "the first sweep is one period after start"
    );
    assert!(retention.due(t0 + Duration::from_secs(600)));
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, t0),
    };
    retention.run(&mut Courier::default(), &mut Consent::default(), &mut ctx);
    let left = d
        .store
        .audit_since(Timestamp::from_unix_millis(0), 10)
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].at, T0 - day);
    assert!(d.store.ticket(&[1; 16]).unwrap().is_none());
    assert!(d.store.ticket(&[2; 16]).unwrap().is_some());
    assert!(!retention.due(t0 + Duration::from_secs(599)));
    assert!(retention.due(t0 + Duration::from_secs(600)));
}

// ----- broadcasts -------------------------------------------------------

#[test]
fn a_broadcast_that_names_a_mailbox_or_answers_a_message_is_refused() {
    let t = team();
    let now = at(T0 + 1000, Instant::now());
    let sent = Timestamp::from_unix_millis(T0);
    let to_one = letter(&t.alpha, &t.me, sent, |h, b| {
        h.kind = Kind::Broadcast;
        b.to_mailbox = Some(Name::parse("mailbox", "pipeline").unwrap());
    });
    let a_reply = letter(&t.alpha, &t.me, sent, |h, _| {
        h.kind = Kind::Broadcast;
        h.in_reply_to = Some(MessageId([9; 16]));
    });
    let fine = letter(&t.alpha, &t.me, sent, |h, _| h.kind = Kind::Broadcast);
    let out = outcomes_of(
        member(t.alpha.peer_id()),
        &[&to_one, &a_reply, &fine],
        &t,
        now,
    );
    assert_eq!(code(&out[0]), "bad_broadcast");
    assert_eq!(code(&out[1]), "bad_broadcast");
    assert_eq!(out[2], MailOutcome::accepted(false));
}

#[test]
fn broadcasts_past_the_waiting_bound_are_answered_busy_and_stored_ones_are_not_inbox_mail() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let mut consent = Consent::default();
    let sent = Timestamp::from_unix_millis(T0);
    let three: Vec<Vec<u8>> = (0..3)
        .map(|_| letter(&t.alpha, &t.me, sent, |h, _| h.kind = Kind::Broadcast))
        .collect();
    let refs: Vec<&[u8]> = three.iter().map(Vec::as_slice).collect();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 1000, Instant::now()),
    };
    // Room for two more.
    let (reply, events, brought) = inbox.receive_all(
        member(t.alpha.peer_id()),
        &batch(&refs),
        &mut consent,
        inbox::Room {
            broadcasts: 2,
            per_sender: &|_| MAX_WAITING_PER_SENDER,
            deferred: &|_| None,
        },
        &mut ctx,
    );
    assert_eq!(
        reply.outcomes,
        [
            MailOutcome::accepted(false),
            MailOutcome::accepted(false),
            MailOutcome::Busy
        ]
    );
    // Stored to be judged: not in the inbox, announced to no client.
    assert!(events.is_empty());
    assert_eq!(brought.broadcasts.len(), 2);
    assert_eq!(d.store.broadcasts().unwrap().len(), 2);
    assert_eq!(d.store.last_inbox_seq().unwrap(), 0);
    // The busy one comes again and is taken; the others are duplicates.
    let (reply, _, _) = inbox.receive_all(
        member(t.alpha.peer_id()),
        &batch(&refs),
        &mut consent,
        inbox::Room {
            broadcasts: 2,
            per_sender: &|_| MAX_WAITING_PER_SENDER,
            deferred: &|_| None,
        },
        &mut ctx,
    );
    assert_eq!(
        reply.outcomes,
        [
            MailOutcome::Duplicate,
            MailOutcome::Duplicate,
            MailOutcome::accepted(false)
        ]
    );
    // Room for many, but alpha may add one more of its own: its others
    // are busy (one member can't fill everyone's queue).
    let more: Vec<Vec<u8>> = (0..3)
        .map(|_| letter(&t.alpha, &t.me, sent, |h, _| h.kind = Kind::Broadcast))
        .collect();
    let refs: Vec<&[u8]> = more.iter().map(Vec::as_slice).collect();
    let alpha = t.alpha.peer_id().to_string();
    let one_for_alpha = |sender: &str| usize::from(sender == alpha);
    let (reply, _, brought) = inbox.receive_all(
        member(t.alpha.peer_id()),
        &batch(&refs),
        &mut consent,
        inbox::Room {
            broadcasts: 100,
            per_sender: &one_for_alpha,
            deferred: &|_| None,
        },
        &mut ctx,
    );
    assert_eq!(
        reply.outcomes,
        [
            MailOutcome::accepted(false),
            MailOutcome::Busy,
            MailOutcome::Busy
        ]
    );
    assert_eq!(brought.broadcasts.len(), 1);
}

#[test]
fn counts_are_kept_only_from_the_machine_the_copy_went_to() {
    let t = team();
    let mut d = desk();
    let id = "0123456789abcdef0123456789abcdef";
    let expected = crate::store::CountsRecord {
        to_peer: t.alpha.peer_id().to_string(),
        created_at: T0,
        reported: None,
    };
    d.store.put_counts(id, &expected).unwrap();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 1000, Instant::now()),
    };
    let counts = |delivered| agentmesh_protocol::envelope::Counts {
        delivered,
        dropped: 1,
    };
    // Carol claims counts for a copy that went to alpha: ignored.
    bus::on_counts(t.carol.peer_id(), id, counts(7), &mut ctx);
    assert_eq!(d.store.counts(id).unwrap().unwrap().reported, None);
    // Alpha's are kept, the first only.
    bus::on_counts(t.alpha.peer_id(), id, counts(2), &mut ctx);
    bus::on_counts(t.alpha.peer_id(), id, counts(9), &mut ctx);
    let r = d.store.counts(id).unwrap().unwrap().reported.unwrap();
    assert_eq!((r.delivered, r.dropped), (2, 1));
    // Counts for a copy never sent: nothing.
    bus::on_counts(t.alpha.peer_id(), "ffff", counts(1), &mut ctx);
    assert_eq!(d.store.counts("ffff").unwrap(), None);
}
