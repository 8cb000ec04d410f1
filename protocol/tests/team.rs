//! Team blocks: authority, conflicts, revocation, and order independence.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

mod common;

use agentmesh_protocol::team::{
    Admit, Applied, Block, BlockBody, BlockError, BlockRejected, Genesis, MAX_PENDING_BLOCKS,
    Person, Revoke, Standing, TeamId, TeamState,
};
use agentmesh_protocol::{Identity, Name, Owner, Timestamp};
use common::*;
use proptest::prelude::*;

fn n(s: &str) -> Name {
    Name::parse("machine name", s).unwrap()
}

fn genesis(founder: &Identity) -> Block {
    Block::sign(
        BlockBody::Genesis(Genesis {
            team_name: n("core"),
            founder: founder.peer_id(),
            founder_x25519: founder.x25519_public(),
            founder_name: n("founder-box"),
            founder_owner: Owner::parse("Ada").unwrap(),
            admins: vec![founder.peer_id()],
            created_at: T0,
            nonce: [5; 16],
        }),
        founder,
    )
    .unwrap()
}

fn admit(team: TeamId, by: &Identity, who: &Identity, name: &str, at: u64) -> Block {
    Block::sign(
        BlockBody::Admit(Admit {
            team,
            peer: who.peer_id(),
            x25519: who.x25519_public(),
            name: n(name),
            owner: Owner::parse("Bob").unwrap(),
            admitted_by: by.peer_id(),
            at: Timestamp::from_unix_millis(at),
        }),
        by,
    )
    .unwrap()
}

fn revoke(team: TeamId, by: &Identity, who: &Identity) -> Block {
    Block::sign(
        BlockBody::Revoke(Revoke {
            team,
            peer: who.peer_id(),
            revoked_by: by.peer_id(),
            at: T0,
        }),
        by,
    )
    .unwrap()
}

#[test]
fn team_id_is_the_genesis_hash() {
    let f = identity(1);
    let g = genesis(&f);
    let state = TeamState::from_genesis(g.clone()).unwrap();
    assert_eq!(state.id().0, g.hash().0);
    use sha2::Digest;
    assert_eq!(
        state.id().0,
        <[u8; 32]>::from(sha2::Sha256::digest(g.bytes()))
    );
    assert!(state.is_member(&f.peer_id()));
    assert!(state.member(&f.peer_id()).unwrap().admin);
}

#[test]
fn admit_and_revoke() {
    let (f, b, c) = (identity(1), identity(2), identity(3));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    assert_eq!(
        s.apply(admit(id, &f, &b, "bob-laptop", 1)),
        Ok(Applied::Added)
    );
    assert_eq!(
        s.apply(admit(id, &f, &b, "bob-laptop", 1)),
        Ok(Applied::Duplicate)
    );
    assert_eq!(s.apply(admit(id, &f, &c, "carol", 1)), Ok(Applied::Added));
    assert!(s.is_member(&b.peer_id()) && s.is_member(&c.peer_id()));
    assert_eq!(s.by_name("bob-laptop").unwrap().peer, b.peer_id());
    assert_eq!(s.apply(revoke(id, &f, &c)), Ok(Applied::Added));
    assert!(!s.is_member(&c.peer_id()) && s.is_revoked(&c.peer_id()));
    assert_eq!(s.member(&c.peer_id()).unwrap().standing, Standing::Revoked);
    // A revocation wins forever: a later Admit of the same key changes nothing.
    assert_eq!(
        s.apply(admit(id, &f, &c, "carol-again", 99)),
        Ok(Applied::Added)
    );
    assert!(s.is_revoked(&c.peer_id()) && !s.is_member(&c.peer_id()));
    // A member may leave by revoking itself.
    assert_eq!(s.apply(revoke(id, &b, &b)), Ok(Applied::Added));
    assert!(s.is_revoked(&b.peer_id()));
}

