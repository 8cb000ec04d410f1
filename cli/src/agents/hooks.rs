//! `agentmesh hook claude|codex EVENT`: mail into a running session at its
//! turn boundaries, for every agent (Codex has no server push; Claude Code
//! drops channel events while idle).
//!
//! ```text
//!  stdin: the hook's JSON {session_id, cwd, stop_hook_active, …}
//!   ── mailbox of `cwd` (not this process's folder) ── peek, then take what
//!      fits (marked read: injected into one session, once)
//!   SessionStart, UserPromptSubmit, PostToolUse
//!      ── {"hookSpecificOutput":{"hookEventName":E,"additionalContext":…}}
//!   Stop ── {"decision":"block","reason":…} while unread mail waits
//!   UserPromptSubmit ── then hop_reset: the person spoke
//!  nothing to say, no daemon, bad input, any error ── prints nothing, exit 0
//! ```
//!
//! A message a hook names is marked read, so a `Stop` with
//! `stop_hook_active` never blocks again for it: it blocks again only for
//! mail that arrived since.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{Op, Taken, Who, WhoKind};
use agentmesh_node::client::{Client, ClientError, Requests};
use agentmesh_node::home::Home;

/// The agents whose hooks this speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Code.
    Claude,
    /// OpenAI Codex.
    Codex,
}

impl Agent {
    fn who_name(self) -> &'static str {
        match self {
            Agent::Claude => "claude-code",
            Agent::Codex => "codex",
        }
    }
}

/// The events a hook acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PostToolUse,
    Stop,
}

impl HookEvent {
    fn parse(name: &str) -> Option<HookEvent> {
        let folded: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        Some(match folded.as_str() {
            "sessionstart" => HookEvent::SessionStart,
            "userpromptsubmit" => HookEvent::UserPromptSubmit,
            "posttooluse" => HookEvent::PostToolUse,
            "stop" => HookEvent::Stop,
            _ => return None,
        })
    }

    /// The name the agent's hook output uses.
    fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
        }
    }
}

/// The hook's input on stdin, at most this many bytes.
const MAX_INPUT: u64 = 1024 * 1024;
/// Everything a hook does, at most: past it, it says nothing (the agent's
/// turn never waits on a stuck daemon).
const BUDGET: Duration = Duration::from_secs(3);
/// Messages one injection looks at.
const PEEK: usize = 20;
/// Characters of framed mail one injection carries, about (at least one
/// message, whatever its size).
const MAX_INJECTED: usize = 32 * 1024;

/// Runs the hook; always exits 0.
pub fn run(home: &Home, agent: Agent, event: &str, mailbox: Option<&str>) -> ExitCode {
    let mut input = String::new();
    let _ = std::io::stdin().take(MAX_INPUT).read_to_string(&mut input);
    if let Some(out) = answer(home, agent, event, mailbox, &input) {
        println!("{out}");
    }
    ExitCode::SUCCESS
}

/// What the hook prints for `input`, if anything.
fn answer(
    home: &Home,
    agent: Agent,
    event: &str,
    mailbox: Option<&str>,
    input: &str,
) -> Option<String> {
    let event = HookEvent::parse(event)?;
    let input: serde_json::Value = serde_json::from_str(input).unwrap_or_default();
    let cwd = input["cwd"]
        .as_str()
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())?;
    let session = input["session_id"]
        .as_str()
        .map(|s| s.chars().take(128).collect());
    let who = Who {
        kind: WhoKind::Agent,
        name: agent.who_name().into(),
        session_id: session,
        task: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let taken = rt
        .block_on(async {
            tokio::time::timeout(BUDGET, mail(home, who, &cwd, mailbox, event)).await
        })
        .ok()?
        .ok()?;
    let text = super::frame_all(&taken.messages);
    if taken.messages.is_empty() {
        return None;
    }
    let out = match event {
        HookEvent::Stop => serde_json::json!({
            "decision": "block",
            "reason": format!(
                "{} new message(s) from peers arrived before you stopped; read them, and reply where one asks you something (or tell your user you won't).\n\n{text}",
                taken.messages.len()
            ),
        }),
        _ => serde_json::json!({
            "hookSpecificOutput": {
                "hookEventName": event.name(),
                "additionalContext": text,
            }
        }),
    };
    Some(out.to_string())
}

/// The mail to inject: what fits, taken (marked read) from the mailbox of
/// `cwd`; after a prompt, the hop reset.
async fn mail(
    home: &Home,
    who: Who,
    cwd: &std::path::Path,
    mailbox: Option<&str>,
    event: HookEvent,
) -> Result<Taken, ClientError> {
    let (requests, _events) = Client::connect(home, who).await?.split();
    let found = super::resolve_mailbox(&requests, mailbox, cwd).await?;
    let mailbox = Some(found.mailbox);
    let taken = take_what_fits(&requests, mailbox.clone()).await?;
    if event == HookEvent::UserPromptSubmit {
        let _: serde_json::Value = requests.call(Op::HopReset { mailbox }).await?;
    }
    Ok(taken)
}

/// Looks at the oldest unread messages, then takes as many as fit one
/// injection (at least one).
async fn take_what_fits(
    requests: &Requests,
    mailbox: Option<String>,
) -> Result<Taken, ClientError> {
    let peeked: Taken = requests
        .call(Op::Take {
            mailbox: mailbox.clone(),
            limit: Some(PEEK),
            peek: true,
        })
        .await?;
    if peeked.messages.is_empty() {
        return Ok(peeked);
    }
    let mut size = 0;
    let mut fit = 0;
    for m in &peeked.messages {
        size += super::frame(m).len();
        if size > MAX_INJECTED && fit > 0 {
            break;
        }
        fit += 1;
    }
    requests
        .call(Op::Take {
            mailbox,
            limit: Some(fit),
            peek: false,
        })
        .await
}
