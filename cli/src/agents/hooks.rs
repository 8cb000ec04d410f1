//! `agentmesh hook claude|codex EVENT`: mail into a running session at its
//! turn boundaries, for every agent (Codex has no server push; Claude Code
//! drops channel events while idle).
//!
//! ```text
//!  stdin: the hook's JSON {session_id, cwd, stop_hook_active, …}
//!   ── mailbox of `cwd` (not this process's folder; none: print nothing)
//!   ── take what fits (marked read in one step: injected into one
//!      session, once), cut to MAX_INJECTED as the model reads it
//!   every event (not in a run agentmesh started) ── the session reported:
//!      live from SessionStart until SessionEnd (custody: no run resumes it)
//!   SessionEnd, or any event in a run agentmesh started
//!      (AGENTMESH_WAKE_RUN set: its prompt shows its mail) ── nothing more
//!   SessionStart, UserPromptSubmit, PostToolUse
//!      ── {"hookSpecificOutput":{"hookEventName":E,"additionalContext":…}}
//!   Stop ── {"decision":"block","reason":…} while unread mail waits
//!   UserPromptSubmit ── then hop_reset: the person spoke
//!  no daemon, stopped with `agentmesh down` ── says so, once per session
//!      ({"systemMessage": …} for the person, the context for the model)
//!  nothing to say, no daemon, bad input, any error ── prints nothing, exit 0
//! ```
//!
//! A message a hook names is marked read, so a `Stop` with
//! `stop_hook_active` never blocks again for it: it blocks again only for
//! mail that arrived since.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{SessionEvent, Taken, WakeAgent, Who, WhoKind, ops};
use agentmesh_node::client::{Client, ClientError};
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
    fn wake_agent(self) -> WakeAgent {
        match self {
            Agent::Claude => WakeAgent::Claude,
            Agent::Codex => WakeAgent::Codex,
        }
    }

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
    SessionEnd,
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
            "sessionend" => HookEvent::SessionEnd,
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
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
        }
    }
}

/// The hook's input on stdin, at most this many bytes.
const MAX_INPUT: u64 = 1024 * 1024;
/// Reaching the daemon and finding the mailbox, at most: past it, the hook
/// says nothing (the agent's turn never waits on a stuck daemon). Nothing
/// is marked read by then.
const REACH: Duration = Duration::from_millis(500);
/// The take itself, once asked for, at most: it marks mail read, so it is
/// waited for rather than abandoned early (the agent's own hook timeout,
/// set by `agentmesh setup`, is 5 s).
const TAKE: Duration = Duration::from_secs(4);
/// Messages one injection carries, at most.
const MAX_MESSAGES: usize = 20;
/// Bytes of text one injection carries at most, measured as the model
/// reads it (escaped, framed, with the preamble): what is taken is about
/// this much before escaping, and a message whose escaped text does not
/// fit is cut with a marker saying how to read all of it (one 64 KiB
/// message of `<` would otherwise be 256 KiB of context).
const MAX_INJECTED: usize = 32 * 1024;

/// Runs the hook; always exits 0.
pub fn run(home: &Home, agent: Agent, event: &str, mailbox: Option<&str>) -> ExitCode {
    // An agent asked to judge a broadcast is no session: nothing to
    // report, nothing to show it.
    if super::mcp::in_judgment() {
        return ExitCode::SUCCESS;
    }
    let mut input = String::new();
    let _ = std::io::stdin().take(MAX_INPUT).read_to_string(&mut input);
    if let Some(out) = answer(home, agent, event, mailbox, &input) {
        // An agent that closed its end gets nothing, and no panic.
        let _ = writeln!(std::io::stdout(), "{out}");
    }
    ExitCode::SUCCESS
}

/// What an agent's hook is given on stdin, as far as agentmesh reads it
/// (Claude Code and Codex send more; the rest is ignored).
#[derive(Debug, Default, serde::Deserialize)]
struct HookInput {
    /// The session's working folder.
    #[serde(default)]
    cwd: Option<String>,
    /// The session's id.
    #[serde(default)]
    session_id: Option<String>,
}

/// The session id an agent's hook input names, as the daemon takes one:
/// cut to the protocol's limit in bytes at a character boundary, and none
/// if it is not one line of printable text (then the hook still works,
/// for a session it cannot name).
fn session_id(id: &str) -> Option<String> {
    use agentmesh_protocol::envelope::MAX_SESSION_ID;
    let id = super::cut(id, MAX_SESSION_ID);
    agentmesh_protocol::names::one_line_problem(&id)
        .is_none()
        .then_some(id)
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
    let input: HookInput = serde_json::from_str(input).unwrap_or_default();
    let cwd = input
        .cwd
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())?;
    let session = input.session_id.as_deref().and_then(session_id);
    let who = Who {
        kind: WhoKind::Agent,
        name: agent.who_name().into(),
        session_id: session.clone(),
        task: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    // No mailbox for this folder: nothing to say, nothing marked read.
    let taken = match rt.block_on(mail(home, (agent, who), &cwd, mailbox, event)) {
        Ok(taken) => taken?,
        Err(ClientError::NotRunning { .. }) if event != HookEvent::SessionEnd => {
            return stopped(home, event, session.as_deref().unwrap_or_default());
        }
        Err(_) => return None,
    };
    if taken.messages.is_empty() {
        return None;
    }
    let out = match event {
        HookEvent::Stop => {
            let lead = format!(
                "{} from peers arrived before you stopped; read {}, and reply where one asks you something (or tell your user you won't).\n\n",
                agentmesh_protocol::time::count(taken.messages.len() as u64, "new message"),
                if taken.messages.len() == 1 {
                    "it"
                } else {
                    "them"
                }
            );
            serde_json::json!({
                "decision": "block",
                "reason": super::frame_all(&lead, &taken.messages, MAX_INJECTED),
            })
        }
        _ => serde_json::json!({
            "hookSpecificOutput": {
                "hookEventName": event.name(),
                "additionalContext": super::frame_all("", &taken.messages, MAX_INJECTED),
            }
        }),
    };
    Some(out.to_string())
}