#[test]
fn authority_rules() {
    let (f, b, c) = (identity(1), identity(2), identity(3));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    s.apply(admit(id, &f, &b, "bob", 1)).unwrap();
    // A member that is not an admin cannot admit.
    assert_eq!(
        s.apply(admit(id, &b, &c, "carol", 1)),
        Err(BlockRejected::NotAnAdmin {
            signer: b.peer_id()
        })
    );
    // Nor revoke another member.
    s.apply(admit(id, &f, &c, "carol", 1)).unwrap();
    assert_eq!(
        s.apply(revoke(id, &b, &c)),
        Err(BlockRejected::RevokeNotAllowed {
            signer: b.peer_id(),
            peer: c.peer_id()
        })
    );
    // The founder can't be revoked, even by itself, nor admitted again.
    assert_eq!(
        s.apply(revoke(id, &f, &f)),
        Err(BlockRejected::RevokesAdmin { peer: f.peer_id() })
    );
    assert_eq!(
        s.apply(revoke(id, &b, &f)),
        Err(BlockRejected::RevokesAdmin { peer: f.peer_id() })
    );
    assert_eq!(
        s.apply(admit(id, &f, &f, "again", 1)),
        Err(BlockRejected::AdmitsAdmin { peer: f.peer_id() })
    );
    let e = s.apply(revoke(id, &f, &f)).unwrap_err().to_string();
    assert!(
        e.contains("a lost founder key means founding a new team"),
        "{e}"
    );
}

#[test]
fn blocks_of_another_team_are_refused() {
    let (f, g, b) = (identity(1), identity(9), identity(2));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let other = TeamState::from_genesis(genesis(&g)).unwrap().id();
    assert!(matches!(
        s.apply(admit(other, &g, &b, "bob", 1)),
        Err(BlockRejected::WrongTeam { .. })
    ));
    // A second genesis is another team's.
    assert!(matches!(
        s.apply(genesis(&g)),
        Err(BlockRejected::WrongTeam { .. })
    ));
}

#[test]
fn genesis_rules() {
    let (f, other) = (identity(1), identity(2));
    let mut g = match genesis(&f).body().clone() {
        BlockBody::Genesis(g) => g,
        _ => unreachable!(),
    };
    g.admins = vec![f.peer_id(), other.peer_id()];
    let two_admins = Block::sign(BlockBody::Genesis(g.clone()), &f).unwrap();
    assert!(matches!(
        TeamState::from_genesis(two_admins),
        Err(BlockRejected::BadGenesis(_))
    ));
    g.admins = vec![other.peer_id()];
    let not_founder = Block::sign(BlockBody::Genesis(g), &f).unwrap();
    assert!(matches!(
        TeamState::from_genesis(not_founder),
        Err(BlockRejected::BadGenesis(_))
    ));
    let b = identity(3);
    assert!(matches!(
        TeamState::from_genesis(admit(TeamId([0; 32]), &f, &b, "x", 1)),
        Err(BlockRejected::BadGenesis(_))
    ));
}

#[test]
fn signatures_are_checked_on_decode() {
    let (f, b) = (identity(1), identity(2));
    let block = admit(TeamId([1; 32]), &f, &b, "bob", 1);
    let mut bytes = block.bytes().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    assert_eq!(
        Block::from_bytes(&bytes),
        Err(BlockError::BadSignature(f.peer_id()))
    );
    // Signing with a key other than the author's is refused.
    let body = block.body().clone();
    assert!(matches!(
        Block::sign(body, &b),
        Err(BlockError::WrongSigner { .. })
    ));
}

#[test]
fn leaving_needs_an_admit_first() {
    // A fresh key's self-revoke can't add a block to the team (else any key
    // could fill it); it waits for an Admit of that key, and then sticks.
    let (f, stranger) = (identity(1), identity(2));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    assert_eq!(
        s.apply(revoke(id, &stranger, &stranger)),
        Ok(Applied::Pending)
    );
    assert_eq!(s.blocks().count(), 1);
    assert!(!s.is_revoked(&stranger.peer_id()));
    assert_eq!(
        s.apply(admit(id, &f, &stranger, "late", 1)),
        Ok(Applied::Added)
    );
    assert_eq!(s.pending(), 0);
    assert!(s.is_revoked(&stranger.peer_id()));
    assert_eq!(s.blocks().count(), 3);
}

fn person(team: TeamId, by: &Identity, who: &Identity, name: &str, seq: u64) -> Block {
    Block::sign(
        BlockBody::Person(Person {
            team,
            by: by.peer_id(),
            peer: who.peer_id(),
            person: Owner::parse(name).unwrap(),
            seq,
            at: T0,
        }),
        by,
    )
    .unwrap()
}

/// A block signed by `by` whose payload is `items` (a later version's
/// type, or a malformed one).
fn raw_block(by: &Identity, items: Vec<ciborium::Value>) -> Vec<u8> {
    use agentmesh_protocol::cbor::encode;
    use ciborium::Value;
    let payload = encode(&Value::Array(items));
    let sig = by.sign(&[agentmesh_protocol::team::BLOCK_SIGNATURE_DST, &payload].concat());
    encode(&Value::Array(vec![
        Value::Bytes(payload),
        Value::Bytes(sig.to_vec()),
    ]))
}

