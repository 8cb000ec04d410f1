//! The small answers of the local API: what an op that changes one thing
//! says it did. Each is a typed view, so the CLI, the MCP server and any
//! other client read fields, not strings looked up in untyped JSON.

use serde::{Deserialize, Serialize};

/// An op whose answer is only that it was done (`shutdown`,
/// `join_refuse`): `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}

/// `team leave`: the team this machine left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftView {
    /// The team's id, hex.
    pub left: String,
}

/// `revoke`: the machine revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedView {
    /// Its PeerId.
    pub revoked: String,
    /// Its machine name.
    pub name: String,
}

/// What a person decided of held mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// It is in the inbox now.
    Approved,
    /// It was dropped (its sender is told, with the reason).
    Rejected,
}

impl Resolution {
    /// The word in JSON and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Approved => "approved",
            Resolution::Rejected => "rejected",
        }
    }
}

/// `approve` / `reject`: the message, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedView {
    /// The message id.
    pub id: String,
    /// Approved or rejected.
    pub outcome: Resolution,
}

/// `trust`: the machine whose mail is no longer held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedView {
    /// Its machine name.
    pub trusted: String,
    /// Its PeerId.
    pub peer_id: String,
    /// Whether its mail passes unheld now (`false` after `trust --off`).
    #[serde(default = "yes")]
    pub trusting: bool,
    /// Its messages still held here after this (`trust` releases none
    /// unless asked: `--approve-held`).
    #[serde(default)]
    pub held: u64,
    /// Its held messages this approved (`--approve-held`).
    #[serde(default)]
    pub approved: u64,
}

fn yes() -> bool {
    true
}

/// `pause` / `resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedView {
    /// Whether inbound mail is paused now.
    pub paused: bool,
    /// `resume`: held messages it released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<u64>,
    /// `resume`: held messages still held (another person's machine, a
    /// folder opted out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub still_held: Option<u64>,
}

/// A folder bound to a mailbox (`mailboxes`, `allow`, `deny`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingView {
    /// The mailbox name.
    pub mailbox: String,
    /// The folder, absolute.
    pub path: String,
    /// Whether it receives (`allow`), or not (`deny`).
    pub allowed: bool,
    /// `allow` moved the mailbox here: the folder it was bound to before
    /// (empty when `deny` had left it none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_from: Option<String>,
}

/// `ui`: where the daemon serves the local web page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UiView {
    /// Whether it serves one (`[ui] enabled`).
    pub enabled: bool,
    /// The URL that signs a browser in: the page's address with its
    /// secret (`?secret=…`). Whoever has it sees the team: it is shown
    /// to this machine's user only.
    pub url: Option<String>,
    /// The page's address, `http://127.0.0.1:PORT/`.
    pub address: Option<String>,
    /// The port it listens on.
    pub port: Option<u16>,
    /// The port `[ui] port` asks for.
    pub configured_port: u16,
    /// That port was taken (another daemon on this machine has it): the
    /// page is on another.
    pub fell_back: bool,
}

/// `clock_advance` (test builds): how far the daemon's clock is ahead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockView {
    /// Seconds ahead of the real clock.
    pub offset_secs: u64,
}

/// A backup's passphrase: never empty, never printed (its `Debug` hides
/// it, so a logged request does not show it).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Passphrase(String);

impl Passphrase {
    /// `text` as a passphrase; refused if empty.
    pub fn new(text: String) -> Result<Self, crate::api::ApiError> {
        if text.is_empty() {
            return Err(crate::api::ApiError::new(
                crate::codes::ErrorCode::EmptyPassphrase,
                "the passphrase is empty; give one (typed when asked, or in $AGENTMESH_PASSPHRASE for scripts)",
            ));
        }
        Ok(Passphrase(text))
    }

    /// The text itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Passphrase {
    type Error = crate::api::ApiError;
    fn try_from(text: String) -> Result<Self, crate::api::ApiError> {
        Passphrase::new(text)
    }
}

impl From<Passphrase> for String {
    fn from(p: Passphrase) -> String {
        p.0
    }
}

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Passphrase(…)")
    }
}

/// What `backup export` made (the daemon, or the command with the daemon
/// stopped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupMade {
    /// The file written.
    pub file: std::path::PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// The store entries in it.
    pub entries: u64,
    /// Whether the mail is in it.
    pub with_mail: bool,
    /// The machine.
    pub name: String,
    /// Its PeerId.
    pub peer_id: String,
    /// Its team, if any.
    pub team: Option<String>,
}

/// `team renew`: the member renewed, until when, and by whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewed {
    /// Its machine name.
    pub machine: String,
    /// Its PeerId.
    pub peer_id: String,
    /// When its membership now lapses, RFC 3339.
    pub expires_at: String,
    /// The admin machine that renewed it.
    pub renewed_by: String,
}
