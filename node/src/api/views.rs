//! What the API's answers and events look like: the views of the
//! daemon's state that clients read.

use serde::{Deserialize, Serialize};

use super::Who;

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// This machine's PeerId.
    pub peer_id: String,
    /// Its name.
    pub name: String,
    /// Its team, if any.
    pub team: Option<TeamRef>,
    /// Where this machine stands in that team: `member`, `revoked` (revoked
    /// or left), or `name_taken`.
    #[serde(default, with = "super::team_standing")]
    pub team_standing: Option<super::Standing>,
    /// When its membership lapses unless renewed (RFC 3339; `null`: it
    /// does not, as the founder's), and which admin gave that term.
    #[serde(default)]
    pub member_until: Option<String>,
    /// The admin machine whose term it holds.
    #[serde(default)]
    pub renewed_by: Option<String>,
    /// Addresses it listens on.
    pub listen_addrs: Vec<String>,
    /// Addresses others observed or confirmed for it.
    pub external_addrs: Vec<String>,
    /// `public`, `private` or `unknown`: what AutoNAT concluded.
    pub reachability: super::Reachability,
    /// This machine's relays and its reservation on each.
    #[serde(default)]
    pub reservations: Vec<ReservationView>,
    /// Where machines on other networks reach it through its relays:
    /// `…/p2p/RELAY/p2p-circuit/p2p/SELF`.
    #[serde(default)]
    pub circuit_addrs: Vec<String>,
    /// The daemon's process id.
    pub pid: u32,
    /// The agentmesh version.
    pub version: String,
    /// Peers currently connected.
    pub connected_peers: usize,
    /// Inbound mail is paused (`agentmesh resume` delivers it again).
    #[serde(default)]
    pub paused: bool,
    /// Messages held for approval (`agentmesh held`).
    #[serde(default)]
    pub held: usize,
    /// Sent messages not yet delivered (`agentmesh outbox`).
    #[serde(default)]
    pub outbox_waiting: usize,
    /// Envelopes this machine holds, as a carrier, for members that are
    /// offline.
    #[serde(default)]
    pub carrying: usize,
    /// Whether this daemon is a test build whose clock the API can move.
    #[serde(default)]
    pub test_build: bool,
    /// The mailboxes whose mail wakes an idle session: their budgets
    /// today, their runs, a failed one.
    #[serde(default)]
    pub wake: Vec<super::WakeStatusView>,
    /// Another daemon runs with this machine's key (a copy of its home
    /// started beside it): the last sign of it in the last hour. Each copy
    /// gets part of the mail and neither all of it; stop one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub another_copy: Option<AnotherCopyView>,
}

/// The last sign of another daemon with this machine's key: a contact
/// record signed by it that this daemon did not make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnotherCopyView {
    /// When it was seen, RFC 3339.
    pub seen_at: String,
    /// The record's sequence number.
    pub seq: u64,
    /// The addresses the other copy published.
    pub addrs: Vec<String>,
}

/// `config_show`: the configuration the running daemon uses, command-line
/// overrides included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigShown {
    /// The configuration, defaults and the machine name filled in.
    pub config: crate::config::Config,
    /// The same, as TOML.
    pub toml: String,
}

impl ConfigShown {
    /// What `config_show` answers for `config`.
    pub fn of(config: &crate::config::Config) -> ConfigShown {
        ConfigShown {
            config: config.clone(),
            toml: config.to_toml(),
        }
    }
}

/// A relay this machine reserves on, and how that stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationView {
    /// The relay's address, ending in `/p2p/RELAY`.
    pub relay: String,
    /// The relay's PeerId.
    pub relay_peer_id: String,
    /// `waiting` (to try again), `connecting`, `reserving`, `reserved`, or
    /// `not_needed` (AutoNAT says this machine is publicly reachable, so
    /// it makes no new reservations).
    pub state: super::ReservationState,
    /// This machine's circuit addresses through it.
    pub circuit_addrs: Vec<String>,
    /// Why the last try failed, while it waits to try again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Learnt from the ticket this machine joined with, not configured.
    pub adopted: bool,
}

