//! Carried mail: at its recipient, what a carrier's batch is answered
//! and which receipts its envelopes' senders are owed; at its sender,
//! which carrier is handed what.

use agentmesh_protocol::receipt::ReceiptState;

use super::*;
use crate::mail::post::inbox::Room;
use crate::store::CarryStore;

/// A batch `carrier` brought (as a carrier), received by `inbox`: its
/// outcomes, and the receipts owed (sender, message id, first state).
fn carried(
    inbox: &mut Inbox,
    carrier: Sender,
    envelopes: &[&[u8]],
    t: &Team,
    d: &mut Desk<SledStore>,
) -> (Vec<MailOutcome>, Vec<(String, String, ReceiptState)>) {
    let mut consent = Consent::default();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, Instant::now()),
    };
    let carrier = Sender {
        carrier: true,
        ..carrier
    };
    let (reply, _, brought) = inbox.receive_all(
        carrier,
        &batch(envelopes),
        &mut consent,
        Room::unbounded(),
        &mut ctx,
    );
    let owed = (brought.owed.into_iter())
        .map(|(debt, entries)| (debt.from_peer, debt.id, entries[0].state))
        .collect();
    (reply.outcomes, owed)
}

#[test]
fn carried_mail_is_taken_as_its_senders_and_owes_it_a_delivered_receipt() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let e = plain(&t.alpha, &t.me, Timestamp::from_unix_millis(T0));
    let (o, owed) = carried(&mut inbox, member(t.carol.peer_id()), &[&e], &t, &mut d);
    assert!(
        matches!(o[..], [MailOutcome::Accepted { held: false, .. }]),
        "{o:?}"
    );
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!(owed[0].0, t.alpha.peer_id().to_string());
    assert_eq!(owed[0].2, ReceiptState::Delivered);
    // Brought again: a duplicate, and nothing more is owed.
    let (o, owed) = carried(&mut inbox, member(t.carol.peer_id()), &[&e], &t, &mut d);
    assert_eq!(o, [MailOutcome::Duplicate]);
    assert!(owed.is_empty(), "{owed:?}");
}

#[test]
fn a_revoked_carrier_is_refused_and_its_refusals_tell_the_sender_nothing() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let e = plain(&t.alpha, &t.me, Timestamp::from_unix_millis(T0));
    let revoked = Sender {
        revoked: true,
        ..member(t.carol.peer_id())
    };
    let (o, owed) = carried(&mut inbox, revoked, &[&e], &t, &mut d);
    assert_eq!(code(&o[0]), "revoked");
    // Alpha's message was not refused: its carrier was. Alpha keeps
    // delivering its own copy.
    assert!(owed.is_empty(), "{owed:?}");
}

#[test]
fn a_refusal_of_carried_mail_is_told_once_however_often_it_is_brought() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let e = letter(&t.alpha, &t.me, Timestamp::from_unix_millis(T0), |_, b| {
        b.to_mailbox = Some(Name::parse("mailbox", "nowhere").unwrap());
    });
    let carol = member(t.carol.peer_id());
    let (o, owed) = carried(&mut inbox, carol, &[&e, &e, &e], &t, &mut d);
    assert!(o.iter().all(|o| code(o) == "no_mailbox"), "{o:?}");
    assert_eq!(owed.len(), 1, "{owed:?}");
    assert_eq!(owed[0].2, ReceiptState::Refused);
    let (_, owed) = carried(&mut inbox, carol, &[&e], &t, &mut d);
    assert!(owed.is_empty(), "told already: {owed:?}");
}

#[test]
fn carried_mail_from_a_machine_this_one_does_not_know_yet_waits() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    // Admitted while this machine was away: its carrier brings it again
    // once the team's blocks arrived.
    let newcomer = Identity::generate(&mut rand::rng());
    let e = plain(&newcomer, &t.me, Timestamp::from_unix_millis(T0));
    let (o, owed) = carried(&mut inbox, member(t.carol.peer_id()), &[&e], &t, &mut d);
    assert_eq!(o, [MailOutcome::Busy]);
    assert!(owed.is_empty(), "{owed:?}");
}

