//! The team without a swarm: two machines' teams wired through recording
//! networks, messages carried by hand.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::{Duration, Instant};

use agentmesh_protocol::team::{Admit, Block, BlockBody};
use agentmesh_protocol::{Identity, Name, Owner, PeerId};
use tokio::sync::{oneshot, watch};

use super::network::fake::{Call, FakeNet};
use super::*;
use crate::clock::now;
use crate::store::{GroupCommit, SledStore};
use crate::wire::{JoinReply, MAX_BLOCKS_PER_SYNC, SyncRequest};

/// One machine: its team part, its network, and what keeps them alive.
struct Machine {
    id: PeerId,
    team: Team,
    net: FakeNet,
    _dir: tempfile::TempDir,
    _flusher: std::thread::JoinHandle<()>,
}

fn machine(name: &str) -> Machine {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
    let (commit, flusher) = GroupCommit::start(store.clone());
    let me = Identity::generate(&mut rand::rng());
    let config = crate::config::Config {
        name: Some(name.into()),
        ..Default::default()
    };
    let settings = config.validate().unwrap();
    let mut team = Team::new(
        me.clone(),
        settings,
        store,
        AuditLog::new(commit),
        local_none(),
    )
    .unwrap();
    let mut net = FakeNet::default();
    team.start(&mut net);
    Machine {
        id: me.peer_id(),
        team,
        net,
        _dir: dir,
        _flusher: flusher,
    }
}

/// Runs `op` and waits for its answer (it comes once what it audited is
/// durable, from the flusher's thread).
fn op<R: api::Request>(m: &mut Machine, r: R) -> Result<serde_json::Value, ApiError> {
    let op = team_op(r);
    let (tx, rx) = oneshot::channel();
    m.team.op(&mut m.net, op, tx, Instant::now());
    rx.blocking_recv().unwrap().map(|a| a.to_json())
}

/// `r` as the team's op.
fn team_op<R: api::Request>(r: R) -> TeamOp {
    let api::Op::Team(op) = r.into_op() else {
        panic!("not a team op")
    };
    op
}

/// Carries the sync requests `from` sent to `to`, and the answers back.
/// Returns how many were fetches, and whether any moved.
fn carry_syncs(from: &mut Machine, to: &mut Machine) -> (usize, bool) {
    let (mut fetches, mut moved) = (0, false);
    for call in std::mem::take(&mut from.net.calls) {
        let Call::Sync(peer, request) = call else {
            from.net.calls.push(call);
            continue;
        };
        assert_eq!(peer, to.id, "syncs go only to the other member");
        fetches += usize::from(matches!(request, SyncRequest::Fetch { .. }));
        let reply = to
            .team
            .on_sync_request(&mut to.net, from.id, request, Instant::now());
        from.team.on_sync_reply(&mut from.net, to.id, reply);
        moved = true;
    }
    (fetches, moved)
}

/// Carries syncs both ways until neither side sends more. Returns the
/// fetches `b` sent.
fn pump(a: &mut Machine, b: &mut Machine) -> usize {
    let mut fetches = 0;
    loop {
        let (f, moved_b) = carry_syncs(b, a);
        let (_, moved_a) = carry_syncs(a, b);
        fetches += f;
        if !moved_a && !moved_b {
            return fetches;
        }
    }
}

/// `founder` admits `joiner` directly (as its own Admit block would),
/// and `joiner` installs the Genesis and that Admit, as a join would.
fn admit(founder: &mut Machine, joiner: &mut Machine, name: &str) {
    let me = founder.team.core.me.clone();
    let joiner_id = joiner.team.core.me.clone();
    let team = founder.team.state().unwrap().id();
    let block = Block::sign(
        BlockBody::Admit(Admit {
            team,
            peer: joiner.id,
            x25519: joiner_id.x25519_public(),
            name: Name::parse("machine name", name).unwrap(),
            owner: Owner::parse("ada").unwrap(),
            admitted_by: me.peer_id(),
            at: now(),
        }),
        &me,
    )
    .unwrap();
    founder
        .team
        .core
        .merge_blocks(&mut founder.net, vec![block]);
    let mut state = TeamState::new(team);
    for b in founder.team.state().unwrap().blocks() {
        state.apply(b.clone()).unwrap();
    }
    joiner
        .team
        .core
        .replace_team(&mut joiner.net, state)
        .unwrap();
}

