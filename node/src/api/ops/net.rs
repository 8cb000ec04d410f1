//! The network's ops, and the socket server's own.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The network's loop's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum NetOp {
    /// [`Status`].
    Status,
    /// [`Peers`].
    Peers(Peers),
    /// [`Connect`].
    Connect(Connect),
    /// [`Shutdown`].
    Shutdown,
    /// [`ConfigShow`].
    ConfigShow,
    /// [`Directory`].
    Directory(Directory),
    /// [`Relays`].
    Relays,
    /// [`RelaysForget`].
    RelaysForget(RelaysForget),
}

/// The socket server's own operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum SocketOp {
    /// [`Ui`].
    Ui,
    /// [`BackupExport`].
    BackupExport(BackupExport),
}

/// The daemon's identity, team and addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status;

/// The peer table, a page at a time (members first, then by name and
/// PeerId).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Peers {
    /// Only rows after this one (paging; from `next_after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<api::PeerCursor>,
    /// At most this many rows (default and cap: 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// Dial an address and sync the team with whoever answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connect {
    /// A multiaddr, ending in `/p2p/PEER` or not.
    pub addr: String,
}

/// Stop the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shutdown;

/// The configuration the running daemon uses (command-line overrides
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigShow;

/// Where the local web page is, and the URL that signs a browser in
/// ([`UiView`](api::UiView)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ui;

/// The team's directory: every member machine with its mailboxes,
/// profiles, goals and statuses, and whether it is reachable now, a page
/// at a time (served by the network's loop, which knows both)
/// ([`DirectoryPage`](api::DirectoryPage)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Directory {
    /// Only mailboxes after this one (paging; from `next_after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most about this many bytes (as JSON) per page, and at least
    /// one mailbox (default and cap: 24 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
}

/// Every relay this machine knows and how its reservation stands
/// ([`RelaysView`](api::RelaysView)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relays;

/// Drop a relay adopted from a ticket: no reservation on it any more, and
/// not used again after a restart. A configured one is refused
/// (`relay_configured`: it is removed from config.toml). Answers the
/// relays left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelaysForget {
    /// The relay's PeerId.
    pub peer_id: String,
}

/// Write a backup of this machine to `file`, encrypted with `passphrase`
/// (`agentmesh backup export` while the daemon runs: it holds the
/// store). Served by the socket server beside the daemon's other work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupExport {
    /// Where to write it: an absolute path (replaced if it exists).
    pub file: std::path::PathBuf,
    /// What it is encrypted with.
    pub passphrase: api::Passphrase,
    /// Whether the mail goes in too.
    #[serde(default)]
    pub with_mail: bool,
}

requests! {
    Status => api::Status = |_| NetOp::Status;
    Peers => api::PeersPage = NetOp::Peers;
    Directory => api::DirectoryPage = NetOp::Directory;
    Connect => api::Connected = NetOp::Connect;
    Shutdown => api::Done = |_| NetOp::Shutdown;
    ConfigShow => api::ConfigShown = |_| NetOp::ConfigShow;
    Relays => api::RelaysView = |_| NetOp::Relays;
    RelaysForget => api::RelaysView = NetOp::RelaysForget;
    Ui => api::UiView = |_| SocketOp::Ui;
    BackupExport => api::BackupMade = SocketOp::BackupExport;
}