#[test]
fn a_carrier_cannot_pass_off_its_own_mail_or_this_machines() {
    let t = team();
    let mut d = desk();
    let mut inbox = Inbox::new(t.me.clone(), 0);
    let own = plain(&t.carol, &t.me, Timestamp::from_unix_millis(T0));
    let carol = member(t.carol.peer_id());
    let (o, _) = carried(&mut inbox, carol, &[&own], &t, &mut d);
    assert_eq!(code(&o[0]), "sender_mismatch", "its own goes on mail/1");
}

// ----- handing mail to carriers -----------------------------------------

/// `id`'s signed directory record, saying it carries, in `store`.
fn announce_carrier(store: &dyn Store, id: &Identity) {
    use agentmesh_protocol::directory::{DirectoryRecord, SignedDirectory};
    let record = DirectoryRecord {
        peer: id.peer_id(),
        seq: 1,
        at: Timestamp::from_unix_millis(T0),
        always_on: true,
        mailboxes: vec![],
    };
    let signed = SignedDirectory::sign(record, id).unwrap();
    store
        .put_directory_record(&id.peer_id(), signed.bytes())
        .unwrap();
}

fn hold_answer(carry: &Carry, outcomes: Vec<MailOutcome>) -> Delivered {
    Delivered {
        via: Via::Hold,
        ..answer(carry, outcomes)
    }
}

#[test]
fn mail_for_an_unreachable_member_goes_to_a_carrier_and_one_that_refuses_does_not_block_the_next() {
    let mut t = team();
    let dora = Identity::generate(&mut rand::rng());
    (t.dir.machines).insert(dora.peer_id(), machine("dora", "Ada", &dora));
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    announce_carrier(d.store.as_ref(), &t.carol);
    announce_carrier(d.store.as_ref(), &dora);
    let net = Collect::default();
    let t0 = Instant::now();
    let mut courier = loaded(&d, alpha, 2, 100);
    courier.hand_off_after(Duration::from_secs(1));
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 3_000, t0 + Duration::from_secs(3)),
    };
    // Old enough, but alpha is reachable as far as it knows: nothing is
    // handed over.
    courier.hand_off_due(&net, &mut ctx);
    assert!(net.take().is_empty());
    courier.retry_due(&net, &mut ctx);
    let sent = net.take();
    let lost = Delivered {
        batch: sent[0].batch,
        via: Via::Mail,
        result: Err(Undelivered::never_left("no route")),
    };
    courier.delivered(lost, &net, &mut ctx);
    // Alpha is offline and the mail is older than a second: carol (the
    // first carrier by name) is handed both.
    ctx.now = at(T0 + 5_000, t0 + Duration::from_secs(5));
    courier.hand_off_due(&net, &mut ctx);
    let hold = net.take();
    assert_eq!(hold.len(), 1);
    assert_eq!((hold[0].peer, hold[0].via), (t.carol.peer_id(), Via::Hold));
    assert_eq!(hold[0].request.envelopes.len(), 2);
    // Carol takes one and refuses the other for good.
    let refusal = MailOutcome::Refused {
        code: "wrong_recipient".into(),
        reason: "no".into(),
    };
    courier.handed(
        hold_answer(&hold[0], vec![MailOutcome::accepted(false), refusal]),
        &mut ctx,
    );
    // The refused one goes to dora next, though carol is not backing off.
    ctx.now = at(T0 + 7_000, t0 + Duration::from_secs(7));
    courier.hand_off_due(&net, &mut ctx);
    let next = net.take();
    assert_eq!(next.len(), 1, "{next:?}");
    assert_eq!(next[0].peer, dora.peer_id());
    assert_eq!(next[0].request.envelopes.len(), 1);
    courier.handed(hold_answer(&next[0], accepted(1)), &mut ctx);
    // Each is noted carried, by its carrier, once.
    let (carriers, _) = courier.take_writes();
    let mut by: Vec<Option<String>> = carriers.iter().map(|r| r.carrier.clone()).collect();
    by.sort();
    assert_eq!(by, [Some("carol".into()), Some("dora".into())]);
    ctx.now = at(T0 + 9_000, t0 + Duration::from_secs(9));
    courier.hand_off_due(&net, &mut ctx);
    assert!(
        net.take().is_empty(),
        "carried mail is not handed over again"
    );
}

