//! The bus: what lets agents find each other and speak to many at once:
//! the words the directory and the broadcast judge share.

use serde::{Deserialize, Serialize};

pub use directory::{MAX_DIRECTORY_PAGE, Published, REPUBLISH_EVERY};
pub use profiles::{LocalDirectory, LocalMailbox, Presence, Profiles, WORKING_FOR};

/// How eager a mailbox is to receive broadcasts: each preset is a
/// threshold on the judge's probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Only what is clearly about this mailbox's work.
    Strict,
    /// The default: what is likely to matter.
    #[default]
    Balanced,
    /// Anything that might matter.
    Loose,
}

impl Preset {
    /// Every preset, strictest first.
    pub const ALL: [Preset; 3] = [Preset::Strict, Preset::Balanced, Preset::Loose];

    /// Its name, as in config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Strict => "strict",
            Preset::Balanced => "balanced",
            Preset::Loose => "loose",
        }
    }

    /// The preset a name means, if any.
    pub fn parse(name: &str) -> Option<Preset> {
        Preset::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a mailbox's session is doing, as the directory shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A session is attached and a hook or tool call was seen in the last
    /// two minutes.
    Working,
    /// A session is attached and quiet.
    Idle,
    /// Nothing is attached.
    Offline,
}

impl Status {
    /// Its name, as shown and as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::Idle => "idle",
            Status::Offline => "offline",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub mod directory;
pub mod profiles;