#[test]
fn nothing_team_derived_is_sent_to_a_stranger() {
    let mut a = machine("alpha");
    op(
        &mut a,
        ops::TeamCreate {
            name: "ward".into(),
            owner: "ada".into(),
            member_days: None,
        },
    )
    .unwrap();
    let stranger = PeerId::random();
    a.net.calls.clear();
    a.team.on_connected(&mut a.net, stranger);
    a.team.sync_with(&mut a.net, stranger);
    assert!(a.net.syncs().is_empty(), "no sync request to a stranger");
    assert!(a.net.calls.contains(&Call::Finished(
        stranger,
        0,
        Err("it is not a member of the team".into())
    )));
    // A stranger naming the team is refused, and makes this machine ask
    // a connected member instead (none here).
    let id = a.team.state().unwrap().id();
    let ask = SyncRequest::Fetch {
        team: id.0.to_vec(),
        hashes: vec![],
    };
    let reply = a
        .team
        .on_sync_request(&mut a.net, stranger, ask, Instant::now());
    assert!(matches!(reply, SyncReply::Refused(_)), "{reply:?}");
    assert!(a.net.syncs().is_empty());
}

#[test]
fn a_member_missing_more_than_a_fetch_syncs_again_until_it_has_every_block() {
    let (mut a, mut b) = (machine("alpha"), machine("bravo"));
    op(
        &mut a,
        ops::TeamCreate {
            name: "ward".into(),
            owner: "ada".into(),
            member_days: None,
        },
    )
    .unwrap();
    admit(&mut a, &mut b, "bravo");
    // 250 more machines admitted while bravo was away.
    let me = a.team.core.me.clone();
    let team = a.team.state().unwrap().id();
    let blocks: Vec<Block> = (0..250)
        .map(|i| {
            let id = Identity::generate(&mut rand::rng());
            Block::sign(
                BlockBody::Admit(Admit {
                    team,
                    peer: id.peer_id(),
                    x25519: id.x25519_public(),
                    name: Name::parse("machine name", &format!("m{i}")).unwrap(),
                    owner: Owner::parse("ada").unwrap(),
                    admitted_by: me.peer_id(),
                    at: now(),
                }),
                &me,
            )
            .unwrap()
        })
        .collect();
    assert_eq!(a.team.core.merge_blocks(&mut a.net, blocks), 250);
    a.net.connected = vec![b.id];
    b.net.connected = vec![a.id];
    a.net.calls.clear();
    b.net.calls.clear();
    b.team.on_connected(&mut b.net, a.id);
    let fetches = pump(&mut a, &mut b);
    assert_eq!(
        b.team.state().unwrap().digest(),
        a.team.state().unwrap().digest(),
        "bravo has every block"
    );
    assert_eq!(
        fetches,
        250usize.div_ceil(MAX_BLOCKS_PER_SYNC),
        "a fetch per 100 blocks"
    );
}