/// With no daemon because a person ran `agentmesh down`: saying so, to
/// the person (`systemMessage`) and, but at Stop, to the model, once per
/// session (the record in the home remembers whom it told); else nothing.
/// A Stop is never blocked for it.
fn stopped(home: &Home, event: HookEvent, session: &str) -> Option<String> {
    if home.stopped_by_down().is_none() || !home.tell_session_once(session) {
        return None;
    }
    let said = format!("agentmesh: {}", crate::term::STOPPED_BY_DOWN);
    let out = match event {
        HookEvent::Stop => serde_json::json!({ "systemMessage": said }),
        _ => serde_json::json!({
            "systemMessage": said,
            "hookSpecificOutput": {
                "hookEventName": event.name(),
                "additionalContext": format!(
                    "{said}. Until then no mail from peers reaches this session; starting it is your user's decision."
                ),
            }
        }),
    };
    Some(out.to_string())
}

/// The mail to inject: what fits, taken (marked read) from the mailbox of
/// `cwd`; after a prompt, the hop reset. `None` when the folder has no
/// mailbox (its name is another folder's, or folds to nothing).
async fn mail(
    home: &Home,
    (agent, who): (Agent, Who),
    cwd: &std::path::Path,
    mailbox: Option<&str>,
    event: HookEvent,
) -> Result<Option<Taken>, ClientError> {
    let slow = || ClientError::Io("the daemon did not answer in time".into());
    let session = who.session_id.clone();
    let reach = async {
        let (requests, _events) = Client::connect(home, who).await?.split();
        let found = super::resolve_mailbox(&requests, mailbox, cwd).await?;
        Ok::<_, ClientError>((requests, found.mailbox))
    };
    let (requests, mailbox) = tokio::time::timeout(REACH, reach)
        .await
        .map_err(|_| slow())??;
    let Some(mailbox) = mailbox else {
        return Ok(None);
    };
    let mailbox = Some(mailbox);
    // A woken run's prompt is agentmesh's, not its person's: every limit
    // (hop, quota, taint) carries through the run, and its session is in
    // the daemon's custody, not reported as its person's.
    let woken =
        std::env::var_os(agentmesh_node::agents::run::RUN_MARKER).is_some_and(|v| !v.is_empty());
    if let (Some(session_id), false) = (session, woken) {
        // Custody: a session is live from its start to its end; a run
        // never resumes a live one. What this answers changes nothing here.
        let op = ops::Session {
            mailbox: mailbox.clone(),
            agent: agent.wake_agent(),
            session_id,
            event: match event {
                HookEvent::SessionStart => SessionEvent::Start,
                HookEvent::SessionEnd => SessionEvent::End,
                _ => SessionEvent::Seen,
            },
        };
        let seen = requests.call(op);
        let _ = tokio::time::timeout(REACH, seen).await;
    }
    if event == HookEvent::SessionEnd || woken {
        // Nothing more reaches a session that ended. A run agentmesh
        // started takes nothing either: its prompt shows its mail, marked
        // read only when the run exits 0, and mail arriving meanwhile
        // waits for the next run.
        return Ok(None);
    }
    let take = ops::Take {
        mailbox: mailbox.clone(),
        limit: Some(MAX_MESSAGES),
        max_bytes: Some(MAX_INJECTED),
        peek: false,
        stop: event == HookEvent::Stop,
    };
    let taken: Taken = tokio::time::timeout(TAKE, requests.call(take))
        .await
        .map_err(|_| slow())??;
    if event == HookEvent::UserPromptSubmit {
        // What was taken is shown whatever this answers.
        let reset = requests.call(ops::HopReset { mailbox });
        let _ = tokio::time::timeout(REACH, reset).await;
    }
    Ok(Some(taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session id the daemon would refuse must not cost the hook its
    /// attach: an id of 128 characters but 256 bytes once failed it.
    #[test]
    fn a_hooks_session_id_is_one_the_daemon_takes() {
        let who = |session_id: Option<String>| Who {
            kind: WhoKind::Agent,
            name: "claude".into(),
            session_id,
            task: None,
        };
        let long = "é".repeat(128);
        let id = session_id(&long);
        assert!(
            id.as_ref()
                .is_some_and(|id| id.len() <= 128 && id.starts_with('é'))
        );
        assert!(who(id).check().is_ok());
        assert!(
            who(Some(long)).check().is_err(),
            "the daemon's own limit is in bytes"
        );
        // Not one line of printable text: no session, rather than no hook.
        assert_eq!(session_id("two\nlines"), None);
        assert_eq!(session_id("bell\u{7}"), None);
        assert_eq!(
            session_id("0199c2a4-7d1e-7c3b-9f52-3c1e0f6b2a11").as_deref(),
            Some("0199c2a4-7d1e-7c3b-9f52-3c1e0f6b2a11")
        );
    }
}
