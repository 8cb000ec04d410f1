//! One relay and this machine's reservation on it: its state, how its
//! tries back off, and how `status` and `agentmesh relays` show it.
//! [`super::reach::Reach`] keeps the list and decides which are used.

use std::time::{Duration, Instant, SystemTime};

use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::core::transport::ListenerId;

use crate::api::{RelayState, RelayView, ReservationState, ReservationView};

/// The first wait before a relay is tried again; it doubles up to
/// [`MAX_RETRY`].
pub const FIRST_RETRY: Duration = Duration::from_secs(5);

/// The longest wait between tries of a relay: a relay that restarts (an
/// upgrade at 3 a.m.) is reserved on again at most this long after it is
/// back. A try of a relay that is down costs one dial.
pub const MAX_RETRY: Duration = Duration::from_secs(20);

/// The addresses one relay may be known by (its TCP and QUIC ones, v4
/// and v6).
pub const MAX_RELAY_ADDRS: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    /// Not used now: enough other relays hold reservations, or none is
    /// needed.
    Idle,
    /// Not tried, or waiting to try again at the instant.
    Waiting(Instant),
    /// Dialled; waits for identify with the relay (since the instant).
    Connecting(Instant),
    /// Listening through it; waits for the reservation.
    Reserving(Instant, ListenerId),
    /// Holding a reservation through the listener.
    Reserved(ListenerId),
}

/// One relay and this machine's reservation on it.
#[derive(Debug)]
pub(super) struct Relay {
    /// Its addresses, each ending in `/p2p/RELAY`; the first is the one
    /// listened through.
    pub addrs: Vec<Multiaddr>,
    pub peer: PeerId,
    /// Learnt from a ticket rather than configured.
    pub adopted: bool,
    pub state: State,
    /// This machine's circuit addresses through it, each ending in
    /// `/p2p-circuit/p2p/SELF`.
    pub circuits: Vec<Multiaddr>,
    /// Why the last try failed (kept after it works again).
    pub error: Option<String>,
    /// Tries failed in a row.
    pub failures: u32,
    /// When the first of those failed.
    failing_since: Option<SystemTime>,
    /// When the reservation it holds was granted.
    reserved_since: Option<SystemTime>,
}

impl Relay {
    pub fn new(addr: Multiaddr, peer: PeerId, adopted: bool, now: Instant) -> Relay {
        Relay {
            addrs: vec![addr],
            peer,
            adopted,
            state: State::Waiting(now),
            circuits: vec![],
            error: None,
            failures: 0,
            failing_since: None,
            reserved_since: None,
        }
    }

    /// The address listened through.
    pub fn addr(&self) -> &Multiaddr {
        &self.addrs[0]
    }

    /// Another address of the same relay; whether it was new.
    pub fn add_addr(&mut self, addr: Multiaddr) -> bool {
        if self.addrs.contains(&addr) || self.addrs.len() >= MAX_RELAY_ADDRS {
            return false;
        }
        self.addrs.push(addr);
        true
    }

    pub fn listener(&self) -> Option<ListenerId> {
        match self.state {
            State::Reserving(_, l) | State::Reserved(l) => Some(l),
            _ => None,
        }
    }

    /// Whether its last try failed and it has not worked since.
    pub fn failing(&self) -> bool {
        self.failures > 0
    }

    pub fn is_reserved(&self) -> bool {
        matches!(self.state, State::Reserved(_))
    }

    /// This try failed: wait, doubling from [`FIRST_RETRY`].
    pub fn failed(&mut self, why: String, now: Instant) {
        if self.failures == 0 {
            self.failing_since = Some(SystemTime::now());
        }
        self.failures = self.failures.saturating_add(1);
        let wait = FIRST_RETRY
            .saturating_mul(1 << self.failures.saturating_sub(1).min(8))
            .min(MAX_RETRY);
        tracing::info!(relay = %self.addr(), error = %why, retry_in = ?wait, "no reservation on the relay");
        self.error = Some(why);
        self.state = State::Waiting(now + wait);
        self.circuits.clear();
        self.reserved_since = None;
    }

    /// The reservation was granted (through `listener`).
    pub fn reserved(&mut self, listener: ListenerId) {
        if !self.is_reserved() {
            self.reserved_since = Some(SystemTime::now());
        }
        self.state = State::Reserved(listener);
        self.failures = 0;
        self.failing_since = None;
    }