/// A courier on `t`'s machine with one message for alpha, older than its
/// 1 s handoff, whose first attempt ended as `first` at `T0 + 2 s`.
fn attempted(
    t: &Team,
    net: &Collect,
    ctx: &mut Ctx<'_>,
    first: Result<Vec<MailOutcome>, Undelivered>,
) -> Courier {
    let records = vec![outbox_record(0, t.alpha.peer_id(), 100)];
    ctx.store.put_outbox(&records).unwrap();
    let mut courier = Courier::default();
    courier.load(records);
    courier.hand_off_after(Duration::from_secs(1));
    courier.retry_due(net, ctx);
    let sent = net.take();
    let result = first.map(|outcomes| MailReply { outcomes });
    (courier).delivered(
        Delivered {
            batch: sent[0].batch,
            via: Via::Mail,
            result,
        },
        net,
        ctx,
    );
    courier
}

#[test]
fn mail_lost_on_a_connection_is_handed_over_and_mail_answered_busy_is_not() {
    let t = team();
    let mut d = desk();
    announce_carrier(d.store.as_ref(), &t.carol);
    let net = Collect::default();
    let t0 = Instant::now();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 5_000, t0 + Duration::from_secs(5)),
    };
    // A relayed circuit that carries nothing: the batch got no answer.
    let lost = Undelivered {
        reached: true,
        why: "no answer within 20 s".into(),
    };
    let mut courier = attempted(&t, &net, &mut ctx, Err(lost));
    courier.hand_off_due(&net, &mut ctx);
    let hold = net.take();
    assert_eq!(hold.len(), 1, "{hold:?}");
    assert_eq!((hold[0].peer, hold[0].via), (t.carol.peer_id(), Via::Hold));
    // Alpha answered, busy: it is there, and a carrier would only add to
    // its load.
    let mut courier = attempted(&t, &net, &mut ctx, Ok(vec![MailOutcome::Busy]));
    courier.hand_off_due(&net, &mut ctx);
    assert!(net.take().is_empty());
}

#[test]
fn a_full_carrier_is_offered_the_message_again_only_after_the_handoff_wait() {
    let t = team();
    let mut d = desk();
    announce_carrier(d.store.as_ref(), &t.carol);
    let net = Collect::default();
    let t0 = Instant::now();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 5_000, t0 + Duration::from_secs(5)),
    };
    let mut courier = attempted(&t, &net, &mut ctx, Err(Undelivered::never_left("no route")));
    courier.hand_off_due(&net, &mut ctx);
    let hold = net.take();
    let full = MailOutcome::Refused {
        code: "carrier_full".into(),
        reason: "full".into(),
    };
    courier.handed(hold_answer(&hold[0], vec![full]), &mut ctx);
    // Not again before a second (the handoff wait) has passed...
    ctx.now = at(T0 + 5_500, t0 + Duration::from_millis(5_500));
    courier.hand_off_due(&net, &mut ctx);
    assert!(net.take().is_empty());
    // ...then again, as it may have room now.
    ctx.now = at(T0 + 7_000, t0 + Duration::from_secs(7));
    courier.hand_off_due(&net, &mut ctx);
    let again = net.take();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].peer, t.carol.peer_id());
}

// ----- the carrier ---------------------------------------------------------

/// A carrier's rules, with room for anything the tests hold.
fn carrier_rules() -> crate::config::CarryRules {
    crate::config::CarryRules {
        carry: true,
        ..crate::config::CarryRules::default()
    }
}

