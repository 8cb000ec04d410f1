//! What a broadcast's judgments decide, as a function of them: the audit
//! entry of each judgment, the copies to deliver and the counts its
//! sender is told. The actor carries it out (writes the entries, skips a
//! copy already delivered before a crash, spends wake budgets, takes
//! inbox seqs).

use agentmesh_protocol::envelope::Counts;

use super::copy_id;
use super::stages::{Outcome, Skips, Stage};
use crate::audit::AuditEvent;
use crate::mail::address::address;
use crate::store::{AuditEntry, InboxRecord, Judged};

/// What the judgments of one broadcast decide.
#[derive(Debug)]
pub(super) struct Delivery {
    /// One audit entry per judgment, in order.
    pub audits: Vec<(AuditEvent, AuditEntry)>,
    /// The copies to deliver: (copy id, mailbox).
    pub copies: Vec<(String, Option<String>)>,
    /// The counts for the sender: copies delivered, mailboxes dropped.
    pub counts: Counts,
}

/// What `outcomes` decide for `record`, judged by `judge` on machine
/// `machine`, with the mailboxes it was not judged for (`skips`).
pub(super) fn judged(
    record: &InboxRecord,
    (outcomes, skips): (Vec<Outcome>, Skips),
    judge: &str,
    machine: &str,
) -> Delivery {
    let mut audits = vec![];
    let (skipped, reason) = skips.total();
    if skipped > 0 {
        audits.push((
            AuditEvent::BroadcastSkipped,
            skipped_entry(record, skips, machine),
        ));
    }
    let mut copies = vec![];
    let mut dropped = 0u32;
    for o in outcomes {
        let threshold = o.threshold;
        let (score, error) = match &o.p {
            Ok(p) => (Some(*p), None),
            Err((code, e)) => (None, Some(format!("{code}: {e}"))),
        };
        let delivered = score.is_some_and(|p| p >= threshold);
        let m = o.mailbox.as_deref();
        let id = copy_id(&record.id, m);
        let mut detail = detail(&o, &id, score, error.as_deref(), delivered);
        if let Some(note) = o.note {
            detail.push_str("; ");
            detail.push_str(note);
        }
        let event = if delivered {
            AuditEvent::BroadcastDelivered
        } else {
            AuditEvent::BroadcastDropped
        };
        let entry = AuditEntry {
            peer: Some(record.from_peer.clone()),
            sender: Some(record.from.clone()),
            recipient: Some(address(m, machine)),
            message_id: Some(record.id.clone()),
            body_sha256: Some(record.body_sha256.clone()),
            detail,
            judged: Some(Judged {
                score,
                preset: o.preset,
                threshold,
                delivered,
                judge: judge.into(),
                error,
                stage: Some(o.stage.as_str().into()),
                why: o.why,
            }),
            ..AuditEntry::default()
        };
        audits.push((event, entry));
        if delivered {
            copies.push((id, o.mailbox));
        } else {
            dropped += 1;
        }
    }
    let counts = Counts {
        delivered: u32::try_from(copies.len()).unwrap_or(u32::MAX),
        dropped,
        skipped,
        reason: reason.map(Into::into),
    };
    Delivery {
        audits,
        copies,
        counts,
    }
}

/// The audit entry of the mailboxes `record` was not judged for: the
/// sender named, and why in words.
fn skipped_entry(record: &InboxRecord, skips: Skips, machine: &str) -> AuditEntry {
    let (count, reason) = skips.total();
    let sender = record.from.rsplit('@').next().unwrap_or_default();
    let mut why = vec![];
    if skips.held_sender > 0 {
        why.push(format!(
            "{} held: mail from {sender} is held here (`agentmesh trust {sender}` lets its next broadcast be judged)",
            skips.held_sender
        ));
    }
    if skips.paused > 0 {
        why.push(format!(
            "{} held: inbound mail is paused here (`agentmesh resume`)",
            skips.paused
        ));
    }
    if skips.busy > 0 {
        why.push(format!(
            "{} busy: its daily wake budget is spent",
            skips.busy
        ));
    }
    let mailboxes = if count == 1 { "mailbox" } else { "mailboxes" };
    AuditEntry {
        peer: Some(record.from_peer.clone()),
        sender: Some(record.from.clone()),
        recipient: Some(format!("*@{machine}")),
        message_id: Some(record.id.clone()),
        body_sha256: Some(record.body_sha256.clone()),
        detail: format!("not judged for {count} {mailboxes}: {}", why.join("; ")),
        skipped: Some(crate::store::Skipped { count, reason }),
        ..AuditEntry::default()
    }
}

