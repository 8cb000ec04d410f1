//! What arrives: the verdict's checks, the inbox's write and its pages, a store that fails.

use super::*;

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

#[test]
fn the_inbox_record_is_the_dedup_record_until_the_inbox_forgets_it() {
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
    let from = member(t.alpha.peer_id());
    let (first, _) = inbox.receive(from, &batch(&[&e]), &mut consent, &mut ctx);
    assert_eq!(first.outcomes, [MailOutcome::accepted(false)]);
    let stored = ctx.store.inbox_after(0, 10).unwrap();
    let (key, until) = stored[0].dedup_after(now.wall).expect("its window is open");
    // Accepting it wrote no dedup record: the inbox refuses it again.
    assert!(
        !ctx.store.seen(&key).unwrap(),
        "no dedup record while in the inbox"
    );
    let (again, _) = inbox.receive(from, &batch(&[&e]), &mut consent, &mut ctx);
    assert_eq!(again.outcomes, [MailOutcome::Duplicate]);
    // Forgotten within its window (rejected, or read and expired): its
    // dedup record is left behind, and it is still a duplicate.
    ctx.store.delete_inbox(&[stored[0].seq], now.wall).unwrap();
    assert!(ctx.store.seen(&key).unwrap(), "the dedup record is written");
    let (later, events) = inbox.receive(from, &batch(&[&e]), &mut consent, &mut ctx);
    assert_eq!(later.outcomes, [MailOutcome::Duplicate]);
    assert!(events.is_empty());
    assert!(
        ctx.store.inbox_after(0, 10).unwrap().is_empty(),
        "not stored again"
    );
    // Once the window is over, the record goes with the others.
    let after = Timestamp::from_unix_millis(until + 1);
    assert_eq!(ctx.store.prune_seen(after).unwrap(), 1);
    assert!(!ctx.store.seen(&key).unwrap());
}

#[test]
fn a_message_forgotten_after_its_window_leaves_no_dedup_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), 1 << 20).unwrap();
    let t = team();
    let mut r = record(1, true);
    r.from_peer = t.alpha.peer_id().to_string();
    r.id = format!("{:032x}", 7);
    r.expires_at = 1_000;
    store.put_inbox(&[r.clone()], &[]).unwrap();
    let (key, until) = r.dedup_after(Timestamp::from_unix_millis(0)).unwrap();
    // At the window's last millisecond an envelope is still taken: its
    // record is kept.
    store
        .delete_inbox(&[1], Timestamp::from_unix_millis(until))
        .unwrap();
    assert!(store.seen(&key).unwrap());
    // Past its window (and the skew allowed): an envelope that old is
    // refused as expired, so nothing is kept.
    let mut again = r.clone();
    again.seq = 2;
    again.id = format!("{:032x}", 8);
    store.put_inbox(&[again.clone()], &[]).unwrap();
    let (key, _) = again.dedup_after(Timestamp::from_unix_millis(0)).unwrap();
    store
        .delete_inbox(&[2], Timestamp::from_unix_millis(until + 1))
        .unwrap();
    assert!(!store.seen(&key).unwrap());
    assert!(store.inbox_at(2).unwrap().is_none());
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
