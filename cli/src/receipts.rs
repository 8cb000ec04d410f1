//! What the sender learns: `send`'s wait for the first answer at a
//! terminal, `outbox ID`, and `receipts MAILBOX` (whether a mailbox here
//! tells senders their mail was read).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use agentmesh_node::api::{MessageState, OutboxView, SentView, StateView, ops};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;
use serde::Serialize;

use crate::term;

/// How long `send` at a terminal waits for the recipient's first answer.
pub const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(2);
/// How often it looks.
const POLL: Duration = Duration::from_millis(50);

/// What `send --json` prints: the daemon's answer, and where the message
/// stood when `send` stopped waiting (absent when it did not wait).
#[derive(Debug, Serialize)]
pub struct SendOutput {
    /// The daemon's answer.
    #[serde(flatten)]
    pub sent: SentView,
    /// Where it stood after the wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<MessageState>,
    /// Every state so far, oldest first (with the wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub states: Option<Vec<StateView>>,
}

/// Sends `op`; with the recipient's first answer when `wait` (a person
/// at a terminal: `send` and `reply`).
pub async fn send_waiting(
    c: &mut Client,
    op: ops::Send,
    wait: bool,
) -> anyhow::Result<(SentView, Option<OutboxView>)> {
    let sent: SentView = c.call(op).await?;
    let answer = if wait {
        Some(first_answer(c, &sent.id).await?)
    } else {
        None
    };
    Ok((sent, answer))
}

