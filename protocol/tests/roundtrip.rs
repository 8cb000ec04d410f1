//! Property tests: every wire type survives encode then decode unchanged,
//! and decoding arbitrary bytes never panics.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use agentmesh_protocol::contact::{ContactRecord, SignedContact};
use agentmesh_protocol::directory::{
    DirectoryAnnounce, DirectoryEntry, DirectoryRecord, MAX_DIRECTORY_BYTES,
    MAX_DIRECTORY_MAILBOXES, SignedDirectory, Status,
};
use agentmesh_protocol::envelope::{Attachment, Body, Header, Kind, MessageId, Who, WhoKind};
use agentmesh_protocol::join::{JoinOffer, JoinRequest};
use agentmesh_protocol::team::{Admit, Block, BlockBody, Genesis, Person, Revoke, TeamId};
use agentmesh_protocol::ticket::Ticket;
use agentmesh_protocol::{
    Identity, Multiaddr, Name, Owner, PeerId, Timestamp, Wire, X25519Public, open, seal,
};
use proptest::prelude::*;

fn ids() -> Vec<Identity> {
    (0..4).map(common::identity).collect()
}

fn peer() -> impl Strategy<Value = PeerId> {
    (0u64..4).prop_map(|i| common::identity(i).peer_id())
}

fn name() -> impl Strategy<Value = Name> {
    "[a-z0-9][a-z0-9-]{0,31}".prop_map(|s| Name::parse("name", &s).unwrap())
}

fn owner() -> impl Strategy<Value = Owner> {
    "[A-Za-zé][A-Za-z é.]{0,20}[a-z]".prop_map(|s| Owner::parse(&s).unwrap())
}

fn ts() -> impl Strategy<Value = Timestamp> {
    any::<u64>().prop_map(Timestamp::from_unix_millis)
}

fn addr() -> impl Strategy<Value = Multiaddr> {
    (any::<[u8; 4]>(), any::<u16>(), any::<bool>()).prop_map(|(ip, port, quic)| {
        let ip = std::net::Ipv4Addr::from(ip);
        if quic {
            format!("/ip4/{ip}/udp/{port}/quic-v1").parse().unwrap()
        } else {
            format!("/ip4/{ip}/tcp/{port}").parse().unwrap()
        }
    })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Tell),
        Just(Kind::Ask),
        Just(Kind::Reply),
        Just(Kind::Broadcast)
    ]
}

prop_compose! {
    fn header()(id in any::<[u8; 16]>(), team in any::<[u8; 32]>(), from in peer(), to in peer(), kind in kind(),
                irt in proptest::option::of(any::<[u8; 16]>()), thread in any::<[u8; 16]>(), hop in any::<u8>(),
                taint in any::<bool>(), sent in ts(), expires in ts()) -> Header {
        Header { id: MessageId(id), team: TeamId(team), from, to, kind, in_reply_to: irt.map(MessageId),
                 thread: MessageId(thread), hop, taint, sent_at: sent, expires_at: expires }
    }
}

prop_compose! {
    fn who()(agent in any::<bool>(), name in ".{0,20}", session in proptest::option::of(".{0,20}"),
             task in proptest::option::of(".{0,40}")) -> Who {
        // A name and a session are one plain line (the owner-name rule).
        let line = |t: &str| agentmesh_protocol::names::to_one_line(t, 64);
        Who { kind: if agent { WhoKind::Agent } else { WhoKind::Human }, name: line(&name),
              session_id: session.as_deref().map(line), task }
    }
}

prop_compose! {
    fn body()(who in who(), from in proptest::option::of(name()), to in proptest::option::of(name()), text in ".{0,200}",
              attachments in proptest::collection::vec((".{0,10}", "[a-z]+/[a-z]+", proptest::collection::vec(any::<u8>(), 0..64)), 0..8)) -> Body {
        Body { who, from_mailbox: from, to_mailbox: to, text,
               attachments: attachments.into_iter().map(|(name, media_type, data)| Attachment { name, media_type, data }).collect() }
    }
}

fn roundtrip<T: Wire + PartialEq + std::fmt::Debug>(v: &T) {
    let bytes = v.to_bytes();
    assert!(
        bytes.len() <= T::MAX_BYTES,
        "{} encodes over its own limit",
        T::WHAT
    );
    assert_eq!(&T::from_bytes(&bytes).unwrap(), v);
}