/// One relay this machine knows (configured, or adopted from the ticket
/// it joined with), as `agentmesh relays` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayView {
    /// The relay's PeerId.
    pub peer_id: String,
    /// Its addresses, each ending in `/p2p/RELAY`.
    pub addrs: Vec<String>,
    /// `reserved`, `reserving`, `failing` or `idle`.
    pub state: super::RelayState,
    /// When the reservation lapses unless renewed. Null when not reserved,
    /// and null while reserved too: libp2p's relay client renews the
    /// reservation by itself (at three quarters of the time the relay
    /// granted) and does not report the expiry, so it is not known here.
    pub expires_at: Option<String>,
    /// Since when it has been failing (its first failed try since it last
    /// worked), RFC 3339; null unless `failing`.
    pub failing_since: Option<String>,
    /// Why its last try failed, kept after it works again; null if none
    /// has failed since the daemon started.
    pub last_error: Option<String>,
    /// When the reservation it holds was granted, RFC 3339; null unless
    /// `reserved`.
    pub reserved_since: Option<String>,
    /// Learnt from the ticket this machine joined with, not configured:
    /// `agentmesh relays forget` can drop it.
    pub adopted: bool,
    /// This machine's circuit addresses through it.
    pub circuit_addrs: Vec<String>,
}

/// `agentmesh relays`: every relay this machine knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelaysView {
    /// In the order they are preferred: configured first, then adopted.
    pub relays: Vec<RelayView>,
    /// How many it holds reservations on at once (`relays.reservations`).
    pub reservations: usize,
    /// What AutoNAT says: a `public` machine makes no new reservations.
    pub reachability: super::Reachability,
}

/// A team, briefly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamRef {
    /// The team id, hex.
    pub team_id: String,
    /// Its name.
    pub name: String,
}

/// `team show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamView {
    /// The team id, hex.
    pub team_id: String,
    /// The team's name.
    pub name: String,
    /// The founder's PeerId.
    pub founder: String,
    /// The founder's machine name.
    pub founder_name: String,
    /// Every machine the team admitted, revoked ones included.
    pub members: Vec<MemberView>,
}

/// One machine of a team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberView {
    /// Its machine name.
    pub name: String,
    /// The person who runs it.
    pub owner: String,
    /// Its PeerId.
    pub peer_id: String,
    /// When it was admitted, RFC 3339.
    pub admitted_at: String,
    /// Whether it was revoked (or left).
    pub revoked: bool,
    /// Whether it is an admin.
    pub admin: bool,
    /// `current`, `left`, `revoked`, or `name_taken`.
    pub standing: super::Standing,
    /// Whether this is the machine answering.
    pub this_machine: bool,
    /// Whether it is a carrier (always on: it holds mail for members that
    /// are offline), as its directory record says.
    #[serde(default)]
    pub always_on: bool,
    /// When its membership lapses unless renewed, RFC 3339; `null` for
    /// the founder (whose does not) and a machine given no term.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// The admin machine whose term it holds (`null` without one).
    #[serde(default)]
    pub renewed_by: Option<String>,
}

/// Where a page of `peers` ends: the sort key of its last row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerCursor {
    /// Members 0, revoked 1, relays 2, strangers 3.
    pub rank: u8,
    /// The machine name, if any.
    pub name: Option<String>,
    /// The PeerId.
    pub peer_id: String,
}

/// One page of `peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeersPage {
    /// The rows.
    pub peers: Vec<PeerRow>,
    /// Ask with this as `after` for the next page; null on the last.
    pub next_after: Option<PeerCursor>,
}

/// `peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerRow {
    /// The machine name, if the team knows it.
    pub name: Option<String>,
    /// The person who runs it, as its Admit says (members and revoked
    /// machines): a name reused after a revocation shows another owner.
    #[serde(default)]
    pub owner: Option<String>,
    /// The PeerId.
    pub peer_id: String,
    /// `member`, `revoked`, `stranger` or `relay` (a machine that left is
    /// `revoked` here, as before, with `left` set).
    pub membership: super::Membership,
    /// Whether it left the team (revoked by itself), rather than being
    /// revoked: people are shown `left`.
    #[serde(default)]
    pub left: bool,
    /// `direct`, `hole-punched`, `relayed` or `none`.
    pub connection: super::Connection,
    /// The relay, when relayed.
    pub relay: Option<String>,
    /// `tcp` or `quic`: the transport of the connection in use (for a
    /// relayed one, the transport to the relay); null when not connected.
    pub transport: Option<super::Transport>,
    /// Known addresses.
    pub addresses: Vec<String>,
    /// The last round-trip time measured (ping), ms, while connected;
    /// null when not connected.
    pub rtt_ms: Option<f64>,
    /// When last connected, RFC 3339; null if never.
    pub last_seen: Option<String>,
    /// How long the connection in use has been up, ms; null when not
    /// connected. A connection that closed and opened again starts at 0.
    #[serde(default)]
    pub connected_for_ms: Option<u64>,
    /// How long ago it was last seen, ms, while no connection is open:
    /// when its last connection closed (or, across a restart of this
    /// daemon, when it last answered); null while connected or if never
    /// seen. `last_seen` to the millisecond.
    #[serde(default)]
    pub disconnected_for_ms: Option<u64>,
    /// The relays its latest contact record names, each ending in
    /// `/p2p/RELAY`: where it says it can be reached through now (empty
    /// when it names none, or no record of it is held).
    #[serde(default)]
    pub contact_relays: Vec<String>,
}