/// Prints what `send` or `reply` did: the id, and the first answer if it
/// waited for one (`--json`: [`SendOutput`]); a message refused, rejected
/// or failed by then exits 1.
pub fn print_sent(
    sent: SentView,
    answer: Option<OutboxView>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let failed = answer.as_ref().is_some_and(failed);
    if json {
        term::json(&SendOutput {
            status: answer.as_ref().map(|a| a.status),
            states: answer.map(|a| a.states),
            sent,
        })?;
    } else {
        crate::say!("{}", sent.id);
        if let Some(a) = &answer {
            crate::say!("{}", answer_line(a));
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Waits up to [`FIRST_ANSWER_WAIT`] for the recipient's first answer to
/// `id`: returns as soon as the message is past `queued`, or the courier
/// found the recipient offline; the view as it stands then.
pub async fn first_answer(c: &mut Client, id: &str) -> anyhow::Result<OutboxView> {
    let deadline = Instant::now() + FIRST_ANSWER_WAIT;
    loop {
        let v: OutboxView = c.call(ops::MessageStatus { id: id.into() }).await?;
        if v.status != MessageState::Queued || v.offline || Instant::now() >= deadline {
            return Ok(v);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits up to [`FIRST_ANSWER_WAIT`] for what each machine did with its
/// copy of a broadcast (`ids`): returns as soon as every copy has its
/// counts or its machine is found offline; the views as they stand then,
/// in the order of `ids`.
pub async fn first_counts(c: &mut Client, ids: &[String]) -> anyhow::Result<Vec<OutboxView>> {
    let deadline = Instant::now() + FIRST_ANSWER_WAIT;
    loop {
        let mut views = Vec::with_capacity(ids.len());
        for id in ids {
            let v: OutboxView = c.call(ops::MessageStatus { id: id.clone() }).await?;
            views.push(v);
        }
        let done = views.iter().all(|v| v.counts.is_some() || v.offline);
        if done || Instant::now() >= deadline {
            return Ok(views);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One line for people: what the recipient said first, or that it has
/// not answered yet.
pub fn answer_line(v: &OutboxView) -> String {
    let machine = v.to.rsplit('@').next().unwrap_or_default();
    let last = v.states.last();
    let reason = last.and_then(|s| s.reason.as_deref()).unwrap_or_default();
    match v.status {
        MessageState::Queued if v.offline => format!(
            "queued: {machine} is offline; it goes when {machine} connects (`agentmesh outbox` shows where it stands)"
        ),
        MessageState::Queued => format!(
            "queued: no answer from {machine} yet; `agentmesh outbox` shows where it stands"
        ),
        MessageState::Refused | MessageState::Failed | MessageState::Rejected => {
            format!("{}: {}", v.status, term::clean(reason))
        }
        MessageState::Held => format!("held: it waits for {machine}'s person to approve it"),
        MessageState::Deferred => format!(
            "deferred: in the inbox; the mailbox's daily wake budget is spent until {}",
            v.deferred_until.as_deref().unwrap_or("its next day")
        ),
        MessageState::Carried => format!(
            "carried: {} took a copy to deliver when {machine} connects; this machine keeps trying too",
            v.carrier.as_deref().unwrap_or("a carrier")
        ),
        other => other.to_string(),
    }
}

/// Why a message still `queued` waits, in words: its machine offline or
/// not answered yet, when the next attempt is, and what the last one
/// met (`last`: for a person; an agent is not shown the last attempt's
/// words, which may be a peer's). `None` past `queued`.
pub fn waiting_words(v: &OutboxView, last: bool) -> Option<String> {
    if v.status != MessageState::Queued {
        return None;
    }
    let machine = v.to.rsplit('@').next().unwrap_or_default();
    let mut words = if v.offline {
        format!(
            "{machine} is offline (the last attempt could not reach it): it goes when {machine} connects"
        )
    } else if v.attempts == 0 {
        format!("not yet sent to {machine}: it is next in this machine's outbox")
    } else {
        format!("sent to {machine}, which has not answered yet")
    };
    if let Some(ms) = v.retry_in_ms {
        words.push_str(&format!(
            "; next attempt in {}",
            agentmesh_protocol::time::human_duration(Duration::from_millis(ms))
        ));
    }
    if let Some(r) = v.reason.as_deref().filter(|r| last && !r.is_empty()) {
        words.push_str(&format!("; the last attempt: {}", term::clean(r)));
    }
    Some(words)
}

/// Whether the sender should hear it failed: refused, rejected or failed.
pub fn failed(v: &OutboxView) -> bool {
    matches!(
        v.status,
        MessageState::Refused | MessageState::Failed | MessageState::Rejected
    )
}

/// The states for people: `queued 3s ago → delivered 2s ago → read now`.
pub fn states_line(states: &[StateView]) -> String {
    states
        .iter()
        .map(|s| format!("{} {}", s.state, term::ago(&s.at)))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Who decided a carried message's status, for the outbox's status
/// column: ` by RECIPIENT (carried by CARRIER)`, ` by CARRIER` while it
/// is only carried; nothing for mail no carrier touched (its recipient
/// is in the TO column).
pub fn deciders(r: &OutboxView) -> String {
    let Some(carrier) = &r.carrier else {
        return String::new();
    };
    let carrier = term::clean(carrier);
    match r.status {
        MessageState::Carried => format!(" by {carrier}"),
        MessageState::Queued | MessageState::Failed => format!(" (carried by {carrier})"),
        _ => {
            let by = r
                .states
                .iter()
                .rev()
                .find(|s| s.state == r.status)
                .and_then(|s| s.by.as_deref());
            match by {
                Some(by) => format!(" by {} (carried by {carrier})", term::clean(by)),
                None => format!(" (carried by {carrier})"),
            }
        }
    }
}

/// `agentmesh outbox ID`: one sent message and every state it went
/// through.
pub fn one(home: &Home, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    crate::call::simple(home, ops::MessageStatus { id: id.into() }, json, |v| {
        crate::say!("{} to {} ({})", v.id, v.to, v.kind);
        crate::say!("status: {}", answer_line(v));
        if let Some(w) = waiting_words(v, true) {
            crate::say!("waiting: {w}");
        }
        if let Some(c) = &v.carrier {
            crate::say!("carrier: {c}");
        }
        for s in &v.states {
            let why = s
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let by =
                s.by.as_deref()
                    .map(|b| format!(" by {}", term::clean(b)))
                    .unwrap_or_default();
            crate::say!(
                "  {:<10} {}{}{}",
                s.state.as_str(),
                term::ago(&s.at),
                by,
                why
            );
        }
    })
}

/// `agentmesh receipts MAILBOX [--read on|off]`.
pub fn receipts(
    home: &Home,
    mailbox: &str,
    read: Option<bool>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let op = ops::Receipts {
        mailbox: mailbox.into(),
        read,
    };
    crate::call::simple(home, op, json, |v| {
        let who = if v.mailbox == "@" {
            "the owner's mailbox".to_owned()
        } else {
            format!("mailbox {}", v.mailbox)
        };
        if v.read {
            crate::say!(
                "{who} tells senders when their mail is read (and always when it is delivered, held, approved, rejected, deferred or refused)"
            );
        } else {
            crate::say!(
                "{who} does not tell senders when their mail is read (they still learn when it is delivered, held, approved, rejected, deferred or refused)"
            );
        }
    })
}
