//! Seal, open, sign and verify, for 1 KiB and 64 KiB bodies, next to the
//! same work done with the hpke and ed25519-dalek crates directly (the
//! floor), so the protocol layer's own cost is the difference.
//!
//! `cargo bench -p agentmesh-protocol`; figures in docs/benchmarks.md.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::hint::black_box;
use std::time::Duration;

use agentmesh_protocol::cbor::MAX_BODY_BYTES;
use agentmesh_protocol::envelope::{HPKE_INFO, SIGNATURE_DST};
use agentmesh_protocol::{
    Body, Envelope, Header, Identity, Kind, MessageId, Name, TeamId, Timestamp, Who, WhoKind, Wire,
    open, seal,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::{Signer, SigningKey};
use hpke::{Deserializable, OpModeR, OpModeS, Serializable};
use rand::SeedableRng;
use rand::rngs::StdRng;

type Kem = hpke::kem::X25519HkdfSha256;
type Aead = hpke::aead::ChaCha20Poly1305;
type Kdf = hpke::kdf::HkdfSha256;

const NOW: Timestamp = Timestamp::from_unix_millis(1_795_996_800_000);

fn header(from: &Identity, to: &Identity) -> Header {
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
        sent_at: NOW,
        expires_at: NOW.saturating_add(Duration::from_secs(7 * 86_400)),
    }
}

fn body(len: usize) -> Body {
    let mut b = Body {
        who: Who {
            kind: WhoKind::Agent,
            name: "claude".into(),
            session_id: Some("session-1".into()),
            task: None,
        },
        from_mailbox: Some(Name::parse("mailbox name", "api").unwrap()),
        to_mailbox: Some(Name::parse("mailbox name", "pipeline").unwrap()),
        text: String::new(),
        attachments: vec![],
    };
    // The text's CBOR length prefix grows with it; converge on exactly `len`.
    let mut text_len = len;
    loop {
        b.text = "x".repeat(text_len);
        let total = b.to_bytes().len();
        if total == len {
            return b;
        }
        text_len = text_len + len - total;
    }
}

/// The floor: what any envelope format built on these crates must do.
struct Raw {
    sender: SigningKey,
    verifier: ed25519_dalek::VerifyingKey,
    recipient_pk: <Kem as hpke::Kem>::PublicKey,
    recipient_sk: <Kem as hpke::Kem>::PrivateKey,
}

impl Raw {
    fn seal_sign(
        &self,
        header: &[u8],
        plaintext: &[u8],
        rng: &mut StdRng,
    ) -> ([u8; 32], Vec<u8>, [u8; 64]) {
        let (enc, mut ctx) = hpke::setup_sender_with_rng::<Aead, Kdf, Kem>(
            &OpModeS::Base,
            &self.recipient_pk,
            HPKE_INFO,
            rng,
        )
        .unwrap();
        let ct = ctx.seal(plaintext, header).unwrap();
        let enc: [u8; 32] = enc.to_bytes().into();
        let msg = [SIGNATURE_DST, header, &enc, &ct].concat();
        (enc, ct, self.sender.sign(&msg).to_bytes())
    }

    fn verify_open(&self, header: &[u8], enc: &[u8; 32], ct: &[u8], sig: &[u8; 64]) -> Vec<u8> {
        let msg = [SIGNATURE_DST, header, enc, ct].concat();
        self.verifier
            .verify_strict(&msg, &ed25519_dalek::Signature::from_bytes(sig))
            .unwrap();
        let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(enc).unwrap();
        let mut ctx = hpke::setup_receiver::<Aead, Kdf, Kem>(
            &OpModeR::Base,
            &self.recipient_sk,
            &enc,
            HPKE_INFO,
        )
        .unwrap();
        ctx.open(ct, header).unwrap()
    }
}

fn bench(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(1);
    let alice = Identity::generate(&mut rng);
    let bob = Identity::generate(&mut rng);
    let (bob_sk, bob_pk) = <Kem as hpke::Kem>::gen_keypair_with_rng(&mut rng);
    let sender = SigningKey::from_bytes(&alice.ed25519_secret());
    let raw = Raw {
        verifier: sender.verifying_key(),
        sender,
        recipient_pk: bob_pk,
        recipient_sk: bob_sk,
    };
    let h = header(&alice, &bob);
    let header_bytes = h.to_bytes();

    for (label, len) in [("1KiB", 1024), ("64KiB", MAX_BODY_BYTES)] {
        let b = body(len);
        let plaintext = b.to_bytes();
        assert_eq!(plaintext.len(), len);
        let mut g = c.benchmark_group(format!("envelope_{label}"));
        g.throughput(Throughput::Bytes(len as u64));

        g.bench_function("raw/seal+sign", |x| {
            x.iter(|| raw.seal_sign(&header_bytes, black_box(&plaintext), &mut rng))
        });
        let (enc, ct, sig) = raw.seal_sign(&header_bytes, &plaintext, &mut rng);
        g.bench_function("raw/verify+open", |x| {
            x.iter(|| raw.verify_open(&header_bytes, &enc, black_box(&ct), &sig))
        });
        g.bench_function("raw/roundtrip", |x| {
            x.iter(|| {
                let (enc, ct, sig) = raw.seal_sign(&header_bytes, black_box(&plaintext), &mut rng);
                raw.verify_open(&header_bytes, &enc, &ct, &sig)
            })
        });
        let msg = [SIGNATURE_DST, &header_bytes, &enc, &ct].concat();
        g.bench_function("raw/sign", |x| x.iter(|| raw.sender.sign(black_box(&msg))));
        let signature = raw.sender.sign(&msg);
        let key_bytes = raw.verifier.to_bytes();
        g.bench_function("raw/verifying_key_from_bytes", |x| {
            x.iter(|| ed25519_dalek::VerifyingKey::from_bytes(black_box(&key_bytes)).unwrap())
        });
        g.bench_function("raw/verify", |x| {
            x.iter(|| {
                raw.verifier
                    .verify_strict(black_box(&msg), &signature)
                    .unwrap()
            })
        });

        // The protocol: encode the body, seal, sign, encode the envelope;
        // decode the envelope and header, verify, open, decode the body.
        g.bench_function("agentmesh/seal", |x| {
            x.iter(|| {
                seal(&alice, &bob.x25519_public(), &h, black_box(&b), &mut rng)
                    .unwrap()
                    .to_wire()
            })
        });
        let wire = seal(&alice, &bob.x25519_public(), &h, &b, &mut rng)
            .unwrap()
            .to_wire();
        g.bench_function("agentmesh/open", |x| {
            x.iter(|| open(black_box(&wire), &bob, NOW).unwrap())
        });
        g.bench_function("agentmesh/roundtrip", |x| {
            x.iter(|| {
                let wire = seal(&alice, &bob.x25519_public(), &h, black_box(&b), &mut rng)
                    .unwrap()
                    .to_wire();
                open(&wire, &bob, NOW).unwrap()
            })
        });
        let env = Envelope::from_wire(&wire).unwrap();
        g.bench_function("agentmesh/decode_only", |x| {
            x.iter(|| Envelope::from_wire(black_box(&wire)).unwrap())
        });
        drop(env);
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
