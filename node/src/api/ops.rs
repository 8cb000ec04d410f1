//! The operations a client may request, and who serves each.

use serde::{Deserialize, Serialize};

use super::*;

impl Op {
    /// Whether its answer may wait on something outside the daemon (a
    /// send that waits for its recipient's first answer): the server
    /// answers the client's later requests meanwhile.
    pub fn waits(&self) -> bool {
        matches!(
            self,
            Op::Send {
                wait_first_answer_ms: Some(_),
                ..
            }
        )
    }
}

/// The operations a client may request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum Op {
    /// The daemon's identity, team and addresses.
    Status,
    /// The peer table, a page at a time (members first, then by name and
    /// PeerId).
    Peers {
        /// Only rows after this one (paging; from `next_after`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<PeerCursor>,
        /// At most this many rows (default and cap: 500).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// The team and its members.
    TeamShow,
    /// Found a team with this machine as its admin.
    TeamCreate {
        /// The team's name.
        name: String,
        /// The person who runs this machine.
        owner: String,
    },
    /// Leave the team (revoke this machine).
    TeamLeave,
    /// Make a single-use invite ticket.
    Invite {
        /// Its lifetime in seconds; the configured default if absent.
        #[serde(default)]
        ttl_secs: Option<u64>,
    },
    /// Ask a founder to join its team.
    JoinStart {
        /// The ticket.
        ticket: String,
        /// This machine's name in the team.
        name: String,
        /// The person who runs this machine.
        owner: String,
    },
    /// Where a join stands.
    JoinStatus {
        /// From [`JoinStarted`].
        join_id: u64,
    },
    /// Accept (the team codes match) or decline a join.
    JoinConfirm {
        /// From [`JoinStarted`].
        join_id: u64,
        /// Whether the person confirmed the team code.
        accept: bool,
    },
    /// Join requests waiting for this admin.
    AdmitList,
    /// Check the pairing code a person typed for a request.
    AdmitCode {
        /// The request.
        request_id: u64,
        /// The code as typed.
        code: String,
    },
    /// Whose machine a request whose code matched is: the person it is
    /// admitted as (what consent compares). Answers the team code.
    AdmitPerson {
        /// The request.
        request_id: u64,
        /// The person's name.
        person: String,
        /// Whether `person` is one of the team's persons already (the
        /// machine then counts as theirs: mail between their machines is
        /// never held). A name that is (or is not) one already is refused
        /// when this says otherwise, so a claim is never merged silently.
        existing: bool,
    },
    /// Where an approved request stands.
    AdmitStatus {
        /// The request.
        request_id: u64,
    },
    /// Refuse a join request.
    AdmitReject {
        /// The request.
        request_id: u64,
    },
    /// Move a machine to another person (a Person block; founder only).
    TeamPerson {
        /// The machine's name.
        machine: String,
        /// The person who runs it from now on.
        person: String,
    },
    /// Revoke a member by machine name.
    Revoke {
        /// The member's machine name.
        name: String,
    },
    /// Dial an address and sync the team with whoever answers.
    Connect {
        /// A multiaddr, ending in `/p2p/PEER` or not.
        addr: String,
    },
    /// Stop the daemon.
    Shutdown,
    /// The configuration the running daemon uses (command-line overrides
    /// included).
    ConfigShow,
    /// Send a message. The answer (its id) comes once it is durable.
    Send {
        /// `MAILBOX@MACHINE`, or `@MACHINE` for the machine's owner.
        to: String,
        /// The message.
        text: String,
        /// An ask (a reply is expected) rather than a tell.
        #[serde(default)]
        ask: bool,
        /// The id of the message this one answers.
        #[serde(default)]
        reply_to: Option<String>,
        /// The sending mailbox; the attached mailbox, else the owner's.
        #[serde(default)]
        from_mailbox: Option<String>,
        /// Answer once the recipient first answers (or is found offline),
        /// waiting at most this long (capped at 10 s), with where the
        /// message stands then and the sending mailbox's state: one round
        /// trip instead of a send and a poll. None: answer once durable.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_first_answer_ms: Option<u64>,
    },
    /// Received messages, oldest first.
    Inbox {
        /// Only this mailbox (`@` for the owner's).
        #[serde(default)]
        mailbox: Option<String>,
        /// Only unread messages.
        #[serde(default)]
        unread: bool,
        /// Only messages after this seq (paging).
        #[serde(default)]
        after_seq: Option<u64>,
        /// At most this many (default and cap: 1000).
        #[serde(default)]
        limit: Option<usize>,
    },
    /// Show one received message and mark it read.
    Read {
        /// The message id.
        id: String,
    },
    /// Sent messages and where each stands.
    Outbox,
    /// Where one sent message stands. Answers its [`OutboxView`].
    MessageStatus {
        /// The message id (or a unique prefix of it, at least 4
        /// characters, among the messages `outbox` lists).
        id: String,
    },
    /// Shows, or sets, whether a mailbox tells senders when their mail
    /// was read. Answers a [`ReceiptsView`].
    Receipts {
        /// The mailbox (a name on this machine, or `@`: the owner's).
        mailbox: String,
        /// Send read receipts (`Some(true)`), or not; `None` shows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        read: Option<bool>,
    },
    /// Messages held for approval.
    Held,
    /// Deliver a held message.
    Approve {
        /// The message id.
        id: String,
    },
    /// Drop a held message.
    Reject {
        /// The message id.
        id: String,
        /// Why, for the audit log.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Stop holding a machine's mail.
    Trust {
        /// Its machine name.
        machine: String,
    },
    /// Opt a folder in: its mailbox receives.
    Allow {
        /// The folder.
        path: String,
        /// The mailbox name; default: the folder's base name.
        #[serde(default)]
        mailbox: Option<String>,
    },
    /// Opt a folder out: its mailbox refuses mail.
    Deny {
        /// The folder, as it was allowed (empty to name the mailbox only).
        #[serde(default)]
        path: String,
        /// Or the mailbox's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// The mailboxes: each folder opted in or out, and its name.
    Mailboxes,
    /// Hold all inbound mail until `resume`.
    Pause,
    /// Deliver inbound mail again, and what `pause` held.
    Resume,
    /// A mailbox's unread messages, oldest first, marked read unless
    /// `peek` (how an agent's session sees its mail: `check_inbox`, and a
    /// hook's injection). Two takes never return one message twice.
    Take {
        /// The mailbox (`@` for the owner's); default: the attached one,
        /// else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
        /// At most this many (default and cap: 50).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
        /// At most about this many bytes of messages (as JSON), and at
        /// least one message (default and cap: 640 KiB, one answer).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<usize>,
        /// Leave them unread.
        #[serde(default)]
        peek: bool,
        /// A Stop hook asks: what it takes keeps its session working, so
        /// it costs the mailbox a wake from its daily budget, and takes
        /// nothing once that is spent.
        #[serde(default)]
        stop: bool,
    },
    /// A mailbox's unread and held counts and the hop it is handling.
    MailboxState {
        /// The mailbox (`@` for the owner's); default: the attached one,
        /// else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// The mailbox a folder is: the one bound to it or to its nearest
    /// bound ancestor, else its base name, unless that name is bound to
    /// another folder or folds to nothing (then it has none).
    MailboxFor {
        /// The folder.
        path: String,
    },
    /// The mailbox's person spoke: what it sends next is hop 0 again.
    HopReset {
        /// The mailbox (`@` for the owner's); default: the attached one,
        /// else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// A person sets whether mail to a mailbox wakes an idle session of
    /// an agent, and its daily budget. Answers its [`WakeView`].
    WakeSet {
        /// The mailbox (a name on this machine).
        mailbox: String,
        /// The agent, or off.
        wake: WakeChoice,
        /// Wakes a day it may cost; default: unchanged (at first,
        /// `wake.budget`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<u32>,
        /// A Claude Code run's `--max-budget-usd`; default: unchanged (at
        /// first, `wake.max_budget_usd`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_budget_usd: Option<f64>,
    },
    /// The exact command a wake run of a mailbox would start now; runs
    /// nothing. Answers a [`WakeTestView`].
    WakeTest {
        /// The mailbox (a name on this machine).
        mailbox: String,
    },
    /// The recent wake runs, newest first. Answers a [`WakeListView`].
    WakeList,
    /// Ends a wake run: SIGTERM to its process group, SIGKILL 10 s later.
    /// Answers its [`RunView`] (still `running` until it has exited).
    WakeStop {
        /// The run's id (or a unique prefix of it).
        run: String,
    },
    /// An agent's hook reports its session in a mailbox's folder (a run agentmesh started reports none). Answers its
    /// [`SessionView`].
    Session {
        /// The mailbox of the session's folder; default: the attached one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
        /// The agent.
        agent: WakeAgent,
        /// Its session id (1 to 128 bytes, one line).
        session_id: String,
        /// What happened.
        event: SessionEvent,
    },
    /// A person marks a mailbox tainted (its session reads text others
    /// wrote), or clears its taint whole (`on: false`: the mark and what it
    /// caught from tainted mail). Answers its [`TaintView`].
    Taint {
        /// The mailbox (a name on this machine).
        mailbox: String,
        /// Mark it (true) or clear it (false).
        on: bool,
    },
    /// Sets a mailbox's profile, goal or preset (each left as it is when
    /// absent). Answers its [`ProfileView`].
    ProfileSet {
        /// The mailbox (`@` for the owner's); default: the attached one,
        /// else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
        /// What its session knows and works on (at most 1 KiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<String>,
        /// Its current objective (at most 256 bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        goal: Option<String>,
        /// The preset its broadcasts are judged with.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preset: Option<crate::bus::Preset>,
    },
    /// This machine's mailboxes' profiles, goals, statuses and presets
    /// ([`ProfilesView`]); only `mailbox` if given.
    ProfileShow {
        /// The mailbox (`@` for the owner's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// The team's directory: every member machine with its mailboxes,
    /// profiles, goals and statuses, a page at a time ([`DirectoryPage`]).
    Directory {
        /// Only mailboxes after this one (paging; from `next_after`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// At most about this many bytes (as JSON) per page, and at least
        /// one mailbox (default and cap: 24 KiB).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<usize>,
    },
    /// Sends one message to every mailbox in the team it concerns, as
    /// each receiving machine's judge decides ([`BroadcastView`]).
    Broadcast {
        /// The message.
        text: String,
        /// The sending mailbox; the attached mailbox, else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_mailbox: Option<String>,
    },
    /// Says a broadcast delivered to a mailbox was not for it, and why
    /// ([`NotForMeView`]).
    NotForMe {
        /// The delivered broadcast's id (or a unique prefix).
        id: String,
        /// Why it was not for this session.
        #[serde(default)]
        note: String,
        /// The mailbox (`@` for the owner's); default: the attached one,
        /// else the owner's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// What the bus delivered and dropped, and the wake runs broadcasts
    /// started that did nothing ([`BusStatsView`]).
    BusStats,
    /// The bus's decisions ([`BusLogView`]).
    BusLog {
        /// Only entries from the last this many seconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_secs: Option<u64>,
        /// Only entries about this mailbox (`NAME@MACHINE`, `NAME@`, or
        /// `@` for the owner's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mailbox: Option<String>,
    },
    /// The audit log.
    Audit {
        /// Only entries from the last this many seconds.
        #[serde(default)]
        since_secs: Option<u64>,
    },
    /// Where the local web page is, and the URL that signs a browser in
    /// ([`UiView`]).
    Ui,
    /// Move this daemon's clock forward (test builds only).
    #[cfg(feature = "test-clock")]
    ClockAdvance {
        /// How far, in seconds.
        secs: u64,
    },
}

/// Who serves an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The network's event loop: status, peers, connect, shutdown, config.
    Net,
    /// The team part (inside the network's loop): team, invite, join,
    /// admit, revoke.
    Team,
    /// The mail actor: messages, consent, the audit log.
    Mail,
    /// The socket server itself: what the daemon started it with (the
    /// web page's address).
    Socket,
}

impl Op {
    /// Who serves it. Exhaustive: a new op must say.
    pub fn owner(&self) -> Owner {
        match self {
            Op::Status | Op::Peers { .. } | Op::Connect { .. } | Op::Shutdown | Op::ConfigShow => {
                Owner::Net
            }
            Op::Ui => Owner::Socket,
            Op::TeamShow
            | Op::TeamCreate { .. }
            | Op::TeamLeave
            | Op::Invite { .. }
            | Op::JoinStart { .. }
            | Op::JoinStatus { .. }
            | Op::JoinConfirm { .. }
            | Op::AdmitList
            | Op::AdmitCode { .. }
            | Op::AdmitPerson { .. }
            | Op::TeamPerson { .. }
            | Op::AdmitStatus { .. }
            | Op::AdmitReject { .. }
            | Op::Revoke { .. }
            | Op::Directory { .. } => Owner::Team,
            Op::Send { .. }
            | Op::Inbox { .. }
            | Op::Read { .. }
            | Op::Outbox
            | Op::MessageStatus { .. }
            | Op::Receipts { .. }
            | Op::Held
            | Op::Approve { .. }
            | Op::Reject { .. }
            | Op::Trust { .. }
            | Op::Allow { .. }
            | Op::Deny { .. }
            | Op::Mailboxes
            | Op::Pause
            | Op::Resume
            | Op::Take { .. }
            | Op::MailboxState { .. }
            | Op::MailboxFor { .. }
            | Op::HopReset { .. }
            | Op::Taint { .. }
            | Op::WakeSet { .. }
            | Op::WakeTest { .. }
            | Op::WakeList
            | Op::WakeStop { .. }
            | Op::Session { .. }
            | Op::ProfileSet { .. }
            | Op::ProfileShow { .. }
            | Op::Broadcast { .. }
            | Op::NotForMe { .. }
            | Op::BusLog { .. }
            | Op::BusStats
            | Op::Audit { .. } => Owner::Mail,
            #[cfg(feature = "test-clock")]
            Op::ClockAdvance { .. } => Owner::Mail,
        }
    }

    /// Whether the mailroom (rather than the network) answers it.
    pub fn is_mail(&self) -> bool {
        self.owner() == Owner::Mail
    }
}
