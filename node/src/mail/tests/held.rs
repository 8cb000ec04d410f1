//! Consent: held mail, the held cap, pause and resume, approve and reject.

use super::*;

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
    consent.trust(&ada(), "carol", true, &mut ctx).unwrap();
    assert_eq!(consent.decide(carol, None, &t.dir), Decision::Deliver);
    let folder = tempfile::tempdir().unwrap();
    let path = folder.path().display().to_string();
    consent
        .allow(&ada(), (&path, Some("docs")), (true, false), &mut ctx)
        .unwrap();
    assert_eq!(
        consent.decide(alpha, Some("docs"), &t.dir),
        Decision::Deliver
    );
    consent
        .allow(&ada(), ("", Some("docs")), (false, false), &mut ctx)
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
        .allow(&ada(), (&path, Some("docs")), (true, false), &mut ctx)
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
        .allow(&ada(), ("", Some("docs")), (false, false), &mut ctx)
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
