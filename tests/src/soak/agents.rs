//! The soak's agents: one `agentmesh mcp` session per machine, driven by
//! rmcp's client with the seed's choices, noting what each tool said.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentmesh_node::api::MessageState;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use super::check::Accepted;
use super::{MAILBOX, NAMES};
use crate::mcp::Session;

/// What the agents did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Traffic {
    /// Tells a tool result said were accepted.
    pub tells: usize,
    /// Asks accepted.
    pub asks: usize,
    /// Replies accepted.
    pub replies: usize,
    /// Broadcasts accepted.
    pub broadcasts: usize,
    /// Messages taken with `check_inbox`.
    pub taken: usize,
    /// Tool calls that failed, nothing accepted and the agent told so,
    /// by the code their text ends with: `daemon_down` (its daemon was
    /// killed and not yet back), the loop guard's (`hop_limit`,
    /// `rate_limited`, `turn_quota` ...: refused as designed),
    /// `revoked_recipient` ...
    pub failed_calls: std::collections::BTreeMap<String, usize>,
}

/// What one agent did.
#[derive(Debug, Default)]
pub(super) struct AgentLog {
    pub(super) accepted: Vec<Accepted>,
    pub(super) taken: Vec<String>,
    /// Every status the agent was shown: (id, status).
    pub(super) shown: Vec<(String, MessageState)>,
    pub(super) traffic: Traffic,
    /// The code of each kind of failure said so far.
    reasons: Vec<String>,
}

impl Traffic {
    pub(super) fn add(&mut self, o: &Traffic) {
        self.tells += o.tells;
        self.asks += o.asks;
        self.replies += o.replies;
        self.broadcasts += o.broadcasts;
        self.taken += o.taken;
        for (code, n) in &o.failed_calls {
            *self.failed_calls.entry(code.clone()).or_default() += n;
        }
    }
}

/// What `check_inbox` gave, as far as the agent reads it.
#[derive(serde::Deserialize)]
struct Inbox {
    messages: Vec<Taken>,
}

#[derive(serde::Deserialize)]
struct Taken {
    id: String,
    kind: String,
}

/// A send's (or `message_status`'s) tool result, as far as the agent
/// reads it.
#[derive(serde::Deserialize)]
struct Sent {
    id: String,
    /// The status it was shown (`delivered` when the first answer came
    /// within the send's wait).
    status: Option<MessageState>,
}

/// Agent `i`: until `stop`, a tell (40 %), an ask (20 %), a look at its
/// inbox answering each ask (30 %), a broadcast (5 %) or a look at one of
/// its messages (5 %), 50–300 ms apart.
pub(super) async fn agent(
    i: usize,
    s: Session,
    seed: u64,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> AgentLog {
    let mut rng = StdRng::seed_from_u64(
        seed.wrapping_add(1 + i as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut log = AgentLog::default();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let pick = rng.random_range(0..100u32);
        let began = t0.elapsed();
        match pick {
            0..60 => {
                let mut to = rng.random_range(0..NAMES.len() - 1);
                if to >= i {
                    to += 1;
                }
                let ask = pick >= 40;
                let text = format!(
                    "soak {} #{n}: is the build cache warm on your side?",
                    NAMES[i]
                );
                let args = json!({"to": format!("{MAILBOX}@{}", NAMES[to]), "text": text, "kind": if ask {"ask"} else {"tell"}});
                let r = s.call("send_message", args).await;
                if log.record(r, i, began, false) {
                    if ask {
                        log.traffic.asks += 1
                    } else {
                        log.traffic.tells += 1
                    }
                }
            }
            60..90 => take(&s, i, t0, &mut log).await,
            90..95 => {
                let text = format!(
                    "soak {} #{n}: the shared build cache evicts at noon; cache keys change.",
                    NAMES[i]
                );
                let r = s.call("broadcast", json!({"text": text})).await;
                if log.record(r, i, began, true) {
                    log.traffic.broadcasts += 1;
                }
            }
            _ => {
                // A broadcast's id names no one message: its copies do.
                let direct: Vec<&Accepted> = log.accepted.iter().filter(|a| !a.broadcast).collect();
                if !direct.is_empty() {
                    let id = direct[rng.random_range(0..direct.len())].id.clone();
                    let r = s.call("message_status", json!({"id": id})).await;
                    if r.is_error == Some(true) {
                        log.failed(&r);
                    } else if let Ok(seen) =
                        serde_json::from_value::<Sent>(r.structured_content.unwrap_or_default())
                        && let Some(st) = seen.status
                    {
                        log.shown.push((seen.id, st));
                    }
                }
            }
        }
        let pause = Duration::from_millis(rng.random_range(50..300));
        tokio::time::sleep(pause).await; // the agent's pace
    }
    let _ = s.service.cancel().await;
    log
}

/// `check_inbox`, then a reply to each ask it gave.
async fn take(s: &Session, i: usize, t0: Instant, log: &mut AgentLog) {
    let r = s.call("check_inbox", json!({})).await;
    if r.is_error == Some(true) {
        log.failed(&r);
        return;
    }
    let inbox: Inbox = serde_json::from_value(r.structured_content.unwrap_or_default())
        .expect("check_inbox's result has messages");
    for m in inbox.messages {
        log.traffic.taken += 1;
        log.taken.push(m.id.clone());
        if m.kind == "ask" {
            let began = t0.elapsed();
            let text = format!("soak {}: warm here, keys as of this morning", NAMES[i]);
            let r = s.call("reply", json!({"id": m.id, "text": text})).await;
            if log.record(r, i, began, false) {
                log.traffic.replies += 1;
            }
        }
    }
}

impl AgentLog {
    /// Notes a failed call, and says why the first of each kind failed.
    fn failed(&mut self, r: &rmcp::model::CallToolResult) {
        let text = serde_json::to_value(&r.content)
            .ok()
            .and_then(|c| c[0]["text"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let code = if text.contains("daemon is not running") || text.contains("may have stopped") {
            "daemon_down".to_owned()
        } else {
            text.rsplit_once('(')
                .and_then(|(_, c)| c.strip_suffix(')'))
                .filter(|c| c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'))
                .unwrap_or("other")
                .to_owned()
        };
        *self.traffic.failed_calls.entry(code.clone()).or_default() += 1;
        if code != "other" && self.reasons.contains(&code) {
            return;
        }
        eprintln!("(soak: a call failed: {text})");
        self.reasons.push(code);
    }

    /// Notes a send's result; whether it was accepted.
    fn record(
        &mut self,
        r: rmcp::model::CallToolResult,
        from: usize,
        started: Duration,
        broadcast: bool,
    ) -> bool {
        if r.is_error == Some(true) {
            self.failed(&r);
            return false;
        }
        let sent: Sent = serde_json::from_value(r.structured_content.unwrap_or_default())
            .expect("a send's result has its id");
        if let Some(st) = sent.status {
            self.shown.push((sent.id.clone(), st));
        }
        self.accepted.push(Accepted {
            id: sent.id,
            from,
            started,
            broadcast,
        });
        true
    }
}