#[test]
fn directory_records_travel_a_page_of_64_kib_at_a_time_and_only_members_are_kept() {
    use agentmesh_protocol::directory::{
        DirectoryEntry, DirectoryRecord, SignedDirectory, Status as WireStatus,
    };
    let (mut a, mut b) = (machine("alpha"), machine("bravo"));
    op(
        &mut a,
        ops::TeamCreate {
            name: "ward".into(),
            owner: "ada".into(),
            member_days: None,
        },
    )
    .unwrap();
    admit(&mut a, &mut b, "bravo");
    // Three more members, each with a record of about 42 KiB, that alpha
    // holds; and one stranger's record, which nobody keeps.
    let me = a.team.core.me.clone();
    let team = a.team.state().unwrap().id();
    let ids: Vec<Identity> = (0..4)
        .map(|_| Identity::generate(&mut rand::rng()))
        .collect();
    let blocks: Vec<Block> = ids[..3]
        .iter()
        .enumerate()
        .map(|(i, id)| {
            Block::sign(
                BlockBody::Admit(Admit {
                    team,
                    peer: id.peer_id(),
                    x25519: id.x25519_public(),
                    name: Name::parse("machine name", &format!("m{i}")).unwrap(),
                    owner: Owner::parse("ada").unwrap(),
                    admitted_by: me.peer_id(),
                    at: now(),
                }),
                &me,
            )
            .unwrap()
        })
        .collect();
    a.team.core.merge_blocks(&mut a.net, blocks.clone());
    b.team.core.merge_blocks(&mut b.net, blocks);
    for id in &ids {
        let record = DirectoryRecord {
            peer: id.peer_id(),
            seq: 3,
            at: now(),
            always_on: false,
            mailboxes: (0..44)
                .map(|k| DirectoryEntry {
                    mailbox: Some(Name::parse("mailbox name", &format!("b{k}")).unwrap()),
                    profile: "p".repeat(1000),
                    goal: String::new(),
                    status: WireStatus::Idle,
                    last_active: None,
                })
                .collect(),
        };
        let signed = SignedDirectory::sign(record, id).unwrap();
        assert!(signed.bytes().len() > 40 * 1024);
        a.team
            .core
            .store
            .put_directory_record(&id.peer_id(), signed.bytes())
            .unwrap();
    }
    // One answer carries at most 64 KiB, the stranger's never.
    let (page, more) = a.team.sync.directory.share(&a.team.core, &[]);
    let bytes: usize = page.iter().map(|r| r.bytes.len()).sum();
    assert!(bytes <= crate::wire::MAX_RECORD_BYTES_PER_SYNC, "{bytes}");
    assert!(more && !page.is_empty());
    // Bravo, syncing, pages through them all.
    a.net.connected = vec![b.id];
    b.net.connected = vec![a.id];
    a.net.calls.clear();
    b.net.calls.clear();
    b.team.on_connected(&mut b.net, a.id);
    pump(&mut a, &mut b);
    let held = b.team.core.store.directory_records().unwrap();
    for id in &ids[..3] {
        assert!(
            held.contains_key(&id.peer_id()),
            "bravo has every member's record"
        );
    }
    assert!(
        !held.contains_key(&ids[3].peer_id()),
        "a stranger's is never sent"
    );
    assert!(held.contains_key(&a.id), "and alpha's own");
}

#[test]
fn a_sync_on_a_closed_connection_is_tried_again_while_another_is_up() {
    let (mut a, mut b) = (machine("alpha"), machine("bravo"));
    op(
        &mut a,
        ops::TeamCreate {
            name: "ward".into(),
            owner: "ada".into(),
            member_days: None,
        },
    )
    .unwrap();
    admit(&mut a, &mut b, "bravo");
    b.net.connected = vec![a.id];
    b.net.calls.clear();
    b.team.sync_with(&mut b.net, a.id);
    assert_eq!(b.net.syncs().len(), 1);
    b.team
        .on_sync_failed(&mut b.net, a.id, "closed".into(), true);
    assert_eq!(b.net.syncs().len(), 2, "tried again");
    b.team
        .on_sync_failed(&mut b.net, a.id, "closed".into(), true);
    b.team
        .on_sync_failed(&mut b.net, a.id, "closed".into(), true);
    assert_eq!(b.net.syncs().len(), 3, "twice, then it ends");
    assert!(matches!(
        b.net.calls.last(),
        Some(Call::Finished(_, 0, Err(_)))
    ));
}

