//! # agentmesh (the command)
//!
//! Every command here will be a client of the local daemon's socket, the
//! same way every other client is: `daemon`/`up`/`down`, `init`, `team`,
//! `invite`, `join`, `admit`, `revoke`, `peers`, `status`, `doctor`, `send`,
//! `inbox`, `watch`, the MCP server (`agentmesh mcp`) and the agent hooks.
//! Binaries stay thin: they parse arguments and call `agentmesh-node`.
//!
//! Today the daemon does not exist yet, so the command only reports its
//! version.

use clap::Parser;

/// agentmesh: messages between AI coding agents and their people, across machines.
#[derive(Debug, Parser)]
#[command(name = "agentmesh", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
    println!(
        "agentmesh {}: the daemon and its commands are not built yet; see CHANGELOG.md",
        env!("CARGO_PKG_VERSION")
    );
}