/// A block of a later version's type 9, as that version would write one:
/// `[1, 9, team, signer, …whatever it adds]`.
fn later_type(team: TeamId, by: &Identity, extra: &str) -> Block {
    use ciborium::Value;
    let bytes = raw_block(
        by,
        vec![
            Value::Integer(1.into()),
            Value::Integer(9.into()),
            Value::Bytes(team.0.to_vec()),
            Value::Bytes(by.peer_id().to_bytes()),
            Value::Text(extra.into()),
            Value::Array(vec![Value::Integer(7.into())]),
        ],
    );
    Block::from_bytes(&bytes).unwrap()
}

#[test]
fn blocks_of_a_later_type_are_kept_when_an_admin_signed_them() {
    use ciborium::Value;
    let (f, b) = (identity(1), identity(2));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    s.apply(admit(id, &f, &b, "bravo", 1)).unwrap();
    let before: Vec<String> = s.members().map(|m| format!("{m:?}")).collect();
    let later = later_type(id, &f, "something new");
    assert!(matches!(later.body(), BlockBody::Unknown(u) if u.block_type == 9));
    assert_eq!(s.apply(later.clone()), Ok(Applied::Added));
    // Kept (so every member holds the same set and digest), understood as
    // nothing: the members are as they were.
    assert!(s.hashes().contains(&later.hash()));
    assert_eq!(
        s.members().map(|m| format!("{m:?}")).collect::<Vec<_>>(),
        before
    );
    // A member that is not an admin cannot add one.
    assert!(matches!(
        s.apply(later_type(id, &b, "from a member")),
        Err(BlockRejected::NotAnAdmin { .. })
    ));
    // Its signature is checked like any block's.
    let mut forged = later.bytes().to_vec();
    let at = forged.len() - 1;
    forged[at] ^= 1;
    assert!(matches!(
        Block::from_bytes(&forged),
        Err(BlockError::BadSignature(_))
    ));
    // Without the common start (team, signer) it is malformed.
    let short = raw_block(
        &f,
        vec![
            Value::Integer(1.into()),
            Value::Integer(7.into()),
            Value::Null,
        ],
    );
    let e = Block::from_bytes(&short).unwrap_err().to_string();
    assert!(e.contains("where 4 were expected"), "{e}");
    // A later version is still refused as such.
    let v2 = raw_block(&f, vec![Value::Integer(2.into()), Value::Integer(9.into())]);
    let e = Block::from_bytes(&v2).unwrap_err().to_string();
    assert!(e.contains("version 2"), "{e}");
}

#[test]
fn a_machines_person_is_its_admits_until_a_person_block_says_otherwise() {
    let (f, b, c) = (identity(1), identity(2), identity(3));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    s.apply(admit(id, &f, &b, "bravo", 1)).unwrap();
    s.apply(admit(id, &f, &c, "charlie", 1)).unwrap();
    let person_of =
        |s: &TeamState, who: &Identity| s.member(&who.peer_id()).unwrap().owner.to_string();
    assert_eq!(person_of(&s, &b), "Bob");
    assert_eq!(s.member(&b.peer_id()).unwrap().person_seq, 0);
    s.apply(person(id, &f, &b, "Ada", 1)).unwrap();
    assert_eq!(person_of(&s, &b), "Ada");
    assert_eq!(s.member(&b.peer_id()).unwrap().person_seq, 1);
    // The highest sequence wins, whatever arrived last.
    s.apply(person(id, &f, &b, "Cleo", 3)).unwrap();
    s.apply(person(id, &f, &b, "Dan", 2)).unwrap();
    assert_eq!(person_of(&s, &b), "Cleo");
    // Two of one sequence: the lowest hash.
    let (x, y) = (person(id, &f, &c, "Eve", 5), person(id, &f, &c, "Finn", 5));
    let low = if x.hash() < y.hash() { "Eve" } else { "Finn" };
    s.apply(y).unwrap();
    s.apply(x).unwrap();
    assert_eq!(person_of(&s, &c), low);
    // The founder's person can be moved too.
    assert_eq!(person_of(&s, &f), "Ada");
    s.apply(person(id, &f, &f, "Ada L", 1)).unwrap();
    assert_eq!(person_of(&s, &f), "Ada L");
    // Only an admin says whose machine it is.
    assert!(matches!(
        s.apply(person(id, &b, &b, "Bob", 9)),
        Err(BlockRejected::NotAnAdmin { .. })
    ));
    // The team's persons, with their machines.
    let persons: Vec<(String, Vec<String>)> = s
        .persons()
        .into_iter()
        .map(|(p, m)| (p.to_string(), m.iter().map(ToString::to_string).collect()))
        .collect();
    assert!(
        persons.contains(&("Cleo".into(), vec!["bravo".into()])),
        "{persons:?}"
    );
}

