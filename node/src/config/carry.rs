//! `carry` and `[carrier]`: whether this machine is a carrier (a member
//! its person marks as always on, which holds sealed envelopes for
//! members that are offline), and the bounds on what it holds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, duration, invalid};

/// `[carrier]` in config.toml.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CarrierConfig {
    /// How long mail waits with no connection to its recipient before a
    /// copy is handed to a connected carrier. Default "60s".
    pub handoff_after: String,
    /// Envelopes held for one sender, at most. Default 1000.
    pub per_sender: u32,
    /// MiB of envelopes held for one sender, at most. Default 16.
    pub per_sender_mib: u32,
    /// MiB of envelopes held for all senders, at most. Default 256.
    pub total_mib: u32,
}

impl Default for CarrierConfig {
    fn default() -> Self {
        CarrierConfig {
            handoff_after: "60s".into(),
            per_sender: 1000,
            per_sender_mib: 16,
            total_mib: 256,
        }
    }
}

/// `carry` and `[carrier]`, checked and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CarryRules {
    /// This machine holds mail for offline members (`carry = true`).
    pub carry: bool,
    /// Mail waits this long for its recipient before it is handed over.
    pub handoff_after: Duration,
    /// Envelopes held per sender, at most.
    pub per_sender: usize,
    /// Bytes held per sender, at most.
    pub per_sender_bytes: u64,
    /// Bytes held in all, at most.
    pub total_bytes: u64,
}

impl Default for CarryRules {
    fn default() -> Self {
        CarrierConfig::default()
            .rules(false)
            .expect("the default [carrier] is valid")
    }
}

impl CarrierConfig {
    /// Checks `[carrier]`; the error names the key and what to write.
    pub fn rules(&self, carry: bool) -> Result<CarryRules, ConfigError> {
        let handoff_after = duration("carrier.handoff_after", &self.handoff_after)?;
        if handoff_after < Duration::from_secs(1) || handoff_after > Duration::from_secs(24 * 3600)
        {
            return Err(invalid("carrier.handoff_after", "must be from 1s to 24h"));
        }
        if !(1..=100_000).contains(&self.per_sender) {
            return Err(invalid(
                "carrier.per_sender",
                "must be from 1 to 100000 envelopes",
            ));
        }
        if !(1..=4096).contains(&self.total_mib) {
            return Err(invalid("carrier.total_mib", "must be from 1 to 4096 MiB"));
        }
        if !(1..=self.total_mib).contains(&self.per_sender_mib) {
            return Err(invalid(
                "carrier.per_sender_mib",
                "must be from 1 MiB to carrier.total_mib",
            ));
        }
        let mib = |n: u32| u64::from(n) * 1024 * 1024;
        Ok(CarryRules {
            carry,
            handoff_after,
            per_sender: self.per_sender as usize,
            per_sender_bytes: mib(self.per_sender_mib),
            total_bytes: mib(self.total_mib),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn the_bounds_are_checked_and_named() {
        let d = CarryRules::default();
        assert_eq!(d.handoff_after, Duration::from_secs(60));
        assert_eq!(d.per_sender, 1000);
        assert_eq!(d.per_sender_bytes, 16 << 20);
        assert_eq!(d.total_bytes, 256 << 20);
        for (bad, key) in [
            (
                CarrierConfig {
                    handoff_after: "0s".into(),
                    ..CarrierConfig::default()
                },
                "carrier.handoff_after",
            ),
            (
                CarrierConfig {
                    per_sender_mib: 300,
                    ..CarrierConfig::default()
                },
                "carrier.per_sender_mib",
            ),
            (
                CarrierConfig {
                    per_sender: 0,
                    ..CarrierConfig::default()
                },
                "carrier.per_sender",
            ),
        ] {
            let e = bad.rules(true).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