/// `invite`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invite {
    /// The ticket to hand the joiner.
    pub ticket: String,
    /// When it expires, RFC 3339.
    pub expires_at: String,
}

/// `join_start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinStarted {
    /// Names this join in later requests.
    pub join_id: u64,
    /// The code to read to the founder.
    pub pairing_code: String,
    /// The team's name, as the founder states it.
    pub team_name: String,
    /// The founder's PeerId.
    pub founder: String,
}

/// `join_status` and `join_confirm`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinState {
    /// `waiting` (for the founder), `approved` (team code to confirm),
    /// `joined`, `refused`, or `declined`.
    pub state: super::JoinPhase,
    /// The team code to confirm, once approved.
    pub team_code: Option<String>,
    /// Why, when refused.
    pub reason: Option<String>,
    /// The team, once joined.
    pub team: Option<TeamRef>,
    /// The person this machine was admitted as, once joined (the
    /// founder's choice; it decides whose machines' mail is held).
    #[serde(default)]
    pub person: Option<String>,
}

/// One pending join request, for `admit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinRequestView {
    /// Names the request in later requests.
    pub request_id: u64,
    /// The machine name it asks for.
    pub name: String,
    /// Its claimed owner.
    pub owner: String,
    /// Its PeerId.
    pub peer_id: String,
    /// Seconds since it arrived.
    pub age_secs: u64,
    /// Wrong codes left before it is cancelled.
    pub attempts_left: u32,
    /// `waiting`, `matched` (the code matched; whose machine it is comes
    /// next), or `approved` (the person chosen; the joiner confirms).
    pub state: super::RequestPhase,
    /// The machine that held the name before (revoked or departed), if
    /// any: admitted, this machine's mail shows under the same name.
    #[serde(default)]
    pub name_was: Option<MemberView>,
}

/// `admit_code`: the code matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitApproved {
    /// The team code to read to the joiner.
    pub team_code: String,
    /// The person the machine is admitted as.
    pub person: String,
}

/// `admit_code` when the code matched: whose machine is it?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitMatched {
    /// The person the joiner says runs it (a claim: only shown).
    pub claimed_owner: String,
    /// The team's persons, each with their machines.
    pub persons: Vec<PersonView>,
}

/// One person of the team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonView {
    /// The person's name, as admitted.
    pub person: String,
    /// The names of their current machines.
    pub machines: Vec<String>,
}

/// `team_person`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonMoved {
    /// The machine.
    pub machine: String,
    /// Its person before.
    pub was: String,
    /// Its person now.
    pub person: String,
    /// Whether that person had no machine in the team before (a typo makes
    /// a new person: the output says so).
    pub new_person: bool,
}

/// `admit_status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmitState {
    /// `waiting`, `awaiting_confirmation`, `admitted`, `declined`, or
    /// `cancelled` (three wrong codes, refused, or expired).
    pub state: super::AdmitPhase,
    /// Why, when cancelled.
    pub reason: Option<String>,
}

/// `connect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connected {
    /// Who answered.
    pub peer_id: String,
    /// Its membership, as this machine sees it.
    pub membership: super::Membership,
    /// Blocks the sync brought in.
    pub new_blocks: usize,
}

