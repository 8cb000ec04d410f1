//! The configuration file, `HOME/config.toml`.
//!
//! Every field is optional; a missing file means every default. Unknown
//! fields are refused (a typo should not be silently ignored), and
//! [`Config::validate`] names the field at fault; [`Config::load_settings`]
//! (what the daemon and every command use) names the file too, and says
//! how to fix it. `agentmesh config show` prints the configuration in
//! effect, defaults filled in; `agentmesh config set|unset` edit the file
//! in place through [`edit::ConfigFile`].

mod bus;
mod carry;
pub mod edit;
mod relays;
mod ui;
mod wake;

pub use bus::BusConfig;
pub use carry::{CarrierConfig, CarryRules};
pub use relays::{DEFAULT_RESERVATIONS, RelaysConfig};
pub use ui::{DEFAULT_UI_PORT, UiConfig};
pub use wake::{WakeConfig, WakeRules};

use std::path::Path;
use std::time::Duration;

use agentmesh_protocol::{Multiaddr, Name};
use serde::{Deserialize, Serialize};

/// The port agentmesh listens on by default, TCP and UDP (QUIC) alike.
pub const DEFAULT_PORT: u16 = 7650;

/// A configuration problem, naming the field. Every message is one line
/// (the daemon's last log line is what `agentmesh up` shows) and, once the
/// file is known, names it and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or not TOML for this configuration (an
    /// unknown field, a value of the wrong type).
    #[error("the config file {path} is not valid: {at}{}: {message}; {}", field.as_ref().map(|f| format!(", field `{f}`")).unwrap_or_default(), parse_fix(field.as_deref(), message, path))]
    Parse {
        /// The file.
        path: String,
        /// Where in it: `line 3, column 9`.
        at: String,
        /// The field at fault, dotted (`agents.max_hop`), when the parser
        /// points at one.
        field: Option<String>,
        /// The parser's message, on one line.
        message: String,
    },
    /// A field holds a value that can't be used.
    #[error("{}config field `{field}`: {problem}{}", path.as_ref().map(|p| format!("the config file {p}: ")).unwrap_or_default(), path.as_ref().map(|_| format!("; {}", invalid_fix(field))).unwrap_or_default())]
    Invalid {
        /// The file, once known ([`Config::validate`] alone does not know
        /// it; [`Config::load_settings`] fills it in).
        path: Option<String>,
        /// The field, as written in the file (`listen[1]`, `join.max_pending`).
        field: String,
        /// What is wrong and what to do.
        problem: String,
    },
    /// `config set` or `config unset` named a key the configuration does
    /// not have.
    #[error("{}", unknown_key(key, suggestion.as_deref(), known))]
    UnknownKey {
        /// The key given.
        key: String,
        /// The nearest known key, if one is near.
        suggestion: Option<String>,
        /// Every known key.
        known: Vec<String>,
    },
    /// `config set` was given a value its key can't hold, or a key that
    /// names a table or is set another way.
    #[error("{key}: {problem}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong and what to give instead.
        problem: String,
    },
    /// The file could not be written.
    #[error("cannot write the config file {path}: {source}; nothing was changed")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl ConfigError {
    /// The same error, naming the file it is about.
    pub fn in_file(self, file: &Path) -> ConfigError {
        match self {
            ConfigError::Invalid {
                path: None,
                field,
                problem,
            } => ConfigError::Invalid {
                path: Some(file.display().to_string()),
                field,
                problem,
            },
            other => other,
        }
    }

    /// The field at fault, dotted, when the error names one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Parse { field, .. } => field.as_deref(),
            ConfigError::Invalid { field, .. } => Some(field),
            ConfigError::UnknownKey { key, .. } | ConfigError::BadValue { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// The key a field is set with: `listen[1]` is set as `listen`.
fn key_of(field: &str) -> &str {
    field.split('[').next().unwrap_or(field)
}

/// What to do about an invalid value.
fn invalid_fix(field: &str) -> String {
    let key = key_of(field);
    format!(
        "change it with `agentmesh config set {key} VALUE`, or go back to the default with `agentmesh config unset {key}`"
    )
}

/// What to do about a file the parser refused.
fn parse_fix(field: Option<&str>, message: &str, path: &str) -> String {
    match field.map(key_of) {
        Some(key) if message.starts_with("unknown field") => {
            format!("remove it with `agentmesh config unset {key}` (or edit {path})")
        }
        Some(key) => invalid_fix(key),
        None => format!("edit {path} (`agentmesh config show` checks it)"),
    }
}

/// An unknown key's message: the near one, else every one.
fn unknown_key(key: &str, suggestion: Option<&str>, known: &[String]) -> String {
    match suggestion {
        Some(s) => format!("no config key `{key}`; did you mean `{s}`?"),
        None => format!("no config key `{key}`; the keys are {}", known.join(", ")),
    }
}

/// The daemon's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This machine's name: how teammates address it (`mailbox@NAME`).
    /// Default: the host name, folded to the name rule (lowercase letters,
    /// digits and `-`, at most 32).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Multiaddrs to listen on. Default: TCP and QUIC on port 7650 on every
    /// IPv4 and IPv6 interface.
    pub listen: Vec<String>,
    /// Find machines on the local network with mDNS. Default: true.
    pub mdns: bool,
    /// `[relays]`: the relays to hold reservations on, and on how many at
    /// once.
    pub relays: RelaysConfig,
    /// Kademlia bootstrap nodes (an agentmesh-relay is one), each ending in
    /// `/p2p/PEER_ID`. Default: none.
    pub bootstrap: Vec<String>,
    /// This machine is always on: it holds sealed envelopes for members
    /// that are offline and hands them over when they connect (a
    /// carrier; announced in its directory record). Default: false.
    pub carry: bool,
    /// Storage settings.
    pub store: StoreConfig,
    /// Limits on joining.
    pub join: JoinConfig,
    /// Messaging.
    pub messages: MessagesConfig,
    /// Agents: loop safety.
    pub agents: AgentsConfig,
    /// `[bus]`: the directory and broadcasts.
    pub bus: BusConfig,
    /// `[wake]`: waking idle sessions when mail arrives.
    pub wake: WakeConfig,
    /// `[carrier]`: the bounds on what a carrier holds, and when mail is
    /// handed to one.
    pub carrier: CarrierConfig,
    /// `[ui]`: the local web page.
    pub ui: UiConfig,
}