#[test]
fn a_machine_that_left_is_told_apart_from_one_revoked() {
    let (f, b, c) = (identity(1), identity(2), identity(3));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    s.apply(admit(id, &f, &b, "bravo", 1)).unwrap();
    s.apply(admit(id, &f, &c, "charlie", 1)).unwrap();
    s.apply(revoke(id, &b, &b)).unwrap();
    s.apply(revoke(id, &f, &c)).unwrap();
    let (mb, mc) = (
        s.member(&b.peer_id()).unwrap(),
        s.member(&c.peer_id()).unwrap(),
    );
    assert_eq!((mb.standing, mb.left), (Standing::Revoked, true));
    assert_eq!((mc.standing, mc.left), (Standing::Revoked, false));
    // A revoked machine can't turn "revoked" into "left" by signing Revokes
    // of its own (whatever their hashes).
    for at in 0..8 {
        let own = Block::sign(
            BlockBody::Revoke(Revoke {
                team: id,
                peer: c.peer_id(),
                revoked_by: c.peer_id(),
                at: Timestamp::from_unix_millis(at),
            }),
            &c,
        )
        .unwrap();
        s.apply(own).unwrap();
    }
    assert!(!s.member(&c.peer_id()).unwrap().left);
}

#[test]
fn name_conflicts_resolve_to_the_lowest_hash() {
    let (f, b, c) = (identity(1), identity(2), identity(3));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    let ab = admit(id, &f, &b, "laptop", 1);
    let ac = admit(id, &f, &c, "laptop", 2);
    let (winner, loser) = if ab.hash() < ac.hash() {
        (&b, &c)
    } else {
        (&c, &b)
    };
    s.apply(ab).unwrap();
    s.apply(ac).unwrap();
    assert!(s.is_member(&winner.peer_id()));
    assert_eq!(
        s.member(&loser.peer_id()).unwrap().standing,
        Standing::NameTaken
    );
    assert_eq!(s.by_name("laptop").unwrap().peer, winner.peer_id());
    // Once the winner is revoked, the name is free and the other holds it.
    s.apply(revoke(id, &f, winner)).unwrap();
    assert!(s.is_member(&loser.peer_id()));
    // The founder's name can never be taken by an Admit.
    let d = identity(4);
    s.apply(admit(id, &f, &d, "founder-box", 3)).unwrap();
    assert_eq!(s.by_name("founder-box").unwrap().peer, f.peer_id());
    assert_eq!(
        s.member(&d.peer_id()).unwrap().standing,
        Standing::NameTaken
    );
}

#[test]
fn one_admit_per_peer_id() {
    let (f, b) = (identity(1), identity(2));
    let mut s = TeamState::from_genesis(genesis(&f)).unwrap();
    let id = s.id();
    let first = admit(id, &f, &b, "one", 1);
    let second = admit(id, &f, &b, "two", 2);
    let expected = if first.hash() < second.hash() {
        "one"
    } else {
        "two"
    };
    s.apply(second).unwrap();
    s.apply(first).unwrap();
    assert_eq!(s.member(&b.peer_id()).unwrap().name.as_str(), expected);
    assert_eq!(s.members().count(), 2);
}

#[test]
fn blocks_before_genesis_wait_in_a_bounded_buffer() {
    let f = identity(1);
    let g = genesis(&f);
    let id = TeamId(g.hash().0);
    let mut s = TeamState::new(id);
    let members: Vec<Identity> = (10..10 + MAX_PENDING_BLOCKS as u64 + 1)
        .map(identity)
        .collect();
    for (i, m) in members.iter().enumerate().take(MAX_PENDING_BLOCKS) {
        assert_eq!(
            s.apply(admit(id, &f, m, &format!("m{i}"), 1)),
            Ok(Applied::Pending)
        );
    }
    assert_eq!(
        s.apply(admit(id, &f, &members[MAX_PENDING_BLOCKS], "late", 1)),
        Err(BlockRejected::PendingFull)
    );
    // A pending block that breaks a rule is dropped when the genesis arrives.
    let outsider = identity(5);
    let _ = s.apply(revoke(id, &outsider, &members[0]));
    assert!(!s.is_member(&members[0].peer_id()));
    assert_eq!(s.apply(g), Ok(Applied::Added));
    assert_eq!(s.pending(), 0);
    assert!(
        members[..MAX_PENDING_BLOCKS]
            .iter()
            .all(|m| s.is_member(&m.peer_id()))
    );
    assert_eq!(s.blocks().count(), MAX_PENDING_BLOCKS + 1);
}

