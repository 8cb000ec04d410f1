//! `send`, `inbox`, `read`, `outbox`, `watch`, consent (`allow`, `deny`,
//! `held`, `approve`, `reject`, `trust`, `pause`, `resume`) and `audit`.

use agentmesh_node::codes::ErrorCode;
use std::io::IsTerminal;
use std::io::Read as _;
use std::process::ExitCode;

use agentmesh_node::api::{
    BindingView, InboxPage, MessageView, OutboxView, PausedView, Request, Resolution, ResolvedView,
    Status, WakeView, ops,
};
use agentmesh_node::home::Home;

use crate::call::simple;
use crate::term;

/// The text of `send` or `reply`: as given, or standard input for `-`;
/// refused here if it is empty or over what a message carries, before
/// anything is sent (the daemon refuses it too, for every client).
pub(crate) fn message_text(text: &str) -> anyhow::Result<String> {
    let text = if text == "-" {
        // One byte past the limit is enough to say it is too large (the
        // check below says so); a cut character there is not an encoding
        // error.
        let max = agentmesh_protocol::cbor::MAX_BODY_BYTES;
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![];
        (&mut stdin).take(max as u64 + 1).read_to_end(&mut buf)?;
        if buf.len() > max {
            // Too large: said with the text's own size, counted without
            // keeping the rest.
            let len = buf.len() as u64 + std::io::copy(&mut stdin, &mut std::io::sink())?;
            return Err(agentmesh_node::client::ClientError::Api(
                agentmesh_node::api::ApiError::new(
                    ErrorCode::TooLarge,
                    agentmesh_node::api::too_large_text(len),
                ),
            )
            .into());
        } else {
            String::from_utf8(buf).map_err(|_| {
                anyhow::anyhow!(
                    "the message on standard input is not UTF-8 text; agentmesh carries text"
                )
            })?
        }
    } else {
        text.to_owned()
    };
    agentmesh_node::api::check_text(&text).map_err(agentmesh_node::client::ClientError::Api)?;
    Ok(text)
}

/// Typed at a terminal, a command is the person speaking: the sending
/// mailbox's hop goes back to 0, as an agent's does at its person's
/// prompt. Run by a script or an agent's shell tool, it is not, and the
/// loop rules apply to it as to any client (docs/agents.md).
pub(crate) fn person_speaks() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// The `hop_reset` of the person speaking from `mailbox` (the owner's
/// when none is named).
pub(crate) fn reset_of(mailbox: Option<String>) -> ops::HopReset {
    ops::HopReset {
        mailbox: Some(mailbox.unwrap_or_else(|| "@".into())),
    }
}

/// `agentmesh send TO TEXT`. At a terminal (unless `no_wait`) it waits
/// up to 2 s for the recipient's first answer and prints it; a message
/// refused, rejected or failed by then exits 1.
pub fn send(
    home: &Home,
    to: &str,
    text: &str,
    (ask, no_wait): (bool, bool),
    reply_to: Option<String>,
    from: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let text = message_text(text)?;
    let person = person_speaks();
    let reset = reset_of(from.clone());
    let op = ops::Send {
        to: to.into(),
        text,
        ask,
        reply_to,
        from_mailbox: from,
        wait_first_answer_ms: None,
    };
    let wait = person && !no_wait;
    let rt = term::runtime()?;
    let (sent, answer) = rt.block_on(async {
        let mut c = term::client(home).await?;
        if person {
            // A mailbox that does not exist has no hop to reset; the send
            // says why it is refused.
            let _ = c.call(reset).await;
        }
        crate::receipts::send_waiting(&mut c, op, wait).await
    })?;
    crate::receipts::print_sent(sent, answer, json)
}