/// Loop safety for agents' messages (docs/agents.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// The highest hop a new message may carry; past it, refused. Default
    /// 2: a person asks A (hop 0), A asks B (hop 1), B asks C (hop 2), C can
    /// ask no one. 0: agents handling peer mail may only reply. Replies are
    /// never refused for their hop. At most 16.
    pub max_hop: u8,
    /// Messages of hop 1 or more from one mailbox to one address in an
    /// hour, at most. Default 6. Hop 0 (a person, or an agent its person
    /// started) is never counted.
    pub pair_limit_per_hour: u32,
    /// With no peer mail for this long, a mailbox's hop falls back to 0
    /// (agents whose hooks never report the person's prompt). Default "10m".
    pub hop_reset: String,
    /// Replies one mailbox may send in one thread until its person speaks
    /// again. Default 6: an agent may answer a clarifying question a few
    /// times over, but two agents replying to each other stop after 6
    /// turns each. At least 1.
    pub max_turns: u32,
    /// New asks a mailbox handling peer mail may send until its person
    /// speaks again (the per-turn quota; replies to the mail it handles
    /// are not counted). Default 3; 0: none.
    pub turn_asks: u32,
    /// New tells, likewise. Default 3.
    pub turn_tells: u32,
    /// Broadcasts, likewise. Default 1.
    pub turn_broadcasts: u32,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        let q = TurnQuota::default();
        AgentsConfig {
            max_hop: 2,
            pair_limit_per_hour: 6,
            hop_reset: "10m".into(),
            max_turns: 6,
            turn_asks: q.asks,
            turn_tells: q.tells,
            turn_broadcasts: q.broadcasts,
        }
    }
}

