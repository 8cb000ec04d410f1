//! A stranger that dials a member and speaks the team protocols is refused
//! on every one, and is sent nothing derived from the team: no sync
//! request (which would carry the team id and every member's contact
//! record), no block, no team-named gossip topic, no Kademlia answers.
//!
//! The stranger is a libp2p node built in this test with the daemon's own
//! behaviour (so it speaks every protocol correctly), dialing real daemons,
//! and it records every request the daemon sends it. The gossip check can
//! fail: with strangers scored 0 instead of `stranger_score()`, the
//! stranger receives the revocation block. Its mail is answered busy and
//! never opened, stored or audited; before the fix it made the daemon send
//! the stranger a sync digest naming the team.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::sync::Arc;
use std::time::Duration;

use agentmesh_node::net::{BehaviourEvent, blocks_topic};
use agentmesh_node::wire::MAX_BATCH_ENVELOPES;
use agentmesh_node::wire::{JoinMsg, JoinReply, MailOutcome, MailRequest, SyncReply, SyncRequest};
use agentmesh_protocol::join::JoinRequest;
use agentmesh_protocol::team::TeamId;
use agentmesh_protocol::{Identity, Name, Owner, PeerId, Wire};
use agentmesh_tests::{DEADLINE, team, wait_for};
use futures::StreamExt;
use libp2p::request_response;
use libp2p::swarm::SwarmEvent;