/// `agentmesh reply ID TEXT`: to the sender of the received message ID,
/// from the mailbox that received it, in its thread. At a terminal it is
/// the person answering: the message is marked read (they are answering
/// it) and that mailbox's hop goes back to 0, as `send` does.
pub fn reply(home: &Home, id: &str, text: &str, json: bool) -> anyhow::Result<ExitCode> {
    let text = message_text(text)?;
    let person = person_speaks();
    let op = ops::Send {
        to: String::new(),
        text,
        ask: false,
        reply_to: Some(id.to_owned()),
        from_mailbox: None,
        wait_first_answer_ms: None,
    };
    let rt = term::runtime()?;
    let (sent, answer) = rt.block_on(async {
        let mut c = term::client(home).await?;
        if person {
            // Held mail can't be read: it keeps its hop, and the send says
            // whether it may be answered.
            if let Ok(m) = c.call(ops::Read { id: id.into() }).await {
                let _ = c.call(reset_of(m.mailbox)).await;
            }
        }
        // At a terminal, the first answer, as `send` waits for it.
        crate::receipts::send_waiting(&mut c, op, person).await
    })?;
    crate::receipts::print_sent(sent, answer, json)
}

/// When a message was sent; with when it arrived too when that was over a
/// minute later (a carrier brought it, or its machine was offline).
fn when_sent(m: &MessageView) -> String {
    let Some(sent) = &m.sent_at else {
        return m.received_at.clone();
    };
    let late = match (
        humantime::parse_rfc3339(sent),
        humantime::parse_rfc3339(&m.received_at),
    ) {
        (Ok(s), Ok(r)) => r
            .duration_since(s)
            .is_ok_and(|d| d > std::time::Duration::from_secs(60)),
        _ => false,
    };
    if late {
        format!("{sent} (arrived {})", m.received_at)
    } else {
        sent.clone()
    }
}

/// Prints a message for people: who sent it (machine and owner), as whom
/// (human or agent, as claimed), when, and its text, made terminal-safe.
pub fn print_message(m: &MessageView) {
    let kind = if m.who.kind == agentmesh_node::api::WhoKind::Agent {
        "agent"
    } else {
        "human"
    };
    // A person named only by their kind ("human") is not "human human".
    let named = if m.who.name.is_empty() || m.who.name == kind {
        kind.to_owned()
    } else {
        format!("{kind} {}", m.who.name)
    };
    let who = match &m.who.session_id {
        Some(s) => format!("{named} (session {s})"),
        None => named,
    };
    let to = term::here(m.mailbox.as_deref());
    let who = term::clean(&who);
    let from = match &m.from_owner {
        Some(owner) => format!("{} [{}]", m.from, term::clean(owner)),
        None => m.from.clone(),
    };
    crate::say!(
        "{} {} {} from {from} ({who}) to {to}{}{}",
        when_sent(m),
        m.kind,
        m.id,
        if m.read { "" } else { " [unread]" },
        m.held
            .map(|h| format!(" [held: {}]", h.words()))
            .unwrap_or_default(),
    );
    if let Some(gone) = &m.sender_gone {
        // Its name may be another key's now: say whose it was.
        crate::say!(
            "  sent by {} key {}, which {} since; it can only be rejected",
            m.from.rsplit('@').next().unwrap_or_default(),
            term::short_peer(&m.from_peer),
            if gone == "left" {
                "left the team"
            } else {
                "was revoked"
            }
        );
    }
    if let Some(r) = &m.in_reply_to {
        crate::say!("  in reply to {r}");
    }
    for line in m.text.lines() {
        // Control characters from the mesh never reach the terminal raw.
        crate::say!("  | {}", term::clean(line));
    }
}

/// Says, on standard error (standard output may be JSON), that what
/// follows was read from the store of a daemon that is not running.
fn stored_note() {
    eprintln!(
        "agentmesh is not running: this is what its store holds (nothing is marked read, retries and offline machines are unknown); `agentmesh up` starts it"
    );
}

