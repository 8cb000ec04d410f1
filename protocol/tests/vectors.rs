//! Test vectors for the envelope format: `tests/vectors/envelope.json`.
//!
//! Two tests: one opens every committed case from its hex fields alone,
//! the way another implementation would, and checks the outcome; the other
//! regenerates the cases from fixed keys and seeds and checks the file is
//! byte-for-byte what this build produces, so a change to the wire format
//! cannot slip by without the vectors (and docs/protocol.md) changing too.
//! To rewrite the file after a deliberate format change:
//! `AGENTMESH_REGENERATE_VECTORS=1 cargo test -p agentmesh-protocol --test vectors`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use std::time::Duration;

use agentmesh_protocol::envelope::{Attachment, Counts, Envelope, HPKE_INFO, signed_message};
use agentmesh_protocol::receipt::{Receipt, ReceiptEntry, ReceiptState};
use agentmesh_protocol::time::MAX_CLOCK_SKEW;
use agentmesh_protocol::{Identity, Kind, MessageId, PeerId, Timestamp, Wire, seal};
use common::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/envelope.json");

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Vectors {
    description: String,
    cases: Vec<Case>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Case {
    name: String,
    description: String,
    recipient_x25519_secret: String,
    recipient_x25519_public: String,
    recipient_peer_id: String,
    sender_ed25519_public: String,
    info: String,
    header_cbor: String,
    enc: String,
    header_tag: String,
    ciphertext: String,
    signed_message: String,
    signature: String,
    body_cbor: String,
    envelope: String,
    now: u64,
    expect: String,
}

/// A key from a label: SHA-256 of it, so the vectors' keys are reproducible.
fn key(label: &str) -> [u8; 32] {
    Sha256::digest(label.as_bytes()).into()
}

/// X25519 clamping (RFC 7748 §5), so the vector holds the secret as
/// SerializePrivateKey would.
fn clamp(mut k: [u8; 32]) -> [u8; 32] {
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    k
}

struct Party {
    id: Identity,
    x_secret: [u8; 32],
}

fn party(name: &str) -> Party {
    let x_secret = clamp(key(&format!("agentmesh test vector {name} x25519")));
    Party {
        id: Identity::from_secrets(
            &key(&format!("agentmesh test vector {name} ed25519")),
            &x_secret,
        ),
        x_secret,
    }
}

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn unhex(s: &str) -> Vec<u8> {
    data_encoding::HEXLOWER
        .decode(s.as_bytes())
        .expect("vector fields are lowercase hex")
}

#[allow(clippy::too_many_arguments)]
fn case(
    name: &str,
    description: &str,
    recipient: &Party,
    recipient_peer: PeerId,
    sender: &Party,
    env: &Envelope,
    body_cbor: &[u8],
    now: Timestamp,
    expect: &str,
) -> Case {
    Case {
        name: name.into(),
        description: description.into(),
        recipient_x25519_secret: hex(&recipient.x_secret),
        recipient_x25519_public: hex(&recipient.id.x25519_public().0),
        recipient_peer_id: hex(&recipient_peer.to_bytes()),
        sender_ed25519_public: hex(&sender.id.ed25519_public()),
        info: hex(HPKE_INFO),
        header_cbor: hex(env.header_bytes()),
        enc: hex(env.enc()),
        header_tag: hex(env.header_tag()),
        ciphertext: hex(env.ciphertext()),
        signed_message: hex(&signed_message(
            env.header_bytes(),
            env.enc(),
            env.ciphertext(),
        )),
        signature: hex(env.signature()),
        body_cbor: hex(body_cbor),
        envelope: hex(&env.to_wire()),
        now: now.as_unix_millis(),
        expect: expect.into(),
    }
}

fn generate() -> Vectors {
    let (alice, bob, carol) = (party("alice"), party("bob"), party("carol"));
    let mut cases = vec![];
    let now = T0.saturating_add(Duration::from_secs(2));

    let h = header(&alice.id, &bob.id);
    let b = body("Before you change the schema: how does the pipeline handle late-arriving rows?");
    let env = seal(&alice.id, &bob.id.x25519_public(), &h, &b, &mut rng(100)).unwrap();
    let body_cbor = b.to_bytes();
    cases.push(case(
        "ok_ask",
        "An ask from alice to bob.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &env,
        &body_cbor,
        now,
        "ok",
    ));

    let mut h2 = header(&bob.id, &alice.id);
    h2.id = MessageId([0x42; 16]);
    h2.kind = Kind::Reply;
    h2.in_reply_to = Some(h.id);
    h2.thread = h.thread;
    h2.hop = 1;
    h2.taint = true;
    let mut b2 = body("Late rows go to a side table and are merged hourly; see the attached diff.");
    b2.who.kind = agentmesh_protocol::WhoKind::Human;
    b2.who.session_id = None;
    b2.to_mailbox = None;
    b2.attachments = vec![Attachment {
        name: "merge.diff".into(),
        media_type: "text/x-diff".into(),
        data: b"--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n".to_vec(),
    }];
    let env2 = seal(&bob.id, &alice.id.x25519_public(), &h2, &b2, &mut rng(101)).unwrap();
    cases.push(case(
        "ok_reply_with_attachment",
        "bob's reply, one hop, tainted, with an attachment, to alice's owner mailbox.",
        &alice,
        alice.id.peer_id(),
        &bob,
        &env2,
        &b2.to_bytes(),
        now,
        "ok",
    ));

    // What bob's machine did with a broadcast of alice's: a counts
    // envelope, its body one attachment of [version, delivered, dropped].
    let mut h3 = header(&bob.id, &alice.id);
    h3.id = MessageId([0x43; 16]);
    h3.kind = Kind::Counts;
    h3.in_reply_to = Some(h.id);
    h3.thread = h.thread;
    let who = agentmesh_protocol::Who {
        kind: agentmesh_protocol::WhoKind::Agent,
        name: "agentmesh".into(),
        session_id: None,
        task: None,
    };
    let b3 = Counts {
        delivered: 2,
        dropped: 5,
        ..Counts::default()
    }
    .to_body(who);
    let env3 = seal(&bob.id, &alice.id.x25519_public(), &h3, &b3, &mut rng(102)).unwrap();
    cases.push(case(
        "ok_counts",
        "bob's machine reports it delivered alice's broadcast to 2 mailboxes and dropped it for 5.",
        &alice,
        alice.id.peer_id(),
        &bob,
        &env3,
        &b3.to_bytes(),
        now,
        "ok",
    ));

    // What bob's machine did with alice's ask: a receipt envelope, its
    // body one attachment of [version, [entry...]]: stored in the inbox,
    // deferred by the mailbox's spent budget, then read.
    let mut h4 = header(&bob.id, &alice.id);
    h4.id = MessageId([0x44; 16]);
    h4.kind = Kind::Receipt;
    h4.in_reply_to = Some(h.id);
    h4.thread = h.thread;
    let at = h4.sent_at;
    let b4 = Receipt {
        entries: vec![
            ReceiptEntry::new(ReceiptState::Delivered, at),
            ReceiptEntry {
                until: Some(at.saturating_add(Duration::from_secs(3600))),
                ..ReceiptEntry::new(ReceiptState::Deferred, at)
            },
            ReceiptEntry::new(
                ReceiptState::Read,
                at.saturating_add(Duration::from_secs(1)),
            ),
        ],
    }
    .to_body(agentmesh_protocol::Who {
        kind: agentmesh_protocol::WhoKind::Agent,
        name: "agentmesh".into(),
        session_id: None,
        task: None,
    });
    let env4 = seal(&bob.id, &alice.id.x25519_public(), &h4, &b4, &mut rng(103)).unwrap();
    cases.push(case(
        "ok_receipt",
        "bob's machine tells alice's that her ask was delivered, deferred for an hour by a spent wake budget, and read a second later.",
        &alice,
        alice.id.peer_id(),
        &bob,
        &env4,
        &b4.to_bytes(),
        now,
        "ok",
    ));

    let edge = h.expires_at.saturating_add(MAX_CLOCK_SKEW);
    cases.push(case(
        "ok_at_expiry_plus_skew",
        "The last moment the ask is accepted: expires_at + MAX_CLOCK_SKEW.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &env,
        &body_cbor,
        edge,
        "ok",
    ));

    let parts = |env: &Envelope| {
        (
            env.header_bytes().to_vec(),
            *env.enc(),
            *env.header_tag(),
            env.ciphertext().to_vec(),
            *env.signature(),
        )
    };

    let (mut hb, enc, tag, ct, sig) = parts(&env);
    hb[4] ^= 0x01;
    let tampered = Envelope::from_parts(&hb, enc, tag, ct, sig).unwrap();
    cases.push(case(
        "tampered_header",
        "One bit of the header's message id flipped.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &tampered,
        &[],
        now,
        "TamperedHeader",
    ));

    let (hb, enc, tag, mut ct, sig) = parts(&env);
    ct[10] ^= 0x01;
    let tampered = Envelope::from_parts(&hb, enc, tag, ct, sig).unwrap();
    cases.push(case(
        "tampered_ciphertext",
        "One bit of the ciphertext flipped.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &tampered,
        &[],
        now,
        "TamperedCiphertext",
    ));

    let (hb, enc, tag, ct, mut sig) = parts(&env);
    sig[5] ^= 0x01;
    let tampered = Envelope::from_parts(&hb, enc, tag, ct, sig).unwrap();
    cases.push(case(
        "bad_signature",
        "One bit of the signature flipped.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &tampered,
        &[],
        now,
        "BadSignature",
    ));

    cases.push(case(
        "wrong_key",
        "Opened with carol's X25519 secret as if it were bob's: the seal does not open for this key.",
        &carol,
        bob.id.peer_id(),
        &alice,
        &env,
        &[],
        now,
        "WrongRecipient",
    ));
    cases.push(case(
        "wrong_recipient",
        "carol receives an envelope whose header names bob.",
        &carol,
        carol.id.peer_id(),
        &alice,
        &env,
        &[],
        now,
        "WrongRecipient",
    ));

    let late = edge.saturating_add(Duration::from_millis(1));
    cases.push(case(
        "expired",
        "One millisecond after expires_at + MAX_CLOCK_SKEW.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &env,
        &[],
        late,
        "Expired",
    ));

    let early = T0.saturating_sub(MAX_CLOCK_SKEW + Duration::from_millis(1));
    cases.push(case(
        "not_yet_valid",
        "Judged by a clock more than MAX_CLOCK_SKEW behind sent_at.",
        &bob,
        bob.id.peer_id(),
        &alice,
        &env,
        &[],
        early,
        "NotYetValid",
    ));

    // Header-level refusals: each replaces the header bytes and keeps the
    // rest, so they are refused before any signature or seal is checked.
    // Such envelopes do not decode into an `Envelope`, so each case is
    // written from its parts.
    let reencode = |index: usize, value: ciborium::Value| {
        let mut v = agentmesh_protocol::cbor::decode("header", env.header_bytes(), 512).unwrap();
        if let ciborium::Value::Array(items) = &mut v {
            items[index] = value;
        }
        agentmesh_protocol::cbor::encode(&v)
    };
    let header_case = |name: &str, description: &str, hb: Vec<u8>, expect: &str| {
        let wire = agentmesh_protocol::cbor::encode(&ciborium::Value::Array(vec![
            ciborium::Value::Bytes(hb.clone()),
            ciborium::Value::Bytes(env.enc().to_vec()),
            ciborium::Value::Bytes(env.header_tag().to_vec()),
            ciborium::Value::Bytes(env.ciphertext().to_vec()),
            ciborium::Value::Bytes(env.signature().to_vec()),
        ]));
        let mut c = case(
            name,
            description,
            &bob,
            bob.id.peer_id(),
            &alice,
            &env,
            &[],
            now,
            expect,
        );
        c.header_cbor = hex(&hb);
        c.signed_message = hex(&signed_message(&hb, env.enc(), env.ciphertext()));
        c.envelope = hex(&wire);
        c
    };
    let v2 = reencode(0, ciborium::Value::Integer(2.into()));
    cases.push(header_case(
        "unsupported_version",
        "The header's version is 2.",
        v2,
        "UnsupportedVersion",
    ));
    let s9 = reencode(1, ciborium::Value::Integer(9.into()));
    cases.push(header_case(
        "unsupported_suite",
        "The header's suite is 9.",
        s9,
        "UnsupportedSuite",
    ));
    // hop 0 written as 0x18 0x00 (a two-byte form) instead of 0x00. The
    // header ends: hop (1 byte), taint (1), sent_at (9), expires_at (9).
    let canonical = env.header_bytes().to_vec();
    let hop_at = canonical.len() - 20;
    assert_eq!(
        &canonical[hop_at..hop_at + 2],
        &[0x00, 0xf4],
        "hop then taint"
    );
    let mut long_hop = canonical[..hop_at].to_vec();
    long_hop.extend_from_slice(&[0x18, 0x00]);
    long_hop.extend_from_slice(&canonical[hop_at + 1..]);
    cases.push(header_case(
        "non_canonical_header",
        "The header's hop is encoded in two bytes where one suffices.",
        long_hop,
        "Malformed",
    ));
    let long_life = reencode(
        12,
        ciborium::Value::Integer((h.sent_at.as_unix_millis() + 31 * 86_400_000).into()),
    );
    cases.push(header_case(
        "lifetime_too_long",
        "expires_at is 31 days after sent_at, beyond MAX_ENVELOPE_LIFETIME.",
        long_life,
        "BadLifetime",
    ));

    Vectors {
        description: "agentmesh envelope test vectors, version 1. See docs/protocol.md, section 'Test vectors'. All byte fields are lowercase hex; `now` is Unix milliseconds.".into(),
        cases,
    }
}

fn arr<const N: usize>(s: &str) -> [u8; N] {
    unhex(s).try_into().expect("field has the right length")
}

#[test]
fn every_committed_vector_has_its_expected_outcome() {
    let text = std::fs::read_to_string(PATH).expect("tests/vectors/envelope.json exists");
    let vectors: Vectors = serde_json::from_str(&text).unwrap();
    assert!(vectors.cases.len() >= 10);
    for c in &vectors.cases {
        // Rebuild from the parts, as another implementation would.
        let env = match Envelope::from_parts(
            &unhex(&c.header_cbor),
            arr(&c.enc),
            arr(&c.header_tag),
            unhex(&c.ciphertext),
            arr(&c.signature),
        ) {
            Ok(env) => env,
            Err(e) => {
                // Refused while decoding: the whole envelope is refused the same way.
                assert_eq!(e.name(), c.expect, "{}: {e}", c.name);
                let anyone = Identity::from_secrets(&[0; 32], &[0; 32]);
                let whole = agentmesh_protocol::open(
                    &unhex(&c.envelope),
                    &anyone,
                    Timestamp::from_unix_millis(c.now),
                );
                assert_eq!(whole.unwrap_err().name(), c.expect, "{}", c.name);
                continue;
            }
        };
        assert_eq!(
            hex(&env.to_wire()),
            c.envelope,
            "{}: envelope is the CBOR of its parts",
            c.name
        );
        assert_eq!(unhex(&c.info), HPKE_INFO, "{}", c.name);
        assert_eq!(
            hex(&signed_message(
                env.header_bytes(),
                env.enc(),
                env.ciphertext()
            )),
            c.signed_message,
            "{}: signed_message",
            c.name
        );
        let peer = PeerId::from_bytes(&unhex(&c.recipient_peer_id)).unwrap();
        let outcome = env.open_as(
            &peer,
            &arr(&c.recipient_x25519_secret),
            Timestamp::from_unix_millis(c.now),
        );
        match (&outcome, c.expect.as_str()) {
            (Ok(opened), "ok") => {
                assert_eq!(
                    hex(&opened.body.to_bytes()),
                    c.body_cbor,
                    "{}: body",
                    c.name
                );
                // The signature verifies with the listed key over the listed bytes.
                let vk = ed25519_dalek::VerifyingKey::from_bytes(&arr(&c.sender_ed25519_public))
                    .unwrap();
                let sig = ed25519_dalek::Signature::from_bytes(&arr(&c.signature));
                assert!(
                    vk.verify_strict(&unhex(&c.signed_message), &sig).is_ok(),
                    "{}",
                    c.name
                );
            }
            (Err(e), expected) => assert_eq!(e.name(), expected, "{}: {e}", c.name),
            (Ok(_), expected) => panic!("{}: opened, but {expected} was expected", c.name),
        }
    }
    let expects: std::collections::BTreeSet<_> =
        vectors.cases.iter().map(|c| c.expect.as_str()).collect();
    for needed in [
        "ok",
        "TamperedHeader",
        "TamperedCiphertext",
        "WrongRecipient",
        "BadSignature",
        "Expired",
        "NotYetValid",
        "UnsupportedVersion",
        "UnsupportedSuite",
        "Malformed",
        "BadLifetime",
    ] {
        assert!(expects.contains(needed), "no vector expects {needed}");
    }
}

#[test]
fn committed_vectors_are_what_this_build_generates() {
    let generated = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    if std::env::var_os("AGENTMESH_REGENERATE_VECTORS").is_some() {
        std::fs::write(PATH, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        committed == generated,
        "tests/vectors/envelope.json differs from what this build generates; if the wire format changed on purpose, \
         regenerate with AGENTMESH_REGENERATE_VECTORS=1 and update docs/protocol.md"
    );
}

#[test]
fn the_counts_vector_carries_its_counts_and_other_bodies_are_refused() {
    let text = std::fs::read_to_string(PATH).unwrap();
    let vectors: Vectors = serde_json::from_str(&text).unwrap();
    let c = vectors
        .cases
        .iter()
        .find(|c| c.name == "ok_counts")
        .unwrap();
    let body = agentmesh_protocol::envelope::Body::from_bytes(&unhex(&c.body_cbor)).unwrap();
    assert_eq!(
        Counts::from_body(&body).unwrap(),
        Counts {
            delivered: 2,
            dropped: 5,
            ..Counts::default()
        }
    );
    // Nothing skipped: the short form, byte for byte the vector's, which
    // a build that knows no skips reads.
    assert_eq!(
        Counts::from_body(&body).unwrap().to_body(body.who.clone()),
        body
    );
    // A body that carries no counts attachment is no counts.
    let mut other = body.clone();
    other.attachments[0].media_type = "text/plain".into();
    assert!(Counts::from_body(&other).is_err());
    other.attachments.clear();
    assert!(Counts::from_body(&other).is_err());
}

#[test]
fn counts_that_skipped_mailboxes_say_how_many_and_why() {
    use agentmesh_protocol::envelope::SkipReason;
    for reason in [
        Some(SkipReason::HeldSender),
        Some(SkipReason::Paused),
        Some(SkipReason::Busy),
        None,
    ] {
        let c = Counts {
            delivered: 1,
            dropped: 0,
            skipped: 3,
            reason,
        };
        assert_eq!(Counts::from_bytes(&c.to_bytes()).unwrap(), c);
    }
    // The long form with a reason code this build does not know: the
    // counts stand, the reason is unknown.
    let later = ciborium::Value::Array(vec![
        1u64.into(),
        0u64.into(),
        0u64.into(),
        2u64.into(),
        99u64.into(),
    ]);
    let mut bytes = vec![];
    ciborium::into_writer(&later, &mut bytes).unwrap();
    let c = Counts::from_bytes(&bytes).unwrap();
    assert_eq!((c.skipped, c.reason), (2, None));
    // Four items is neither form.
    let odd = ciborium::Value::Array(vec![1u64.into(), 0u64.into(), 0u64.into(), 2u64.into()]);
    let mut bytes = vec![];
    ciborium::into_writer(&odd, &mut bytes).unwrap();
    assert!(Counts::from_bytes(&bytes).is_err());
}

#[test]
fn the_receipt_vector_carries_its_states_and_other_bodies_are_refused() {
    let text = std::fs::read_to_string(PATH).unwrap();
    let vectors: Vectors = serde_json::from_str(&text).unwrap();
    let c = vectors
        .cases
        .iter()
        .find(|c| c.name == "ok_receipt")
        .unwrap();
    let body = agentmesh_protocol::envelope::Body::from_bytes(&unhex(&c.body_cbor)).unwrap();
    let r = Receipt::from_body(&body).unwrap();
    let states: Vec<_> = r.entries.iter().map(|e| e.state.as_str()).collect();
    assert_eq!(states, ["delivered", "deferred", "read"]);
    assert_eq!(
        r.entries[1].until.unwrap().since(r.entries[1].at),
        Duration::from_secs(3600)
    );
    let mut other = body.clone();
    other.attachments[0].name = "counts".into();
    assert!(Receipt::from_body(&other).is_err());
    other.attachments.clear();
    assert!(Receipt::from_body(&other).is_err());
}
