//! `agentmesh connect ADDR`: the dial the person asked for, and what it
//! waits for, as a state machine with no I/O.
//!
//! ```text
//!  push (dialled) ──> connection up ── a member: sync ── sync_finished ── Connected{new_blocks}
//!                                   ── revoked: refused      ── stranger/relay: Connected at once
//!                 ──> dial failed (denied only for too many connections, and connected
//!                     another way: as if up) ── otherwise connect_failed
//!                 ──> 10 s without an answer: connect_failed
//! ```
//!
//! The dial race: a sync that fails on another connection (one the
//! peer's restart left behind, or the loser of a simultaneous dial) waits
//! for the connect's own dial instead of failing it.

use std::time::{Duration, Instant};

use agentmesh_protocol::{Multiaddr, PeerId};
use libp2p::swarm::{ConnectionId, DialError};
use tokio::sync::oneshot;

use super::peers::without_peer;
use crate::api::{self, Reply, err};
use crate::codes::ErrorCode;
use crate::team::Membership;

/// How long `agentmesh connect` waits for the connection and the sync:
/// the person gets an answer well within 15 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `connect` waits for identify from a machine that is not a
/// member, to say whether it is a relay (identify follows the connection
/// by a round trip or two).
pub const IDENTIFY_WAIT: Duration = Duration::from_secs(2);

/// An answer to send.
pub type Answer = (oneshot::Sender<Reply>, Reply);

/// An `agentmesh connect` waiting for its connection or its sync.
#[derive(Debug)]
struct ConnectWait {
    addr: Multiaddr,
    peer: Option<PeerId>,
    dial: ConnectionId,
    /// Whether that dial has connected.
    dial_up: bool,
    /// Whether it is the second, from a fresh port.
    fresh_port: bool,
    reply: oneshot::Sender<Reply>,
    deadline: Instant,
    syncing: bool,
    /// Up to a machine that is not a member, waiting until then for
    /// identify to say what it is.
    identify_until: Option<Instant>,
}

impl ConnectWait {
    /// Whether this connect's own dial is still on its way.
    fn own_dial_pending(&self) -> bool {
        !self.dial_up
    }
}

/// What a connection coming up decided.
#[derive(Debug, Default)]
pub struct Up {
    /// Connects answered.
    pub answers: Vec<Answer>,
    /// Whether a connect waits for a sync with the peer.
    pub sync: bool,
}

/// `connect`'s answer, held to the answer its request names.
fn connected_answer(c: api::Connected) -> Reply {
    api::answer::<api::ops::Connect>(Ok(c))
}

fn connected(peer: PeerId, membership: Membership) -> Reply {
    connected_answer(api::Connected {
        peer_id: peer.to_string(),
        membership: membership.word(),
        new_blocks: 0,
    })
}

/// The connects waiting.
#[derive(Debug, Default)]
pub struct Connects {
    waits: Vec<ConnectWait>,
}

impl Connects {
    /// Waits for `addr` (of `peer`, if the address names it), dialled as
    /// `dial`, until `now` + [`CONNECT_TIMEOUT`].
    pub fn push(
        &mut self,
        addr: Multiaddr,
        peer: Option<PeerId>,
        dial: ConnectionId,
        reply: oneshot::Sender<Reply>,
        now: Instant,
    ) {
        self.waits.push(ConnectWait {
            addr,
            peer,
            dial,
            dial_up: false,
            fresh_port: false,
            reply,
            deadline: now + CONNECT_TIMEOUT,
            syncing: false,
            identify_until: None,
        });
    }

    /// Takes out the waits `matches` picks.
    fn take(&mut self, matches: impl Fn(&ConnectWait) -> bool) -> Vec<ConnectWait> {
        let (out, keep) = std::mem::take(&mut self.waits)
            .into_iter()
            .partition(|c| matches(c));
        self.waits = keep;
        out
    }

