//! Agents on the mesh: the MCP server an agent's session talks to
//! (`agentmesh mcp`) and the hooks that bring mail into a session at its
//! turn boundaries (`agentmesh hook claude|codex EVENT`).
//!
//! ```text
//!  agent session ── stdio MCP ── mcp.rs ──┐   (its tools' inputs and results: tools.rs)
//!  agent hooks ── stdin JSON ── hooks.rs ─┼── local socket ── daemon (mail actor:
//!                                         │                   take, mailbox_state,
//!  (both) ── mailbox: --mailbox, else the │                   mailbox_for, hop_reset)
//!            folder's bound mailbox ──────┘
//! ```
//!
//! What both share lives here: how a session finds its mailbox, and how a
//! message from a peer is framed for a model, as a named peer's message and
//! never as the user's instruction, escaped so that no message can close or
//! forge the frame.

pub mod hooks;
pub mod mcp;
pub mod stdio;
pub mod tools;

use std::path::Path;

use agentmesh_node::api::{MailboxFor, ops};
use agentmesh_node::client::{ClientError, Requests};

/// The mailbox a session in `cwd` serves: `given` (`--mailbox`), else the
/// mailbox bound to `cwd` or its nearest bound ancestor, else the folder's
/// base name (which receives nothing until a person runs `agentmesh
/// allow`), unless that name is another folder's mailbox or folds to
/// nothing: then none (`mailbox` is null and `not_set_up` says why).
pub async fn resolve_mailbox(
    requests: &Requests,
    given: Option<&str>,
    cwd: &Path,
) -> Result<MailboxFor, ClientError> {
    if let Some(m) = given {
        return Ok(given_mailbox(m));
    }
    requests
        .call(ops::MailboxFor {
            path: cwd.display().to_string(),
        })
        .await
}

/// The mailbox `--mailbox` names, as [`resolve_mailbox`] answers it.
pub fn given_mailbox(m: &str) -> MailboxFor {
    MailboxFor {
        mailbox: Some(m.to_owned()),
        bound_path: None,
        receives: true,
        not_set_up: None,
    }
}

pub use agentmesh_node::agents::framing::*;
