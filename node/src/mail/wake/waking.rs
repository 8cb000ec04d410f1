//! When mail wakes an idle session: the mail actor's decision, and what
//! it does when a run ends.
//!
//! ```text
//!  mail delivered to MAILBOX (durable), or a run of it ended, or a slot freed
//!   ── wake off, no allowed folder ─────────── nothing
//!   ── a run of it running ─────────────────── waits: its end looks again
//!   ── a session live, an MCP server attached ─ nothing: push and hooks deliver
//!   ── unread mail all tainted ─────────────── nothing (logged `taint`)
//!   ── budget spent today ──────────────────── nothing (logged `budget`)
//!   ── wake.max_runs running ───────────────── queued for a slot
//!   ── a run: its prompt shows the oldest untainted unread mail;
//!      its mailbox handles that mail (hop, quota, taint carry through)
//!  run ended ── exit 0, its agent named its session (on the agent's own
//!               channel): the mail it showed is read; that session is
//!               the one the next run resumes
//!            ── otherwise: the mail stays unread (audited, in `status`),
//!               and the session it resumed is forgotten: the next run
//!               starts a new one
//! ```

use crate::agents::run as wake;
use crate::api::{self, MessageView, RunStatus, WakeStatusView};
use crate::audit::AuditEvent;
use crate::store::AuditEntry;

use crate::mail::wake::runs::{RunEnded, Start};
use crate::mail::wake::wakes::Spend;
use crate::mail::wake::{Wake, decide};
use crate::mail::{Ctx, address, hex, post::pages};

/// Unread messages of a mailbox looked at for a run, at most: tainted
/// mail at the head of its inbox hides no more than this much of the rest.
pub(in crate::mail) const MAX_SCANNED: usize = 1000;

/// What waking reads and records of the other wings, lent for one call.
pub(in crate::mail) struct Lent<'a, 'c> {
    pub consent: &'a crate::mail::consent::Consent,
    pub profiles: &'a crate::mail::bus::profiles::Profiles,
    pub unread: &'a mut crate::mail::post::unread::Unread,
    pub loops: &'a mut crate::mail::guard::loops::Loops,
    pub ctx: &'a mut Ctx<'c>,
}

