//! `[ui]`: the local web page (`agentmesh ui`).

use serde::{Deserialize, Serialize};

/// The web page's port unless `[ui] port` says otherwise: beside the
/// network's 7650, on 127.0.0.1 only.
pub const DEFAULT_UI_PORT: u16 = 7658;

/// `[ui]` in config.toml.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// Whether the daemon serves the web page. Default true.
    pub enabled: bool,
    /// The port on 127.0.0.1; when it is taken (another daemon of this
    /// machine has it), a free one is used and `agentmesh ui` says which.
    /// Default 7658.
    pub port: u16,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            enabled: true,
            port: DEFAULT_UI_PORT,
        }
    }
}