/// A judgment in words, for its audit entry.
fn detail(
    o: &Outcome,
    id: &str,
    score: Option<f64>,
    error: Option<&str>,
    delivered: bool,
) -> String {
    let threshold = o.threshold;
    let by = match (o.stage, &score) {
        (Stage::Agent(cli), Some(_)) => format!("; the agent ({}) decided", cli.as_str()),
        (Stage::Agent(cli), None) => format!("; the agent ({}) gave no judgment", cli.as_str()),
        _ => String::new(),
    };
    match score {
        Some(p) if delivered => format!(
            "delivered as {id}: p {p:.3} ≥ {threshold:.3} ({}){by}",
            o.preset
        ),
        Some(p) => format!("dropped: p {p:.3} < {threshold:.3} ({}){by}", o.preset),
        None => format!("dropped: {}{by}", error.unwrap_or("no judgment")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Preset;
    use crate::codes::ErrorCode;

    fn outcome(mailbox: Option<&str>, p: Result<f64, (ErrorCode, String)>) -> Outcome {
        Outcome {
            mailbox: mailbox.map(str::to_owned),
            preset: Preset::Balanced,
            p,
            threshold: 0.5,
            stage: Stage::Builtin,
            why: None,
            note: None,
        }
    }

    #[test]
    fn a_score_at_the_threshold_delivers_below_it_or_none_drops() {
        let record = crate::store::testing::inbox_record(7, None, false, false);
        let outcomes = vec![
            outcome(Some("pipeline"), Ok(0.5)),
            outcome(Some("frontend"), Ok(0.49)),
            outcome(None, Err((ErrorCode::Internal, "judge failed".into()))),
            outcome(Some("billing"), Ok(0.9)),
        ];
        let d = judged(
            &record,
            (outcomes, Skips::default()),
            "builtin",
            "bob-laptop",
        );
        let mailboxes: Vec<_> = d.copies.iter().map(|(_, m)| m.as_deref()).collect();
        assert_eq!(mailboxes, vec![Some("pipeline"), Some("billing")]);
        assert_eq!((d.counts.delivered, d.counts.dropped), (2, 2));
        // Each copy has its own id, the one its audit entry names.
        assert_ne!(d.copies[0].0, d.copies[1].0);
        assert_eq!(d.copies[0].0, copy_id(&record.id, Some("pipeline")));
        let events: Vec<_> = d.audits.iter().map(|(e, _)| *e).collect();
        assert_eq!(
            events,
            vec![
                AuditEvent::BroadcastDelivered,
                AuditEvent::BroadcastDropped,
                AuditEvent::BroadcastDropped,
                AuditEvent::BroadcastDelivered,
            ]
        );
        let entry = &d.audits[0].1;
        assert_eq!(entry.recipient.as_deref(), Some("pipeline@bob-laptop"));
        assert!(
            entry
                .detail
                .starts_with(&format!("delivered as {}: p 0.500 ≥ 0.500", d.copies[0].0)),
            "{}",
            entry.detail
        );
        assert!(d.audits[1].1.detail.starts_with("dropped: p 0.490 < 0.500"));
        let failed = &d.audits[2].1;
        assert_eq!(failed.recipient.as_deref(), Some("@bob-laptop"));
        assert!(failed.detail.contains("judge failed"), "{}", failed.detail);
        let judged = failed.judged.as_ref().unwrap();
        assert_eq!((judged.score, judged.delivered), (None, false));
    }

    #[test]
    fn mailboxes_not_judged_are_counted_audited_and_named_by_the_first_reason() {
        let record = crate::store::testing::inbox_record(7, None, false, false);
        let skips = Skips {
            held_sender: 2,
            paused: 0,
            busy: 1,
        };
        let outcomes = vec![outcome(Some("billing"), Ok(0.9))];
        let d = judged(&record, (outcomes, skips), "builtin", "bob-laptop");
        assert_eq!(
            (d.counts.delivered, d.counts.dropped, d.counts.skipped),
            (1, 0, 3)
        );
        assert_eq!(
            d.counts.reason,
            Some(agentmesh_protocol::envelope::SkipReason::HeldSender)
        );
        let (event, entry) = &d.audits[0];
        assert_eq!(*event, AuditEvent::BroadcastSkipped);
        assert_eq!(entry.recipient.as_deref(), Some("*@bob-laptop"));
        assert_eq!(entry.sender.as_deref(), Some(record.from.as_str()));
        let s = entry.skipped.unwrap();
        assert_eq!(
            (s.count, s.reason),
            (3, Some(crate::api::SkipReason::HeldSender))
        );
        assert!(entry.detail.contains("2 held"), "{}", entry.detail);
        assert!(entry.detail.contains("1 busy"), "{}", entry.detail);
        // Nothing skipped: no entry, and the counts' short form.
        let d = judged(&record, (vec![], Skips::default()), "builtin", "bob-laptop");
        assert!(d.audits.is_empty());
        assert_eq!((d.counts.skipped, d.counts.reason), (0, None));
        // Paused alone names paused; a budget alone, busy.
        let paused = Skips {
            paused: 1,
            ..Skips::default()
        };
        assert_eq!(paused.total(), (1, Some(crate::api::SkipReason::Paused)));
        let busy = Skips {
            busy: 2,
            ..Skips::default()
        };
        assert_eq!(busy.total(), (2, Some(crate::api::SkipReason::Busy)));
    }
}
