//! The enumerated words of the API's answers: each a serde enum, so a
//! client matches on a variant instead of comparing strings, and a word a
//! daemon sends is one of these or fails to read (the JSON is the same
//! word as before).

use serde::{Deserialize, Serialize};

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
    }
}

words! {
    /// Where this machine stands in its team (`status`' `team_standing`).
    TeamStanding {
        /// A current member.
        Member = "member",
        /// It left.
        Left = "left",
        /// It was revoked.
        Revoked = "revoked",
        /// Its name was taken by an earlier member.
        NameTaken = "name_taken",
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
        // Tables pad them like the strings they were.
        assert_eq!(format!("{:<8}|", Membership::Member), "member  |");
    }
}
