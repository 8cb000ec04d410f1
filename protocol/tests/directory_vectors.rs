//! Test vectors for directory records and their gossip announcement:
//! `tests/vectors/directory.json` (docs/protocol.md §9a).
//!
//! One test reads every committed case from its hex fields alone, the way
//! another implementation would, and checks what it must decode to or why
//! it must be refused; the other regenerates the file from fixed keys and
//! checks it is byte for byte what this build produces. To rewrite it after
//! a deliberate format change:
//! `AGENTMESH_REGENERATE_VECTORS=1 cargo test -p agentmesh-protocol --test directory_vectors`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_protocol::directory::{
    DIRECTORY_SIGNATURE_DST, DirectoryAnnounce, DirectoryEntry, DirectoryRecord, SignedDirectory,
    Status,
};
use agentmesh_protocol::{Identity, Name, Timestamp, Wire};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/directory.json");

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Vectors {
    description: String,
    /// The signer's PeerId bytes (hex).
    peer_id: String,
    /// Its Ed25519 public key (hex).
    ed25519_public: String,
    cases: Vec<Case>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Case {
    name: String,
    description: String,
    /// The signed record (or announcement), hex.
    bytes: String,
    /// Its payload, hex (empty for an announcement).
    payload: String,
    /// The Ed25519 input: DST ‖ payload (empty for an announcement).
    signed_message: String,
    /// What it decodes to, or `null` if refused.
    decoded: Option<Decoded>,
    /// The refusal, if refused: `too_large`, `too_many_mailboxes`,
    /// `bad_signature`.
    refused: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Decoded {
    seq: u64,
    at: u64,
    always_on: bool,
    mailboxes: Vec<Mailbox>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Mailbox {
    /// `null` for the owner's mailbox.
    mailbox: Option<String>,
    profile: String,
    goal: String,
    status: String,
    last_active: Option<u64>,
}

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn unhex(s: &str) -> Vec<u8> {
    data_encoding::HEXLOWER
        .decode(s.as_bytes())
        .expect("vector fields are lowercase hex")
}

fn machine() -> Identity {
    let key = |l: &str| -> [u8; 32] { Sha256::digest(l.as_bytes()).into() };
    Identity::from_secrets(
        &key("agentmesh directory vector ed25519"),
        &key("agentmesh directory vector x25519"),
    )
}

/// 2026-11-30T00:00:00Z.
const T0: u64 = 1_795_996_800_000;

fn entry(mailbox: Option<&str>, profile: &str, goal: &str, status: Status) -> DirectoryEntry {
    DirectoryEntry {
        mailbox: mailbox.map(|m| Name::parse("mailbox name", m).unwrap()),
        profile: profile.into(),
        goal: goal.into(),
        status,
        last_active: (status != Status::Offline).then(|| Timestamp::from_unix_millis(T0 - 30_000)),
    }
}

fn record(seq: u64, mailboxes: Vec<DirectoryEntry>) -> DirectoryRecord {
    DirectoryRecord {
        peer: machine().peer_id(),
        seq,
        at: Timestamp::from_unix_millis(T0),
        always_on: false,
        mailboxes,
    }
}

fn payload_of(bytes: &[u8]) -> Vec<u8> {
    let value: ciborium::Value = ciborium::from_reader(bytes).unwrap();
    match value {
        ciborium::Value::Array(items) => match &items[0] {
            ciborium::Value::Bytes(p) => p.clone(),
            _ => panic!("the payload is a byte string"),
        },
        _ => panic!("a signed record is an array"),
    }
}

fn decoded(s: &SignedDirectory) -> Decoded {
    let r = s.record();
    Decoded {
        seq: r.seq,
        at: r.at.as_unix_millis(),
        always_on: r.always_on,
        mailboxes: r
            .mailboxes
            .iter()
            .map(|m| Mailbox {
                mailbox: m.mailbox.as_ref().map(|n| n.to_string()),
                profile: m.profile.clone(),
                goal: m.goal.clone(),
                status: m.status.as_str().into(),
                last_active: m.last_active.map(Timestamp::as_unix_millis),
            })
            .collect(),
    }
}

fn refusal(bytes: &[u8]) -> Result<SignedDirectory, String> {
    SignedDirectory::from_bytes(bytes).map_err(|e| {
        let text = e.to_string();
        if text.contains("over the limit of 49152") || text.contains("49152") {
            "too_large".into()
        } else if text.contains("mailboxes") && text.contains("over the limit of 64") {
            "too_many_mailboxes".into()
        } else if text.contains("signature") {
            "bad_signature".into()
        } else {
            format!("other: {text}")
        }
    })
}

fn case(name: &str, description: &str, bytes: Vec<u8>) -> Case {
    let payload = payload_of(&bytes);
    let (decoded, refused) = match refusal(&bytes) {
        Ok(s) => (Some(decoded(&s)), None),
        Err(why) => (None, Some(why)),
    };
    Case {
        name: name.into(),
        description: description.into(),
        signed_message: hex(&[DIRECTORY_SIGNATURE_DST, &payload].concat()),
        payload: hex(&payload),
        bytes: hex(&bytes),
        decoded,
        refused,
    }
}

fn generate() -> Vectors {
    let me = machine();
    let two = record(
        7,
        vec![
            entry(None, "Ada, who runs this machine.", "", Status::Offline),
            entry(
                Some("api"),
                "The billing API: Rust, axum, Postgres 16; owns /v2/invoices.",
                "Move invoice export to the new queue.",
                Status::Working,
            ),
            entry(Some("web"), "", "", Status::Idle),
        ],
    );
    let ok = SignedDirectory::sign(two.clone(), &me).unwrap();
    let empty = SignedDirectory::sign(record(1, vec![]), &me).unwrap();
    let many = record(
        8,
        (0..65)
            .map(|i| entry(Some(&format!("m{i}")), "", "", Status::Offline))
            .collect(),
    );
    let big = record(
        9,
        (0..48)
            .map(|i| entry(Some(&format!("m{i}")), &"p".repeat(1024), "", Status::Idle))
            .collect(),
    );
    let mut forged = ok.bytes().to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let announce = DirectoryAnnounce {
        peer: me.peer_id(),
        seq: 7,
    }
    .to_bytes();
    let mut cases = vec![
        case(
            "three_mailboxes",
            "The owner's mailbox (null), a working one with a profile and goal, an idle one with neither.",
            ok.bytes().to_vec(),
        ),
        case(
            "no_mailboxes",
            "A machine with no mailboxes yet.",
            empty.bytes().to_vec(),
        ),
        case(
            "too_many_mailboxes",
            "65 mailboxes: refused whole, before any entry is read.",
            SignedDirectory::sign_unchecked(&many, &me),
        ),
        case(
            "too_large",
            "48 profiles of 1 KiB: over 48 KiB, refused whole before any CBOR is parsed.",
            SignedDirectory::sign_unchecked(&big, &me),
        ),
        case(
            "bad_signature",
            "three_mailboxes with the signature's last bit flipped.",
            forged,
        ),
    ];
    cases.push(Case {
        name: "announce".into(),
        description: "The gossip announcement of three_mailboxes: [1, peer, 7].".into(),
        bytes: hex(&announce),
        payload: String::new(),
        signed_message: String::new(),
        decoded: None,
        refused: None,
    });
    Vectors {
        description: "Directory records (docs/protocol.md §9a) signed by one fixed machine, and the gossip announcement. Byte fields in lowercase hex; each case gives what it decodes to or why it is refused.".into(),
        peer_id: hex(&me.peer_id().to_bytes()),
        ed25519_public: hex(&me.peer_id().to_bytes()[6..]),
        cases,
    }
}

#[test]
fn every_committed_case_decodes_or_is_refused_as_it_says() {
    let text = std::fs::read_to_string(PATH).expect("tests/vectors/directory.json exists");
    let v: Vectors = serde_json::from_str(&text).unwrap();
    for c in &v.cases {
        let bytes = unhex(&c.bytes);
        if c.name == "announce" {
            let a = DirectoryAnnounce::from_bytes(&bytes).unwrap();
            assert_eq!(hex(&a.peer.to_bytes()), v.peer_id);
            assert_eq!(a.seq, 7);
            continue;
        }
        assert_eq!(payload_of(&bytes), unhex(&c.payload), "{}", c.name);
        assert_eq!(
            unhex(&c.signed_message),
            [DIRECTORY_SIGNATURE_DST, &unhex(&c.payload)].concat(),
            "{}",
            c.name
        );
        match refusal(&bytes) {
            Ok(s) => {
                assert_eq!(Some(decoded(&s)), c.decoded, "{}", c.name);
                assert_eq!(hex(&s.record().peer.to_bytes()), v.peer_id);
            }
            Err(why) => assert_eq!(Some(why), c.refused, "{}", c.name),
        }
    }
    let names: Vec<&str> = v.cases.iter().map(|c| c.name.as_str()).collect();
    for n in [
        "three_mailboxes",
        "too_many_mailboxes",
        "too_large",
        "bad_signature",
    ] {
        assert!(names.contains(&n), "{n}");
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
        "tests/vectors/directory.json differs from what this build generates; if the record format changed on purpose, \
         regenerate with AGENTMESH_REGENERATE_VECTORS=1 and update docs/protocol.md"
    );
}
