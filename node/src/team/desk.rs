//! The founder's join desk: the requests waiting for a person to type a
//! pairing code, with the limits that keep a flood of fresh PeerIds from
//! burying the founder.
//!
//! ```text
//! request arrives ──> Waiting ──code matches──> Matched ──person chosen──> Approved ──joiner confirms──> Admitted
//!                        │  └─3 wrong codes──> Cancelled                           └─joiner declines──> Declined
//!                        ├─joiner withdraws (Ctrl-C)─> Cancelled
//!                        └─request_ttl passes─> Expired
//! ```
//!
//! Whose machine it is (the person consent compares) is chosen by the
//! person at the founder's terminal once the code matched and before the
//! team code is shown: the joiner's claim is only what the prompt shows
//! first.
//!
//! Limits, each a setting (`[join]` in config.toml): requests waiting at
//! once from all machines (`max_pending`), requests per machine per minute
//! (`max_per_peer_per_minute`), and how long a request waits
//! (`request_ttl`). A request whose code is mistyped [`MAX_CODE_ATTEMPTS`]
//! times is cancelled: the joiner must start again with a new ticket.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::join::{Code, Codes, JoinOffer, JoinRequest};

use crate::api::{self, JoinRequestView};
use crate::limits::RateWindow;

/// Wrong pairing codes before a request is cancelled.
pub const MAX_CODE_ATTEMPTS: u32 = 3;

/// How long a settled request (admitted, declined, cancelled, expired) is
/// kept so the joiner's next poll (every 100 ms) and the founder's `admit`
/// learn how it ended, and a joiner whose confirmation answer was lost can
/// ask again.
pub const SETTLED_LINGER: Duration = Duration::from_secs(120);

/// The window the per-machine rate limit counts in.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// The most machines whose recent requests are remembered for rate
/// limiting; beyond it the oldest are forgotten.
const MAX_RATE_ENTRIES: usize = 4096;

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeskState {
    /// Waiting for the person to type the pairing code.
    Waiting,
    /// The code matched; waiting for the person to say whose machine it
    /// is (the joiner is still told to wait).
    Matched,
    /// The code matched and the person was chosen; waiting for the joiner
    /// to confirm the team code.
    Approved,
    /// The joiner confirmed and was admitted.
    Admitted,
    /// The joiner said the team codes differ.
    Declined,
    /// Refused for good, with the reason the joiner is told.
    Cancelled(String),
}

impl DeskState {
    fn is_open(&self) -> bool {
        matches!(
            self,
            DeskState::Waiting | DeskState::Matched | DeskState::Approved
        )
    }
}

/// One join request.
#[derive(Debug, Clone)]
pub struct PendingJoin {
    /// Names it in the local API.
    pub id: u64,
    /// The joining machine, as the connection authenticated it.
    pub peer: PeerId,
    /// What it asked.
    pub request: JoinRequest,
    /// What the founder answered.
    pub offer: JoinOffer,
    /// The codes of this join.
    pub codes: Codes,
    /// When it arrived.
    pub arrived: Instant,
    /// When it settled, if it has.
    pub settled: Option<Instant>,
    /// Wrong codes left.
    pub attempts_left: u32,
    /// The person it is admitted as, once chosen.
    pub person: Option<agentmesh_protocol::Owner>,
    /// How many days its membership lasts, as the founder said then
    /// (`admit --days`; `None`: the team's default).
    pub days: Option<u32>,
    /// Where it stands.
    pub state: DeskState,
}

/// What typing a code did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeOutcome {
    /// It matched: whose machine it is comes next, then the team code.
    Matched,
    /// It did not; this many tries remain.
    Wrong(u32),
    /// It did not, and that was the last try: the request is cancelled.
    Cancelled,
    /// The text is not a code at all (no try used).
    NotACode(String),
    /// No open request has this id.
    Unknown,
}

/// The founder's pending join requests.
#[derive(Debug, Default)]
pub struct Desk {
    next_id: u64,
    requests: BTreeMap<u64, PendingJoin>,
    /// Requests per machine per minute, counted from the first request.
    recent: Option<(Instant, RateWindow<PeerId>)>,
}

impl Desk {
    /// Counts a request from `peer`; false if it is over `per_minute`.
    /// At most `MAX_RATE_ENTRIES` machines are remembered; a new one
    /// takes the place of the one whose minute started longest ago, so a
    /// flood of fresh identities can't lock a real joiner out.
    pub fn allow(&mut self, peer: PeerId, now: Instant, per_minute: u32) -> bool {
        let (epoch, window) = self.recent.get_or_insert_with(|| {
            (
                now,
                RateWindow::evicting(RATE_WINDOW, per_minute, MAX_RATE_ENTRIES),
            )
        });
        window.check(&peer, now.saturating_duration_since(*epoch))
    }