#[test]
fn a_stranger_is_refused_everywhere_and_gets_no_blocks() {
    let [a, b, _c] = team([("alpha", "Ada"), ("bravo", "Bob"), ("charlie", "Cy")]);
    let team = TeamId::parse(a.json(&["team", "show"])["team_id"].as_str().unwrap()).unwrap();
    let a_peer: PeerId = a.peer_id().parse().unwrap();
    let a_addr: libp2p::Multiaddr = a.addr().parse().unwrap();
    let (a, b) = (Arc::new(a), Arc::new(b));

    let stranger = Identity::from_secrets(&[0x55; 32], &[0x66; 32]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut swarm = agentmesh_node::net::build(agentmesh_node::libp2p_keypair(&stranger), false).unwrap();
        swarm.dial(a_addr).unwrap();
        // What alpha's identify says, whenever it arrives.
        let mut identified = None;
        tokio::time::timeout(DEADLINE, async {
            loop {
                match swarm.select_next_some().await {
                    SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == a_peer => break,
                    SwarmEvent::Behaviour(BehaviourEvent::Identify(libp2p::identify::Event::Received { info, .. })) => identified = Some(info),
                    _ => {}
                }
            }
        })
        .await
        .expect("the stranger connects to alpha");

        // It listens on the team's topic, and waits until alpha has told
        // it that alpha is on that topic too, so alpha has its subscription.
        let topic = blocks_topic();
        swarm.behaviour_mut().gossipsub.subscribe(&topic).unwrap();
        tokio::time::timeout(DEADLINE, async {
            loop {
                match swarm.select_next_some().await {
                    SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(libp2p::gossipsub::Event::Subscribed {
                        peer_id,
                        topic: t,
                    })) if peer_id == a_peer && t == topic.hash() => break,
                    SwarmEvent::Behaviour(BehaviourEvent::Identify(libp2p::identify::Event::Received { info, .. })) => identified = Some(info),
                    _ => {}
                }
            }
        })
        .await
        .expect("alpha and the stranger exchange subscriptions");
        // It asks for the blocks (both sync steps), polls for a join it
        // never made, and asks to join with a ticket it never got.
        let sync = swarm.behaviour_mut().sync.send_request(
            &a_peer,
            SyncRequest::Digest {
                team: team.0.to_vec(),
                digest: vec![0; 32],
                contacts: vec![],
                directory: vec![],
            },
        );
        let fetch = swarm.behaviour_mut().sync.send_request(
            &a_peer,
            SyncRequest::Fetch {
                team: team.0.to_vec(),
                hashes: vec![serde_bytes::ByteBuf::from(team.0.to_vec())],
            },
        );
        let poll = swarm.behaviour_mut().join.send_request(&a_peer, JoinMsg::Poll(vec![9; 16]));
        let request = JoinRequest {
            ticket_nonce: [1; 16],
            joiner: stranger.peer_id(),
            x25519: stranger.x25519_public(),
            name: Name::parse("machine name", "mallory").unwrap(),
            owner: Owner::parse("Mallory").unwrap(),
            nonce: [2; 16],
        };
        let ask = swarm.behaviour_mut().join.send_request(&a_peer, JoinMsg::Request(request.to_bytes()));
        // It sends mail: nothing it sends is opened, stored or audited, and
        // a batch over the limit gets a short answer.
        let mail = swarm.behaviour_mut().mail.send_request(
            &a_peer,
            MailRequest { envelopes: vec![serde_bytes::ByteBuf::from(vec![0xa1; 600]); 3] },
        );
        let big = swarm.behaviour_mut().mail.send_request(
            &a_peer,
            MailRequest { envelopes: vec![serde_bytes::ByteBuf::from(vec![1; 8]); MAX_BATCH_ENVELOPES + 1] },
        );

        // Meanwhile alpha revokes charlie: a new block, gossiped and synced
        // to bravo, the control that shows blocks do flow to members.
        let (a2, b2) = (a.clone(), b.clone());
        let mut control = tokio::task::spawn_blocking(move || {
            a2.ok(&["revoke", "charlie", "--yes"]);
            wait_for("bravo to learn charlie's revocation", || {
                (b2.member("charlie").unwrap()["revoked"] == true).then_some(())
            });
        });

        let (mut sync_reply, mut fetch_reply, mut poll_reply, mut ask_reply) = (None, None, None, None);
        let (mut mail_reply, mut big_reply) = (None, None);
        let mut gossip = 0;
        // Everything alpha sends the stranger unasked.
        let mut requests_to_stranger: Vec<String> = vec![];
        let mut topics_seen = vec![];
        let mut control_done = false;
        tokio::time::timeout(DEADLINE + Duration::from_secs(10), async {
            while !(control_done
                && identified.is_some()
                && sync_reply.is_some()
                && fetch_reply.is_some()
                && poll_reply.is_some()
                && ask_reply.is_some()
                && mail_reply.is_some()
                && big_reply.is_some())
            {
                tokio::select! {
                    r = &mut control, if !control_done => { r.unwrap(); control_done = true; }
                    ev = swarm.select_next_some() => match ev {
                        SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(libp2p::gossipsub::Event::Message { .. })) => gossip += 1,
                        SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(libp2p::gossipsub::Event::Subscribed { topic, .. })) => topics_seen.push(topic),
                        SwarmEvent::Behaviour(BehaviourEvent::Identify(libp2p::identify::Event::Received { info, .. })) => identified = Some(info),
                        SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::Message {
                            message: request_response::Message::Request { request, .. }, ..
                        })) => requests_to_stranger.push(format!("sync {request:?}")),
                        SwarmEvent::Behaviour(BehaviourEvent::Join(request_response::Event::Message {
                            message: request_response::Message::Request { request, .. }, ..
                        })) => requests_to_stranger.push(format!("join {request:?}")),
                        SwarmEvent::Behaviour(BehaviourEvent::Mail(request_response::Event::Message {
                            message: request_response::Message::Request { request, .. }, ..
                        })) => requests_to_stranger.push(format!("mail {request:?}")),
                        SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::Message {
                            message: request_response::Message::Response { request_id, response }, ..
                        })) => {
                            if request_id == sync { sync_reply = Some(response) } else if request_id == fetch { fetch_reply = Some(response) }
                        }
                        SwarmEvent::Behaviour(BehaviourEvent::Mail(request_response::Event::Message {
                            message: request_response::Message::Response { request_id, response }, ..
                        })) => {
                            if request_id == mail { mail_reply = Some(response) } else if request_id == big { big_reply = Some(response) }
                        }
                        SwarmEvent::Behaviour(BehaviourEvent::Join(request_response::Event::Message {
                            message: request_response::Message::Response { request_id, response }, ..
                        })) => {
                            if request_id == poll { poll_reply = Some(response) } else if request_id == ask { ask_reply = Some(response) }
                        }
                        _ => {}
                    }
                }
            }
        })
        .await
        .expect("every request is answered and the control finishes");

        for reply in [sync_reply.unwrap(), fetch_reply.unwrap()] {
            match reply {
                SyncReply::Refused(why) => assert!(why.contains("not a member"), "{why}"),
                other => panic!("a stranger was answered {other:?}"),
            }
        }
        match poll_reply.unwrap() {
            JoinReply::Refused(why) => assert!(why.contains("no such join request"), "{why}"),
            other => panic!("a stranger's poll was answered {other:?}"),
        }
        match ask_reply.unwrap() {
            JoinReply::Refused(why) => assert!(why.contains("unknown or was already used"), "{why}"),
            other => panic!("a join with a forged ticket was answered {other:?}"),
        }
        assert_eq!(gossip, 0, "the stranger received gossiped blocks");
        // What it was sent: no request of any kind (a sync digest would
        // carry the team id and the members' contact records), a gossip
        // topic that names no team, and identify's list of alpha's own
        // addresses and protocols, without Kademlia (it answers no one).
        assert!(
            requests_to_stranger.is_empty(),
            "alpha sent the stranger {requests_to_stranger:?}"
        );
        // (Alpha's subscription to the shared topic arrived above; its
        // subscription to the directory's announcements, which names no
        // team either, may arrive too: gossipsub tells every peer.)
        for t in &topics_seen {
            assert!(
                t == &topic.hash() || t.as_str() == agentmesh_node::wire::DIRECTORY_TOPIC,
                "a topic other than the shared ones: {t}"
            );
        }
        assert_eq!(topic.hash().as_str(), agentmesh_node::wire::BLOCKS_TOPIC);
        let info = identified.expect("identify ran");
        assert!(
            !info.protocols.iter().any(|p| p.as_ref() == agentmesh_node::net::KAD_PROTOCOL.as_ref()),
            "alpha offers Kademlia to strangers: {:?}",
            info.protocols
        );
        // Busy, not refused: a member admitted a moment ago looks like this
        // until its admission arrives, and retries.
        assert_eq!(mail_reply.unwrap().outcomes, vec![MailOutcome::Busy; 3]);
        assert!(big_reply.unwrap().outcomes.is_empty());
    });
    assert!(a.inbox_all().is_empty());
    let stranger_id = stranger.peer_id().to_string();
    let audit = a.json(&["audit"]);
    assert!(
        !audit
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["peer"] == stranger_id.as_str()),
        "a stranger's mail reached the audit log: {audit}"
    );
    let row = a
        .peer_row(&stranger.peer_id().to_string())
        .expect("alpha lists the stranger");
    assert_eq!(row["membership"], "stranger");
    assert!(row["name"].is_null());
}
