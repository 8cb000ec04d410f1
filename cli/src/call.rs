//! One op, its answer printed: as JSON with `--json`, else in words.

use std::process::ExitCode;

use agentmesh_node::api::{MailboxStateView, Op};
use agentmesh_node::home::Home;

use crate::term;

/// Runs one op and prints its result as JSON, or `human` of it.
pub fn simple<T: serde::de::DeserializeOwned + serde::Serialize>(
    home: &Home,
    op: Op,
    json: bool,
    human: impl FnOnce(&T),
) -> anyhow::Result<ExitCode> {
    spoken(home, None, op, json, human)
}

/// As [`simple`], after `reset` (a `hop_reset`: the person speaking,
/// whose answer does not matter).
pub fn spoken<T: serde::de::DeserializeOwned + serde::Serialize>(
    home: &Home,
    reset: Option<Op>,
    op: Op,
    json: bool,
    human: impl FnOnce(&T),
) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let value: T = rt.block_on(async {
        let mut c = term::client(home).await?;
        if let Some(reset) = reset {
            let _ = c.call::<MailboxStateView>(reset).await;
        }
        anyhow::Ok(c.call(op).await?)
    })?;
    if json {
        term::json(&value)?;
    } else {
        human(&value);
    }
    Ok(ExitCode::SUCCESS)
}