/// What a mailbox handling peer mail may send until its person speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnQuota {
    /// New asks.
    pub asks: u32,
    /// New tells.
    pub tells: u32,
    /// Broadcasts.
    pub broadcasts: u32,
}

impl Default for TurnQuota {
    fn default() -> Self {
        TurnQuota {
            asks: 3,
            tells: 3,
            broadcasts: 1,
        }
    }
}

/// The loop rules, from `[agents]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopRules {
    /// The highest hop a new message may carry.
    pub max_hop: u8,
    /// Messages of hop ≥ 1 from one mailbox to one address per hour, at
    /// most.
    pub pair_per_hour: u32,
    /// With no peer mail for this long, a mailbox's hop falls back to 0.
    pub hop_reset: Duration,
    /// Replies from one mailbox in one thread until its person speaks.
    pub max_turns: u32,
    /// New messages a mailbox handling peer mail may send until then.
    pub quota: TurnQuota,
}

impl Default for LoopRules {
    fn default() -> Self {
        LoopRules {
            max_hop: 2,
            pair_per_hour: 6,
            hop_reset: Duration::from_secs(600),
            max_turns: 6,
            quota: TurnQuota::default(),
        }
    }
}

/// Replies to one ask that pass unheld, by default: an answer, a
/// correction and a follow-up or two; a machine asked once can't turn the
/// question into an open channel past the hold.
pub const DEFAULT_REPLIES_PER_ASK: u32 = 5;

/// Messaging settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MessagesConfig {
    /// How long a sent message stays deliverable. Default: "7d", so a
    /// machine away over a long weekend still gets its mail. At most 30d.
    pub lifetime: String,
    /// How long the audit log keeps entries. Default: "90d".
    pub audit_retention: String,
    /// Replies to one of this machine's asks that pass unheld from another
    /// person's machine (more are held like other mail). Default: 5.
    pub replies_per_ask: u32,
}

impl Default for MessagesConfig {
    fn default() -> Self {
        MessagesConfig {
            lifetime: "7d".into(),
            audit_retention: "90d".into(),
            replies_per_ask: DEFAULT_REPLIES_PER_ASK,
        }
    }
}

/// Storage settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// sled's page cache, in MiB (as sled counts it: pages' sizes on
    /// disk, rounded up to a power of two). Default: 1. The store's
    /// working set is small: at 30,000 messages a 4 MiB cache kept the
    /// receiving daemon 12 MiB smaller than 16 did, and at 100,000 a 1 MiB
    /// cache kept a restarted receiver 1-9 MiB smaller than 4 did, with no
    /// throughput difference the paired runs could see (docs/benchmarks.md,
    /// "Bounded memory").
    pub cache_mib: u64,
}

/// Limits on joining: how long a request lives, how many may wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JoinConfig {
    /// How long `agentmesh invite` tickets last unless `--ttl` says
    /// otherwise. Default: "10m".
    pub invite_ttl: String,
    /// The longest `--ttl` accepted. Default: "24h". The pairing code's
    /// strength rests on requests being short-lived (docs/protocol.md §7.5).
    pub max_invite_ttl: String,
    /// How long a join request waits for `agentmesh admit`. Default: "10m".
    pub request_ttl: String,
    /// Join requests waiting at once, from all machines. Default: 16.
    pub max_pending: usize,
    /// Join requests one machine may make per minute. Default: 3.
    pub max_per_peer_per_minute: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: None,
            listen: vec![
                format!("/ip4/0.0.0.0/tcp/{DEFAULT_PORT}"),
                format!("/ip4/0.0.0.0/udp/{DEFAULT_PORT}/quic-v1"),
                format!("/ip6/::/tcp/{DEFAULT_PORT}"),
                format!("/ip6/::/udp/{DEFAULT_PORT}/quic-v1"),
            ],
            mdns: true,
            relays: RelaysConfig::default(),
            bootstrap: vec![],
            carry: false,
            store: StoreConfig::default(),
            join: JoinConfig::default(),
            messages: MessagesConfig::default(),
            agents: AgentsConfig::default(),
            bus: BusConfig::default(),
            wake: WakeConfig::default(),
            carrier: CarrierConfig::default(),
            ui: UiConfig::default(),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { cache_mib: 1 }
    }
}