/// Starts a run for `mailbox` if it should have one now: its record
/// durable, its supervisor returned for the actor to run as its task.
pub(in crate::mail) fn wake(
    w: &mut Wake,
    mailbox: &str,
    lent: &mut Lent<'_, '_>,
) -> Option<impl Future<Output = RunEnded> + Send + use<>> {
    let ctx = &mut *lent.ctx;
    let dir = ctx.dir;
    let now = ctx.now.wall;
    let folder = lent
        .consent
        .binding(mailbox)
        .filter(|b| b.allowed && !b.path.is_empty())
        .map(|b| b.path.clone());
    let agent = w.wakes.agent(mailbox);
    let gate = decide::Gate {
        on: agent.is_some(),
        running: w.runs.busy(mailbox),
        folder: folder.is_some(),
        // Custody: a live session's transcript is its person's.
        custody: w.wakes.live(mailbox, now).is_some() || lent.profiles.attached(Some(mailbox)),
    };
    if decide::gate(gate).is_some() {
        return None;
    }
    let (agent, folder) = (agent?, folder?);
    let found = match lent
        .unread
        .for_run(ctx.store, mailbox, (wake::MAX_SHOWN, MAX_SCANNED))
    {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "cannot read a mailbox's unread mail for a wake run");
            return None;
        }
    };
    let facts = decide::Facts {
        gate,
        shown: found.shown.len(),
        tainted: found.newest_tainted.is_some(),
        left: w.wakes.left(mailbox, now),
        slot: w.runs.has_slot(),
    };
    let recipient = Some(address(Some(mailbox), &dir.my_name));
    match decide::decide(facts) {
        decide::Decision::Start => {}
        decide::Decision::Queue => {
            w.runs.queue(mailbox);
            return None;
        }
        decide::Decision::Skip(decide::Skip::BudgetSpent) => {
            budget_spent(&mut w.wakes, ctx.log, mailbox, &dir.my_name, now);
            return None;
        }
        decide::Decision::Skip(decide::Skip::Tainted) => {
            if let Some(newest) = &found.newest_tainted
                && w.runs.taint_to_log(mailbox, &newest.id)
            {
                let entry = AuditEntry {
                    recipient,
                    sender: Some(newest.from.clone()),
                    message_id: Some(newest.id.clone()),
                    detail: format!(
                        "taint: {} of tainted mail started no wake run; it waits, unread, for its person's own session",
                        agentmesh_protocol::time::count(found.tainted as u64, "message")
                    ),
                    ..AuditEntry::default()
                };
                ctx.log.record(AuditEvent::TaintWaits, now, entry);
            }
            return None;
        }
        decide::Decision::Skip(_) => return None,
    }
    let shown = found.shown;
    let views: Vec<MessageView> = shown.iter().map(pages::view).collect();
    let id = hex(&rand::random::<[u8; 6]>());
    let session = w.wakes.resumable(mailbox, agent);
    let run = wake::Run {
        agent,
        mailbox,
        session: session.as_ref(),
        max_budget_usd: w.wakes.max_budget_usd(mailbox),
        cwd: std::path::Path::new(&folder),
        home: w.wakes.home(),
        run_id: &id,
    };
    let command = wake::command(w.wakes.rules(), &run, &wake::prompt(mailbox, &views));
    let start = Start {
        id: id.clone(),
        mailbox: mailbox.to_owned(),
        agent,
        command,
        shown: shown.iter().map(|r| (r.seq, r.id.clone())).collect(),
        broadcast: shown.iter().any(|r| r.kind == api::MessageKind::Broadcast),
    };
    let supervised = match w.runs.start(ctx.store, start, now) {
        Ok((_, supervised)) => supervised,
        Err(e) => {
            tracing::error!(error = %e, "cannot record a wake run; none was started");
            return None;
        }
    };
    if let Err(e) = w.wakes.spend(ctx.store, mailbox, Spend::Run, now) {
        tracing::error!(error = %e, "cannot record a mailbox's spent wake budget");
    }
    // A run is a new turn: its quota counts afresh, and it handles the
    // mail its prompt shows (the hop, the quota and taint carry
    // through it: its hooks never count as its person speaking).
    lent.loops.new_turn(Some(mailbox));
    for r in &shown {
        lent.loops.received(Some(mailbox), r.hop, now);
    }
    let entry = AuditEntry {
        recipient,
        message_id: shown.first().map(|r| r.id.clone()),
        detail: format!(
            "wake_started: run {id}: {} {} in {folder}, showing {} ({}); {} of today's budget left",
            agent.name(),
            match &session {
                Some(s) => format!("resumes session {s}"),
                None => "starts a new session".to_owned(),
            },
            agentmesh_protocol::time::count(shown.len() as u64, "message"),
            shown
                .iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            w.wakes.left(mailbox, now),
        ),
        ..AuditEntry::default()
    };
    ctx.log.record(AuditEvent::WakeStarted, now, entry);
    Some(supervised)
}

/// A run ended: its record final; done, its mail read and its session
/// remembered; otherwise the session it resumed forgotten. The receipts
/// its reading owes, and the mailboxes to look at again (those waiting
/// for a slot, then its own unless it failed).
pub(in crate::mail) fn run_ended(
    w: &mut Wake,
    end: RunEnded,
    (unread, receipts): (
        &mut crate::mail::post::unread::Unread,
        &crate::mail::post::receipts::Receipts,
    ),
    ctx: &mut Ctx<'_>,
) -> Option<(Debts, Vec<String>)> {
    let dir = ctx.dir;
    let now = ctx.now.wall;
    let resumed = w.runs.resumed(&end.id);
    let r = w.runs.ended(ctx.store, &end, now)?;
    let read = match r.status {
        RunStatus::Done => unread
            .mark_read(ctx.store, &r.mailbox, &r.shown, now)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "cannot mark a run's messages read");
                vec![]
            }),
        _ => vec![],
    };
    // Only a run that exited 0 read what it was shown.
    let read_debts = receipts.read(&read, now);
    let read = read.len();
    let session = match (&end.session, r.status) {
        // The run's session, ended: the one the next run resumes.
        (Some(s), RunStatus::Done) => {
            let ended = api::SessionEvent::End;
            if let Err(e) = w
                .wakes
                .session(ctx.store, &r.mailbox, r.agent, s.as_str(), ended, now)
            {
                tracing::warn!(error = %e.message, "cannot remember a wake run's session");
            }
            format!("session {s}")
        }
        // It never ran: nothing of it can be at fault.
        (_, RunStatus::NotStarted) => "no session named".to_owned(),
        // A run that failed, or named no session of its own: no
        // session it could have touched is resumed again (its output
        // can't have chosen the next run's session, and a session a
        // run can't finish in is not retried for ever); the next run
        // starts a new one.
        _ => {
            let tried = resumed
                .as_deref()
                .map_or_else(|| "no session named".to_owned(), |s| format!("session {s}"));
            match w.wakes.forget(ctx.store, &r.mailbox, r.agent, now) {
                Ok(0) => tried,
                Ok(n) => format!(
                    "{tried}; {} forgotten: the next run starts a new one",
                    agentmesh_protocol::time::count(n as u64, "session")
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot forget a wake run's sessions");
                    tried
                }
            }
        }
    };
    if r.status == RunStatus::NotStarted
        && let Err(e) = w.wakes.refund_run(ctx.store, &r.mailbox, now)
    {
        tracing::error!(error = %e, "cannot give back a wake that never ran");
    }
    let took = r.ended.unwrap_or(r.started).saturating_sub(r.started);
    let entry = AuditEntry {
        recipient: Some(address(Some(&r.mailbox), &dir.my_name)),
        message_id: r.messages.first().cloned(),
        detail: format!(
            "wake_ended: run {} {} after {} ms ({}); {}; {} of {} shown marked read{}",
            r.id,
            r.status.as_str(),
            took,
            end.exit,
            session,
            read,
            r.messages.len(),
            if r.status.failed() {
                "; they stay unread for a later run"
            } else {
                ""
            }
        ),
        ..AuditEntry::default()
    };
    ctx.log.record(AuditEvent::WakeEnded, now, entry);
    // The mailboxes waiting for a slot first, then this one (which
    // waits behind them if none is left). A failed run's mail waits
    // for new mail, its person or the next day: retrying at once
    // would spend the budget on the same failure.
    let mut next = w.runs.take_queued();
    if !r.status.failed() {
        next.push(r.mailbox.clone());
    }
    Some((read_debts, next))
}

