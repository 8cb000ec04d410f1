//! `agentmesh relays`: the relays this machine holds reservations on, and
//! `relays forget` for one adopted from a ticket.

use std::process::ExitCode;

use agentmesh_node::api::{RelayState, RelayView, RelaysView, ops};
use agentmesh_node::home::Home;

use crate::term;

/// `agentmesh relays`' subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum RelaysCommand {
    /// Drop a relay adopted from the ticket this machine joined with: its
    /// reservation is released and it is not used after a restart. A
    /// configured relay is removed from config.toml instead.
    Forget {
        /// The relay's PeerId (`agentmesh relays` lists them).
        peer_id: String,
    },
}

/// `agentmesh relays [forget PEER_ID]`.
pub fn run(home: &Home, command: Option<RelaysCommand>, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        None => list(home, json),
        Some(RelaysCommand::Forget { peer_id }) => forget(home, &peer_id, json),
    }
}

/// Lists every relay and how its reservation stands.
fn list(home: &Home, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let view = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(ops::Relays).await?)
    })?;
    if json {
        term::json(&view)?;
    } else {
        print(&view);
    }
    Ok(ExitCode::SUCCESS)
}

/// Drops the adopted relay `peer_id`.
fn forget(home: &Home, peer_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let view = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(
            c.call(ops::RelaysForget {
                peer_id: peer_id.to_owned(),
            })
            .await?,
        )
    })?;
    if json {
        term::json(&view)?;
    } else {
        crate::say!(
            "Forgot the relay {peer_id}: no reservation on it, and it is not used after a restart."
        );
        print(&view);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(view: &RelaysView) {
    if view.relays.is_empty() {
        crate::say!("No relays: machines on other networks reach this one only if it is public.");
        crate::say!(
            "Add one with `agentmesh config set relays /ip4/ADDRESS/tcp/4001/p2p/RELAY_PEER_ID` (docs/relay.md runs one), then restart the daemon."
        );
        return;
    }
    let public = view.reachability == agentmesh_node::api::Reachability::Public;
    crate::say!(
        "Reservations on {} at once (relays.reservations){}.",
        term::count(view.reservations, "relay"),
        if public {
            "; AutoNAT says this machine is public, so it makes no new ones"
        } else {
            ""
        }
    );
    for r in &view.relays {
        crate::say!("{}", line(r));
        for a in &r.addrs {
            crate::say!("    {a}");
        }
    }
    let failing = view
        .relays
        .iter()
        .filter(|r| r.state == RelayState::Failing)
        .count();
    if failing > 0 && !view.relays.iter().any(|r| r.state == RelayState::Reserved) {
        crate::say!(
            "No relay holds a reservation: machines on other networks can't reach this one. Check that the relays run and that this machine reaches them (`agentmesh doctor`)."
        );
    }
}

/// One relay's line: its PeerId, state and since when.
fn line(r: &RelayView) -> String {
    let from = if r.adopted { " (from the ticket)" } else { "" };
    let how = match r.state {
        RelayState::Reserved => match &r.reserved_since {
            Some(t) => format!("reserved since {}", term::ago(t)),
            None => "reserved".into(),
        },
        RelayState::Failing => format!(
            "failing{}: {}",
            r.failing_since
                .as_deref()
                .map(|t| format!(" since {}", term::ago(t)))
                .unwrap_or_default(),
            term::clean(r.last_error.as_deref().unwrap_or("unknown"))
        ),
        RelayState::Reserving => "reserving".into(),
        RelayState::Idle => "idle (a spare)".into(),
    };
    format!("{}{from}  {how}", r.peer_id)
}