impl Default for JoinConfig {
    fn default() -> Self {
        JoinConfig {
            invite_ttl: "10m".into(),
            max_invite_ttl: "24h".into(),
            request_ttl: "10m".into(),
            max_pending: 16,
            max_per_peer_per_minute: 3,
        }
    }
}

/// The configuration once validated, with values parsed.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This machine's name.
    pub name: Name,
    /// Where to listen.
    pub listen: Vec<Multiaddr>,
    /// Whether mDNS runs.
    pub mdns: bool,
    /// Relays to reserve on, each ending in `/p2p/RELAY`, in the order
    /// they are preferred.
    pub relays: Vec<Multiaddr>,
    /// How many relays to hold reservations on at once.
    pub reservations: usize,
    /// Kademlia bootstrap nodes, each ending in `/p2p/PEER`.
    pub bootstrap: Vec<Multiaddr>,
    /// sled's cache, bytes.
    pub cache_bytes: u64,
    /// Default ticket lifetime.
    pub invite_ttl: Duration,
    /// Longest ticket lifetime.
    pub max_invite_ttl: Duration,
    /// Join request lifetime.
    pub request_ttl: Duration,
    /// Pending join requests, at most.
    pub max_pending: usize,
    /// Join requests per machine per minute, at most.
    pub max_per_peer_per_minute: u32,
    /// How long a sent message stays deliverable.
    pub message_lifetime: Duration,
    /// Loop safety.
    pub loops: LoopRules,
    /// Replies to one of this machine's asks that pass unheld.
    pub replies_per_ask: u32,
    /// How long the audit log keeps entries.
    pub audit_retention: Duration,
    /// The preset of mailboxes that chose none.
    pub preset: agentmesh_judge::Preset,
    /// How broadcasts are judged.
    pub judge: crate::judge::JudgeWith,
    /// How idle sessions are woken.
    pub wake: WakeRules,
    /// `carry` and `[carrier]`.
    pub carry: CarryRules,
    /// The configuration these settings came from, defaults and the
    /// machine name filled in (what `agentmesh config show` prints).
    pub config: Config,
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        path: None,
        field: field.into(),
        problem: problem.into(),
    }
}

fn duration(field: &str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text).map_err(|e| {
        invalid(
            field,
            format!("{text:?} is not a duration ({e}); write it like \"10m\" or \"2h\""),
        )
    })
}

