//! What SIGHUP changes while the relay runs, and what it cannot.
//!
//! The relay enforces some limits itself (server.rs, idle.rs): the
//! allow-list, the per-source caps and the circuits' idle timeout. Those
//! are read again on SIGHUP and apply at once, and nothing held is
//! dropped: a source over a lowered cap keeps what it holds and is refused
//! more, a peer taken off the allow-list keeps its reservation until it
//! asks to renew it. The others are fixed when the relay starts: libp2p's
//! relay takes its limits and rates once (`relay::Config`), the listeners,
//! key and metrics server are made once. A change to one of them is named
//! in the log, and kept for the next start.

use std::time::Duration;

use crate::Config;
use crate::idle::IdleTimeout;
use crate::server::{Relay, SourceCaps};

/// One setting: its key (the flag's name in snake case), its value as
/// text, and whether SIGHUP applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key in relay.toml.
    pub key: &'static str,
    /// The value, as `config check` shows it.
    pub value: String,
    /// Applied by SIGHUP (`true`), or fixed at start.
    pub reloadable: bool,
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    let shown: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", shown.join(", "))
}

fn duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Every setting of `config`, in the order `--help` lists the flags.
pub fn settings(config: &Config) -> Vec<Setting> {
    let fixed = |key, value: String| Setting {
        key,
        value,
        reloadable: false,
    };
    let reloads = |key, value: String| Setting {
        key,
        value,
        reloadable: true,
    };
    vec![
        fixed("identity", config.identity.display().to_string()),
        fixed("listen", list(&config.listen)),
        fixed("external_addr", list(&config.external)),
        reloads("allow", list(&config.allow)),
        fixed("max_reservations", config.max_reservations.to_string()),
        fixed(
            "max_reservations_per_peer",
            config.max_reservations_per_peer.to_string(),
        ),
        fixed(
            "reservation_duration",
            duration(config.reservation_duration),
        ),
        fixed("max_circuits", config.max_circuits.to_string()),
        fixed(
            "max_circuits_per_peer",
            config.max_circuits_per_peer.to_string(),
        ),
        fixed(
            "max_circuit_duration",
            duration(config.max_circuit_duration),
        ),
        fixed("max_circuit_bytes", config.max_circuit_bytes.to_string()),
        fixed(
            "reservations_per_peer_per_minute",
            config.reservations_per_peer_per_minute.to_string(),
        ),
        fixed(
            "reservations_per_ip_per_minute",
            config.reservations_per_ip_per_minute.to_string(),
        ),
        fixed("max_connections", config.max_connections.to_string()),
        reloads(
            "max_connections_per_ip",
            config.max_connections_per_ip.to_string(),
        ),
        reloads(
            "max_reservations_per_ip",
            config.max_reservations_per_ip.to_string(),
        ),
        reloads(
            "max_circuits_per_ip",
            config.max_circuits_per_ip.to_string(),
        ),
        reloads(
            "circuit_idle_timeout",
            duration(config.circuit_idle_timeout),
        ),
        fixed(
            "metrics",
            config
                .metrics
                .map_or_else(|| "off".to_owned(), |a| a.to_string()),
        ),
    ]
}

/// What changed from `old` to `new`: `(key, old value, new value,
/// reloadable)`.
pub fn changes(old: &Config, new: &Config) -> Vec<(&'static str, String, String, bool)> {
    settings(old)
        .into_iter()
        .zip(settings(new))
        .filter(|(o, n)| o.value != n.value)
        .map(|(o, n)| (o.key, o.value, n.value, o.reloadable))
        .collect()
}

/// Applies `new` to the running relay: the reloadable settings take
/// effect now (in `relay` and `idle`) and are kept in `current`; a changed
/// fixed one is logged as needing a restart and left as it was.
pub fn apply(current: &mut Config, new: Config, relay: &mut Relay, idle: &IdleTimeout) {
    let changed = changes(current, &new);
    if changed.is_empty() {
        tracing::info!("SIGHUP: the settings read again are the ones in use; nothing changed");
        return;
    }
    for (key, old, value, reloadable) in &changed {
        if *reloadable {
            tracing::info!(key, from = %old, to = %value, "SIGHUP: applied");
        } else {
            tracing::warn!(
                key,
                from = %old,
                to = %value,
                "SIGHUP: libp2p's relay (or the process) fixes this at start; restart the relay to apply it; still {old}"
            );
        }
    }
    current.allow = new.allow;
    current.max_connections_per_ip = new.max_connections_per_ip;
    current.max_reservations_per_ip = new.max_reservations_per_ip;
    current.max_circuits_per_ip = new.max_circuits_per_ip;
    current.circuit_idle_timeout = new.circuit_idle_timeout;
    relay.reload(&current.allow, caps(current));
    idle.set(current.circuit_idle_timeout);
}

/// The per-source caps `config` sets.
pub fn caps(config: &Config) -> SourceCaps {
    SourceCaps {
        connections: config.max_connections_per_ip,
        reservations: config.max_reservations_per_ip,
        circuits: config.max_circuits_per_ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_reloadable_only_where_the_relay_enforces_it_itself() {
        let old = Config::new("relay.key".into());
        let mut new = old.clone();
        new.max_reservations_per_ip = 2;
        new.circuit_idle_timeout = Duration::from_secs(90);
        new.allow = vec![libp2p::PeerId::random()];
        new.max_reservations = 10_000;
        let changed = changes(&old, &new);
        let keys: Vec<(&str, bool)> = changed.iter().map(|c| (c.0, c.3)).collect();
        assert_eq!(
            keys,
            vec![
                ("allow", true),
                ("max_reservations", false),
                ("max_reservations_per_ip", true),
                ("circuit_idle_timeout", true),
            ]
        );
        assert_eq!(changed[3].1, "30s");
        assert_eq!(changed[3].2, "1m 30s");
        assert!(changes(&old, &old).is_empty());
    }
}