#[test]
fn a_join_runs_from_ticket_to_member_without_a_swarm() {
    let (mut a, mut b) = (machine("alpha"), machine("bravo"));
    op(
        &mut a,
        ops::TeamCreate {
            name: "ward".into(),
            owner: "ada".into(),
            member_days: None,
        },
    )
    .unwrap();
    let ticket = op(&mut a, ops::Invite { ttl_secs: None }).unwrap()["ticket"]
        .as_str()
        .unwrap()
        .to_owned();
    // The joiner's request goes to the founder; its offer comes back.
    let (tx, rx) = oneshot::channel();
    let start = ops::JoinStart {
        ticket,
        name: "bravo".into(),
        owner: "ada".into(),
    };
    b.team.op(&mut b.net, team_op(start), tx, Instant::now());
    let carry = |from: &mut Machine, to: &mut Machine| {
        let call = from
            .net
            .calls
            .iter()
            .rposition(|c| matches!(c, Call::Join(..)))
            .unwrap();
        let Call::Join(founder, msg) = from.net.calls.remove(call) else {
            unreachable!()
        };
        assert_eq!(founder, to.id);
        let waiter = from.net.waiters.pop().unwrap();
        let reply = to
            .team
            .on_join_request(&mut to.net, from.id, msg, Instant::now());
        from.team
            .on_join_answer(&mut from.net, waiter, reply.clone());
        reply
    };
    assert!(matches!(carry(&mut b, &mut a), JoinReply::Offer(_)));
    let started = rx.blocking_recv().unwrap().unwrap().to_json();
    let (join_id, code) = (
        started["join_id"].as_u64().unwrap(),
        started["pairing_code"].as_str().unwrap().to_owned(),
    );
    // Polled while nobody typed the code.
    b.team.tick(&mut b.net, Instant::now());
    assert_eq!(carry(&mut b, &mut a), JoinReply::Waiting);
    let list = op(&mut a, ops::AdmitList).unwrap();
    let request_id = list[0]["request_id"].as_u64().unwrap();
    let matched = op(&mut a, ops::AdmitCode { request_id, code }).unwrap();
    assert!(matched["persons"].is_array(), "{matched}");
    // Matched, but whose machine it is was not said yet: still waiting.
    b.team
        .tick(&mut b.net, Instant::now() + Duration::from_secs(1));
    assert_eq!(carry(&mut b, &mut a), JoinReply::Waiting);
    op(
        &mut a,
        ops::AdmitPerson {
            request_id,
            person: "Bea".into(),
            existing: false,
            days: None,
        },
    )
    .unwrap();
    // The next poll says approved.
    b.team
        .tick(&mut b.net, Instant::now() + Duration::from_secs(1));
    assert_eq!(carry(&mut b, &mut a), JoinReply::Approved);
    let state = op(&mut b, ops::JoinStatus { join_id }).unwrap();
    assert_eq!(state["state"], "approved");
    // Confirmed: admitted, and answered once the first sync with the
    // founder ended.
    a.net.connected = vec![b.id];
    b.net.connected = vec![a.id];
    let (tx, mut rx) = oneshot::channel();
    let confirm = ops::JoinConfirm {
        join_id,
        accept: true,
    };
    b.team.op(&mut b.net, team_op(confirm), tx, Instant::now());
    assert!(matches!(carry(&mut b, &mut a), JoinReply::Admitted(_)));
    assert!(rx.try_recv().is_err(), "not before the first sync");
    pump(&mut a, &mut b);
    let joined = rx.blocking_recv().unwrap().unwrap().to_json();
    assert_eq!(joined["state"], "joined");
    // Admitted as the person the founder chose.
    assert_eq!(joined["person"], "Bea");
    assert!(b.team.is_member(&b.id));
}

/// The network's loop never waits for the disk: with the group commit's
/// queue full, a team op's answer (and its audit entry) waits for a later
/// round, then goes out once its entry is written.
#[test]
fn a_full_group_commit_queue_delays_answers_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SledStore::open(dir.path(), 1 << 20).unwrap());
    let (commit, disk) = crate::store::stalled(1);
    // Someone else's job fills the queue.
    commit.submit(crate::store::Writes::default(), None);
    let config = crate::config::Config {
        name: Some("alpha".into()),
        ..Default::default()
    };
    let me = Identity::generate(&mut rand::rng());
    let mut team = Team::new(
        me,
        config.validate().unwrap(),
        store,
        AuditLog::new(commit),
        local_none(),
    )
    .unwrap();
    let mut net = FakeNet::default();
    team.start(&mut net);
    let (tx, mut rx) = oneshot::channel();
    let create = ops::TeamCreate {
        name: "ward".into(),
        owner: "ada".into(),
        member_days: None,
    };
    team.op(&mut net, team_op(create), tx, Instant::now());
    assert!(
        rx.try_recv().is_err(),
        "not answered before its entry is written"
    );
    // The disk takes the job ahead; the next round hands this one over.
    assert!(disk.take().is_some());
    team.tick(&mut net, Instant::now());
    let (writes, then) = disk.take().expect("the op's job, queued by the tick");
    assert_eq!(writes.audit.len(), 1);
    assert_eq!(writes.audit[0].event, "team_created");
    assert!(rx.try_recv().is_err(), "still not before it is durable");
    then.unwrap()();
    assert_eq!(rx.try_recv().unwrap().unwrap().to_json()["name"], "ward");
}

/// No mailboxes published (the receiver keeps the value after its sender
/// is gone).
fn local_none() -> watch::Receiver<Arc<records::LocalDirectory>> {
    watch::channel(Arc::new(records::LocalDirectory::default())).1
}
