//! The team's request-response events (join and sync), as the event
//! loop hands them to the team.

use std::time::Instant;

use libp2p::request_response;

use super::{Net, breaks_protocol};

impl Net {
    /// A gossip message: a team block, or a directory announcement.
    pub(super) fn on_gossip(
        &mut self,
        via: libp2p::PeerId,
        message: &libp2p::gossipsub::Message,
        now: Instant,
    ) {
        let directory = message.topic == crate::net::behaviour::directory_topic().hash();
        self.with_team(now, |team, port| {
            if directory {
                team.on_directory_gossip(port, message.source, via, &message.data);
            } else {
                team.on_gossip(port, message.source, via, &message.data);
            }
        });
    }

    pub(super) fn on_sync(
        &mut self,
        event: request_response::Event<crate::wire::SyncRequest, crate::wire::SyncReply>,
        now: Instant,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let reply = self.with_team(now, |team, port| {
                        team.on_sync_request(port, peer, request, now)
                    });
                    let _ = self
                        .swarm
                        .behaviour_mut()
                        .sync
                        .send_response(channel, reply);
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(peer) = self.waiting.sync.remove(&request_id) {
                        self.with_team(now, |team, port| team.on_sync_reply(port, peer, response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                let Some(peer) = self.waiting.sync.remove(&request_id) else {
                    return;
                };
                if breaks_protocol(&error) {
                    // An answer too large or not decodable: the connection
                    // is closed rather than left with a half-read stream;
                    // the member may reconnect.
                    tracing::info!(%peer, %error, "a sync answer broke the protocol; disconnecting");
                    let _ = self.swarm.disconnect_peer_id(peer);
                }
                let closed = !breaks_protocol(&error)
                    && matches!(
                        error,
                        request_response::OutboundFailure::ConnectionClosed
                            | request_response::OutboundFailure::Io(_)
                    );
                let why = error.to_string();
                self.with_team(now, |team, port| {
                    team.on_sync_failed(port, peer, why, closed)
                });
            }
            _ => {}
        }
    }

    pub(super) fn on_join(
        &mut self,
        event: request_response::Event<crate::wire::JoinMsg, crate::wire::JoinReply>,
        now: Instant,
    ) {
        match event {
            request_response::Event::Message { peer, message, .. } => match message {
                request_response::Message::Request {
                    request, channel, ..
                } => {
                    let reply = self.with_team(now, |team, port| {
                        team.on_join_request(port, peer, request, now)
                    });
                    let _ = self
                        .swarm
                        .behaviour_mut()
                        .join
                        .send_response(channel, reply);
                }
                request_response::Message::Response {
                    request_id,
                    response,
                } => {
                    if let Some(w) = self.waiting.join.remove(&request_id) {
                        self.with_team(now, |team, port| team.on_join_answer(port, w, response));
                    }
                }
            },
            request_response::Event::OutboundFailure {
                request_id, error, ..
            } => {
                if let Some(w) = self.waiting.join.remove(&request_id) {
                    // Not reached: another try may reach it. (A request
                    // that timed out or lost its connection may have
                    // reached the founder and used the ticket.)
                    let again = matches!(error, request_response::OutboundFailure::DialFailure);
                    let why = format!("could not reach the founder: {error}");
                    self.with_team(now, |team, port| {
                        team.on_join_failed(port, w, (why, again), now)
                    });
                }
            }
            _ => {}
        }
    }
}
