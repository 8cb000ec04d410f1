//! One op, its answer printed: as JSON with `--json`, else in words.

use std::process::ExitCode;

use agentmesh_node::api::{Request, ops};
use agentmesh_node::home::Home;

use crate::term;

/// Runs one op and prints its result as JSON, or `human` of it.
pub fn simple<R: Request>(
    home: &Home,
    r: R,
    json: bool,
    human: impl FnOnce(&R::Answer),
) -> anyhow::Result<ExitCode> {
    spoken(home, None, r, json, human)
}

/// As [`simple`], after `reset` (a `hop_reset`: the person speaking,
/// whose answer does not matter).
pub fn spoken<R: Request>(
    home: &Home,
    reset: Option<ops::HopReset>,
    r: R,
    json: bool,
    human: impl FnOnce(&R::Answer),
) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let value = rt.block_on(async {
        let mut c = term::client(home).await?;
        if let Some(reset) = reset {
            let _ = c.call(reset).await;
        }
        anyhow::Ok(c.call(r).await?)
    })?;
    if json {
        term::json(&value)?;
    } else {
        human(&value);
    }
    Ok(ExitCode::SUCCESS)
}