    /// A connection to `peer` at `remote` came up as `connection`;
    /// `identify_pending`: `Some(now)` while identify has not yet said what
    /// the machine is (a stranger's answer then waits for it, at most
    /// [`IDENTIFY_WAIT`]: it may turn out to be a relay).
    pub fn connection_up(
        &mut self,
        peer: PeerId,
        remote: &Multiaddr,
        connection: ConnectionId,
        membership: Membership,
        identify_pending: Option<Instant>,
    ) -> Up {
        let mut up = Up::default();
        for c in &mut self.waits {
            if c.dial == connection {
                c.dial_up = true;
            }
        }
        let matching = |c: &ConnectWait| {
            !c.syncing
                && c.identify_until.is_none()
                && (c.peer == Some(peer)
                    || c.dial == connection
                    || (c.peer.is_none() && without_peer(&c.addr) == without_peer(remote)))
        };
        if membership == Membership::Member {
            for c in self.waits.iter_mut().filter(|c| matching(c)) {
                c.peer = Some(peer);
                c.syncing = true;
                up.sync = true;
            }
            return up;
        }
        if let (Membership::Stranger, Some(now)) = (membership, identify_pending) {
            for c in self.waits.iter_mut().filter(|c| matching(c)) {
                c.peer = Some(peer);
                c.identify_until = Some(now + IDENTIFY_WAIT);
            }
            return up;
        }
        for c in self.take(matching) {
            let answer = if membership == Membership::Revoked {
                err(
                    ErrorCode::Revoked,
                    format!("{peer} was revoked from the team; this machine refuses it"),
                )
            } else {
                connected_answer(api::Connected {
                    peer_id: peer.to_string(),
                    membership: membership.word(),
                    new_blocks: 0,
                })
            };
            up.answers.push((c.reply, answer));
        }
        up
    }

    /// Identify said what `peer` is: connects waiting for it are answered.
    pub fn identified(&mut self, peer: PeerId, membership: Membership) -> Vec<Answer> {
        self.take(|c| c.peer == Some(peer) && c.identify_until.is_some())
            .into_iter()
            .map(|c| (c.reply, connected(peer, membership)))
            .collect()
    }

    /// The last connection to `peer` closed; `connection` was one of them.
    pub fn connection_closed(&mut self, peer: PeerId, connection: ConnectionId) -> Vec<Answer> {
        for c in &mut self.waits {
            if c.peer == Some(peer) && c.own_dial_pending() {
                c.syncing = false;
            }
        }
        // A connect still dialling waits for its own dial: the connection
        // that closed may be one left over from before the peer restarted.
        self.fail(
            |c| c.dial == connection || (c.peer == Some(peer) && !c.own_dial_pending()),
            "the peer closed the connection (if this machine was revoked, members refuse it)",
        )
    }

    /// The address of the connect whose own dial is `dial`, if there is
    /// one still waiting that was not dialled again already.
    pub fn dialled(&self, dial: ConnectionId) -> Option<&Multiaddr> {
        self.waits
            .iter()
            .find(|c| c.dial == dial && !c.fresh_port)
            .map(|c| &c.addr)
    }

    /// The connect whose own dial was `old` waits for `new` instead (the
    /// same address, dialled again).
    pub fn redialled(&mut self, old: ConnectionId, new: ConnectionId) {
        for c in &mut self.waits {
            if c.dial == old {
                c.dial = new;
                c.fresh_port = true;
            }
        }
    }

    /// The dial `connection` failed (`why`). `reached`: it reached the
    /// machine and was denied only because this machine already has as
    /// many connections to it as it keeps; a connect whose machine is
    /// `connected` then goes on as if its dial came up, over those. The
    /// connects to go on that way are returned with their addresses.
    pub fn dial_failed(
        &mut self,
        connection: ConnectionId,
        reached: bool,
        connected: impl Fn(&PeerId) -> bool,
        why: &str,
    ) -> (Vec<(PeerId, Multiaddr)>, Vec<Answer>) {
        let mut fallback = vec![];
        for c in &mut self.waits {
            if reached
                && c.dial == connection
                && let Some(p) = c.peer.filter(|p| connected(p))
            {
                c.dial_up = true;
                fallback.push((p, c.addr.clone()));
            }
        }
        let answers = self.fail(|c| c.dial == connection && !c.dial_up, why);
        (fallback, answers)
    }

    /// The sync with `peer` ended: connects waiting on it are answered,
    /// except those whose own dial is still on its way after a failure
    /// (they sync again once it is up).
    pub fn sync_finished(
        &mut self,
        peer: PeerId,
        added: usize,
        membership: api::Membership,
        outcome: &Result<(), String>,
    ) -> Vec<Answer> {
        for c in &mut self.waits {
            if outcome.is_err() && c.peer == Some(peer) && c.own_dial_pending() {
                c.syncing = false;
            }
        }
        self.take(|c| c.peer == Some(peer) && c.syncing)
            .into_iter()
            .map(|c| {
                let answer = match outcome {
                    Ok(()) => connected_answer(api::Connected {
                        peer_id: peer.to_string(),
                        membership,
                        new_blocks: added,
                    }),
                    Err(why) => err(ErrorCode::Refused, format!("{peer} refused to sync: {why}")),
                };
                (c.reply, answer)
            })
            .collect()
    }