    /// Not used any more; the listener, if any, to remove.
    pub fn release(&mut self) -> Option<ListenerId> {
        let l = self.listener();
        self.state = State::Idle;
        self.circuits.clear();
        self.reserved_since = None;
        l
    }

    /// As `status` shows it (`public`: AutoNAT says this machine is).
    pub fn reservation_view(&self, public: bool) -> ReservationView {
        let state = match &self.state {
            State::Idle | State::Waiting(_) if public => ReservationState::NotNeeded,
            State::Idle | State::Waiting(_) => ReservationState::Waiting,
            State::Connecting(_) => ReservationState::Connecting,
            State::Reserving(..) => ReservationState::Reserving,
            State::Reserved(_) => ReservationState::Reserved,
        };
        ReservationView {
            relay: self.addr().to_string(),
            relay_peer_id: self.peer.to_string(),
            state,
            circuit_addrs: self.circuits.iter().map(ToString::to_string).collect(),
            error: self.failing().then(|| self.error.clone()).flatten(),
            adopted: self.adopted,
        }
    }

    /// As `agentmesh relays` shows it (`public`: AutoNAT says this
    /// machine is, so it makes no new reservation).
    pub fn view(&self, public: bool) -> RelayView {
        let time =
            |t: Option<SystemTime>| t.map(|t| humantime::format_rfc3339_seconds(t).to_string());
        let state = match &self.state {
            State::Reserved(_) => RelayState::Reserved,
            _ if self.failing() => RelayState::Failing,
            State::Idle => RelayState::Idle,
            State::Waiting(_) if public => RelayState::Idle,
            State::Waiting(_) | State::Connecting(_) | State::Reserving(..) => {
                RelayState::Reserving
            }
        };
        RelayView {
            peer_id: self.peer.to_string(),
            addrs: self.addrs.iter().map(ToString::to_string).collect(),
            state,
            expires_at: None,
            failing_since: if self.failing() {
                time(self.failing_since)
            } else {
                None
            },
            last_error: self.error.clone(),
            reserved_since: time(self.reserved_since),
            adopted: self.adopted,
            circuit_addrs: self.circuits.iter().map(ToString::to_string).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    fn relay(now: Instant) -> Relay {
        let peer = PeerId::random();
        Relay::new(
            format!("/ip4/1.2.3.4/tcp/1/p2p/{peer}").parse().unwrap(),
            peer,
            false,
            now,
        )
    }

    #[test]
    fn retries_back_off_to_twenty_seconds() {
        let now = Instant::now();
        let mut r = relay(now);
        let mut waits = vec![];
        for _ in 0..5 {
            r.failed("no".into(), now);
            let State::Waiting(at) = r.state else {
                panic!("waits after a failure")
            };
            waits.push(at.duration_since(now).as_secs());
        }
        assert_eq!(waits, [5, 10, 20, 20, 20]);
        assert_eq!(r.error.as_deref(), Some("no"));
    }

    #[test]
    fn failing_since_holds_from_the_first_failure_until_it_works() {
        let now = Instant::now();
        let mut r = relay(now);
        assert_eq!(r.view(false).state, RelayState::Reserving);
        assert_eq!(r.view(false).failing_since, None);
        r.failed("refused".into(), now);
        let first = r.view(false).failing_since.unwrap();
        r.failed("refused again".into(), now);
        let v = r.view(false);
        assert_eq!(v.state, RelayState::Failing);
        assert_eq!(v.failing_since.as_deref(), Some(first.as_str()));
        assert_eq!(v.last_error.as_deref(), Some("refused again"));
        assert_eq!(
            r.reservation_view(false).error.as_deref(),
            Some("refused again")
        );
        // Trying again is still failing until it works.
        r.state = State::Connecting(now);
        assert_eq!(r.view(false).state, RelayState::Failing);
        r.reserved(ListenerId::next());
        let v = r.view(false);
        assert_eq!(v.state, RelayState::Reserved);
        assert_eq!(v.failing_since, None);
        assert!(v.reserved_since.is_some());
        assert_eq!(v.last_error.as_deref(), Some("refused again"), "kept");
        assert_eq!(r.reservation_view(false).error, None, "status shows none");
        assert!(r.release().is_some());
        assert_eq!(r.view(false).state, RelayState::Idle);
        assert_eq!(r.view(false).reserved_since, None);
    }
}