/// `n` envelopes held for `to` from `from`, sealed at `T0 + sent_at[i]`,
/// stored as a carrier stores them; their bytes, in that order.
fn hold_for(store: &dyn Store, from: &Identity, to: &Identity, sent_at: &[u64]) -> Vec<Vec<u8>> {
    let mut all = vec![];
    let mut held = vec![];
    for s in sent_at {
        let at = Timestamp::from_unix_millis(T0 + s);
        let bytes = plain(from, to, at);
        let h = agentmesh_protocol::envelope::Envelope::from_wire(&bytes)
            .unwrap()
            .header;
        let r = crate::store::CarriedRecord {
            recipient: to.peer_id().to_string(),
            sender: from.peer_id().to_string(),
            id: h.id.to_string(),
            size: bytes.len() as u64,
            sent_at: at.as_unix_millis(),
            stored_at: T0,
            expires_at: h.expires_at.as_unix_millis(),
        };
        held.push((r, bytes.clone()));
        all.push(bytes);
    }
    store.put_carried(&held).unwrap();
    all
}

#[test]
fn a_carrier_carries_on_oldest_first_and_what_was_busy_later() {
    use crate::mail::post::carrying::Carrying;
    let t = team();
    let mut d = desk();
    // Sealed at +3 s, +1 s, +2 s: carried on as +1, +2, +3.
    let sealed = hold_for(d.store.as_ref(), &t.alpha, &t.carol, &[3_000, 1_000, 2_000]);
    let mut carrying = Carrying::load(carrier_rules(), d.store.carried().unwrap());
    let net = Collect::default();
    let t0 = Instant::now();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 5_000, t0),
    };
    carrying.connected(t.carol.peer_id(), &net, &mut ctx);
    let batch = net.take();
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].via, Via::Deliver);
    let got: Vec<Vec<u8>> = (batch[0].request.envelopes.iter())
        .map(|e| e.to_vec())
        .collect();
    assert_eq!(
        got,
        [sealed[1].clone(), sealed[2].clone(), sealed[0].clone()]
    );
    // The oldest answered busy, the others taken: only it is kept, and
    // it is not carried on at once.
    let reply = vec![
        MailOutcome::Busy,
        MailOutcome::accepted(false),
        MailOutcome::accepted(false),
    ];
    carrying.delivered(
        Delivered {
            via: Via::Deliver,
            ..answer(&batch[0], reply)
        },
        &net,
        &mut ctx,
    );
    assert_eq!(carrying.len(), 1);
    assert!(net.take().is_empty(), "busy waits");
    ctx.now = at(T0 + 20_000, t0 + Duration::from_secs(15));
    carrying.tick(&net, &mut ctx);
    let later = net.take();
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0].request.envelopes[0].to_vec(), sealed[1]);
}

#[test]
fn a_carrier_that_is_no_longer_a_member_drops_what_it_holds() {
    use crate::mail::post::carrying::Carrying;
    let mut t = team();
    let mut d = desk();
    hold_for(d.store.as_ref(), &t.alpha, &t.carol, &[1_000, 2_000]);
    let mut carrying = Carrying::load(carrier_rules(), d.store.carried().unwrap());
    assert_eq!(carrying.len(), 2);
    let net = Collect::default();
    // A member: kept.
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 5_000, Instant::now()),
    };
    carrying.tick(&net, &mut ctx);
    assert_eq!(carrying.len(), 2);
    net.take();
    // It left (or was revoked): everything goes, from the store too.
    t.dir.member = false;
    let mut carrying = Carrying::load(carrier_rules(), d.store.carried().unwrap());
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0 + 5_000, Instant::now()),
    };
    carrying.tick(&net, &mut ctx);
    assert_eq!(carrying.len(), 0);
    assert!(d.store.carried().unwrap().is_empty());
    assert!(net.take().is_empty(), "nothing is carried on");
}
