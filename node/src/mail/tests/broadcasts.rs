//! Broadcasts: what a broadcast may not be, the waiting bound, counts from the right machine.

use super::*;

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
        skipped: 3,
        reason: Some(agentmesh_protocol::envelope::SkipReason::Paused),
    };
    // Carol claims counts for a copy that went to alpha: ignored.
    bus::on_counts(t.carol.peer_id(), id, counts(7), &mut ctx);
    assert_eq!(d.store.counts(id).unwrap().unwrap().reported, None);
    // Alpha's are kept, the first only.
    bus::on_counts(t.alpha.peer_id(), id, counts(2), &mut ctx);
    bus::on_counts(t.alpha.peer_id(), id, counts(9), &mut ctx);
    let r = d.store.counts(id).unwrap().unwrap().reported.unwrap();
    assert_eq!((r.delivered, r.dropped), (2, 1));
    // What it skipped, and why, are kept with them.
    assert_eq!((r.skipped, r.reason), (3, Some(api::SkipReason::Paused)));
    // Counts for a copy never sent: nothing.
    bus::on_counts(t.alpha.peer_id(), "ffff", counts(1), &mut ctx);
    assert_eq!(d.store.counts("ffff").unwrap(), None);
}
