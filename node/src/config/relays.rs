//! `[relays]`: the relays this machine holds reservations on.
//!
//! ```toml
//! [relays]
//! addrs = ["/ip4/203.0.113.7/tcp/4001/p2p/12D3KooW…"]
//! reservations = 2
//! ```
//!
//! The short form `relays = ["…"]` (the addresses alone, what earlier
//! versions wrote) still reads, as `addrs` with the default number of
//! reservations.

use agentmesh_protocol::Multiaddr;
use serde::{Deserialize, Deserializer, Serialize};

use super::{ConfigError, MAX_RELAYS, invalid, peer_addrs};

/// How many relays a machine behind NAT holds reservations on at once,
/// unless `relays.reservations` says otherwise: two, so one relay's
/// outage never leaves it unreachable.
pub const DEFAULT_RESERVATIONS: usize = 2;

/// `[relays]` in config.toml.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RelaysConfig {
    /// Relays to hold reservations on, each a multiaddr ending in
    /// `/p2p/RELAY_PEER_ID` (docs/networking.md), in the order they are
    /// preferred. A relay's TCP and QUIC addresses may both be listed.
    /// Default: none.
    pub addrs: Vec<String>,
    /// How many relays to hold reservations on at once, from 1 to 8.
    /// When more are known (configured, or adopted from the ticket this
    /// machine joined with), the first that work are used and the others
    /// wait as spares: one that fails is replaced by the next. Default 2.
    pub reservations: usize,
}

impl Default for RelaysConfig {
    fn default() -> Self {
        RelaysConfig {
            addrs: vec![],
            reservations: DEFAULT_RESERVATIONS,
        }
    }
}

impl RelaysConfig {
    /// The addresses, parsed, and the number of reservations, checked.
    pub(super) fn validate(&self) -> Result<(Vec<Multiaddr>, usize), ConfigError> {
        let relays = peer_addrs("relays.addrs", &self.addrs)?;
        let distinct: std::collections::HashSet<_> = relays
            .iter()
            .filter_map(|a| a.iter().last().map(|p| p.to_string()))
            .collect();
        if distinct.len() > MAX_RELAYS {
            return Err(invalid(
                "relays.addrs",
                format!(
                    "lists {} relays; at most {MAX_RELAYS} are used (a contact record names at most that many)",
                    distinct.len()
                ),
            ));
        }
        let reservations = self.reservations;
        if !(1..=MAX_RELAYS).contains(&reservations) {
            return Err(invalid(
                "relays.reservations",
                format!(
                    "is {reservations}; it must be from 1 to {MAX_RELAYS} (default {DEFAULT_RESERVATIONS}: two relays, so one relay's outage leaves this machine reachable)"
                ),
            ));
        }
        Ok((relays, reservations))
    }
}

/// The table as written, every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    addrs: Vec<String>,
    #[serde(default = "default_reservations")]
    reservations: usize,
}

fn default_reservations() -> usize {
    DEFAULT_RESERVATIONS
}

/// Either form `relays` may take in the file.
#[derive(Deserialize)]
#[serde(untagged)]
enum Written {
    /// `relays = ["…"]`.
    List(Vec<String>),
    /// `[relays]`.
    Table(Table),
}

impl<'de> Deserialize<'de> for RelaysConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Untagged enums lose the inner error; say what both forms are.
        let written = Written::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "`relays` is a table: `[relays]` with `addrs = [\"/ip4/…/p2p/RELAY\"]` and `reservations = 2` (or a list of addresses alone)",
            )
        })?;
        Ok(match written {
            Written::List(addrs) => RelaysConfig {
                addrs,
                ..RelaysConfig::default()
            },
            Written::Table(t) => RelaysConfig {
                addrs: t.addrs,
                reservations: t.reservations,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[derive(Debug, Deserialize)]
    struct File {
        relays: RelaysConfig,
    }

    #[test]
    fn both_forms_read_and_the_table_is_written() {
        let list: File = toml::from_str("relays = [\"/ip4/1.2.3.4/tcp/1/p2p/X\"]").unwrap();
        assert_eq!(list.relays.addrs, ["/ip4/1.2.3.4/tcp/1/p2p/X"]);
        assert_eq!(list.relays.reservations, 2);
        let table: File = toml::from_str("[relays]\nreservations = 3\n").unwrap();
        assert_eq!(table.relays.addrs, Vec::<String>::new());
        assert_eq!(table.relays.reservations, 3);
        let bad = toml::from_str::<File>("[relays]\nreservation = 3\n").unwrap_err();
        assert!(bad.to_string().contains("`relays` is a table"), "{bad}");
        let written = toml::to_string(&table.relays).unwrap();
        assert_eq!(written, "addrs = []\nreservations = 3\n");
    }
}
