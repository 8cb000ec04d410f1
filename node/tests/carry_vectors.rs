//! Test vectors of `/agentmesh/carry/1` (docs/protocol.md §10b): the
//! exact bytes the daemon's codec writes for a `Hold` and a `Deliver`
//! request carrying the envelope vector `ok_ask`, and for an answer with
//! every outcome. The committed file must be what this build writes,
//! and must decode back to the same values.
//!
//! Regenerate after a deliberate change with
//! `AGENTMESH_REGENERATE_VECTORS=1 cargo test -p agentmesh-node --test carry_vectors`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::net::CARRY_PROTOCOL;
use agentmesh_node::net::codec::Codec;
use agentmesh_node::wire::{CARRY_LIMITS, CarryRequest, MailOutcome, MailReply};
use libp2p::request_response::Codec as _;
use serde::{Deserialize, Serialize};

const PATH: &str = "tests/vectors/carry.json";
const ENVELOPES: &str = "../protocol/tests/vectors/envelope.json";

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Vectors {
    description: String,
    cases: Vec<Case>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Case {
    name: String,
    description: String,
    /// `request` or `answer`.
    message: String,
    /// The whole message as the codec writes it, lowercase hex.
    bytes: String,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The envelope vector `ok_ask`, as its wire bytes.
fn ok_ask() -> Vec<u8> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ENVELOPES).unwrap()).unwrap();
    let case = (v["cases"].as_array().unwrap().iter())
        .find(|c| c["name"] == "ok_ask")
        .unwrap();
    unhex(case["envelope"].as_str().unwrap())
}

type Carry = Codec<CarryRequest, MailReply>;

fn write_request(r: CarryRequest) -> Vec<u8> {
    let mut out = futures::io::Cursor::new(vec![]);
    futures::executor::block_on(Carry::new(CARRY_LIMITS).write_request(
        &CARRY_PROTOCOL,
        &mut out,
        r,
    ))
    .unwrap();
    out.into_inner()
}

fn write_answer(r: MailReply) -> Vec<u8> {
    let mut out = futures::io::Cursor::new(vec![]);
    futures::executor::block_on(Carry::new(CARRY_LIMITS).write_response(
        &CARRY_PROTOCOL,
        &mut out,
        r,
    ))
    .unwrap();
    out.into_inner()
}

fn read_request(b: &[u8]) -> CarryRequest {
    futures::executor::block_on(Carry::new(CARRY_LIMITS).read_request(&CARRY_PROTOCOL, &mut &b[..]))
        .unwrap()
}

fn read_answer(b: &[u8]) -> MailReply {
    futures::executor::block_on(
        Carry::new(CARRY_LIMITS).read_response(&CARRY_PROTOCOL, &mut &b[..]),
    )
    .unwrap()
}

fn hold() -> CarryRequest {
    CarryRequest::Hold {
        envelopes: vec![serde_bytes::ByteBuf::from(ok_ask())],
    }
}

fn deliver() -> CarryRequest {
    CarryRequest::Deliver {
        envelopes: vec![serde_bytes::ByteBuf::from(ok_ask())],
    }
}

fn answer() -> MailReply {
    MailReply {
        outcomes: vec![
            MailOutcome::accepted(false),
            MailOutcome::Accepted {
                held: false,
                deferred_until: Some(1_796_083_200_000),
            },
            MailOutcome::accepted(true),
            MailOutcome::Duplicate,
            MailOutcome::Refused {
                code: "carrier_full".into(),
                reason: "charlie holds as much as it carries for everyone (256 MiB)".into(),
            },
            MailOutcome::Busy,
        ],
    }
}

fn generate() -> Vectors {
    Vectors {
        description: "/agentmesh/carry/1 messages as the daemon's codec writes them (docs/protocol.md §10b): \
                      CBOR, serde's externally tagged form; `envelopes` is an array of byte strings"
            .into(),
        cases: vec![
            Case {
                name: "hold".into(),
                description: "sender to carrier: hold the envelope vector ok_ask for its offline recipient".into(),
                message: "request".into(),
                bytes: hex(&write_request(hold())),
            },
            Case {
                name: "deliver".into(),
                description: "carrier to recipient: the same envelope, held for it, unchanged".into(),
                message: "request".into(),
                bytes: hex(&write_request(deliver())),
            },
            Case {
                name: "answer".into(),
                description: "one outcome per envelope, in order: accepted; accepted and deferred until \
                              2026-12-01T00:00:00Z; accepted and held; duplicate; refused (carrier_full); busy"
                    .into(),
                message: "answer".into(),
                bytes: hex(&write_answer(answer())),
            },
        ],
    }
}

#[test]
fn committed_vectors_are_what_this_build_writes_and_decode_back() {
    let generated = serde_json::to_string_pretty(&generate()).unwrap() + "\n";
    if std::env::var_os("AGENTMESH_REGENERATE_VECTORS").is_some() {
        std::fs::write(PATH, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        committed == generated,
        "{PATH} differs from what this build writes; if carry/1 changed on purpose, \
         regenerate with AGENTMESH_REGENERATE_VECTORS=1 and update docs/protocol.md"
    );
    let v: Vectors = serde_json::from_str(&committed).unwrap();
    let bytes = |name: &str| unhex(&v.cases.iter().find(|c| c.name == name).unwrap().bytes);
    assert_eq!(read_request(&bytes("hold")), hold());
    assert_eq!(read_request(&bytes("deliver")), deliver());
    assert_eq!(read_answer(&bytes("answer")), answer());
}

#[test]
fn a_hold_of_more_envelopes_than_a_batch_takes_keeps_one_more_and_skips_the_rest() {
    // 300 envelopes: 257 are kept while decoding (one more than a batch
    // takes, so the receiver can tell "too many" and answer the batch
    // with no outcomes), the rest are skipped without being stored.
    let many = CarryRequest::Hold {
        envelopes: vec![serde_bytes::ByteBuf::from(vec![0u8; 1]); 300],
    };
    let kept = read_request(&write_request(many));
    assert_eq!(
        kept.envelopes().len(),
        agentmesh_node::wire::MAX_BATCH_ENVELOPES + 1
    );
}