    /// Open requests (waiting or approved) from machines other than
    /// `except`, whose own open request a new one would replace.
    pub fn open_count(&self, except: Option<&PeerId>) -> usize {
        self.requests
            .values()
            .filter(|r| r.state.is_open() && Some(&r.peer) != except)
            .count()
    }

    /// Files a request. A machine has one request at a time: a new one
    /// from the same machine replaces its old one.
    pub fn file(
        &mut self,
        peer: PeerId,
        request: JoinRequest,
        offer: JoinOffer,
        codes: Codes,
        now: Instant,
    ) -> u64 {
        self.requests
            .retain(|_, r| !(r.peer == peer && r.state.is_open()));
        self.next_id += 1;
        let id = self.next_id;
        self.requests.insert(
            id,
            PendingJoin {
                id,
                peer,
                request,
                offer,
                codes,
                arrived: now,
                settled: None,
                attempts_left: MAX_CODE_ATTEMPTS,
                person: None,
                days: None,
                state: DeskState::Waiting,
            },
        );
        id
    }

    /// Whether a machine other than `peer` has an open request for `name`.
    pub fn name_pending(&self, name: &agentmesh_protocol::Name, peer: &PeerId) -> bool {
        self.requests
            .values()
            .any(|r| r.state.is_open() && r.request.name == *name && r.peer != *peer)
    }

    /// The request of `peer` whose joiner nonce is `nonce`.
    pub fn find(&mut self, peer: &PeerId, nonce: &[u8]) -> Option<&mut PendingJoin> {
        self.requests
            .values_mut()
            .find(|r| r.peer == *peer && r.request.nonce[..] == *nonce)
    }

    /// The request with `id`.
    pub fn get(&mut self, id: u64) -> Option<&mut PendingJoin> {
        self.requests.get_mut(&id)
    }

    /// Settles a request in `state`.
    pub fn settle(&mut self, id: u64, state: DeskState, now: Instant) {
        if let Some(r) = self.requests.get_mut(&id) {
            r.state = state;
            r.settled = Some(now);
        }
    }

    /// Checks a typed pairing code for request `id`.
    pub fn check_code(&mut self, id: u64, typed: &str, now: Instant) -> CodeOutcome {
        let Some(r) = self
            .requests
            .get_mut(&id)
            .filter(|r| matches!(r.state, DeskState::Waiting | DeskState::Matched))
        else {
            return CodeOutcome::Unknown;
        };
        let code = match Code::parse(typed) {
            Ok(c) => c,
            Err(e) => return CodeOutcome::NotACode(e.to_string()),
        };
        if code == r.codes.pairing {
            // Typed again after an `admit` that stopped before choosing the
            // person: it matches again.
            r.state = DeskState::Matched;
            return CodeOutcome::Matched;
        }
        if r.state == DeskState::Matched {
            // Already matched once: a wrong second typing costs no try.
            return CodeOutcome::Wrong(r.attempts_left);
        }
        r.attempts_left -= 1;
        if r.attempts_left == 0 {
            r.state = DeskState::Cancelled(format!(
                "the founder typed a wrong pairing code {MAX_CODE_ATTEMPTS} times, so the request was cancelled; \
                 if the codes really differ, someone may be in the middle; start again with a new ticket"
            ));
            r.settled = Some(now);
            return CodeOutcome::Cancelled;
        }
        CodeOutcome::Wrong(r.attempts_left)
    }

    /// Request `id`, whose code matched, is `person`'s machine: approved;
    /// the team code to read to the joiner. `None` unless its code matched
    /// and it is still open.
    pub fn choose_person(
        &mut self,
        id: u64,
        person: agentmesh_protocol::Owner,
        days: Option<u32>,
    ) -> Option<Code> {
        let r = self
            .requests
            .get_mut(&id)
            .filter(|r| r.state == DeskState::Matched)?;
        r.person = Some(person);
        r.days = days;
        r.state = DeskState::Approved;
        Some(r.codes.team)
    }

    /// Expires open requests older than `ttl` and forgets settled ones
    /// after [`SETTLED_LINGER`]. Returns the ids that expired now.
    pub fn expire(&mut self, now: Instant, ttl: Duration) -> Vec<u64> {
        let mut expired = vec![];
        for r in self.requests.values_mut() {
            if r.state.is_open() && now.duration_since(r.arrived) >= ttl {
                r.state = DeskState::Cancelled(
                    "the request expired before it was admitted; start again with a new ticket"
                        .into(),
                );
                r.settled = Some(now);
                expired.push(r.id);
            }
        }
        self.requests.retain(|_, r| {
            r.settled
                .is_none_or(|t| now.duration_since(t) < SETTLED_LINGER)
        });
        // Finished minutes free their machines' slots (nothing is reported:
        // refused requests are not audited).
        if let Some((epoch, window)) = &mut self.recent {
            window.closed(now.saturating_duration_since(*epoch));
        }
        expired
    }