/// `agentmesh inbox`.
pub fn inbox(
    home: &Home,
    mailbox: Option<String>,
    unread: bool,
    limit: Option<usize>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let read = rt.block_on(async {
        let mut c = term::client(home).await?;
        let mut all: Vec<MessageView> = vec![];
        let mut after = None;
        loop {
            let page: InboxPage = c
                .call(ops::Inbox {
                    mailbox: mailbox.clone(),
                    unread,
                    after_seq: after,
                    limit: None,
                })
                .await?;
            all.extend(page.messages);
            match page.next_after_seq {
                Some(n) if limit.is_none_or(|l| all.len() < l) => after = Some(n),
                _ => break,
            }
        }
        anyhow::Ok(all)
    });
    let mut messages = match read {
        Ok(all) => all,
        // The daemon is down: what its store holds (nothing marked read).
        Err(e) if term::not_running(&e).is_some() => {
            match agentmesh_node::daemon::stored_inbox(home, mailbox.as_deref(), unread)? {
                Some((machine, all)) => {
                    term::set_machine(machine);
                    stored_note();
                    all
                }
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    if let Some(l) = limit {
        let skip = messages.len().saturating_sub(l);
        messages.drain(..skip);
    }
    if json {
        term::json(&messages)?;
    } else if messages.is_empty() {
        let held = rt
            .block_on(async {
                let mut c = term::client(home).await?;
                anyhow::Ok(c.status().await?)
            })
            .map_or(0, |s: Status| s.held);
        if held > 0 {
            crate::say!(
                "No messages. {} for approval: see {} with `agentmesh held`.",
                term::count_with(held, "message", "waits", "wait"),
                if held == 1 { "it" } else { "them" }
            );
        } else {
            crate::say!("No messages.");
        }
    } else {
        for m in &messages {
            print_message(m);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh read ID`.
pub fn read(home: &Home, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    simple(home, ops::Read { id: id.into() }, json, print_message)
}

/// `agentmesh outbox`: with `limit`, only the newest that many.
pub fn outbox(home: &Home, limit: Option<usize>, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let read = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(ops::Outbox).await?)
    });
    let mut rows: Vec<OutboxView> = match read {
        Ok(rows) => rows,
        // The daemon is down: what its store holds.
        Err(e) if term::not_running(&e).is_some() => {
            match agentmesh_node::daemon::stored_outbox(home)? {
                Some(rows) => {
                    stored_note();
                    rows
                }
                None => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    if let Some(l) = limit {
        // Oldest first: the newest are the last.
        rows.drain(..rows.len().saturating_sub(l));
    }
    if json {
        term::json(&rows)?;
    } else {
        print_outbox(&rows);
    }
    Ok(ExitCode::SUCCESS)
}

/// The outbox as a table for people.
fn print_outbox(rows: &[OutboxView]) {
    {
        if rows.is_empty() {
            crate::say!("Nothing sent yet.");
            return;
        }
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let machine = r.to.rsplit('@').next().unwrap_or_default();
                let mut status = r.status.to_string();
                // Who decided it, when a carrier was involved.
                status.push_str(&crate::receipts::deciders(r));
                if let Some(t) = &r.deferred_until {
                    // The recipient's wake budget is spent: in its inbox,
                    // and nothing wakes a session for it before then.
                    status.push_str(&format!(" until {t}"));
                }
                if let Some(ms) = r.retry_in_ms {
                    status.push_str(&format!(
                        " — retrying in {}",
                        agentmesh_protocol::time::human_duration(std::time::Duration::from_millis(
                            ms
                        ))
                    ));
                }
                if r.offline {
                    status.push_str(&format!(" ({machine} offline)"));
                }
                vec![
                    term::ago(&r.created_at),
                    r.id.clone(),
                    match &r.to_owner {
                        Some(o) => format!("{} [{}]", r.to, term::clean(o)),
                        None => r.to.clone(),
                    },
                    r.kind.to_string(),
                    status,
                    crate::receipts::states_line(&r.states),
                    match &r.counts {
                        // What the machine did with a broadcast copy.
                        Some(c) => term::clean(&c.words),
                        None => term::clean(&term::refusal_words(
                            r.reason.as_deref().unwrap_or_default(),
                        )),
                    },
                ]
            })
            .collect();
        term::table(
            &["SENT", "ID", "TO", "KIND", "STATUS", "STATES", "REASON"],
            &table,
        );
    }
}

/// `agentmesh held`.
pub fn held(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    simple(home, ops::Held, json, |rows| {
        if rows.is_empty() {
            crate::say!("No mail is held.");
        }
        for m in rows {
            print_message(m);
        }
        if !rows.is_empty() {
            crate::say!("Approve with `agentmesh approve ID`, or drop with `agentmesh reject ID`.");
        }
    })
}

/// `agentmesh mailboxes`.
pub fn mailboxes(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    simple(home, ops::Mailboxes, json, |rows| {
        if rows.is_empty() {
            crate::say!("No mailboxes. Opt a folder in with `agentmesh allow FOLDER`.");
        }
        for b in rows {
            crate::say!(
                "{:<20} {:<8} {}",
                term::clean(&b.mailbox),
                if b.allowed { "allowed" } else { "denied" },
                if b.path.is_empty() {
                    "(no folder: `agentmesh allow FOLDER --mailbox NAME` gives it one)".to_owned()
                } else {
                    term::clean(&b.path)
                },
            );
        }
    })
}

/// `agentmesh approve ID` / `agentmesh reject ID`.
pub fn decide(
    home: &Home,
    id: &str,
    approve: bool,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let said = |v: &ResolvedView| {
        let done = match v.outcome {
            Resolution::Approved => "Approved",
            Resolution::Rejected => "Rejected",
        };
        crate::say!("{done} {}.", v.id);
    };
    if approve {
        simple(home, ops::Approve { id: id.into() }, json, said)
    } else {
        let id = id.into();
        simple(home, ops::Reject { id, reason }, json, said)
    }
}

/// `agentmesh trust MACHINE`.
pub fn trust(
    home: &Home,
    machine: &str,
    (off, approve_held): (bool, bool),
    json: bool,
) -> anyhow::Result<ExitCode> {
    let op = ops::Trust {
        machine: machine.into(),
        off,
        approve_held,
    };
    simple(home, op, json, |v| {
        if !v.trusting {
            crate::say!(
                "Mail from {machine} is held again for your approval (what it sent before stays delivered)."
            );
            return;
        }
        crate::say!("Mail from {machine} is no longer held.");
        if v.approved > 0 {
            crate::say!(
                "Approved {} held message{} from it.",
                v.approved,
                plural(v.approved)
            );
        }
        if v.held > 0 {
            crate::say!(
                "{} message{} from it {} still held: `agentmesh held` lists them, `agentmesh trust {machine} --approve-held` approves them.",
                v.held,
                plural(v.held),
                if v.held == 1 { "is" } else { "are" }
            );
        }
    })
}

/// "s" for a count other than one.
fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `agentmesh allow PATH [--mailbox NAME] [--wake AGENT]`.
pub fn allow(
    home: &Home,
    (path, mailbox): (&str, Option<String>),
    (move_bound, yes): (bool, bool),
    wake: Option<crate::wake::WakeArg>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let path = absolute(path);
    if move_bound && !yes && term::interactive() {
        // A person at a terminal is asked before a mailbox moves; a
        // script (no terminal) moves it, as --yes would.
        // The name the daemon would use: the one given, else the
        // folder's base name folded as a mailbox name (`My_App` is
        // `my-app`).
        let name = mailbox.clone().or_else(|| {
            std::path::Path::new(&path)
                .file_name()
                .and_then(|n| agentmesh_node::config::try_fold_name(&n.to_string_lossy()))
                .map(|n| n.to_string())
        });
        let rt = term::runtime()?;
        let bindings: Vec<BindingView> = rt.block_on(async {
            let mut c = term::client(home).await?;
            anyhow::Ok(c.call(ops::Mailboxes).await?)
        })?;
        let canonical = std::fs::canonicalize(&path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.clone());
        let bound = bindings
            .iter()
            .find(|b| Some(&b.mailbox) == name.as_ref() && b.allowed && b.path != canonical);
        if let Some(b) = bound {
            let question = format!(
                "Mailbox {} receives in {} now. Move it to {canonical} (its inbox, profile and wake settings come along; its address stays)?",
                b.mailbox, b.path
            );
            if !term::confirm(&question, "moving a mailbox", false)? {
                crate::say!("Nothing moved.");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let op = ops::Allow {
        path,
        mailbox,
        move_bound,
    };
    folder(home, (op, true), wake, json)
}

/// `agentmesh deny PATH` / `agentmesh deny --mailbox NAME`.
pub fn deny(
    home: &Home,
    path: &str,
    mailbox: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let op = ops::Deny {
        path: absolute(path),
        mailbox,
    };
    folder(home, (op, false), None, json)
}

/// `path` made absolute (empty stays empty: the mailbox is named alone).
fn absolute(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    std::path::absolute(path)
        .unwrap_or_else(|_| path.into())
        .display()
        .to_string()
}

/// Allows or denies a folder (`op`), then sets its mailbox's wake.
fn folder<R: Request<Answer = BindingView>>(
    home: &Home,
    (op, allowed): (R, bool),
    wake: Option<crate::wake::WakeArg>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let (machine, v, woken): (String, BindingView, Option<WakeView>) = rt.block_on(async {
        let mut c = term::client(home).await?;
        let v: BindingView = c.call(op).await?;
        let woken = match wake {
            Some(w) => Some(
                c.call(crate::wake::set_op(&v.mailbox, w, None, None))
                    .await?,
            ),
            None => None,
        };
        anyhow::Ok((c.name.clone(), v, woken))
    })?;
    if json {
        /// The folder's binding, with its mailbox's wake when it was set.
        #[derive(serde::Serialize)]
        struct Folder<'a> {
            #[serde(flatten)]
            binding: &'a BindingView,
            #[serde(skip_serializing_if = "Option::is_none")]
            wake: Option<&'a WakeView>,
        }
        term::json(&Folder {
            binding: &v,
            wake: woken.as_ref(),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let (mailbox, path) = (&v.mailbox, &v.path);
    match (allowed, &v.moved_from) {
        (true, Some(from)) => {
            let from = if from.is_empty() {
                "no folder".to_owned()
            } else {
                from.clone()
            };
            crate::say!(
                "Mailbox {mailbox} moved from {from} to {path}: it receives mail there, with its inbox, profile and wake settings (address unchanged: {mailbox}@{machine})."
            );
        }
        (true, None) => {
            crate::say!("{path} receives mail as mailbox {mailbox} (address: {mailbox}@{machine}).")
        }
        (false, _) => crate::say!(
            "{path} (mailbox {mailbox}) no longer receives mail. The mailbox keeps its inbox, profile and wake settings; `agentmesh allow FOLDER --mailbox {mailbox}` gives it a folder again."
        ),
    }
    if let Some(w) = &woken {
        crate::wake::show(w);
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh pause` / `agentmesh resume`.
pub fn pause(home: &Home, paused: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let (v, held) = rt.block_on(async {
        let mut c = term::client(home).await?;
        let v: PausedView = if paused {
            c.call(ops::Pause).await?
        } else {
            c.call(ops::Resume).await?
        };
        // What waits for approval now, whatever held it: mail from
        // another person's machine was held for that from the start.
        let held = c.status().await.map_or(0, |s| s.held);
        anyhow::Ok((v, held))
    })?;
    if json {
        term::json(&v)?;
    } else if paused {
        crate::say!("Inbound mail is paused: it is held until `agentmesh resume`.");
    } else {
        let released = v.released.unwrap_or(0);
        crate::say!(
            "Inbound mail is delivered again ({} released).",
            agentmesh_protocol::time::count(released, "held message")
        );
        if held > 0 {
            crate::say!(
                "{} still {} for approval (from another person's machine, or to a folder opted out): `agentmesh held`.",
                agentmesh_protocol::time::count(held as u64, "message"),
                if held == 1 { "waits" } else { "wait" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `agentmesh audit`.
/// `--since DURATION` in seconds.
pub(crate) fn since_secs(since: Option<&str>) -> anyhow::Result<Option<u64>> {
    since
        .map(|s| {
            humantime::parse_duration(s)
                .map(|d| d.as_secs())
                .map_err(|e| {
                    anyhow::anyhow!("--since {s:?} is not a duration ({e}); write it like 1h or 7d")
                })
        })
        .transpose()
}

/// `agentmesh audit [--since DURATION]`.
pub fn audit(home: &Home, since: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let since_secs = since_secs(since)?;
    simple(home, ops::Audit { since_secs }, json, |rows| {
        for r in rows {
            let mut parts = vec![format!("{} ({})", r.at, term::ago(&r.at)), r.event.clone()];
            if let Some(id) = &r.id {
                parts.push(format!("id {id}"));
            }
            if let Some(s) = &r.sender {
                parts.push(format!("from {s}"));
            }
            if let Some(t) = &r.recipient {
                parts.push(format!("to {t}"));
            }
            if let Some(h) = &r.body_sha256 {
                parts.push(format!("body sha256 {}", &h[..16.min(h.len())]));
            }
            if !r.detail.is_empty() {
                parts.push(format!(
                    "- {}",
                    term::clean(&term::held_detail_words(&r.detail))
                ));
            }
            crate::say!("{}", parts.join("  "));
        }
    })
}
