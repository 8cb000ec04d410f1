//! `agentmesh watch`: events as they come, and `approve ID` / `reject ID`
//! typed in answer to a held message.

use std::process::ExitCode;

use agentmesh_node::api::{Event, InboxPage, ops};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;

use crate::mail::print_message;
use crate::term;

/// How often `watch` tries to attach again while its daemon is away.
const REATTACH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Shows one event `watch` was sent; `after` follows the newest message
/// shown. True when it fell behind and must attach again after `after`.
fn show_event(event: Event, json: bool, after: &mut Option<u64>) -> anyhow::Result<bool> {
    if let Event::Message { message } = &event {
        *after = Some(after.unwrap_or(0).max(message.seq));
    }
    if json {
        crate::outln!("{}", serde_json::to_string(&event)?);
    }
    match event {
        Event::Lagged { after_seq, .. } if json => {
            *after = Some(after.unwrap_or(0).max(after_seq));
            return Ok(true);
        }
        _ if json => {}
        Event::Message { message } => print_message(&message),
        Event::Held { message } => {
            crate::say!(
                "HELD for approval ({}):",
                message
                    .held
                    .map(agentmesh_node::api::HeldReason::words)
                    .unwrap_or_default()
            );
            print_message(&message);
            crate::say!(
                "  -> type `approve {}` or `reject {}`",
                message.id,
                message.id
            );
        }
        Event::Resolved { id, outcome } => crate::say!("{id}: {outcome}"),
        Event::Folders => {}
        Event::Lagged { missed, after_seq } => {
            crate::say!("(fell behind by {missed} events; catching up)");
            *after = Some(after.unwrap_or(0).max(after_seq));
            return Ok(true);
        }
    }
    Ok(false)
}

/// Answers a line typed at `watch`: `approve ID` or `reject ID [REASON]`.
async fn answer_line(l: &str, commands: &mut Client, json: bool) -> anyhow::Result<()> {
    let mut words = l.split_whitespace();
    let answered = match (words.next(), words.next()) {
        (Some("approve"), Some(id)) => Some(commands.call(ops::Approve { id: id.into() }).await),
        (Some("reject"), Some(id)) => {
            let reason = Some(words.collect::<Vec<_>>().join(" "));
            let id = id.into();
            Some(commands.call(ops::Reject { id, reason }).await)
        }
        (None, _) => None,
        _ => {
            crate::say!("type `approve ID` or `reject ID [REASON]`");
            None
        }
    };
    if let Some(answered) = answered {
        match answered {
            Ok(v) if json => crate::outln!("{}", serde_json::to_string(&v)?),
            Ok(v) => crate::say!("{}: {}", v.id, v.outcome.as_str()),
            Err(e) if json => crate::outln!(
                "{}",
                serde_json::json!({ "event": "error", "code": e.code(), "message": e.to_string() })
            ),
            Err(e) => crate::say!("{e}"),
        }
    }
    Ok(())
}

/// Prints one line of `watch` for people, or as one JSON object.
fn watch_say(json: bool, value: serde_json::Value, text: &str) {
    if json {
        crate::outln!("{value}");
    } else {
        crate::say!("{text}");
    }
}

/// `agentmesh watch`: attaches as a person and prints events until Ctrl-C.
/// Typing `approve ID` or `reject ID` answers a held-mail prompt.
///
/// When the daemon goes away, `watch` says so at once and attaches again
/// every second; back, it attaches with `after_seq`, so the messages that
/// arrived meanwhile are shown and none twice. `--no-reconnect` exits
/// non-zero instead.
#[expect(
    clippy::disallowed_methods,
    reason = "the line queue of `watch` holds the lines typed at a terminal, one per Enter"
)]
pub fn watch(
    home: &Home,
    mailbox: Option<String>,
    no_reconnect: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Standard input is read on a thread of its own: a read blocked on a
    // terminal must never keep `watch` from noticing that the daemon is
    // gone, nor from exiting (a runtime waits for its blocking reads).
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let rt = term::runtime()?;
    if let Some(m) = &mailbox {
        // A mailbox that does not exist would be watched forever in
        // silence: the daemon says so (with a near name) as `inbox` does.
        rt.block_on(async {
            let mut c = term::client(home).await?;
            let _: InboxPage = c
                .call(ops::Inbox {
                    mailbox: Some(m.clone()),
                    unread: true,
                    after_seq: Some(u64::MAX),
                    limit: Some(1),
                })
                .await?;
            anyhow::Ok(())
        })?;
    }
    let result: anyhow::Result<ExitCode> = rt.block_on(async {
        // The newest message seq seen: reattaching after it misses nothing.
        let mut after: Option<u64> = None;
        let mut first = true;
        // Closed (`watch </dev/null`): no more lines to wait for.
        let mut stdin_open = true;
        loop {
            let attached = async {
                let events = Client::attach(home, term::who(), mailbox.clone(), after).await?;
                let commands = term::client(home).await?;
                anyhow::Ok((events, commands))
            }
            .await;
            let (mut events, mut commands) = match attached {
                Ok(c) => c,
                // At the start, like every command: say how to start it.
                Err(e) if first => return Err(e),
                Err(_) => {
                    tokio::time::sleep(REATTACH_EVERY).await;
                    continue;
                }
            };
            // Attached "from now on" the first time; after that, only the
            // messages actually shown move `after`, so a reattach that is cut
            // short during its replay misses nothing the next time.
            if after.is_none() {
                after = Some(events.attached_seq);
            }
            if first {
                watch_say(
                    json,
                    serde_json::json!({ "event": "watching", "machine": events.name, "mailbox": mailbox }),
                    &format!(
                        "Watching {} on {} (Ctrl-C to stop; type `approve ID` or `reject ID` to answer a held message).",
                        mailbox.as_deref().map_or_else(|| "every mailbox".to_owned(), |m| format!("mailbox {m}")),
                        events.name
                    ),
                );
                first = false;
            } else {
                watch_say(
                    json,
                    serde_json::json!({ "event": "reattached", "machine": events.name }),
                    &format!("The daemon is back; watching {} again (nothing missed).", events.name),
                );
            }
            let gone = loop {
                tokio::select! {
                    event = events.next_event() => match event {
                        // For MCP servers, which keep their folder's
                        // mailbox: nothing a person watches.
                        Ok(Event::Folders) => {}
                        Ok(event) => {
                            if show_event(event, json, &mut after)? {
                                break false;
                            }
                        }
                        Err(_) => {
                            if no_reconnect {
                                return Err(term::cli_error(
                                    "daemon_gone",
                                    "the daemon went away (stopped or restarted); run `agentmesh up`, then `agentmesh watch` again",
                                ));
                            }
                            watch_say(
                                json,
                                serde_json::json!({ "event": "daemon_gone" }),
                                "The daemon went away; attaching again every second (Ctrl-C to stop)…",
                            );
                            break true;
                        }
                    },
                    line = lines.recv(), if stdin_open => {
                        let Some(l) = line else {
                            stdin_open = false;
                            continue;
                        };
                        answer_line(&l, &mut commands, json).await?;
                    }
                }
            };
            if gone {
                tokio::time::sleep(REATTACH_EVERY).await;
            }
        }
    });
    result
}
