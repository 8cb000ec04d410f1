//! Memberships that expire unless renewed: the Term blocks an admin
//! writes (with each Admit, at `team renew`, and on its own for a member
//! it hears from two thirds of the way through its term), and a member's
//! side of it (it syncs with an admin once it is that far, which is how it
//! asks).
//!
//! ```text
//! admit ── Admit + Term(now + days) ──> member ... 2/3 of the term ... member syncs with an admin
//!                                                                      └─> admin: Term(now + same length)
//! past expires_at, no renewal: lapsed (not a member: mail waits, connections close)
//! team renew MACHINE [--days N] ──> Term(now + N): a member again
//! ```

use std::time::{Duration, Instant};

use agentmesh_protocol::team::{BlockBody, Member, Standing, Term};
use agentmesh_protocol::{PeerId, Timestamp};

use super::network::Network;
use super::state::TeamCore;
use crate::api::{self, ApiError, err};
use crate::audit::AuditEvent;
use crate::codes::ErrorCode;

/// How long a membership lasts when nobody said (`team create
/// --member-days`, `admit --days`): 180 days, Tailscale's key expiry.
pub const DEFAULT_MEMBER_DAYS: u32 = 180;

/// The longest term an admin gives at once: ten years.
pub const MAX_MEMBER_DAYS: u32 = 3650;

/// The shortest: a week. Every renewal is a block the team keeps for
/// ever, so terms bound how fast a team grows toward its cap of
/// `MAX_TEAM_BLOCKS` (4 096): a renewal every 2/3 of 7 days is 78 blocks
/// a member a year; of 180 days, 3.
pub const MIN_MEMBER_DAYS: u32 = 7;

/// Blocks kept free for admissions and revocations: near the cap, no
/// renewal is given on its own (`team renew` still is).
const HEADROOM: usize = 256;

/// How often a member that is due asks again (syncs with an admin).
const ASK_EVERY: Duration = Duration::from_secs(60);

const DAY_MS: u64 = 86_400_000;

/// The days a term given now lasts: `days`, else the team's choice, else
/// [`DEFAULT_MEMBER_DAYS`].
pub fn days_or_default(core: &TeamCore, days: Option<u32>) -> Result<u32, ApiError> {
    let days = match days {
        Some(d) => d,
        None => core
            .store
            .member_days()
            .ok()
            .flatten()
            .unwrap_or(DEFAULT_MEMBER_DAYS),
    };
    check_days(days)?;
    Ok(days)
}

/// Refuses a term of 0 days or over [`MAX_MEMBER_DAYS`].
pub fn check_days(days: u32) -> Result<(), ApiError> {
    if !(MIN_MEMBER_DAYS..=MAX_MEMBER_DAYS).contains(&days) {
        return err(
            ErrorCode::BadInput,
            format!(
                "a membership lasts {MIN_MEMBER_DAYS} to {MAX_MEMBER_DAYS} days; {days} is not that (the default is {DEFAULT_MEMBER_DAYS})"
            ),
        );
    }
    Ok(())
}

/// Signs and spreads a Term for `peer`: a member for `days` from now.
pub fn give(
    core: &mut TeamCore,
    net: &mut dyn Network,
    peer: PeerId,
    days: u32,
) -> Result<Timestamp, ApiError> {
    let Some(team) = core.state() else {
        return err(ErrorCode::NotInTeam, super::NOT_IN_TEAM);
    };
    let now = core.wall();
    let expires_at = Timestamp::from_unix_millis(
        now.as_unix_millis()
            .saturating_add(u64::from(days) * DAY_MS),
    );
    let body = BlockBody::Term(Term {
        team: team.id(),
        by: core.me.peer_id(),
        peer,
        expires_at,
        at: now,
    });
    core.add_own_block(net, body)?;
    core.audit(
        AuditEvent::Renewed,
        Some(&peer),
        format!("a member until {expires_at} ({days} days)"),
    );
    Ok(expires_at)
}

