//! The courier: batches, backoff, answers, expiry, a send carried while its write is flushed.

use super::*;
use crate::mail::post::courier::MAX_FRESH;

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

/// A send is carried by the node as a batch, with no task of its own;
/// the batch's answer, which comes back on the link, delivers it.
#[tokio::test]
async fn a_send_goes_while_its_outbox_write_is_flushed_and_is_answered_once_durable() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
    let t = team();
    let (net, link, mut ends) = Handle::for_tests();
    let mut setup = setup(t.me.clone(), store.clone(), t.dir.clone(), net, link);
    // A disk that has not finished writing: the test says when it has.
    let (commit, disk) = crate::store::stalled(64);
    setup.commit = commit;
    let (mail, task) = Mail::start(setup).unwrap();
    let _task = tokio::spawn(task);
    let send = api::ops::Send {
        to: "@alpha".into(),
        text: "hello".into(),
        ask: false,
        reply_to: None,
        from_mailbox: None,
        wait_first_answer_ms: Some(5_000),
    };
    let sending = {
        let mail = mail.clone();
        tokio::spawn(async move { mail.call(ada(), None, send).await })
    };
    // The envelope goes before its write is durable: from memory.
    let carried = tokio::time::timeout(Duration::from_secs(10), ends.carried.recv())
        .await
        .expect("carried while its write waits for the disk")
        .unwrap();
    assert_eq!(carried.peer, t.alpha.peer_id());
    assert_eq!(carried.request.envelopes.len(), 1);
    // Its answer came too; the send is still not answered: nothing was
    // durable yet.
    ends.delivered
        .send(Delivered {
            batch: carried.batch,
            via: Via::Mail,
            result: Ok(MailReply {
                outcomes: vec![MailOutcome::accepted(false)],
            }),
        })
        .unwrap();
    let _ = mail.call(ada(), None, api::ops::Outbox).await.unwrap();
    assert!(
        !sending.is_finished(),
        "answered before its write was durable"
    );
    // The disk writes: the send is answered, with its first answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sending.is_finished() {
        while let Some((writes, then)) = disk.take() {
            store.put_outbox(&writes.outbox).unwrap();
            store.audit_many(&writes.audit).unwrap();
            if let Some(then) = then {
                then();
            }
        }
        assert!(Instant::now() < deadline, "never answered once durable");
        tokio::task::yield_now().await;
    }
    let sent = sending.await.unwrap().unwrap();
    let first = sent.first.expect("its first answer, in the send's answer");
    assert_eq!(first.id, sent.id);
    assert_eq!(first.status.as_str(), "delivered");
    assert!(
        store.outbox_get(&sent.id).unwrap().is_some(),
        "in the outbox"
    );
    assert!(ends.carried.try_recv().is_err(), "carried once");
}

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

#[test]
fn no_more_than_max_fresh_messages_leave_before_their_write_is_durable() {
    let t = team();
    let mut d = desk();
    let alpha = t.alpha.peer_id();
    let net = Collect::default();
    let mut courier = Courier::default();
    let mut ctx = Ctx {
        store: d.store.as_ref(),
        dir: &t.dir,
        log: &mut d.log,
        now: at(T0, Instant::now()),
    };
    // Written, none durable (the store has none of them): each of the
    // first MAX_FRESH goes from memory, envelope and all.
    for n in 0..MAX_FRESH {
        let r = outbox_record(n, alpha, 10);
        assert!(courier.queue_written(r, &net, &mut ctx).is_none(), "{n}");
    }
    // The next is given back, to be queued once durable.
    let back = courier.queue_written(outbox_record(MAX_FRESH, alpha, 10), &net, &mut ctx);
    assert_eq!(back.map(|r| r.id), Some(format!("{MAX_FRESH:032x}")));
    // All of them reach the network, batch after batch as the in-flight
    // cap allows, each envelope from memory (the store has none: read
    // from there, they would be missing and fail).
    let mut envelopes = 0;
    let mut carried = net.take();
    while !carried.is_empty() {
        for c in &carried {
            assert!(c.request.envelopes.iter().all(|e| e.as_ref() == [7; 10]));
            envelopes += c.request.envelopes.len();
            let n = c.request.envelopes.len();
            courier.delivered(answer(c, accepted(n)), &net, &mut ctx);
        }
        carried = net.take();
    }
    assert_eq!(envelopes, MAX_FRESH);
    // Once durable, a message's envelope is read from the store; and the
    // room frees: the next goes from memory again.
    for n in 0..MAX_FRESH {
        courier.durable(&format!("{n:032x}"));
    }
    assert!(
        courier
            .queue_written(outbox_record(MAX_FRESH + 1, alpha, 10), &net, &mut ctx)
            .is_none()
    );
}
