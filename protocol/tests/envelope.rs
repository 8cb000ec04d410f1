//! Envelopes: sealing, opening, and a refusal for every way an envelope can
//! be wrong.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::time::Duration;

use agentmesh_protocol::cbor::{MAX_BODY_BYTES, MAX_ENVELOPE_BYTES};
use agentmesh_protocol::envelope::{Attachment, Envelope, MAX_ATTACHMENTS, SealError};
use agentmesh_protocol::time::{MAX_CLOCK_SKEW, MAX_ENVELOPE_LIFETIME};
use agentmesh_protocol::{OpenError, Wire, open, seal};
use common::*;

#[test]
fn seal_then_open() {
    let (alice, bob) = (identity(1), identity(2));
    let h = header(&alice, &bob);
    let b = body("how do you handle late-arriving rows?");
    let env = seal(&alice, &bob.x25519_public(), &h, &b, &mut rng(3)).unwrap();
    let opened = open(&env.to_wire(), &bob, T0).unwrap();
    assert_eq!(opened.header, h);
    assert_eq!(opened.body, b);
}

#[test]
fn seal_is_randomised() {
    let (alice, bob) = (identity(1), identity(2));
    let (h, b) = (header(&alice, &bob), body("x"));
    let one = seal(&alice, &bob.x25519_public(), &h, &b, &mut rng(3)).unwrap();
    let two = seal(&alice, &bob.x25519_public(), &h, &b, &mut rng(4)).unwrap();
    assert_ne!(one.enc(), two.enc());
    assert_ne!(one.ciphertext(), two.ciphertext());
}

fn sealed() -> (agentmesh_protocol::Identity, Envelope) {
    let (alice, bob) = (identity(1), identity(2));
    let env = seal(
        &alice,
        &bob.x25519_public(),
        &header(&alice, &bob),
        &body("hello"),
        &mut rng(3),
    )
    .unwrap();
    (bob, env)
}

fn rebuild(
    env: &Envelope,
    f: impl FnOnce(&mut Vec<u8>, &mut [u8; 32], &mut [u8; 16], &mut Vec<u8>, &mut [u8; 64]),
) -> Result<Envelope, OpenError> {
    let (mut h, mut enc, mut tag, mut ct, mut sig) = (
        env.header_bytes().to_vec(),
        *env.enc(),
        *env.header_tag(),
        env.ciphertext().to_vec(),
        *env.signature(),
    );
    f(&mut h, &mut enc, &mut tag, &mut ct, &mut sig);
    Envelope::from_parts(&h, enc, tag, ct, sig)
}

#[test]
fn bad_signature() {
    let (bob, env) = sealed();
    let e = rebuild(&env, |_, _, _, _, sig| sig[10] ^= 1).unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::BadSignature));
}

#[test]
fn signature_by_another_key() {
    // Mallory re-signs Alice's envelope with her own key: the header still
    // names Alice, so the signature does not verify for the sender.
    let (bob, env) = sealed();
    let mallory = identity(66);
    let e = rebuild(&env, |h, enc, _, ct, sig| {
        *sig = mallory.sign(&agentmesh_protocol::envelope::signed_message(h, enc, ct));
    })
    .unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::BadSignature));
}

#[test]
fn tampered_header() {
    let (bob, env) = sealed();
    // Byte 4 of the header is inside the message id (array header, version,
    // suite, bstr header, then the id's bytes).
    let e = rebuild(&env, |h, _, _, _, _| h[4] ^= 0x55).unwrap();
    assert_ne!(e.header.id, env.header.id, "the flip must land in the id");
    assert_eq!(e.open(&bob, T0), Err(OpenError::TamperedHeader));
}

#[test]
fn tampered_hop_is_a_tampered_header() {
    // A relay-in-the-middle raising the hop count, say.
    let (bob, env) = sealed();
    let mut h = env.header.clone();
    h.hop = 2;
    let e = rebuild(&env, |hb, _, _, _, _| *hb = h.to_bytes()).unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::TamperedHeader));
}