proptest! {
    #[test]
    fn header_roundtrips(h in header()) { roundtrip(&h); }

    #[test]
    fn body_roundtrips(b in body()) { roundtrip(&b); }

    #[test]
    fn join_request_roundtrips(tn in any::<[u8; 16]>(), joiner in peer(), x in any::<[u8; 32]>(), name in name(), owner in owner(), nonce in any::<[u8; 16]>()) {
        roundtrip(&JoinRequest { ticket_nonce: tn, joiner, x25519: X25519Public(x), name, owner, nonce });
    }

    #[test]
    fn join_offer_roundtrips(team in any::<[u8; 32]>(), team_name in name(), founder in peer(), nonce in any::<[u8; 16]>()) {
        roundtrip(&JoinOffer { team: TeamId(team), team_name, founder, nonce });
    }

    #[test]
    fn ticket_roundtrips(founder in peer(), addrs in proptest::collection::vec(addr(), 0..8), nonce in any::<[u8; 16]>(), expires in ts()) {
        let t = Ticket { founder, addrs, nonce, expires_at: expires };
        roundtrip(&t);
        let text = t.to_string();
        prop_assert!(text.chars().all(|c| c.is_ascii_alphanumeric()));
        prop_assert_eq!(Ticket::decode(&text).unwrap(), t.clone());
        prop_assert_eq!(Ticket::decode(&text.to_uppercase()).unwrap(), t);
    }

    #[test]
    fn contact_roundtrips(i in 0usize..4, seq in any::<u64>(), addrs in proptest::collection::vec(addr(), 0..16), relays in proptest::collection::vec(addr(), 0..8), at in ts()) {
        let me = &ids()[i];
        let record = ContactRecord { peer: me.peer_id(), seq, addrs, relays, at };
        roundtrip(&record);
        let signed = SignedContact::sign(record, me).unwrap();
        prop_assert_eq!(SignedContact::from_bytes(signed.bytes()).unwrap(), signed);
    }

    #[test]
    fn directory_roundtrips(i in 0usize..4, seq in any::<u64>(), at in ts(), always_on in any::<bool>(),
                            entries in proptest::collection::vec((proptest::option::of(name()), ".{0,40}", ".{0,20}", 0u8..3, proptest::option::of(ts())), 0..12)) {
        let me = &ids()[i];
        let mut seen = std::collections::HashSet::new();
        let mailboxes: Vec<DirectoryEntry> = entries
            .into_iter()
            .filter(|e| seen.insert(e.0.clone()))
            .map(|(mailbox, profile, goal, s, last_active)| DirectoryEntry {
                mailbox,
                profile,
                goal,
                status: [Status::Working, Status::Idle, Status::Offline][usize::from(s)],
                last_active,
            })
            .collect();
        let record = DirectoryRecord { peer: me.peer_id(), seq, at, always_on, mailboxes };
        roundtrip(&record);
        let signed = SignedDirectory::sign(record, me).unwrap();
        prop_assert_eq!(SignedDirectory::from_bytes(signed.bytes()).unwrap(), signed);
    }

    #[test]
    fn directory_bounds_hold_before_decoding(n in 0usize..80, profile_len in 0usize..1100, junk in proptest::collection::vec(any::<u8>(), 0..64)) {
        let me = &ids()[0];
        let record = DirectoryRecord {
            peer: me.peer_id(),
            seq: 1,
            at: Timestamp::from_unix_millis(1),
            always_on: false,
            mailboxes: (0..n)
                .map(|k| DirectoryEntry {
                    mailbox: Some(Name::parse("mailbox name", &format!("m{k}")).unwrap()),
                    profile: "p".repeat(profile_len.min(1024)),
                    goal: String::new(),
                    status: Status::Idle,
                    last_active: None,
                })
                .collect(),
        };
        let bytes = SignedDirectory::sign_unchecked(&record, me);
        let within = n <= MAX_DIRECTORY_MAILBOXES && bytes.len() <= MAX_DIRECTORY_BYTES;
        prop_assert_eq!(SignedDirectory::from_bytes(&bytes).is_ok(), within);
        prop_assert_eq!(SignedDirectory::sign(record, me).is_ok(), within);
        // Anything past the bound is refused without being parsed.
        let mut long = bytes.clone();
        long.extend(junk);
        long.resize(long.len().max(MAX_DIRECTORY_BYTES + 1), 0);
        let refused = SignedDirectory::from_bytes(&long).unwrap_err();
        prop_assert!(refused.to_string().contains("49152"), "{}", refused);
    }

    #[test]
    fn directory_announce_roundtrips(peer in peer(), seq in any::<u64>()) {
        roundtrip(&DirectoryAnnounce { peer, seq });
    }

    #[test]
    fn blocks_roundtrip(i in 0usize..4, j in 0usize..4, team_name in name(), name in name(), owner in owner(), at in ts(), nonce in any::<[u8; 16]>(), which in 0u8..4, seq in any::<u64>()) {
        let ids = ids();
        let (a, b) = (&ids[i], &ids[j]);
        let team = TeamId([1; 32]);
        let body = match which {
            0 => BlockBody::Genesis(Genesis { team_name, founder: a.peer_id(), founder_x25519: a.x25519_public(), founder_name: name,
                                               founder_owner: owner, admins: vec![a.peer_id()], created_at: at, nonce }),
            1 => BlockBody::Admit(Admit { team, peer: b.peer_id(), x25519: b.x25519_public(), name, owner, admitted_by: a.peer_id(), at }),
            2 => BlockBody::Revoke(Revoke { team, peer: b.peer_id(), revoked_by: a.peer_id(), at }),
            _ => BlockBody::Person(Person { team, by: a.peer_id(), peer: b.peer_id(), person: owner, seq, at }),
        };
        let block = Block::sign(body, a).unwrap();
        let back = Block::from_bytes(block.bytes()).unwrap();
        prop_assert_eq!(back.hash(), block.hash());
        prop_assert_eq!(back, block);
    }

    #[test]
    fn envelopes_roundtrip(b in body(), seed in any::<u64>(), kind in kind(), hop in any::<u8>(), taint in any::<bool>()) {
        let ids = ids();
        let (alice, bob) = (&ids[0], &ids[1]);
        let mut h = common::header(alice, bob);
        h.kind = kind;
        h.hop = hop;
        h.taint = taint;
        let env = seal(alice, &bob.x25519_public(), &h, &b, &mut common::rng(seed)).unwrap();
        let opened = open(&env.to_wire(), bob, common::T0).unwrap();
        prop_assert_eq!(opened.header, h);
        prop_assert_eq!(opened.body, b);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let bob = &ids()[1];
        let _ = open(&bytes, bob, common::T0);
        let _ = Header::from_bytes(&bytes);
        let _ = Body::from_bytes(&bytes);
        let _ = Block::from_bytes(&bytes);
        let _ = JoinRequest::from_bytes(&bytes);
        let _ = JoinOffer::from_bytes(&bytes);
        let _ = Ticket::from_bytes(&bytes);
        let _ = SignedContact::from_bytes(&bytes);
        let _ = SignedDirectory::from_bytes(&bytes);
        let _ = DirectoryRecord::from_bytes(&bytes);
        let _ = DirectoryAnnounce::from_bytes(&bytes);
        let _ = Identity::from_key_file(&bytes);
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let _ = Ticket::decode(text);
            let _ = agentmesh_protocol::join::Code::parse(text);
        }
    }

    #[test]
    fn one_flipped_bit_never_opens(bit in 0usize..2000, seed in any::<u64>()) {
        let ids = ids();
        let (alice, bob) = (&ids[0], &ids[1]);
        let env = seal(alice, &bob.x25519_public(), &common::header(alice, bob), &common::body("a short message"), &mut common::rng(seed)).unwrap();
        let mut wire = env.to_wire();
        let bit = bit % (wire.len() * 8);
        wire[bit / 8] ^= 1 << (bit % 8);
        // Flips in the header tag are harmless by design (it never decides);
        // every other flip must be refused.
        if open(&wire, bob, common::T0).is_ok() {
            let orig = env.to_wire();
            let diff = orig.iter().zip(&wire).position(|(a, b)| a != b).unwrap();
            let tag_pos = orig.windows(16).position(|w| w == env.header_tag()).unwrap();
            prop_assert!((tag_pos..tag_pos + 16).contains(&diff), "a flip at byte {} opened", diff);
        }
    }
}
