//! What the network's loop shows: `status`, `relays`, and the contact
//! relays of `peers`' rows.

use agentmesh_protocol::PeerId;
use agentmesh_protocol::contact::SignedContact;

use super::{Net, peers, port};
use crate::api::{self, ApiError};
use crate::codes::ErrorCode;
use crate::net::reach::ForgetError;

impl Net {
    /// The relays the stored contact record of `peer` names.
    pub(super) fn contact_relays(&self, peer: &str) -> Vec<String> {
        let Ok(peer) = peer.parse::<PeerId>() else {
            return vec![];
        };
        match self.store.contact(&peer) {
            Ok(Some(bytes)) => SignedContact::from_bytes_unverified(&bytes)
                .map(|c| c.record().relays.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            _ => vec![],
        }
    }

    pub(super) fn relays(&self) -> api::RelaysView {
        api::RelaysView {
            relays: self.reach.relays_view(),
            reservations: self.reach.reservations(),
            reachability: self.reach.reachability().word(),
        }
    }

    pub(super) fn status(&self) -> api::Status {
        let own = self.team.own_standing();
        api::Status {
            peer_id: self.swarm.local_peer_id().to_string(),
            name: own.name,
            team: own.team,
            team_standing: own.standing,
            member_until: own.term.as_ref().map(|(until, _)| until.clone()),
            renewed_by: own.term.map(|(_, by)| by),
            listen_addrs: port::listen_addrs(&self.swarm, self.reach.configured())
                .iter()
                .map(ToString::to_string)
                .collect(),
            external_addrs: self
                .swarm
                .external_addresses()
                .filter(|a| peers::relay_of(a).is_none())
                .map(ToString::to_string)
                .collect(),
            reachability: self.reach.reachability().word(),
            reservations: self.reach.view(),
            circuit_addrs: self
                .reach
                .circuit_addrs()
                .iter()
                .map(ToString::to_string)
                .collect(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            connected_peers: self.peers.connected().count(),
            // The mailroom's part is filled in by the server.
            paused: false,
            held: 0,
            outbox_waiting: 0,
            carrying: 0,
            wake: vec![],
            another_copy: self.team.another_copy(),
            test_build: crate::clock::TEST_BUILD,
        }
    }

    /// `relays forget`: drops the adopted relay `peer_id`; the relays left.
    pub(super) fn forget_relay(&mut self, peer_id: &str) -> Result<api::RelaysView, ApiError> {
        match self.reach.forget(&mut self.swarm, peer_id) {
            Ok(()) => Ok(self.relays()),
            Err(ForgetError::Unknown(known)) => Err(ApiError::new(
                ErrorCode::UnknownRelay,
                if known.is_empty() {
                    format!("no relay {peer_id} is known: this machine uses none")
                } else {
                    format!(
                        "no relay {peer_id} is known; the relays are {known} (`agentmesh relays`)"
                    )
                },
            )),
            Err(ForgetError::Configured) => Err(ApiError::new(
                ErrorCode::RelayConfigured,
                format!(
                    "the relay {peer_id} is configured, not adopted from a ticket; remove it from `relays.addrs` in config.toml (`agentmesh config show` lists them), or from --relay, then restart the daemon"
                ),
            )),
        }
    }
}
