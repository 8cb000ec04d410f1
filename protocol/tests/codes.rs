//! Join codes and invite tickets.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use agentmesh_protocol::join::{Code, CodeError, JoinOffer, JoinRequest, codes};
use agentmesh_protocol::team::TeamId;
use agentmesh_protocol::ticket::{Ticket, TicketError};
use agentmesh_protocol::{Name, Owner, Timestamp, X25519Public};
use common::*;

fn request() -> JoinRequest {
    let j = identity(2);
    JoinRequest {
        ticket_nonce: [1; 16],
        joiner: j.peer_id(),
        x25519: j.x25519_public(),
        name: Name::parse("machine name", "bob-laptop").unwrap(),
        owner: Owner::parse("Bob").unwrap(),
        nonce: [2; 16],
    }
}

fn offer() -> JoinOffer {
    JoinOffer {
        team: TeamId([3; 32]),
        team_name: Name::parse("team name", "core").unwrap(),
        founder: identity(1).peer_id(),
        nonce: [4; 16],
    }
}

#[test]
fn codes_have_the_documented_shape() {
    let c = codes(&request(), &offer());
    let shown = c.pairing.to_string();
    assert_eq!(shown.len(), 14);
    assert_eq!(shown.matches('-').count(), 2);
    assert!(
        shown
            .chars()
            .all(|ch| ch == '-' || "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(ch)),
        "{shown}"
    );
    assert_ne!(c.pairing, c.team, "the two codes use different labels");
    // Same inputs, same codes, on both machines.
    assert_eq!(codes(&request(), &offer()), c);
}

#[test]
fn any_changed_field_changes_both_codes() {
    let base = codes(&request(), &offer());
    let other = identity(7);
    let mut requests = vec![];
    let mut r = request();
    r.ticket_nonce[0] ^= 1;
    requests.push(r);
    let mut r = request();
    r.joiner = other.peer_id();
    requests.push(r);
    let mut r = request();
    r.x25519 = X25519Public(other.x25519_public().0);
    requests.push(r);
    let mut r = request();
    r.name = Name::parse("machine name", "mallory").unwrap();
    requests.push(r);
    let mut r = request();
    r.owner = Owner::parse("Mallory").unwrap();
    requests.push(r);
    let mut r = request();
    r.nonce[15] ^= 0x80;
    requests.push(r);
    for r in &requests {
        let c = codes(r, &offer());
        assert_ne!(c.pairing, base.pairing, "{r:?}");
        assert_ne!(c.team, base.team, "{r:?}");
    }
    let mut offers = vec![];
    let mut o = offer();
    o.team.0[0] ^= 1;
    offers.push(o);
    let mut o = offer();
    o.team_name = Name::parse("team name", "other").unwrap();
    offers.push(o);
    let mut o = offer();
    o.founder = other.peer_id();
    offers.push(o);
    let mut o = offer();
    o.nonce[0] ^= 1;
    offers.push(o);
    for o in &offers {
        let c = codes(&request(), o);
        assert_ne!(c.pairing, base.pairing, "{o:?}");
        assert_ne!(c.team, base.team, "{o:?}");
    }
}

#[test]
fn typed_codes_are_forgiving_but_exact() {
    let c = codes(&request(), &offer()).pairing;
    let shown = c.to_string();
    assert_eq!(Code::parse(&shown), Ok(c));
    assert_eq!(Code::parse(&shown.to_lowercase()), Ok(c));
    assert_eq!(Code::parse(&shown.replace('-', " ")), Ok(c));
    assert_eq!(Code::parse(&shown.replace('-', "")), Ok(c));
    assert_eq!(
        Code::parse("ABCD-EFGH-JKM"),
        Err(CodeError::WrongLength(11))
    );
    assert_eq!(
        Code::parse("ABCD-EFGH-JKMNP"),
        Err(CodeError::WrongLength(13))
    );
    assert_eq!(
        Code::parse("ABCD-EFGH-JKMU"),
        Err(CodeError::BadCharacter('U'))
    );
    assert_eq!(Code::parse("0000-1111-0000"), Code::parse("oOoO-iIlL-OOOO"));
}

fn ticket() -> Ticket {
    Ticket {
        founder: identity(1).peer_id(),
        addrs: vec![
            "/ip4/192.168.1.20/tcp/4001".parse().unwrap(),
            "/ip4/192.168.1.20/udp/4001/quic-v1".parse().unwrap(),
        ],
        nonce: [8; 16],
        expires_at: T0.saturating_add(std::time::Duration::from_secs(600)),
    }
}

#[test]
fn ticket_round_trip_and_expiry() {
    let t = ticket();
    let text = t.to_string();
    assert!(text.starts_with("amt"));
    assert_eq!(Ticket::parse(&text, T0).unwrap(), t);
    assert_eq!(Ticket::parse(&format!("  {text}\n"), T0).unwrap(), t);
    let later = t
        .expires_at
        .saturating_add(std::time::Duration::from_millis(1));
    let e = Ticket::parse(&text, later).unwrap_err();
    assert_eq!(
        e,
        TicketError::Expired {
            expires_at: t.expires_at,
            now: later
        }
    );
    assert!(e.to_string().contains("agentmesh invite"), "{e}");
}

#[test]
fn every_single_character_typo_is_caught() {
    let text = ticket().to_string();
    let alphabet = "0123456789abcdefghjkmnpqrstvwxyz";
    for i in 3..text.len() {
        for replacement in alphabet
            .chars()
            .filter(|c| *c != text.as_bytes()[i] as char)
        {
            let mut typo = text.clone();
            typo.replace_range(i..i + 1, &replacement.to_string());
            let e = Ticket::decode(&typo).unwrap_err();
            assert_eq!(e, TicketError::BadChecksum, "position {i} -> {replacement}");
        }
    }
    // Dropped characters and truncation too.
    for cut in [1, 2, 5, 20] {
        assert!(matches!(
            Ticket::decode(&text[..text.len() - cut]),
            Err(TicketError::BadChecksum)
        ));
    }
    let mut dropped = text.clone();
    dropped.remove(10);
    assert_eq!(Ticket::decode(&dropped), Err(TicketError::BadChecksum));
}

#[test]
fn ticket_errors_say_what_to_do() {
    let text = ticket().to_string();
    assert_eq!(Ticket::decode("hello"), Err(TicketError::NotATicket));
    assert_eq!(Ticket::decode(""), Err(TicketError::NotATicket));
    let mut bad = text.clone();
    bad.replace_range(7..8, "u");
    assert_eq!(
        Ticket::decode(&bad),
        Err(TicketError::BadCharacter {
            position: 8,
            ch: 'u'
        })
    );
    let e = Ticket::decode(&bad).unwrap_err().to_string();
    assert!(
        e.contains("position 8") && e.contains("copy the ticket again"),
        "{e}"
    );
    assert!(
        Ticket::decode("hello")
            .unwrap_err()
            .to_string()
            .contains("agentmesh invite")
    );
}

#[test]
fn ticket_of_another_version_is_named() {
    // Build a version-2 payload with a valid checksum.
    use sha2::Digest;
    let payload =
        agentmesh_protocol::cbor::encode(&ciborium::Value::Array(vec![ciborium::Value::Integer(
            2.into(),
        )]));
    let sum = sha2::Sha256::new()
        .chain_update(agentmesh_protocol::ticket::CHECKSUM_LABEL)
        .chain_update(&payload)
        .finalize();
    let mut bytes = payload.clone();
    bytes.extend_from_slice(&sum[..4]);
    let text = format!("amt{}", data_encoding_lower(&bytes));
    assert_eq!(
        Ticket::decode(&text),
        Err(TicketError::UnsupportedVersion {
            found: 2,
            supported: 1
        })
    );
    let _ = Timestamp::default();
}

fn data_encoding_lower(bytes: &[u8]) -> String {
    let mut spec = data_encoding::Specification::new();
    spec.symbols.push_str("0123456789abcdefghjkmnpqrstvwxyz");
    spec.encoding().unwrap().encode(bytes)
}