/// Receipts owed: to whom, and what they say.
type Debts = Vec<(
    crate::mail::post::receipts::Debt,
    Vec<agentmesh_protocol::receipt::ReceiptEntry>,
)>;

/// What `status` shows of waking: every mailbox with wake on.
pub(in crate::mail) fn statuses(w: &Wake) -> Vec<WakeStatusView> {
    let now = crate::clock::now();
    w.wakes
        .mailboxes()
        .map(|m| wake_status(&w.wakes, &w.runs, m, now))
        .collect()
}

/// `mailbox`'s budget and runs, as `status` shows them.
pub(in crate::mail) fn wake_status(
    wakes: &crate::mail::wake::wakes::Wakes,
    runs: &crate::mail::wake::runs::Runs,
    mailbox: &str,
    now: agentmesh_protocol::Timestamp,
) -> WakeStatusView {
    WakeStatusView {
        mailbox: mailbox.to_owned(),
        wake: wakes.agent(mailbox),
        budget: wakes.budget(mailbox),
        spent: wakes.spent(mailbox, now),
        left: wakes.left(mailbox, now),
        resets_at: api::rfc3339_ms(crate::mail::wake::wakes::local_day(now).1.as_unix_millis()),
        running: runs.running_of(mailbox).map(|r| r.id.clone()),
        failed: runs
            .last_failure(mailbox)
            .map(|r| crate::mail::wake::runs::view(r, now)),
    }
}

/// `mailbox`'s budget is spent, and it stopped a run, a Stop-hook block
/// or a broadcast: audited `budget`, once a day.
pub(in crate::mail) fn budget_spent(
    wakes: &mut crate::mail::wake::wakes::Wakes,
    log: &mut crate::audit::AuditLog,
    mailbox: &str,
    machine: &str,
    now: agentmesh_protocol::Timestamp,
) {
    if !wakes.log_spent(mailbox, now) {
        return;
    }
    let entry = AuditEntry {
        recipient: Some(address(Some(mailbox), machine)),
        detail: budget_words(wakes, mailbox, now),
        ..AuditEntry::default()
    };
    log.record(AuditEvent::Budget, now, entry);
}

/// Why a mailbox's mail wakes nothing today, for the audit log.
fn budget_words(
    wakes: &crate::mail::wake::wakes::Wakes,
    mailbox: &str,
    now: agentmesh_protocol::Timestamp,
) -> String {
    format!(
        "budget: {mailbox} spent its {} today; its mail is delivered to the inbox but starts no run, no Stop-hook block, and it is no broadcast candidate until {}",
        agentmesh_protocol::time::count(u64::from(wakes.budget(mailbox)), "wake"),
        api::rfc3339_ms(crate::mail::wake::wakes::local_day(now).1.as_unix_millis())
    )
}
