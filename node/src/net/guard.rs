//! What membership means on the wire: members score 0 in gossip and
//! bypass the limits on strangers' connections; everyone else scores as a
//! stranger and counts against those limits (connected or not); a machine connected when it is
//! revoked is disconnected at once, and one that connects later after one
//! short grace per [`REVOKED_GRACE_EVERY`].

use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::team::TeamState;
use libp2p::Swarm;

use super::behaviour::{Behaviour, stranger_score};
use crate::limits::RateWindow;

/// How long a revoked machine that connects is kept, answered only with
/// refusals, before it is disconnected.
pub const REVOKED_GRACE: Duration = Duration::from_secs(2);

/// A revoked machine gets one grace per this long: reconnecting in a loop
/// it is disconnected at once, and its refusals can't become a flood.
pub const REVOKED_GRACE_EVERY: Duration = Duration::from_secs(600);

/// Revoked machines whose last grace is remembered, at most.
const MAX_GRACES: usize = 1024;

/// Revoked machines to disconnect, and their graces.
#[derive(Debug)]
pub struct Guard {
    /// Revoked machines to disconnect, and when.
    disconnecting: Vec<(PeerId, Instant)>,
    /// When each revoked machine last had its grace.
    graces: RateWindow<PeerId>,
    /// When the node started: the zero of the grace window.
    started: Instant,
}

impl Guard {
    /// A guard whose clock starts at `now`.
    pub fn new(now: Instant) -> Guard {
        Guard {
            disconnecting: vec![],
            graces: RateWindow::new(REVOKED_GRACE_EVERY, 1, MAX_GRACES),
            started: now,
        }
    }

    /// The team changed: applies it to every member and every connected
    /// peer.
    pub fn apply(
        &mut self,
        swarm: &mut Swarm<Behaviour>,
        team: Option<&TeamState>,
        connected: &[PeerId],
    ) {
        let standings: Vec<(PeerId, bool)> = team
            .iter()
            .flat_map(|t| t.members())
            .map(|m| (m.peer, t_is_member(team, &m.peer)))
            .collect();
        for (peer, current) in standings {
            let b = swarm.behaviour_mut();
            if current {
                b.limits.bypass_peer_id(&peer);
                b.dcutr.allow(peer);
            } else {
                b.limits.remove_peer_id(&peer);
                b.dcutr.forbid(&peer);
            }
        }
        for peer in connected {
            score(swarm, team, peer);
            // Revoked (or lapsed) while connected: closed at once, so the
            // team refuses it everywhere as soon as each member learns it.
            // Its grace is for when it connects again (its queued mail is
            // then refused with the reason); one in its grace now keeps it.
            if closed_out(team, peer) && !self.in_grace(peer) {
                tracing::debug!(%peer, "disconnecting a machine revoked while connected");
                let _ = swarm.disconnect_peer_id(*peer);
            }
        }
    }

    fn in_grace(&self, peer: &PeerId) -> bool {
        self.disconnecting.iter().any(|(p, _)| p == peer)
    }

    /// Applies the team to one connected peer: a revoked (or lapsed)
    /// machine that connects has its grace, once per
    /// [`REVOKED_GRACE_EVERY`], and is then disconnected.
    pub fn apply_to(
        &mut self,
        swarm: &mut Swarm<Behaviour>,
        team: Option<&TeamState>,
        peer: &PeerId,
        now: Instant,
    ) {
        score(swarm, team, peer);
        if closed_out(team, peer) && !self.in_grace(peer) {
            if self.graces.check(peer, now.duration_since(self.started)) {
                // Not at once: for a moment it is answered on every
                // protocol with why it is refused, so its queued mail fails
                // with a reason instead of retrying until it expires.
                tracing::debug!(%peer, "disconnecting a revoked machine after its grace");
                self.disconnecting.push((*peer, now + REVOKED_GRACE));
            } else {
                // It had its grace moments ago: no second one.
                let _ = swarm.disconnect_peer_id(*peer);
            }
        }
    }

    /// Disconnects revoked machines whose grace is over.
    pub fn tick(&mut self, swarm: &mut Swarm<Behaviour>, team: Option<&TeamState>, now: Instant) {
        let due: Vec<PeerId> = self
            .disconnecting
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(p, _)| *p)
            .collect();
        self.disconnecting.retain(|(_, at)| *at > now);
        for p in due {
            if closed_out(team, &p) {
                let _ = swarm.disconnect_peer_id(p);
            }
        }
    }

    /// Graces that are over free their slots.
    pub fn maintain(&mut self, now: Instant) {
        self.graces.closed(now.duration_since(self.started));
    }
}

/// Members score 0; anyone else scores as a stranger. Members are not
/// explicit gossip peers: every explicit peer is sent every message, so a
/// block reached each of N members N - 1 times, each copy's signature
/// checked (gossipsub verifies before it looks for duplicates). A block's
/// maker sends it to every member (flood publishing), and the members
/// pass it on along gossipsub's mesh of about six each.
fn score(swarm: &mut Swarm<Behaviour>, team: Option<&TeamState>, peer: &PeerId) {
    let me = *swarm.local_peer_id();
    let member = team.is_some_and(|t| t.is_member(peer) && t.is_member(&me));
    let score = if member { 0.0 } else { stranger_score() };
    swarm
        .behaviour_mut()
        .gossipsub
        .set_application_score(peer, score);
}

/// Whether `peer` is kept out: revoked, or a lapsed member (until it is
/// renewed).
fn closed_out(team: Option<&TeamState>, peer: &PeerId) -> bool {
    team.is_some_and(|t| t.is_revoked(peer) || t.lapsed(peer))
}

/// Whether `peer` is a member of `team` now (not lapsed).
fn t_is_member(team: Option<&TeamState>, peer: &PeerId) -> bool {
    team.is_some_and(|t| t.is_member(peer))
}