/// `team renew MACHINE [--days N]`: an admin extends a member (one that
/// lapsed included) from now.
pub fn renew(
    core: &mut TeamCore,
    net: &mut dyn Network,
    machine: &str,
    days: Option<u32>,
) -> Result<api::Renewed, ApiError> {
    if !core.am_admin() {
        return err(
            ErrorCode::NotAdmin,
            "only the team's founder renews memberships",
        );
    }
    let days = days_or_default(core, days)?;
    let Some(team) = core.state() else {
        return err(ErrorCode::NotInTeam, super::NOT_IN_TEAM);
    };
    let Some(member) = team.by_name(machine) else {
        let known: Vec<String> = team
            .members()
            .filter(|m| m.standing == Standing::Current && !m.admin)
            .map(|m| m.name.to_string())
            .collect();
        return err(
            ErrorCode::UnknownMember,
            format!(
                "no current member is named {machine:?}; members: {}",
                known.join(", ")
            ),
        );
    };
    if member.admin {
        return err(
            ErrorCode::Admin,
            "the founder's membership does not expire; there is nothing to renew",
        );
    }
    let peer = member.peer;
    give(core, net, peer, days)?;
    // What counts is the latest expiry of its terms: a shorter one given
    // now changes nothing, and the answer says the one that counts.
    let Some(term) = core
        .state()
        .and_then(|t| t.member(&peer))
        .and_then(|m| m.term)
    else {
        return err(ErrorCode::Internal, "the term given is not in the team");
    };
    let by = core
        .state()
        .and_then(|t| t.member(&term.by))
        .map_or_else(|| term.by.to_string(), |a| a.name.to_string());
    Ok(api::Renewed {
        machine: machine.to_owned(),
        peer_id: peer.to_string(),
        expires_at: api::rfc3339(term.expires_at),
        renewed_by: by,
    })
}

/// Whether `m`'s term is two thirds through at `now` (and not over).
fn due(m: &Member, now: Timestamp) -> bool {
    m.term.is_some_and(|t| {
        let (from, end, now) = (
            t.from.as_unix_millis(),
            t.expires_at.as_unix_millis(),
            now.as_unix_millis(),
        );
        let two_thirds = from + end.saturating_sub(from) / 3 * 2;
        now >= two_thirds && now < end
    })
}

/// An admin heard from `peer` (it asked for a sync): renewed for the
/// length of its current term if it is due. A lapsed member is not
/// renewed this way: only a person can (`team renew`), so a laptop lost
/// for longer than a third of its term stays out.
pub fn on_heard_from(core: &mut TeamCore, net: &mut dyn Network, peer: PeerId) {
    if !core.am_admin() {
        return;
    }
    let now = core.wall();
    let Some(m) = core.state().and_then(|t| t.member(&peer)) else {
        return;
    };
    if m.standing != Standing::Current || m.admin || !due(m, now) {
        return;
    }
    let held = core.state().map_or(0, |t| t.blocks().count());
    if held + HEADROOM >= agentmesh_protocol::team::MAX_TEAM_BLOCKS {
        tracing::warn!(
            %peer,
            held,
            "the team is near its block cap: no renewal is given on its own (`team renew` still works)"
        );
        return;
    }
    let Some(t) = m.term else { return };
    let days = (t
        .expires_at
        .as_unix_millis()
        .saturating_sub(t.from.as_unix_millis())
        / DAY_MS)
        .clamp(u64::from(MIN_MEMBER_DAYS), u64::from(MAX_MEMBER_DAYS)) as u32;
    if let Err(e) = give(core, net, peer, days) {
        tracing::warn!(%peer, error = %e, "cannot renew a member's term");
    }
}

/// A member's side: once its own term is two thirds through, it syncs
/// with an admin (dialing it first if need be) at most every minute,
/// which is how it asks to be renewed. Returns the admin to sync with now,
/// if any.
pub fn ask_if_due(
    core: &TeamCore,
    net: &mut dyn Network,
    last: &mut Option<Instant>,
    now: Instant,
) -> Option<PeerId> {
    let me = core.me.peer_id();
    let mine = core.state()?.member(&me)?;
    if !due(mine, core.wall()) || last.is_some_and(|l| now.duration_since(l) < ASK_EVERY) {
        return None;
    }
    let admin = core
        .other_members()
        .into_iter()
        .find_map(|(p, admin)| admin.then_some(p))?;
    *last = Some(now);
    if net.is_connected(&admin) {
        Some(admin)
    } else {
        // A sync starts when the connection does.
        net.dial(admin);
        None
    }
}