#[test]
fn tampered_ciphertext() {
    let (bob, env) = sealed();
    let e = rebuild(&env, |_, _, _, ct, _| ct[0] ^= 1).unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::TamperedCiphertext));
    let e = rebuild(&env, |_, _, _, ct, _| {
        ct.pop();
    })
    .unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::TamperedCiphertext));
}

#[test]
fn tampered_enc_is_refused() {
    let (bob, env) = sealed();
    let e = rebuild(&env, |_, enc, _, _, _| enc[0] ^= 1).unwrap();
    assert_eq!(e.open(&bob, T0), Err(OpenError::TamperedHeader));
}

#[test]
fn header_tag_never_decides_acceptance() {
    // A damaged tag on an otherwise intact envelope: still opens.
    let (bob, env) = sealed();
    let e = rebuild(&env, |_, _, tag, _, _| tag[0] ^= 1).unwrap();
    assert!(e.open(&bob, T0).is_ok());
}

#[test]
fn wrong_recipient_by_peer_id() {
    let (_, env) = sealed();
    let carol = identity(3);
    assert_eq!(env.open(&carol, T0), Err(OpenError::WrongRecipient));
}

#[test]
fn wrong_recipient_by_key() {
    // Addressed to Bob's PeerId but sealed to Carol's X25519 key.
    let (alice, bob, carol) = (identity(1), identity(2), identity(3));
    let env = seal(
        &alice,
        &carol.x25519_public(),
        &header(&alice, &bob),
        &body("x"),
        &mut rng(3),
    )
    .unwrap();
    assert_eq!(env.open(&bob, T0), Err(OpenError::WrongRecipient));
}

#[test]
fn time_rules() {
    let (bob, env) = sealed();
    let expires = env.header.expires_at;
    // Inside the skew on both ends: accepted.
    assert!(env.open(&bob, T0.saturating_sub(MAX_CLOCK_SKEW)).is_ok());
    assert!(
        env.open(&bob, expires.saturating_add(MAX_CLOCK_SKEW))
            .is_ok()
    );
    // Beyond it: refused.
    let early = T0.saturating_sub(MAX_CLOCK_SKEW + Duration::from_millis(1));
    assert_eq!(
        env.open(&bob, early),
        Err(OpenError::NotYetValid {
            sent_at: T0,
            now: early
        })
    );
    let late = expires.saturating_add(MAX_CLOCK_SKEW + Duration::from_millis(1));
    assert_eq!(
        env.open(&bob, late),
        Err(OpenError::Expired {
            expires_at: expires,
            now: late
        })
    );
}

#[test]
fn lifetime_rules() {
    let (alice, bob) = (identity(1), identity(2));
    let mut h = header(&alice, &bob);
    h.expires_at = h
        .sent_at
        .saturating_add(MAX_ENVELOPE_LIFETIME + Duration::from_millis(1));
    let e = seal(&alice, &bob.x25519_public(), &h, &body("x"), &mut rng(3)).unwrap_err();
    assert!(matches!(e, SealError::InvalidHeader(_)), "{e}");
    h.expires_at = h.sent_at;
    assert!(matches!(
        seal(&alice, &bob.x25519_public(), &h, &body("x"), &mut rng(3)),
        Err(SealError::InvalidHeader(_))
    ));

    // A receiver refuses an over-long lifetime even when it is signed.
    let (bob2, env) = sealed();
    let mut long = env.header.clone();
    long.expires_at = long.sent_at.saturating_add(MAX_ENVELOPE_LIFETIME * 2);
    let e = rebuild(&env, |hb, _, _, _, _| *hb = long.to_bytes()).unwrap();
    assert!(matches!(e.open(&bob2, T0), Err(OpenError::BadLifetime(_))));
}