    /// Connects past their deadline; those whose identify never came are
    /// answered as strangers.
    pub fn expire(&mut self, now: Instant) -> Vec<Answer> {
        let mut answers: Vec<Answer> = self
            .take(|c| c.identify_until.is_some_and(|t| t <= now))
            .into_iter()
            .filter_map(|c| {
                c.peer
                    .map(|p| (c.reply, connected(p, Membership::Stranger)))
            })
            .collect();
        let late: Vec<Answer> = self
            .take(|c| c.deadline <= now)
            .into_iter()
            .map(|c| {
                let why = format!(
                    "no answer within {}; check the address, and that no firewall drops the traffic",
                    agentmesh_protocol::time::exact_duration(CONNECT_TIMEOUT)
                );
                (c.reply, failed(&c.addr, &why))
            })
            .collect();
        answers.extend(late);
        answers
    }

    fn fail(&mut self, matches: impl Fn(&ConnectWait) -> bool, why: &str) -> Vec<Answer> {
        self.take(matches)
            .into_iter()
            .map(|c| (c.reply, failed(&c.addr, why)))
            .collect()
    }
}

/// A `connect` that failed, as one sentence: the address, why, and (for
/// a machine nothing answered at) what to check.
fn failed(addr: &Multiaddr, why: &str) -> Reply {
    err(
        ErrorCode::ConnectFailed,
        format!("could not connect to {addr}: {why}"),
    )
}

/// Why a dial failed, for people: libp2p's error names every layer
/// (`Failed to negotiate transport protocol(s): [(ADDR: : Connection
/// refused (os error 111): Connection refused (os error 111))]`); this is
/// what happened, once, and what to check.
pub fn dial_reason(error: &DialError) -> String {
    match error {
        DialError::Transport(errors) => {
            let mut reasons: Vec<String> =
                errors.iter().map(|(_, e)| transport_reason(e)).collect();
            reasons.dedup();
            if reasons.is_empty() {
                "no transport could dial it".into()
            } else {
                reasons.join("; ")
            }
        }
        DialError::WrongPeerId { obtained, .. } => format!(
            "the machine that answered is {obtained}, not the one the address names (its /p2p/ part); check the address"
        ),
        DialError::LocalPeerId { .. } => "that address is this machine itself".into(),
        DialError::NoAddresses => "there was no address to dial".into(),
        DialError::Aborted => "the dial was cancelled (the daemon may be stopping)".into(),
        DialError::DialPeerConditionFalse(_) => {
            "a dial to that machine was already under way".into()
        }
        DialError::Denied { cause } => {
            if cause
                .downcast_ref::<libp2p::connection_limits::Exceeded>()
                .is_some()
            {
                "this machine already keeps as many connections to that machine as it allows".into()
            } else {
                format!("this machine refused the connection ({cause})")
            }
        }
    }
}

/// `why` a dial failed; when the machine is `connected` another way, also
/// that this address is not how to reach it.
pub fn other_way(why: String, connected: bool) -> String {
    if connected {
        format!(
            "{why}; the machine is connected another way (`agentmesh peers` shows it), and this address is not how to reach it"
        )
    } else {
        why
    }
}

