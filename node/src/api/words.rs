//! The enumerated words of the API's answers: each a serde enum, so a
//! client matches on a variant instead of comparing strings, and a word a
//! daemon sends is one of these or fails to read (the JSON is the same
//! word as before).

use serde::{Deserialize, Serialize};

/// The judge's words: how eagerly a mailbox takes broadcasts, and what a
/// mailbox's session is doing (the directory's status).
pub use agentmesh_judge::{Preset, Status as SessionStatus};

/// Defines an enum of API words, with `as_str` and `Display` giving the
/// word as it is on the wire.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant,)+
        }

        impl $name {
            /// The word, as the API sends it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// The variant whose word `word` is.
            pub fn parse(word: &str) -> Option<$name> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

words! {
    /// How a peer is reached now (`peers`' `connection`).
    Connection {
        /// A connection one side dialled straight.
        Direct = "direct",
        /// Straight, punched through NAT (DCUtR) from a relayed one.
        HolePunched = "hole-punched",
        /// Through a relay's circuit (`relay` names it).
        Relayed = "relayed",
        /// Not connected.
        None = "none",
    }
}

words! {
    /// How a peer stands with this machine's team (`peers`'
    /// `membership`).
    Membership {
        /// A current member.
        Member = "member",
        /// Revoked, or left (`left` tells which).
        Revoked = "revoked",
        /// Not a member, and serves circuit relay.
        Relay = "relay",
        /// Anyone else.
        Stranger = "stranger",
    }
}

words! {
    /// Where a member stands in the team (`team show`'s `standing`).
    Standing {
        /// A member.
        Current = "current",
        /// It left (revoked itself).
        Left = "left",
        /// Revoked by an admin.
        Revoked = "revoked",
        /// Its name was taken by an earlier member; it is not one.
        NameTaken = "name_taken",
        /// Its membership passed its expiry and was not renewed: not a
        /// member until an admin renews it.
        Lapsed = "lapsed",
    }
}

/// `status`' `team_standing`: the same [`Standing`], whose `current` that
/// field has always called `member`.
pub mod team_standing {
    use super::Standing;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// The word `status` uses for `s`.
    pub fn word(s: Standing) -> &'static str {
        match s {
            Standing::Current => "member",
            other => other.as_str(),
        }
    }

    /// Writes `s` as `status` words it.
    pub fn serialize<S: Serializer>(s: &Option<Standing>, out: S) -> Result<S::Ok, S::Error> {
        s.map(word).serialize(out)
    }

    /// Reads `status`' word.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Standing>, D::Error> {
        let Some(w) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        match w.as_str() {
            "member" => Ok(Some(Standing::Current)),
            "current" => Err(serde::de::Error::custom("unknown variant `current`")),
            other => Standing::parse(other)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown variant `{other}`"))),
        }
    }
}

words! {
    /// What AutoNAT concluded about this machine (`status`'
    /// `reachability`).
    Reachability {
        /// Others can dial it.
        Public = "public",
        /// Others can not: it is behind NAT or a firewall.
        Private = "private",
        /// Not known yet.
        Unknown = "unknown",
    }
}

words! {
    /// How this machine's reservation on a relay stands.
    ReservationState {
        /// Waiting to try again.
        Waiting = "waiting",
        /// Dialling the relay.
        Connecting = "connecting",
        /// Asking it for a reservation.
        Reserving = "reserving",
        /// Reserved: others reach this machine through it.
        Reserved = "reserved",
        /// AutoNAT says this machine is public: no new reservation.
        NotNeeded = "not_needed",
    }
}

words! {
    /// How a relay stands, as `agentmesh relays` lists it.
    RelayState {
        /// Holding a reservation: others reach this machine through it.
        Reserved = "reserved",
        /// Dialling it or asking it for a reservation (its first try, or
        /// a spare taking over).
        Reserving = "reserving",
        /// Its last try failed; tried again, backing off to 20 s.
        Failing = "failing",
        /// Not used now: enough others hold reservations
        /// (`relays.reservations`), or AutoNAT says this machine is
        /// public.
        Idle = "idle",
    }
}

words! {
    /// The transport of a connection.
    Transport {
        /// TCP (noise, yamux).
        Tcp = "tcp",
        /// QUIC.
        Quic = "quic",
    }
}

words! {
    /// How a held message's wait ended (the `resolved` event).
    HeldOutcome {
        /// A person approved it: it is delivered.
        Approved = "approved",
        /// A person rejected it: it is dropped.
        Rejected = "rejected",
        /// It expired unanswered.
        Expired = "expired",
    }
}

words! {
    /// What a message is (`kind`): the envelope's kind, as the API and
    /// the store name it.
    MessageKind {
        /// Information; no answer expected.
        Tell = "tell",
        /// A question; a reply is expected.
        Ask = "ask",
        /// An answer to an ask.
        Reply = "reply",
        /// One copy of a message sent to many mailboxes.
        Broadcast = "broadcast",
        /// What a machine did with a broadcast it judged.
        Counts = "counts",
        /// What a recipient machine did with a message.
        Receipt = "receipt",
    }
}

impl From<agentmesh_protocol::envelope::Kind> for MessageKind {
    fn from(k: agentmesh_protocol::envelope::Kind) -> Self {
        use agentmesh_protocol::envelope::Kind;
        match k {
            Kind::Tell => MessageKind::Tell,
            Kind::Ask => MessageKind::Ask,
            Kind::Reply => MessageKind::Reply,
            Kind::Broadcast => MessageKind::Broadcast,
            Kind::Counts => MessageKind::Counts,
            Kind::Receipt => MessageKind::Receipt,
        }
    }
}

