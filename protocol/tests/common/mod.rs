//! Fixtures shared by the protocol's integration tests.
#![allow(dead_code)]

use agentmesh_protocol::{
    Body, Header, Identity, Kind, MessageId, Name, TeamId, Timestamp, Who, WhoKind,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// A deterministic RNG.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A deterministic identity.
pub fn identity(seed: u64) -> Identity {
    Identity::generate(&mut rng(seed))
}

/// 2026-11-30T00:00:00Z.
pub const T0: Timestamp = Timestamp::from_unix_millis(1_795_996_800_000);

/// A header from `from` to `to`, sent at T0, expiring a day later.
pub fn header(from: &Identity, to: &Identity) -> Header {
    Header {
        id: MessageId([7; 16]),
        team: TeamId([9; 32]),
        from: from.peer_id(),
        to: to.peer_id(),
        kind: Kind::Ask,
        in_reply_to: None,
        thread: MessageId([7; 16]),
        hop: 0,
        taint: false,
        sent_at: T0,
        expires_at: T0.saturating_add(std::time::Duration::from_secs(86_400)),
    }
}

/// A body of `text`.
pub fn body(text: &str) -> Body {
    Body {
        who: Who {
            kind: WhoKind::Agent,
            name: "claude".into(),
            session_id: Some("s-1".into()),
            task: Some("schema migration".into()),
        },
        from_mailbox: Some(Name::parse("mailbox name", "api").unwrap()),
        to_mailbox: Some(Name::parse("mailbox name", "pipeline").unwrap()),
        text: text.into(),
        attachments: vec![],
    }
}