/// What one transport's failure to dial an address means.
fn transport_reason(error: &libp2p::TransportError<std::io::Error>) -> String {
    use std::io::ErrorKind;
    let e = match error {
        libp2p::TransportError::MultiaddrNotSupported(_) => {
            return "agentmesh cannot dial that kind of address (it dials /ip4, /ip6 or /dns addresses with /tcp/PORT or /udp/PORT/quic-v1)".into();
        }
        libp2p::TransportError::Other(e) => e,
    };
    // The kind that says most is the first one in the chain that is not
    // a wrapper's `Other`. An `io::Error` wrapping another error hands out
    // that error's source, not the error itself: `get_ref` reaches it.
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = vec![e];
    while let Some(&last) = chain.last() {
        let inner = match last.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|i| i as &(dyn std::error::Error + 'static)),
            None => None,
        };
        match inner.or_else(|| last.source()) {
            Some(next) if chain.len() < 16 => chain.push(next),
            _ => break,
        }
    }
    // libp2p's `Either` errors pass their inner error's source on, never
    // the inner error, so an OS error may show only in the text.
    let os_kind = |c: &&(dyn std::error::Error + 'static)| {
        let text = c.to_string();
        let code = text
            .split("(os error ")
            .nth(1)?
            .split(')')
            .next()?
            .parse()
            .ok()?;
        Some(std::io::Error::from_raw_os_error(code).kind())
    };
    let kind = chain
        .iter()
        .filter_map(|c| c.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
        .chain(chain.iter().filter_map(os_kind))
        .find(|k| *k != ErrorKind::Other);
    // QUIC says `handshake with the remote timed out.`, no OS error.
    let timed_out = chain.iter().any(|c| c.to_string().contains("timed out"));
    match kind.or(timed_out.then_some(ErrorKind::TimedOut)) {
        Some(ErrorKind::ConnectionRefused) => {
            return "nothing listens there (connection refused); check the address (`agentmesh status` on that machine shows it) and that its daemon runs".into();
        }
        Some(ErrorKind::TimedOut) => {
            return "it did not answer in time; check the address, and that no firewall drops the traffic".into();
        }
        Some(ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable) => {
            return "that network or host cannot be reached from here".into();
        }
        Some(ErrorKind::AddrNotAvailable) => {
            return "this machine has no route or address to dial it from".into();
        }
        _ => {}
    }
    let deepest = chain.last().map(ToString::to_string).unwrap_or_default();
    if chain
        .iter()
        .any(|c| c.to_string().contains("Handshake failed"))
    {
        return "the machine there did not complete agentmesh's encrypted handshake (is it an agentmesh daemon or relay?)".into();
    }
    // `Connection reset by peer (os error 104)` reads as
    // `connection reset by peer`.
    let text = match deepest.find(" (os error") {
        Some(at) => &deepest[..at],
        None => deepest.trim_end_matches('.'),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "the transport gave no reason".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    fn addr(peer: &PeerId) -> Multiaddr {
        format!("/ip4/10.0.0.2/tcp/4001/p2p/{peer}")
            .parse()
            .unwrap()
    }

    fn code(answer: &Answer) -> String {
        match &answer.1 {
            Ok(v) => v.to_json()["membership"].as_str().unwrap().to_owned(),
            Err(e) => e.code.to_string(),
        }
    }

    #[test]
    fn a_member_is_answered_after_its_sync() {
        let mut c = Connects::default();
        let peer = PeerId::random();
        let dial = ConnectionId::new_unchecked(1);
        let (tx, mut rx) = oneshot::channel();
        c.push(addr(&peer), Some(peer), dial, tx, Instant::now());
        let up = c.connection_up(peer, &addr(&peer), dial, Membership::Member, None);
        assert!(up.sync && up.answers.is_empty(), "waits for the sync");
        let done = c.sync_finished(peer, 3, api::Membership::Member, &Ok(()));
        assert_eq!(done.len(), 1);
        let (reply, answer) = done.into_iter().next().unwrap();
        reply.send(answer).unwrap();
        assert_eq!(rx.try_recv().unwrap().unwrap().to_json()["new_blocks"], 3);
    }

    #[test]
    fn a_sync_failing_on_another_connection_waits_for_the_own_dial() {
        let mut c = Connects::default();
        let peer = PeerId::random();
        let (old, dial) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        let (tx, _rx) = oneshot::channel();
        c.push(addr(&peer), Some(peer), dial, tx, Instant::now());
        // The peer's old connection (left over from before it restarted)
        // comes up in the table first and the sync on it fails.
        let up = c.connection_up(peer, &addr(&peer), old, Membership::Member, None);
        assert!(up.sync);
        let failed = c.sync_finished(peer, 0, api::Membership::Member, &Err("closed".into()));
        assert!(failed.is_empty(), "its own dial is still on its way");
        assert!(c.connection_closed(peer, old).is_empty());
        // Its own dial comes up: synced again, then answered.
        assert!(
            c.connection_up(peer, &addr(&peer), dial, Membership::Member, None)
                .sync
        );
        let done = c.sync_finished(peer, 0, api::Membership::Member, &Ok(()));
        assert_eq!(done.len(), 1);
        assert!(done[0].1.is_ok());
    }

    #[test]
    fn a_connect_dialled_again_from_a_fresh_port_waits_for_that_dial_once() {
        let mut c = Connects::default();
        let peer = PeerId::random();
        let (first, again) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        let (tx, _rx) = oneshot::channel();
        c.push(addr(&peer), Some(peer), first, tx, Instant::now());
        assert_eq!(c.dialled(first), Some(&addr(&peer)));
        assert_eq!(c.dialled(again), None);
        c.redialled(first, again);
        // Once only: the second dial failing fails the connect.
        assert_eq!(c.dialled(first), None);
        assert_eq!(c.dialled(again), None);
        let (_, answers) = c.dial_failed(again, false, |_| false, "refused");
        assert_eq!(answers.len(), 1);
        assert_eq!(code(&answers[0]), "connect_failed");
    }

    #[test]
    fn strangers_and_revoked_machines_are_answered_at_once() {
        let mut c = Connects::default();
        let (stranger, revoked) = (PeerId::random(), PeerId::random());
        let (d1, d2) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        c.push(
            addr(&stranger),
            None,
            d1,
            oneshot::channel().0,
            Instant::now(),
        );
        c.push(
            addr(&revoked),
            Some(revoked),
            d2,
            oneshot::channel().0,
            Instant::now(),
        );
        let up = c.connection_up(stranger, &addr(&stranger), d1, Membership::Stranger, None);
        assert_eq!(
            up.answers.iter().map(code).collect::<Vec<_>>(),
            ["stranger"]
        );
        let up = c.connection_up(revoked, &addr(&revoked), d2, Membership::Revoked, None);
        assert_eq!(up.answers.iter().map(code).collect::<Vec<_>>(), ["revoked"]);
        assert!(
            c.expire(Instant::now() + CONNECT_TIMEOUT).is_empty(),
            "none left"
        );
    }

    #[test]
    fn a_dial_denied_for_too_many_connections_goes_on_over_them() {
        let mut c = Connects::default();
        let peer = PeerId::random();
        let dial = ConnectionId::new_unchecked(7);
        c.push(
            addr(&peer),
            Some(peer),
            dial,
            oneshot::channel().0,
            Instant::now(),
        );
        let (fallback, failed) = c.dial_failed(dial, true, |_| true, "denied");
        assert_eq!(fallback, vec![(peer, addr(&peer))]);
        assert!(failed.is_empty());
        // Any other failure fails the connect: it never reports success
        // for an address it could not dial.
        let other = ConnectionId::new_unchecked(8);
        c.push(
            addr(&peer),
            Some(peer),
            other,
            oneshot::channel().0,
            Instant::now(),
        );
        let (fallback, failed) = c.dial_failed(other, false, |_| true, "refused");
        assert!(fallback.is_empty());
        assert_eq!(
            failed.iter().map(code).collect::<Vec<_>>(),
            ["connect_failed"]
        );
    }

    #[test]
    fn a_strangers_answer_waits_for_identify_to_say_it_is_a_relay() {
        let mut c = Connects::default();
        let (relay, other) = (PeerId::random(), PeerId::random());
        let now = Instant::now();
        let (d1, d2) = (
            ConnectionId::new_unchecked(1),
            ConnectionId::new_unchecked(2),
        );
        c.push(addr(&relay), Some(relay), d1, oneshot::channel().0, now);
        c.push(addr(&other), Some(other), d2, oneshot::channel().0, now);
        for (p, d) in [(relay, d1), (other, d2)] {
            let up = c.connection_up(p, &addr(&p), d, Membership::Stranger, Some(now));
            assert!(up.answers.is_empty(), "waits for identify");
        }
        let told = c.identified(relay, Membership::Relay);
        assert_eq!(told.iter().map(code).collect::<Vec<_>>(), ["relay"]);
        // No identify from the other: a stranger, after the wait.
        assert!(c.expire(now).is_empty());
        let late = c.expire(now + IDENTIFY_WAIT);
        assert_eq!(late.iter().map(code).collect::<Vec<_>>(), ["stranger"]);
    }

    #[test]
    fn connects_expire_at_their_deadline() {
        let mut c = Connects::default();
        let peer = PeerId::random();
        let now = Instant::now();
        c.push(
            addr(&peer),
            Some(peer),
            ConnectionId::new_unchecked(1),
            oneshot::channel().0,
            now,
        );
        assert!(c.expire(now).is_empty());
        let expired = c.expire(now + CONNECT_TIMEOUT);
        assert_eq!(
            expired.iter().map(code).collect::<Vec<_>>(),
            ["connect_failed"]
        );
    }
}