words! {
    /// Why a message is held for approval (`held`). The words are a
    /// contract: `agentmesh held --json` shows them.
    HeldReason {
        /// Inbound mail is paused.
        Paused = "paused",
        /// Its sender's machine is another person's, and not trusted.
        OtherOwner = "other_owner",
        /// Its mailbox was denied or removed while pause held it.
        FolderNotAllowed = "folder_not_allowed",
        /// Its sending machine left or was revoked while pause held it:
        /// it can only be rejected (a machine now of its name is another
        /// key).
        SenderRevoked = "sender_revoked",
    }
}

impl HeldReason {
    /// Why it is held, for people (`--json` keeps the word).
    pub fn words(self) -> &'static str {
        match self {
            HeldReason::Paused => "inbound mail is paused",
            HeldReason::OtherOwner => "from another person's machine",
            HeldReason::FolderNotAllowed => "its folder is opted out",
            HeldReason::SenderRevoked => "its sending machine left or was revoked since",
        }
    }
}

words! {
    /// What a mailbox's session is doing, as the directory shows it: its
    /// machine's word (`working`, `idle`, `offline`: no session open), or
    /// `unreachable` when its machine is not reachable from here now.
    MailboxStatus {
        /// A session is attached and was active in the last two minutes.
        Working = "working",
        /// A session is attached and quiet.
        Idle = "idle",
        /// No session is open (its machine is reachable).
        Offline = "offline",
        /// Its machine is not reachable from here: what its sessions do
        /// is unknown.
        Unreachable = "unreachable",
    }
}

impl From<SessionStatus> for MailboxStatus {
    fn from(s: SessionStatus) -> Self {
        match s {
            SessionStatus::Working => MailboxStatus::Working,
            SessionStatus::Idle => MailboxStatus::Idle,
            SessionStatus::Offline => MailboxStatus::Offline,
        }
    }
}

words! {
    /// Why a machine judged a broadcast for none (or not all) of its
    /// mailboxes (`outbox`'s `counts.reason`, `bus log`'s `reason`).
    SkipReason {
        /// It holds mail from the broadcast's sender (another person's
        /// machine it does not trust).
        HeldSender = "held_sender",
        /// Its person paused inbound mail.
        Paused = "paused",
        /// The mailboxes' daily wake budgets are spent.
        Busy = "busy",
    }
}

impl From<agentmesh_protocol::envelope::SkipReason> for SkipReason {
    fn from(r: agentmesh_protocol::envelope::SkipReason) -> Self {
        use agentmesh_protocol::envelope::SkipReason as W;
        match r {
            W::HeldSender => SkipReason::HeldSender,
            W::Paused => SkipReason::Paused,
            W::Busy => SkipReason::Busy,
        }
    }
}

impl From<SkipReason> for agentmesh_protocol::envelope::SkipReason {
    fn from(r: SkipReason) -> Self {
        use agentmesh_protocol::envelope::SkipReason as W;
        match r {
            SkipReason::HeldSender => W::HeldSender,
            SkipReason::Paused => W::Paused,
            SkipReason::Busy => W::Busy,
        }
    }
}

words! {
    /// Where a join stands, for the joiner (`join_status`' `state`).
    JoinPhase {
        /// Waiting for the founder to type the pairing code.
        Waiting = "waiting",
        /// The founder approved: the team code is to confirm.
        Approved = "approved",
        /// Admitted and synced.
        Joined = "joined",
        /// The founder refused, or could not be reached (`reason`).
        Refused = "refused",
        /// This machine's person declined (the team codes differed).
        Declined = "declined",
    }
}

words! {
    /// Where a join request stands, for the founder (`admit_list`'
    /// `state`).
    RequestPhase {
        /// Waiting for its pairing code.
        Waiting = "waiting",
        /// The code matched; whose machine it is comes next.
        Matched = "matched",
        /// The person chosen; the joiner confirms.
        Approved = "approved",
    }
}

words! {
    /// Where an approved request stands (`admit_status`' `state`).
    AdmitPhase {
        /// Waiting for its code.
        Waiting = "waiting",
        /// Approved; the joiner has not confirmed yet.
        AwaitingConfirmation = "awaiting_confirmation",
        /// The joiner confirmed: it is a member.
        Admitted = "admitted",
        /// The joiner declined.
        Declined = "declined",
        /// Three wrong codes, refused, or expired (`reason`).
        Cancelled = "cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_are_the_wire_words() {
        for (word, json) in [
            (Connection::HolePunched.as_str(), "\"hole-punched\""),
            (Standing::NameTaken.as_str(), "\"name_taken\""),
        ] {
            assert_eq!(format!("\"{word}\""), json);
        }
        assert_eq!(
            serde_json::to_string(&Connection::HolePunched).unwrap(),
            "\"hole-punched\""
        );
        assert_eq!(
            serde_json::from_str::<ReservationState>("\"not_needed\"").unwrap(),
            ReservationState::NotNeeded
        );
        assert!(serde_json::from_str::<Connection>("\"teleported\"").is_err());
        // `status` says `member` for a current member, as it always did.
        #[derive(Serialize, Deserialize)]
        struct S {
            #[serde(with = "team_standing")]
            s: Option<Standing>,
        }
        let member = serde_json::to_string(&S {
            s: Some(Standing::Current),
        })
        .unwrap();
        assert_eq!(member, r#"{"s":"member"}"#);
        let back: S = serde_json::from_str(r#"{"s":"name_taken"}"#).unwrap();
        assert_eq!(back.s, Some(Standing::NameTaken));
        assert!(serde_json::from_str::<S>(r#"{"s":"current"}"#).is_err());
        assert_eq!(
            HeldReason::parse("other_owner"),
            Some(HeldReason::OtherOwner)
        );
        // Tables pad them like the strings they were.
        assert_eq!(format!("{:<8}|", Membership::Member), "member  |");
    }
}