    /// The requests `agentmesh admit` lists: the open ones.
    pub fn views(&self, now: Instant) -> Vec<JoinRequestView> {
        self.requests
            .values()
            .filter(|r| r.state.is_open())
            .map(|r| JoinRequestView {
                request_id: r.id,
                name: r.request.name.to_string(),
                owner: r.request.owner.to_string(),
                peer_id: r.peer.to_string(),
                age_secs: now.duration_since(r.arrived).as_secs(),
                attempts_left: r.attempts_left,
                state: match r.state {
                    DeskState::Approved => api::RequestPhase::Approved,
                    DeskState::Matched => api::RequestPhase::Matched,
                    _ => api::RequestPhase::Waiting,
                },
                name_was: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentmesh_protocol::join::codes;
    use agentmesh_protocol::team::TeamId;
    use agentmesh_protocol::{Identity, Name, Owner};

    fn request(id: &Identity) -> (JoinRequest, JoinOffer) {
        let req = JoinRequest {
            ticket_nonce: [1; 16],
            joiner: id.peer_id(),
            x25519: id.x25519_public(),
            name: Name::parse("machine name", "bob").unwrap(),
            owner: Owner::parse("Bob").unwrap(),
            nonce: [2; 16],
        };
        let offer = JoinOffer {
            team: TeamId([3; 32]),
            team_name: Name::parse("team name", "core").unwrap(),
            founder: id.peer_id(),
            nonce: [4; 16],
        };
        (req, offer)
    }

    #[test]
    fn three_wrong_codes_cancel() {
        let id = Identity::generate(&mut rand::rng());
        let (req, offer) = request(&id);
        let c = codes(&req, &offer);
        let mut desk = Desk::default();
        let now = Instant::now();
        let rid = desk.file(id.peer_id(), req, offer, c, now);
        let wrong = if c.pairing.to_string() == "0000-0000-0000" {
            "1111-1111-1111"
        } else {
            "0000-0000-0000"
        };
        assert!(matches!(
            desk.check_code(rid, "not a code!", now),
            CodeOutcome::NotACode(_)
        ));
        assert_eq!(desk.check_code(rid, wrong, now), CodeOutcome::Wrong(2));
        assert_eq!(desk.check_code(rid, wrong, now), CodeOutcome::Wrong(1));
        assert_eq!(desk.check_code(rid, wrong, now), CodeOutcome::Cancelled);
        // Even the right code is too late now.
        assert_eq!(
            desk.check_code(rid, &c.pairing.to_string(), now),
            CodeOutcome::Unknown
        );
        assert!(desk.views(now).is_empty());
    }

    #[test]
    fn the_right_code_approves_and_gives_the_team_code() {
        let id = Identity::generate(&mut rand::rng());
        let (req, offer) = request(&id);
        let c = codes(&req, &offer);
        let mut desk = Desk::default();
        let now = Instant::now();
        let rid = desk.file(id.peer_id(), req, offer, c, now);
        let typed = c.pairing.to_string().to_lowercase().replace('-', " ");
        assert_eq!(desk.check_code(rid, &typed, now), CodeOutcome::Matched);
        assert_eq!(desk.views(now)[0].state, api::RequestPhase::Matched);
        // The team code only once whose machine it is was said.
        let ada = Owner::parse("Ada").unwrap();
        assert_eq!(desk.choose_person(rid, ada.clone(), None), Some(c.team));
        assert_eq!(desk.views(now)[0].state, api::RequestPhase::Approved);
        assert_eq!(desk.get(rid).unwrap().person, Some(ada.clone()));
        // Once: a second choice changes nothing.
        assert_eq!(desk.choose_person(rid, ada, None), None);
    }

    #[test]
    fn rate_limit_per_peer() {
        let mut desk = Desk::default();
        let (a, b) = (PeerId::random(), PeerId::random());
        let t = Instant::now();
        assert!(desk.allow(a, t, 2));
        assert!(desk.allow(a, t, 2));
        assert!(!desk.allow(a, t, 2));
        assert!(desk.allow(b, t, 2));
        assert!(desk.allow(a, t + RATE_WINDOW, 2));
    }

    #[test]
    fn requests_expire_then_are_forgotten() {
        let id = Identity::generate(&mut rand::rng());
        let (req, offer) = request(&id);
        let c = codes(&req, &offer);
        let mut desk = Desk::default();
        let t = Instant::now();
        let rid = desk.file(id.peer_id(), req, offer, c, t);
        let ttl = Duration::from_secs(600);
        assert!(desk.expire(t + Duration::from_secs(599), ttl).is_empty());
        assert_eq!(desk.expire(t + ttl, ttl), vec![rid]);
        assert!(matches!(
            desk.get(rid).unwrap().state,
            DeskState::Cancelled(_)
        ));
        desk.expire(t + ttl + SETTLED_LINGER, ttl);
        assert!(desk.get(rid).is_none());
        assert_eq!(desk.open_count(None), 0);
    }
}