/// Everything a member would act on, for comparing two states.
fn view(
    s: &TeamState,
) -> (
    Vec<String>,
    Vec<agentmesh_protocol::team::BlockHash>,
    [u8; 32],
) {
    (
        s.members().map(|m| format!("{m:?}")).collect(),
        s.hashes().into_iter().collect(),
        s.digest(),
    )
}

/// A team history with conflicts, revocations, self-revocations, invalid
/// blocks and a revocation of a key never admitted.
fn history() -> (TeamId, Vec<Block>) {
    let people: Vec<Identity> = (1..8).map(identity).collect();
    let f = &people[0];
    let g = genesis(f);
    let id = TeamId(g.hash().0);
    let mut blocks = vec![g];
    let names = ["a", "b", "a", "c", "b", "d"];
    for (p, name) in people[1..].iter().zip(names) {
        blocks.push(admit(id, f, p, name, 1));
    }
    blocks.push(admit(id, f, &people[1], "z", 2)); // a second Admit for one PeerId
    blocks.push(admit(id, &people[2], &people[3], "x", 1)); // not an admin: invalid
    blocks.push(revoke(id, f, &people[2]));
    blocks.push(revoke(id, &people[4], &people[4])); // leaving
    blocks.push(revoke(id, &people[5], &people[6])); // not allowed: invalid
    blocks.push(revoke(id, f, &identity(99))); // never admitted
    blocks.push(revoke(id, f, f)); // admin: invalid
    blocks.push(person(id, f, &people[1], "Pat", 1));
    blocks.push(person(id, f, &people[1], "Quinn", 2)); // the higher sequence wins
    blocks.push(person(id, f, &people[3], "Ray", 4));
    blocks.push(person(id, f, &people[3], "Sam", 4)); // a tie: the lower hash wins
    blocks.push(person(id, &people[1], &people[1], "Tess", 9)); // not an admin: invalid
    blocks.push(later_type(id, f, "a later version's block")); // kept, not understood
    (id, blocks)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_order_and_duplication_gives_the_same_team(
        order in Just((0..20usize).collect::<Vec<_>>()).prop_shuffle(),
        dups in proptest::collection::vec(0..20usize, 0..10),
    ) {
        let (id, blocks) = history();
        prop_assert_eq!(blocks.len(), 20);
        let mut reference = TeamState::new(id);
        for b in &blocks {
            let _ = reference.apply(b.clone());
        }
        let mut shuffled = TeamState::new(id);
        for i in order.iter().chain(&dups) {
            let _ = shuffled.apply(blocks[*i].clone());
        }
        prop_assert_eq!(view(&shuffled), view(&reference));
        prop_assert!(shuffled.is_revoked(&identity(99).peer_id()));
        prop_assert!(shuffled.is_revoked(&identity(3).peer_id()));
        prop_assert!(!shuffled.is_member(&identity(5).peer_id()));
        prop_assert_eq!(shuffled.member(&identity(2).peer_id()).unwrap().owner.to_string(), "Quinn");
    }

    #[test]
    fn merging_two_partial_states_converges(split in proptest::collection::vec(any::<bool>(), 20)) {
        // Two members each saw part of the history; after exchanging what the
        // other lacks (anti-entropy), they agree.
        let (id, blocks) = history();
        let (mut x, mut y) = (TeamState::new(id), TeamState::new(id));
        for (b, to_x) in blocks.iter().zip(&split) {
            let _ = if *to_x { x.apply(b.clone()) } else { y.apply(b.clone()) };
        }
        // Two rounds: a state without its Genesis offers nothing until it
        // has received the Genesis in the first round.
        for _ in 0..2 {
            for b in x.blocks().cloned().collect::<Vec<_>>() { let _ = y.apply(b); }
            for b in y.blocks().cloned().collect::<Vec<_>>() { let _ = x.apply(b); }
        }
        let mut all = TeamState::new(id);
        for b in &blocks { let _ = all.apply(b.clone()); }
        prop_assert_eq!(view(&x), view(&all));
        prop_assert_eq!(view(&y), view(&all));
    }
}
