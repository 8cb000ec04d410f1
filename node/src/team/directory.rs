//! The directory: the one published view of the team.

use std::collections::HashMap;

use agentmesh_protocol::team::{Standing, TeamId, TeamState};
use agentmesh_protocol::{PeerId, X25519Public};

/// The team as every part reads it: who is in it, under which name and
/// owner, with which key, and where each stands. Published by the team's
/// owner whenever the team changes (a `watch`); nobody else keeps a copy.
#[derive(Debug, Clone, Default)]
pub struct Directory {
    /// This machine.
    pub me: Option<PeerId>,
    /// The team, if this machine is in one.
    pub team: Option<TeamId>,
    /// This machine's name and owner in the team.
    pub my_name: String,
    /// This machine's owner.
    pub my_owner: String,
    /// Whether this machine is a current member.
    pub member: bool,
    /// Every machine the team admitted.
    pub machines: HashMap<PeerId, Machine>,
}

/// A machine of the team.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Its name.
    pub name: String,
    /// The person who runs it.
    pub owner: String,
    /// Its X25519 key.
    pub x25519: X25519Public,
    /// Where it stands.
    pub standing: Standing,
    /// Whether it left (revoked by itself) rather than being revoked.
    pub left: bool,
    /// Whether its membership lapsed (past its expiry, not renewed): its
    /// mail waits until it is renewed.
    pub lapsed: bool,
}

impl Directory {
    /// The directory of `team` as `me` sees it.
    pub fn of(me: PeerId, fallback_name: &str, team: Option<&TeamState>) -> Directory {
        let mut d = Directory {
            me: Some(me),
            my_name: fallback_name.into(),
            ..Directory::default()
        };
        let Some(team) = team else {
            return d;
        };
        d.team = Some(team.id());
        for m in team.members() {
            d.machines.insert(
                m.peer,
                Machine {
                    name: m.name.to_string(),
                    owner: m.owner.to_string(),
                    x25519: m.x25519,
                    standing: m.standing,
                    left: m.left,
                    lapsed: team.lapsed(&m.peer),
                },
            );
        }
        if let Some(mine) = d.machines.get(&me) {
            d.my_name = mine.name.clone();
            d.my_owner = mine.owner.clone();
            d.member = mine.standing == Standing::Current && !mine.lapsed;
        }
        d
    }

    /// The current member named `name`.
    pub fn current(&self, name: &str) -> Option<(PeerId, &Machine)> {
        self.machines
            .iter()
            .find(|(_, m)| m.name == name && m.standing == Standing::Current)
            .map(|(p, m)| (*p, m))
    }

    /// Whether this machine's own membership lapsed (it waits for a
    /// renewal: mail for it is answered "busy", not refused).
    pub fn lapsed_me(&self) -> bool {
        self.me
            .and_then(|me| self.machines.get(&me))
            .is_some_and(|m| m.lapsed)
    }

    /// The name of `peer`, or its PeerId if the team does not know it.
    pub fn name_of(&self, peer: &PeerId) -> String {
        self.machines
            .get(peer)
            .map_or_else(|| peer.to_string(), |m| m.name.clone())
    }
}
