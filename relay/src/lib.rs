//! # agentmesh-relay
//!
//! The public relay and bootstrap node operators run: a libp2p circuit
//! relay v2 server (so machines behind NAT can reach each other and then
//! hole-punch a direct connection with DCUtR), a Kademlia server on
//! agentmesh's private protocol name, identify and ping. A relay never sees
//! an envelope's contents: it carries Noise-encrypted streams between
//! members. Nothing is implemented yet; the binary only reports its version.

#![deny(missing_docs)]

/// The relay's version, as the binary reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
