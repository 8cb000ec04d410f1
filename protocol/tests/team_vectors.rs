//! Test vectors for team blocks, Person blocks (type 3) and blocks of a
//! later type: `tests/vectors/team.json`.
//!
//! One test applies every committed case from its hex fields alone, the
//! way another implementation would, and checks the persons and refusals
//! it names; the other regenerates the file from fixed keys and checks it
//! is byte for byte what this build produces. To rewrite it after a
//! deliberate format change:
//! `AGENTMESH_REGENERATE_VECTORS=1 cargo test -p agentmesh-protocol --test team_vectors`.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::BTreeMap;

use agentmesh_protocol::cbor::encode;
use agentmesh_protocol::team::{
    Admit, BLOCK_SIGNATURE_DST, Block, BlockBody, Genesis, Person, Revoke, TeamId, TeamState, Term,
};
use agentmesh_protocol::{Identity, Name, Owner, Timestamp};
use ciborium::Value;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/team.json");

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Vectors {
    description: String,
    /// Machine label → its PeerId bytes (hex) and Ed25519 public key.
    machines: BTreeMap<String, MachineKeys>,
    /// Block label → the block.
    blocks: BTreeMap<String, BlockVector>,
    cases: Vec<Case>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct MachineKeys {
    peer_id: String,
    ed25519_public: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct BlockVector {
    description: String,
    /// The whole block (§6.1).
    block: String,
    /// Its payload (§6.4).
    payload: String,
    /// The Ed25519 input: DST ‖ payload (§6.2).
    signed_message: String,
    /// SHA-256 of `block` (§6.3).
    hash: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Case {
    name: String,
    description: String,
    /// Block labels, applied in this order to a state for the Genesis's team.
    apply: Vec<String>,
    /// Machine label → the person the team then says runs it.
    persons: BTreeMap<String, String>,
    /// Machine label → `current`, `revoked`, `left` or `name_taken`.
    standings: BTreeMap<String, String>,
    /// Block label → the refusal `apply` gives it (its Rust name).
    refused: BTreeMap<String, String>,
    /// Machine label → when its membership lapses (Unix ms) and the
    /// admin whose Term says so, for machines with a Term (type 4).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    expires: BTreeMap<String, (u64, String)>,
    /// The set digest after it all (§6.5).
    digest: String,
}

fn key(label: &str) -> [u8; 32] {
    Sha256::digest(label.as_bytes()).into()
}

fn machine(label: &str) -> Identity {
    Identity::from_secrets(
        &key(&format!("agentmesh team vector {label} ed25519")),
        &key(&format!("agentmesh team vector {label} x25519")),
    )
}

fn hex(b: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(b)
}

fn unhex(s: &str) -> Vec<u8> {
    data_encoding::HEXLOWER
        .decode(s.as_bytes())
        .expect("vector fields are lowercase hex")
}

fn n(s: &str) -> Name {
    Name::parse("machine name", s).unwrap()
}

fn o(s: &str) -> Owner {
    Owner::parse(s).unwrap()
}

/// 2026-12-01T00:00:00Z.
const T: Timestamp = Timestamp::from_unix_millis(1_796_083_200_000);

const MACHINES: [&str; 3] = ["ada-desk", "bob-laptop", "cleo-box"];

fn signed(body: BlockBody, by: &Identity) -> Block {
    Block::sign(body, by).unwrap()
}

/// The blocks, labelled, and what each shows.
fn blocks() -> Vec<(&'static str, &'static str, Block)> {
    let (ada, bob, cleo) = (
        machine(MACHINES[0]),
        machine(MACHINES[1]),
        machine(MACHINES[2]),
    );
    let genesis = signed(
        BlockBody::Genesis(Genesis {
            team_name: n("core"),
            founder: ada.peer_id(),
            founder_x25519: ada.x25519_public(),
            founder_name: n("ada-desk"),
            founder_owner: o("root"),
            admins: vec![ada.peer_id()],
            created_at: T,
            nonce: [0x11; 16],
        }),
        &ada,
    );
    let team = TeamId(genesis.hash().0);
    let admit = |who: &Identity, name: &str, person: &str| {
        signed(
            BlockBody::Admit(Admit {
                team,
                peer: who.peer_id(),
                x25519: who.x25519_public(),
                name: n(name),
                owner: o(person),
                admitted_by: ada.peer_id(),
                at: T,
            }),
            &ada,
        )
    };
    let person = |by: &Identity, who: &Identity, person: &str, seq: u64| {
        signed(
            BlockBody::Person(Person {
                team,
                by: by.peer_id(),
                peer: who.peer_id(),
                person: o(person),
                seq,
                at: T,
            }),
            by,
        )
    };
    let term = |by: &Identity, who: &Identity, days: u64, from_day: u64| {
        let day = 86_400_000;
        signed(
            BlockBody::Term(Term {
                team,
                by: by.peer_id(),
                peer: who.peer_id(),
                expires_at: Timestamp::from_unix_millis(
                    T.as_unix_millis() + (from_day + days) * day,
                ),
                at: Timestamp::from_unix_millis(T.as_unix_millis() + from_day * day),
            }),
            by,
        )
    };
    // A block of a later version's type 9, as it would be written.
    let later = |by: &Identity| {
        let payload = encode(&Value::Array(vec![
            Value::Integer(1.into()),
            Value::Integer(9.into()),
            Value::Bytes(team.0.to_vec()),
            Value::Bytes(by.peer_id().to_bytes()),
            Value::Text("a field of a later version".into()),
        ]));
        let sig = by.sign(&[BLOCK_SIGNATURE_DST, &payload].concat());
        Block::from_bytes(&encode(&Value::Array(vec![
            Value::Bytes(payload),
            Value::Bytes(sig.to_vec()),
        ])))
        .unwrap()
    };
    vec![
        (
            "genesis",
            "The Genesis: ada-desk founds core; its person is root.",
            genesis,
        ),
        (
            "admit_bob",
            "bob-laptop admitted; the founder chose the person Bob (its login name was root too).",
            admit(&bob, "bob-laptop", "Bob"),
        ),
        (
            "admit_cleo",
            "cleo-box admitted as root's machine (the founder said it is).",
            admit(&cleo, "cleo-box", "root"),
        ),
        (
            "person_bob_1",
            "bob-laptop moved to root, sequence 1.",
            person(&ada, &bob, "root", 1),
        ),
        (
            "person_bob_2",
            "bob-laptop moved back to Bob, sequence 2: wins over sequence 1 in any order.",
            person(&ada, &bob, "Bob", 2),
        ),
        (
            "person_cleo_5a",
            "cleo-box moved to Cleo, sequence 5.",
            person(&ada, &cleo, "Cleo", 5),
        ),
        (
            "person_cleo_5b",
            "cleo-box moved to Dana, also sequence 5: of the two, the lower block hash wins.",
            person(&ada, &cleo, "Dana", 5),
        ),
        (
            "person_by_member",
            "bob-laptop says it is Mallory's: not an admin, refused (NotAnAdmin).",
            person(&bob, &bob, "Mallory", 9),
        ),
        (
            "later_type_by_admin",
            "Type 9 from a later version, signed by the founder: kept, changes nothing.",
            later(&ada),
        ),
        (
            "later_type_by_member",
            "Type 9 signed by bob-laptop: refused (NotAnAdmin).",
            later(&bob),
        ),
        (
            "term_bob",
            "bob-laptop's membership lasts 180 days from its admission (a Term, type 4).",
            term(&ada, &bob, 180, 0),
        ),
        (
            "term_bob_renewed",
            "Renewed on day 120 for another 180 days: the latest expiry counts, in any order.",
            term(&ada, &bob, 180, 120),
        ),
        (
            "term_by_member",
            "cleo-box gives bob-laptop a term: not an admin, refused (NotAnAdmin).",
            term(&cleo, &bob, 999, 0),
        ),
        (
            "term_for_founder",
            "A term for the founder: refused (TermForAdmin); its membership never expires.",
            term(&ada, &ada, 30, 0),
        ),
        (
            "leave_cleo",
            "cleo-box leaves (a Revoke it signs itself): left, not revoked.",
            signed(
                BlockBody::Revoke(Revoke {
                    team,
                    peer: cleo.peer_id(),
                    revoked_by: cleo.peer_id(),
                    at: T,
                }),
                &cleo,
            ),
        ),
    ]
}

fn standing(m: &agentmesh_protocol::team::Member) -> &'static str {
    use agentmesh_protocol::team::Standing;
    match m.standing {
        Standing::Current => "current",
        Standing::Revoked if m.left => "left",
        Standing::Revoked => "revoked",
        Standing::NameTaken => "name_taken",
    }
}

/// Label → word: persons, standings or refusals.
type Words = BTreeMap<String, String>;

/// Machine label → expiry (ms) and the renewing admin's label.
type Expiries = BTreeMap<String, (u64, String)>;

/// Applies `labels` from `blocks` (decoding each from its bytes): the
/// persons, standings, refusals and digest that result.
fn run(
    labels: &[String],
    blocks: &BTreeMap<String, Vec<u8>>,
    peers: &BTreeMap<String, Vec<u8>>,
) -> (Words, Words, Words, Expiries, String) {
    let mut state: Option<TeamState> = None;
    let mut refused = BTreeMap::new();
    for l in labels {
        let block = Block::from_bytes(&blocks[l]).unwrap();
        let s = state.get_or_insert_with(|| TeamState::new(TeamId(block.hash().0)));
        if let Err(e) = s.apply(block) {
            let name = format!("{e:?}");
            refused.insert(
                l.clone(),
                name.split([' ', '{', '(']).next().unwrap().to_owned(),
            );
        }
    }
    let s = state.unwrap();
    let (mut persons, mut standings, mut expires) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let label_of = |p: &agentmesh_protocol::PeerId| {
        peers
            .iter()
            .find(|(_, b)| **b == p.to_bytes())
            .map(|(l, _)| l.clone())
            .unwrap_or_default()
    };
    for (label, peer) in peers {
        let peer = agentmesh_protocol::PeerId::from_bytes(peer).unwrap();
        if let Some(m) = s.member(&peer) {
            persons.insert(label.clone(), m.owner.to_string());
            standings.insert(label.clone(), standing(m).to_owned());
            if let Some(t) = m.term {
                expires.insert(
                    label.clone(),
                    (t.expires_at.as_unix_millis(), label_of(&t.by)),
                );
            }
        }
    }
    (persons, standings, refused, expires, hex(&s.digest()))
}

fn generate() -> Vectors {
    let made = blocks();
    let machines: BTreeMap<String, MachineKeys> = MACHINES
        .iter()
        .map(|l| {
            let id = machine(l);
            (
                (*l).to_owned(),
                MachineKeys {
                    peer_id: hex(&id.peer_id().to_bytes()),
                    ed25519_public: hex(&id.ed25519_public()),
                },
            )
        })
        .collect();
    let bytes: BTreeMap<String, Vec<u8>> = made
        .iter()
        .map(|(l, _, b)| ((*l).to_owned(), b.bytes().to_vec()))
        .collect();
    let peers: BTreeMap<String, Vec<u8>> = machines
        .iter()
        .map(|(l, k)| (l.clone(), unhex(&k.peer_id)))
        .collect();
    let case = |name: &str, description: &str, apply: &[&str]| {
        let apply: Vec<String> = apply.iter().map(|s| (*s).to_owned()).collect();
        let (persons, standings, refused, expires, digest) = run(&apply, &bytes, &peers);
        Case {
            name: name.into(),
            description: description.into(),
            apply,
            persons,
            standings,
            refused,
            expires,
            digest,
        }
    };
    let all = [
        "genesis",
        "admit_bob",
        "admit_cleo",
        "person_bob_1",
        "person_bob_2",
        "person_cleo_5a",
        "person_cleo_5b",
        "person_by_member",
        "later_type_by_admin",
        "later_type_by_member",
    ];
    let mut reversed: Vec<&str> = all[1..].to_vec();
    reversed.reverse();
    reversed.insert(0, "genesis");
    let mut with_leave = all.to_vec();
    with_leave.push("leave_cleo");
    Vectors {
        description: "Team blocks (docs/protocol.md §6): machines' persons as Admits and Person blocks say, blocks of a later type, a machine that left. Block bytes, payloads, signed messages and hashes in hex; each case applies blocks by label and names the persons, standings, refusals and set digest that result.".into(),
        machines,
        blocks: made
            .iter()
            .map(|(l, d, b)| {
                let payload = payload_of(b.bytes());
                (
                    (*l).to_owned(),
                    BlockVector {
                        description: (*d).to_owned(),
                        block: hex(b.bytes()),
                        signed_message: hex(&[BLOCK_SIGNATURE_DST, &payload].concat()),
                        payload: hex(&payload),
                        hash: hex(&b.hash().0),
                    },
                )
            })
            .collect(),
        cases: vec![
            case(
                "admits_only",
                "Persons as the Admits (and the Genesis) say.",
                &["genesis", "admit_bob", "admit_cleo"],
            ),
            case(
                "persons",
                "Person blocks: the highest sequence wins; a tie goes to the lower hash; a member's own Person block and a later type from a member are refused; the admin's later type is kept.",
                &all,
            ),
            case(
                "persons_reversed",
                "The same blocks in reverse (after the Genesis): the same persons and digest.",
                &reversed,
            ),
            case(
                "terms",
                "Term blocks: the latest expiry counts; a member's Term and one for the founder are refused.",
                &["genesis", "admit_bob", "admit_cleo", "term_bob", "term_bob_renewed", "term_by_member", "term_for_founder"],
            ),
            case(
                "terms_reversed",
                "The same Terms the other way round: the same expiry.",
                &["genesis", "term_for_founder", "term_by_member", "term_bob_renewed", "term_bob", "admit_cleo", "admit_bob"],
            ),
            case(
                "left",
                "cleo-box leaves: left, its person still named.",
                &with_leave,
            ),
        ],
    }
}

/// The payload inside a block's bytes.
fn payload_of(block: &[u8]) -> Vec<u8> {
    let v: Value = ciborium::from_reader(block).unwrap();
    match v {
        Value::Array(items) => match &items[0] {
            Value::Bytes(p) => p.clone(),
            _ => panic!("a block's first item is its payload"),
        },
        _ => panic!("a block is an array"),
    }
}

#[test]
fn every_committed_case_gives_its_persons_from_the_bytes_alone() {
    let text = std::fs::read_to_string(PATH).expect("tests/vectors/team.json exists");
    let v: Vectors = serde_json::from_str(&text).unwrap();
    let bytes: BTreeMap<String, Vec<u8>> = v
        .blocks
        .iter()
        .map(|(l, b)| (l.clone(), unhex(&b.block)))
        .collect();
    for (l, b) in &v.blocks {
        // The parts agree with the whole, as §6 says.
        assert_eq!(hex(&Sha256::digest(unhex(&b.block))), b.hash, "{l}");
        assert_eq!(payload_of(&unhex(&b.block)), unhex(&b.payload), "{l}");
        assert_eq!(
            unhex(&b.signed_message),
            [BLOCK_SIGNATURE_DST, &unhex(&b.payload)].concat(),
            "{l}"
        );
    }
    let peers: BTreeMap<String, Vec<u8>> = v
        .machines
        .iter()
        .map(|(l, k)| (l.clone(), unhex(&k.peer_id)))
        .collect();
    assert!(v.cases.len() >= 4);
    for c in &v.cases {
        let (persons, standings, refused, expires, digest) = run(&c.apply, &bytes, &peers);
        assert_eq!(expires, c.expires, "{}", c.name);
        assert_eq!(persons, c.persons, "{}", c.name);
        assert_eq!(standings, c.standings, "{}", c.name);
        assert_eq!(refused, c.refused, "{}", c.name);
        assert_eq!(digest, c.digest, "{}", c.name);
    }
    // What the cases pin down, said plainly.
    let persons = &v
        .cases
        .iter()
        .find(|c| c.name == "persons")
        .unwrap()
        .persons;
    assert_eq!(persons["bob-laptop"], "Bob");
    assert_eq!(persons["ada-desk"], "root");
    let terms = v.cases.iter().find(|c| c.name == "terms").unwrap();
    assert_eq!(
        terms.expires["bob-laptop"],
        (T.as_unix_millis() + 300 * 86_400_000, "ada-desk".into()),
        "renewed on day 120 for 180 days"
    );
    assert!(
        !terms.expires.contains_key("ada-desk"),
        "the founder's never expires"
    );
    assert_eq!(terms.refused["term_for_founder"], "TermForAdmin");
}

#[test]
fn a_member_past_its_expiry_is_not_a_member_until_renewed() {
    let v: Vectors = serde_json::from_str(&std::fs::read_to_string(PATH).unwrap()).unwrap();
    let block = |l: &str| Block::from_bytes(&unhex(&v.blocks[l].block)).unwrap();
    let bob = machine("bob-laptop").peer_id();
    let ada = machine("ada-desk").peer_id();
    let day = |d: u64| Timestamp::from_unix_millis(T.as_unix_millis() + d * 86_400_000);
    let mut s = TeamState::from_genesis(block("genesis")).unwrap();
    for l in ["admit_bob", "term_bob"] {
        s.apply(block(l)).unwrap();
    }
    s.set_now(day(179));
    assert!(s.is_member(&bob) && !s.lapsed(&bob));
    s.set_now(day(180));
    assert!(!s.is_member(&bob) && s.lapsed(&bob) && !s.is_revoked(&bob));
    s.set_now(day(10_000));
    assert!(s.is_member(&ada), "the founder never lapses");
    s.set_now(day(180));
    s.apply(block("term_bob_renewed")).unwrap();
    assert!(s.is_member(&bob), "a renewal lets it back");
    s.set_now(day(300));
    assert!(s.lapsed(&bob));
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
        "tests/vectors/team.json differs from what this build generates; if the block format changed on purpose, \
         regenerate with AGENTMESH_REGENERATE_VECTORS=1 and update docs/protocol.md"
    );
}