/// An event pushed to attached clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A message arrived in the attached mailbox (or, for clients attached
    /// to no mailbox, in any).
    Message {
        /// The message.
        message: MessageView,
    },
    /// A message is held for approval: a prompt for every attached human.
    Held {
        /// The held message.
        message: MessageView,
    },
    /// A held message was approved or rejected (by any client), or expired:
    /// clear its prompt.
    Resolved {
        /// The message id.
        id: String,
        /// `approved`, `rejected`, or `expired`.
        outcome: super::HeldOutcome,
    },
    /// A folder was allowed or denied: the mailbox a folder is, or
    /// whether it receives, may have changed (an MCP server that keeps
    /// its folder's mailbox asks `mailbox_for` again).
    Folders,
    /// This client fell behind and missed events; reattach with
    /// `after_seq` to catch up.
    Lagged {
        /// Events missed.
        missed: u64,
        /// The last message seq this client was sent.
        after_seq: u64,
    },
}

/// A received message, as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageView {
    /// The message id.
    pub id: String,
    /// Its place in this machine's inbox.
    pub seq: u64,
    /// The sender, `mailbox@machine` or `@machine`.
    pub from: String,
    /// The sender's identity stamp, as claimed.
    pub who: Who,
    /// `tell`, `ask`, `reply`, `broadcast`.
    pub kind: super::MessageKind,
    /// The conversation.
    pub thread: String,
    /// The message answered.
    pub in_reply_to: Option<String>,
    /// The message.
    pub text: String,
    /// When it arrived, RFC 3339.
    pub received_at: String,
    /// When its sender sent it, RFC 3339 (a carrier may bring it much
    /// later); absent for mail kept before this was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    /// Whether it was read.
    pub read: bool,
    /// The receiving mailbox (null: the owner's).
    pub mailbox: Option<String>,
    /// Why it is held, if it is.
    pub held: Option<super::HeldReason>,
    /// The person who runs the sending machine, as its Admit says.
    #[serde(default)]
    pub from_owner: Option<String>,
    /// How many peer messages caused it.
    pub hop: u8,
    /// Whether the sender had read untrusted text.
    pub taint: bool,
    /// The sending machine's PeerId.
    #[serde(default)]
    pub from_peer: String,
    /// `left` or `revoked` when the machine that sent it is no longer a
    /// member (held mail only): its name may belong to another key now,
    /// so it is not that machine's mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_gone: Option<String>,
}

/// `inbox`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxPage {
    /// The messages, oldest first.
    pub messages: Vec<MessageView>,
    /// The seq to ask after for the next page; null when this is the last.
    pub next_after_seq: Option<u64>,
}

/// `take`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Taken {
    /// The messages, oldest first.
    pub messages: Vec<MessageView>,
    /// Unread messages left in the mailbox.
    pub unread: usize,
    /// Its messages held for a person's approval.
    pub held: usize,
}

/// `mailbox_state`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailboxStateView {
    /// The mailbox (null: the owner's).
    pub mailbox: Option<String>,
    /// Its address on this machine.
    pub address: String,
    /// Unread messages.
    pub unread: usize,
    /// Messages held for a person's approval.
    pub held: usize,
    /// The hop it is handling (what it sends next carries this plus one;
    /// 0 when it is handling no peer mail).
    pub hop: u8,
    /// Whether it is handling peer mail (then its next new message carries
    /// `hop + 1`).
    pub handling: bool,
    /// The folder bound to it, if any.
    pub path: Option<String>,
    /// Whether it receives (a bound folder opted in; the owner's always).
    pub receives: bool,
    /// Whether it is tainted (its person marked it, or it received tainted
    /// mail since its person last spoke): what it sends carries taint, and
    /// it may not change its profile.
    #[serde(default)]
    pub tainted: bool,
}

/// `taint`: a mailbox's taint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaintView {
    /// The mailbox.
    pub mailbox: String,
    /// Its address.
    pub address: String,
    /// Whether what it sends carries taint now.
    pub tainted: bool,
    /// Its person marked it.
    pub marked: bool,
    /// The tainted message it received since its person last spoke, if
    /// any.
    pub caught: Option<CaughtView>,
}

/// The tainted message that tainted a mailbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaughtView {
    /// When it arrived, RFC 3339.
    pub at: String,
    /// Its sender.
    pub from: String,
    /// Its id.
    pub id: String,
}

/// `mailbox_for`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MailboxFor {
    /// The mailbox's name; null when the folder has none (`not_set_up`
    /// says why).
    pub mailbox: Option<String>,
    /// The bound folder it came from (the folder or an ancestor); null
    /// when it is the folder's base name and nothing is bound.
    pub bound_path: Option<String>,
    /// Whether it receives: bound and opted in.
    pub receives: bool,
    /// When the folder has no mailbox: why, and what a person runs to
    /// give it one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_set_up: Option<String>,
}