#[test]
fn too_large() {
    let (alice, bob) = (identity(1), identity(2));
    let h = header(&alice, &bob);
    let e = seal(
        &alice,
        &bob.x25519_public(),
        &h,
        &body(&"x".repeat(MAX_BODY_BYTES)),
        &mut rng(3),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            SealError::TooLarge {
                limit: MAX_BODY_BYTES,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("send less"), "{e}");

    // The largest body that fits seals into an envelope under the limit.
    let overhead = body("").to_bytes().len() + 3;
    let max = seal(
        &alice,
        &bob.x25519_public(),
        &h,
        &body(&"x".repeat(MAX_BODY_BYTES - overhead)),
        &mut rng(3),
    )
    .unwrap();
    assert!(max.to_wire().len() <= MAX_ENVELOPE_BYTES);
    assert!(open(&max.to_wire(), &bob, T0).is_ok());

    let huge = vec![0u8; MAX_ENVELOPE_BYTES + 1];
    assert_eq!(
        open(&huge, &bob, T0),
        Err(OpenError::TooLarge {
            len: MAX_ENVELOPE_BYTES + 1,
            limit: MAX_ENVELOPE_BYTES
        })
    );
}

#[test]
fn too_many_attachments() {
    let (alice, bob) = (identity(1), identity(2));
    let mut b = body("x");
    b.attachments = vec![
        Attachment {
            name: "a".into(),
            media_type: "text/plain".into(),
            data: vec![1]
        };
        MAX_ATTACHMENTS + 1
    ];
    assert_eq!(
        seal(
            &alice,
            &bob.x25519_public(),
            &header(&alice, &bob),
            &b,
            &mut rng(3)
        ),
        Err(SealError::TooManyAttachments(MAX_ATTACHMENTS + 1))
    );
    b.attachments.pop();
    let env = seal(
        &alice,
        &bob.x25519_public(),
        &header(&alice, &bob),
        &b,
        &mut rng(3),
    )
    .unwrap();
    assert_eq!(open(&env.to_wire(), &bob, T0).unwrap().body, b);
}

#[test]
fn sender_must_seal_its_own_header() {
    let (alice, bob) = (identity(1), identity(2));
    let h = header(&bob, &alice);
    assert!(matches!(
        seal(&alice, &bob.x25519_public(), &h, &body("x"), &mut rng(3)),
        Err(SealError::SenderMismatch { .. })
    ));
}

/// Re-encodes the header with one array item replaced.
fn header_with(env: &Envelope, index: usize, value: ciborium::Value) -> Vec<u8> {
    let mut v = agentmesh_protocol::cbor::decode("h", env.header_bytes(), 512).unwrap();
    if let ciborium::Value::Array(items) = &mut v {
        items[index] = value;
    }
    agentmesh_protocol::cbor::encode(&v)
}

#[test]
fn unsupported_version_and_suite() {
    let (bob, env) = sealed();
    let v2 = header_with(&env, 0, ciborium::Value::Integer(2.into()));
    assert_eq!(
        rebuild(&env, |h, _, _, _, _| *h = v2.clone()).unwrap_err(),
        OpenError::UnsupportedVersion {
            found: 2,
            supported: 1
        }
    );
    let s9 = header_with(&env, 1, ciborium::Value::Integer(9.into()));
    let e = rebuild(&env, |h, _, _, _, _| *h = s9.clone()).unwrap_err();
    assert_eq!(
        e,
        OpenError::UnsupportedSuite {
            found: 9,
            supported: 1
        }
    );
    assert!(e.to_string().contains("suite 9"), "{e}");
    let _ = bob;
}

#[test]
fn malformed() {
    let (bob, env) = sealed();
    for junk in [&b""[..], b"\x00", b"\x85\x01\x02\x03\x04\x05", b"\xff\xff"] {
        assert!(
            matches!(open(junk, &bob, T0), Err(OpenError::Malformed(_))),
            "{junk:?}"
        );
    }
    // Non-canonical: the same envelope with a trailing byte.
    let mut wire = env.to_wire();
    wire.push(0);
    assert!(matches!(
        open(&wire, &bob, T0),
        Err(OpenError::Malformed(_))
    ));
    // A header whose `from` is not an ed25519 PeerId.
    let bad_from = header_with(&env, 4, ciborium::Value::Bytes(vec![0; 38]));
    let e = rebuild(&env, |h, _, _, _, _| *h = bad_from.clone()).unwrap_err();
    assert!(
        e.to_string().contains("from is not an ed25519 PeerId"),
        "{e}"
    );
}

#[test]
fn every_error_has_a_distinct_name() {
    use std::collections::BTreeSet;
    let names: BTreeSet<_> = [
        OpenError::TooLarge { len: 0, limit: 0 }.name(),
        OpenError::Malformed(agentmesh_protocol::DecodeError::NotCanonical { what: "x" }).name(),
        OpenError::UnsupportedVersion {
            found: 0,
            supported: 0,
        }
        .name(),
        OpenError::UnsupportedSuite {
            found: 0,
            supported: 0,
        }
        .name(),
        OpenError::WrongRecipient.name(),
        OpenError::BadLifetime(String::new()).name(),
        OpenError::NotYetValid {
            sent_at: T0,
            now: T0,
        }
        .name(),
        OpenError::Expired {
            expires_at: T0,
            now: T0,
        }
        .name(),
        OpenError::BadSignature.name(),
        OpenError::TamperedHeader.name(),
        OpenError::TamperedCiphertext.name(),
        OpenError::MalformedBody(agentmesh_protocol::DecodeError::NotCanonical { what: "x" })
            .name(),
    ]
    .into_iter()
    .collect();
    assert_eq!(names.len(), 12);
}

#[test]
fn malformed_body_from_a_real_sender() {
    // A member that seals bytes which are not a body: signed and sealed
    // correctly, so the failure is the body's.
    use hpke::{Deserializable, OpModeS, Serializable};
    type Kem = hpke::kem::X25519HkdfSha256;
    let (alice, bob) = (identity(1), identity(2));
    let header_bytes = header(&alice, &bob).to_bytes();
    let pk = <Kem as hpke::Kem>::PublicKey::from_bytes(&bob.x25519_public().0).unwrap();
    let (enc, mut ctx) =
        hpke::setup_sender_with_rng::<hpke::aead::ChaCha20Poly1305, hpke::kdf::HkdfSha256, Kem>(
            &OpModeS::Base,
            &pk,
            agentmesh_protocol::envelope::HPKE_INFO,
            &mut rng(5),
        )
        .unwrap();
    let ct = ctx.seal(b"\x83\x01\x02\x03", &header_bytes).unwrap();
    let enc: [u8; 32] = enc.to_bytes().into();
    let sig = alice.sign(&agentmesh_protocol::envelope::signed_message(
        &header_bytes,
        &enc,
        &ct,
    ));
    let env = Envelope::from_parts(&header_bytes, enc, [0; 16], ct, sig).unwrap();
    assert!(matches!(
        env.open(&bob, T0),
        Err(OpenError::MalformedBody(_))
    ));
}

#[test]
fn a_who_name_of_more_than_one_plain_line_is_refused_when_opened() {
    let (alice, bob) = (identity(1), identity(2));
    for (name, session) in [
        ("a\x1b]0;retitled\x07", None),
        ("two\nlines", None),
        ("ada", Some("s\u{202E}1")),
    ] {
        let mut b = body("x");
        b.who.name = name.into();
        b.who.session_id = session.map(Into::into);
        let env = seal(
            &alice,
            &bob.x25519_public(),
            &header(&alice, &bob),
            &b,
            &mut rng(3),
        )
        .unwrap();
        let e = open(&env.to_wire(), &bob, T0).unwrap_err().to_string();
        assert!(
            e.contains("control") || e.contains("formatting"),
            "{name:?}: {e}"
        );
    }
    // A name with spaces and letters of any script is one plain line.
    let mut b = body("x");
    b.who.name = "Zoë Ångström 田中".into();
    let env = seal(
        &alice,
        &bob.x25519_public(),
        &header(&alice, &bob),
        &b,
        &mut rng(3),
    )
    .unwrap();
    assert_eq!(open(&env.to_wire(), &bob, T0).unwrap().body, b);
}