impl Config {
    /// Reads `path`; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        Config::parse(&text, path)
    }

    /// Parses `text`, the contents of `path`: the one parser of
    /// config.toml, which the daemon and `config set` both use.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| edit::parse_error(&e, text, path))
    }

    /// Reads and checks `path`, as the daemon does at start: errors name
    /// the file, the field, the reason and what to do.
    pub fn load_settings(path: &Path) -> Result<Settings, ConfigError> {
        Config::load(path)?.validate().map_err(|e| e.in_file(path))
    }

    /// The configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("the configuration always serialises")
    }

    /// Checks every field and parses it.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let name = match &self.name {
            Some(n) => {
                Name::parse("machine name", n).map_err(|e| invalid("name", e.to_string()))?
            }
            None => default_name(),
        };
        if self.listen.is_empty() {
            return Err(invalid(
                "listen",
                "is empty, so no machine could reach this one; list at least one address such as \"/ip4/0.0.0.0/tcp/7650\"",
            ));
        }
        let listen = self
            .listen
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.parse::<Multiaddr>().map_err(|e| {
                    invalid(
                        format!("listen[{i}]"),
                        format!("{a:?} is not a multiaddr ({e}); write it like \"/ip4/0.0.0.0/tcp/7650\""),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (relays, reservations) = self.relays.validate()?;
        let bootstrap = peer_addrs("bootstrap", &self.bootstrap)?;
        if self.store.cache_mib == 0 || self.store.cache_mib > 4096 {
            return Err(invalid("store.cache_mib", "must be from 1 to 4096"));
        }
        let invite_ttl = duration("join.invite_ttl", &self.join.invite_ttl)?;
        let max_invite_ttl = duration("join.max_invite_ttl", &self.join.max_invite_ttl)?;
        if max_invite_ttl > Duration::from_secs(7 * 24 * 3600) {
            return Err(invalid(
                "join.max_invite_ttl",
                "must be at most 7d: a ticket is a standing invitation to anyone who copies it",
            ));
        }
        if invite_ttl > max_invite_ttl {
            return Err(invalid(
                "join.invite_ttl",
                "is longer than join.max_invite_ttl",
            ));
        }
        let request_ttl = duration("join.request_ttl", &self.join.request_ttl)?;
        if request_ttl < Duration::from_secs(30) || request_ttl > Duration::from_secs(3600) {
            return Err(invalid(
                "join.request_ttl",
                "must be from 30s to 1h: long enough for two people to compare codes, short enough that the codes stay strong",
            ));
        }
        if self.join.max_pending == 0 || self.join.max_pending > 256 {
            return Err(invalid("join.max_pending", "must be from 1 to 256"));
        }
        if self.join.max_per_peer_per_minute == 0 {
            return Err(invalid(
                "join.max_per_peer_per_minute",
                "must be at least 1",
            ));
        }
        let message_lifetime = duration("messages.lifetime", &self.messages.lifetime)?;
        if message_lifetime < Duration::from_secs(60)
            || message_lifetime > agentmesh_protocol::time::MAX_ENVELOPE_LIFETIME
        {
            return Err(invalid("messages.lifetime", "must be from 1m to 30d"));
        }
        let audit_retention = duration("messages.audit_retention", &self.messages.audit_retention)?;
        if audit_retention < Duration::from_secs(3600) {
            return Err(invalid("messages.audit_retention", "must be at least 1h"));
        }
        if self.messages.replies_per_ask > 100 {
            return Err(invalid(
                "messages.replies_per_ask",
                "must be from 0 to 100 (0: replies from another person's machine are held like any mail)",
            ));
        }
        let a = &self.agents;
        if a.max_hop > 16 {
            return Err(invalid("agents.max_hop", "must be from 0 to 16"));
        }
        if a.pair_limit_per_hour == 0 {
            return Err(invalid(
                "agents.pair_limit_per_hour",
                "must be at least 1 (hop 0 is never limited; to stop agents passing mail on, lower agents.max_hop)",
            ));
        }
        let hop_reset = duration("agents.hop_reset", &a.hop_reset)?;
        if hop_reset < Duration::from_secs(10) {
            return Err(invalid("agents.hop_reset", "must be at least 10s"));
        }
        if a.max_turns == 0 {
            return Err(invalid(
                "agents.max_turns",
                "must be at least 1 (a mailbox must be able to answer what it was asked)",
            ));
        }
        let loops = LoopRules {
            max_hop: a.max_hop,
            pair_per_hour: a.pair_limit_per_hour,
            hop_reset,
            max_turns: a.max_turns,
            quota: TurnQuota {
                asks: a.turn_asks,
                tells: a.turn_tells,
                broadcasts: a.turn_broadcasts,
            },
        };
        let wake = self.wake.rules()?;
        let mut judge = self.bus.judge_with()?;
        if let crate::judge::JudgeWith::Agent(r) = &mut judge {
            r.programs = (wake.claude.clone(), wake.codex.clone());
        }
        let carry = self.carrier.rules(self.carry)?;
        let name_text = name.to_string();
        Ok(Settings {
            wake,
            carry,
            name,
            listen,
            mdns: self.mdns,
            relays,
            reservations,
            bootstrap,
            cache_bytes: self.store.cache_mib * 1024 * 1024,
            invite_ttl,
            max_invite_ttl,
            request_ttl,
            max_pending: self.join.max_pending,
            max_per_peer_per_minute: self.join.max_per_peer_per_minute,
            message_lifetime,
            loops,
            replies_per_ask: self.messages.replies_per_ask,
            audit_retention,
            preset: self.bus.preset,
            judge,
            config: Config {
                name: Some(name_text),
                ..self.clone()
            },
        })
    }
}

/// The most relays a machine reserves on (configured and adopted from a
/// ticket): what one contact record can name.
pub const MAX_RELAYS: usize = agentmesh_protocol::contact::MAX_CONTACT_RELAYS;

/// Parses a list of multiaddrs that must each name their peer, as
/// `/p2p/PEER_ID` at the end.
pub fn peer_addrs(field: &str, addrs: &[String]) -> Result<Vec<Multiaddr>, ConfigError> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| peer_addr(a).map_err(|problem| invalid(format!("{field}[{i}]"), problem)))
        .collect()
}

