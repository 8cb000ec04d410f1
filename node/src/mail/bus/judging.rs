//! A broadcast's life on this machine after it is sealed or arrives: its
//! copies handed on once durable, the judging of the next waiting one
//! (as a task the actor owns), and what a judgment delivers. Each
//! function decides; the actor carries out.

use tokio::sync::oneshot;

use super::{
    BroadcastRequest, JudgeWith, Judgments, Sealed, SendParts, candidates, judged, local_outbox,
    seal_broadcast, seal_counts, stages,
};
use crate::api::{self, Event, Reply, answer, ops as req};
use crate::mail::ctx::{Ctx, peer_of};
use crate::mail::desk::{Parts, Then};
use crate::mail::flush::AfterFlush;
use crate::mail::post::{Post, pages};
use crate::net::CarryHandle;
use crate::store::{CountsRecord, InboxRecord};

/// `broadcast`: one copy sealed per member machine, this machine's own
/// for its judge; answered once all are durable.
pub(in crate::mail) fn broadcast(req: BroadcastRequest, p: Parts<'_>, ctx: &mut Ctx<'_>) -> Then {
    let parts = SendParts {
        room: &p.post.mailroom,
        consent: p.consent,
        loops: &mut p.guard.loops,
        waiting: p.post.courier.waiting(),
    };
    match seal_broadcast(parts, req, ctx) {
        Ok(sealed) => {
            for r in &sealed.remote {
                p.post.courier.write(r.clone());
            }
            let me = p.post.mailroom.peer_id();
            p.post
                .courier
                .write(local_outbox(&sealed.local, me, &ctx.dir.my_name));
            Then::Sealed(Box::new(sealed))
        }
        Err(e) => Then::Now(Err(e)),
    }
}

/// A broadcast is durable: answered, its copies handed to the courier,
/// this machine's own waiting for its judge.
pub(in crate::mail) fn durable(
    reply: oneshot::Sender<Reply>,
    sealed: Sealed,
    (post, queue, net): (&mut Post, &mut super::Queue, &CarryHandle),
    ctx: &mut Ctx<'_>,
) {
    let _ = reply.send(answer::<req::Broadcast>(Ok(sealed.view)));
    for r in sealed.remote {
        post.courier.queue(r, net, ctx);
    }
    queue.enqueue([sealed.local]);
}

/// The judging of the next waiting broadcast (round robin over the
/// sending machines), for the actor to run as its task; none if one is
/// being judged already, or none waits.
pub(in crate::mail) fn next(
    p: Parts<'_>,
    ctx: &mut Ctx<'_>,
) -> Option<impl Future<Output = Judgments> + Send + 'static> {
    if p.bus.queue.judging.is_some() {
        return None;
    }
    let record = p.bus.queue.take_next()?;
    let now = crate::clock::now();
    let me = p.post.mailroom.peer_id();
    let (mut candidates, mut skips) =
        candidates(&record, me, p.consent, &p.bus.profiles, ctx.dir, now);
    // A mailbox whose wake budget is spent is no candidate: a broadcast
    // delivered costs a wake.
    candidates.retain(|c| {
        let Some(m) = c.mailbox.as_deref() else {
            return true;
        };
        if p.wake.wakes.left(m, now) > 0 {
            return true;
        }
        let machine = &ctx.dir.my_name;
        crate::mail::wake::waking::budget_spent(&mut p.wake.wakes, ctx.log, m, machine, now);
        skips.busy += 1;
        false
    });
    for c in &mut candidates {
        c.agent = c
            .mailbox
            .as_deref()
            .and_then(|m| p.wake.wakes.agent(m))
            .map(|a| match a {
                api::WakeAgent::Claude => agentmesh_judge::agent::AgentCli::Claude,
                api::WakeAgent::Codex => agentmesh_judge::agent::AgentCli::Codex,
            });
    }
    let calls_left = match &p.bus.queue.judge {
        JudgeWith::Agent(r) => p
            .bus
            .queue
            .agent_calls
            .left(ctx.store, now, r.calls_per_day),
        _ => 0,
    };
    let judging = stages::Judging {
        with: p.bus.queue.judge.clone(),
        calls_left,
        cwd: p.wake.wakes.home().join("run").join("judge"),
    };
    p.bus.queue.judging = Some(record.from_peer.clone());
    Some(async move {
        let (outcomes, agent_calls) = stages::judge_all(judging, &record.text, candidates).await;
        Judgments {
            record,
            outcomes,
            skips,
            agent_calls,
        }
    })
}

/// A broadcast judged: its copies delivered, each judgment audited, its
/// counts sealed for the sender, in one write; what waits for it (none
/// if the store refused it: it is judged again at the next start).
pub(in crate::mail) fn judged(j: Judgments, p: Parts<'_>, ctx: &mut Ctx<'_>) -> Option<AfterFlush> {
    p.bus.queue.judging = None;
    let Judgments {
        record,
        outcomes,
        skips,
        agent_calls,
    } = j;
    p.bus.queue.agent_calls.spend(agent_calls);
    let me = p.post.mailroom.peer_id();
    let judge = p.bus.queue.judge.as_str();
    let decided = judged::judged(&record, (outcomes, skips), judge, &ctx.dir.my_name);
    for (event, entry) in decided.audits {
        ctx.log.record(event, ctx.now.wall, entry);
    }
    let mut copies = vec![];
    for (id, mailbox) in decided.copies {
        // Judged again after a crash: the copy is there already.
        if ctx.store.inbox_has(&id).unwrap_or(false) {
            continue;
        }
        if let Some(m) = mailbox.as_deref() {
            let spend = crate::mail::wake::wakes::Spend::Broadcast;
            if let Err(e) = p.wake.wakes.spend(ctx.store, m, spend, ctx.now.wall) {
                tracing::error!(error = %e, "cannot record a mailbox's spent wake budget");
            }
        }
        copies.push(InboxRecord {
            seq: p.post.inbox.seqs().take(),
            id,
            mailbox,
            ..record.clone()
        });
    }
    let counts = decided.counts;
    let report = if peer_of(&record.from_peer) == Some(me) {
        // This machine's own copy: its counts are recorded here.
        let reported = crate::store::Reported {
            delivered: counts.delivered,
            dropped: counts.dropped,
            skipped: counts.skipped,
            reason: counts.reason.map(Into::into),
            at: ctx.now.wall.as_unix_millis(),
        };
        let c = CountsRecord {
            to_peer: me.to_string(),
            created_at: record.received_at,
            reported: Some(reported),
        };
        if let Err(e) = ctx.store.put_counts(&record.id, &c) {
            tracing::warn!(error = %e, "cannot record a broadcast's counts");
        }
        None
    } else {
        match seal_counts(&p.post.mailroom, &record, counts, ctx) {
            Ok(r) => Some(r),
            Err(e) => {
                // The sender left the team, say: nobody to tell.
                tracing::info!(error = %e.message, "broadcast counts not sent");
                None
            }
        }
    };
    if let Err(e) = ctx.store.put_judged(&record.id, &copies, report.as_ref()) {
        // Still in the store: judged again at the next start.
        tracing::error!(error = %e, "cannot store a judged broadcast");
        return None;
    }
    let events: Vec<Event> = copies
        .iter()
        .map(|r| Event::Message {
            message: pages::view(r),
        })
        .collect();
    crate::mail::guard::heard(&mut p.post.unread, &mut p.guard.loops, &events, ctx);
    Some(AfterFlush::Judged {
        events,
        report: report.map(Box::new),
    })
}