/// One multiaddr ending in `/p2p/PEER_ID`; the error says what to write.
pub fn peer_addr(text: &str) -> Result<Multiaddr, String> {
    let example = "write it like \"/ip4/203.0.113.7/tcp/4001/p2p/12D3KooW…\" (`agentmesh-relay peer-id` prints the PeerId)";
    let addr: Multiaddr = text
        .parse()
        .map_err(|e| format!("{text:?} is not a multiaddr ({e}); {example}"))?;
    if !matches!(
        addr.iter().last(),
        Some(libp2p::multiaddr::Protocol::P2p(_))
    ) {
        return Err(format!("{text:?} does not end in /p2p/PEER_ID; {example}"));
    }
    if addr
        .iter()
        .any(|p| matches!(p, libp2p::multiaddr::Protocol::P2pCircuit))
    {
        return Err(format!(
            "{text:?} is a relay circuit; give the relay's own address"
        ));
    }
    Ok(addr)
}

/// The host name folded to the name rule, or `machine`.
pub fn default_name() -> Name {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    fold_name(&host)
}

/// Folds any text to a valid name: lowercase, other characters to `-`,
/// trimmed to 32, never starting with `-`; `machine` if nothing is left.
pub fn fold_name(text: &str) -> Name {
    try_fold_name(text)
        .unwrap_or_else(|| Name::parse("machine name", "machine").expect("a valid name"))
}

/// [`fold_name`] without its fallback: `None` when nothing valid is left
/// (`/`, `---`, a name of symbols only). A folder's mailbox uses this: a
/// shared fallback name would make unrelated folders one mailbox.
pub fn try_fold_name(text: &str) -> Option<Name> {
    let folded: String = text
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = folded.trim_matches('-');
    let cut: String = trimmed.chars().take(32).collect();
    Name::parse("machine name", cut.trim_end_matches('-')).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let s = Config::default().validate().unwrap();
        assert_eq!(s.listen.len(), 4);
        assert!(s.mdns);
        assert_eq!(s.invite_ttl, Duration::from_secs(600));
        // The TOML of the defaults reads back as the defaults.
        let back: Config = toml::from_str(&Config::default().to_toml()).unwrap();
        assert_eq!(back, Config::default());
    }

    #[test]
    fn errors_name_the_field() {
        let cases: [(&str, &str); 6] = [
            (
                "listen = [\"/ip4/1.2.3.4/tcp/1\", \"nonsense\"]",
                "config field `listen[1]`",
            ),
            ("listen = []", "config field `listen`"),
            ("name = \"Bob Laptop\"", "config field `name`"),
            (
                "[join]\nrequest_ttl = \"forever\"",
                "config field `join.request_ttl`",
            ),
            ("[join]\nmax_pending = 0", "config field `join.max_pending`"),
            ("[store]\ncache_mib = 0", "config field `store.cache_mib`"),
        ];
        for (text, expected) in cases {
            let config: Config = toml::from_str(text).unwrap();
            let e = config.validate().unwrap_err().to_string();
            assert!(e.starts_with(expected), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "mdsn = false\n").unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("unknown field `mdsn`"), "{e}");
    }

    #[test]
    fn host_names_fold_to_the_name_rule() {
        assert_eq!(
            fold_name("Bob's MacBook.local").as_str(),
            "bob-s-macbook-local"
        );
        assert_eq!(fold_name("---").as_str(), "machine");
        assert_eq!(try_fold_name("---"), None);
        assert_eq!(try_fold_name(""), None);
        assert_eq!(fold_name(&"x".repeat(40)).as_str().len(), 32);
    }
}
