//! Anti-entropy sync of team blocks and contact records, with members
//! only.
//!
//! ```text
//!  start(peer) ── Digest{team, digest, contacts} ──> member
//!  on_reply:  InSync{contacts}            ── done
//!             Have{hashes, contacts}      ── Fetch{≤100 missing} ──> member
//!             Blocks{blocks}              ── merge, done (again if more were missing)
//!             Refused(why)                ── done(why)
//!  on_failed: the connection closed and another is up ── start again (≤ 2 times)
//!             otherwise                   ── done(why)
//!  on_request (a member asks): Digest ── InSync | Have (and sync back to pull)
//!                              Fetch  ── Blocks
//! ```
//!
//! [`Sessions`] is the bookkeeping, a state machine with no I/O; [`Sync`]
//! drives it over the team's state and the [`Network`].

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use agentmesh_protocol::PeerId;
use agentmesh_protocol::team::{Block, BlockHash, TeamState};
use serde_bytes::ByteBuf;

use super::contacts::Contacts;
use super::network::Network;
use super::records::Published;
use super::state::TeamCore;
use crate::wire::{MAX_BLOCKS_PER_SYNC, SyncReply, SyncRequest};

/// How many times a sync is tried again on another connection when the
/// one it went on closes.
pub const MAX_SYNC_RETRIES: u32 = 2;

/// How often mail or a sync from an unknown machine may make this one ask
/// a member for the team's blocks (the unknown machine may have been
/// admitted a moment ago). The unknown machine itself is never asked:
/// nothing team-derived is sent to a non-member.
pub const NEWCOMER_SYNC_EVERY: Duration = Duration::from_secs(5);

/// The syncs in flight and what each is to do when it ends.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Peers with a sync in flight, and the blocks it brought so far.
    open: HashMap<PeerId, usize>,
    /// Asked to sync again while one was in flight.
    again: HashSet<PeerId>,
    /// Their last fetch left blocks to fetch (over
    /// [`MAX_BLOCKS_PER_SYNC`]): synced again only if that round brought
    /// blocks, so a member naming hashes it never sends can't loop.
    more: HashSet<PeerId>,
    /// Syncs tried again because their connection closed, at most
    /// [`MAX_SYNC_RETRIES`] each, forgotten when the sync ends.
    retries: HashMap<PeerId, u32>,
}

/// How a sync ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// Blocks it brought.
    pub added: usize,
    /// Whether to sync again at once.
    pub again: bool,
}

impl Sessions {
    /// Opens a sync with `peer`; false if one is in flight (it runs again
    /// once that one ends).
    pub fn open(&mut self, peer: PeerId) -> bool {
        if self.open.contains_key(&peer) {
            self.again.insert(peer);
            return false;
        }
        self.open.insert(peer, 0);
        true
    }

    /// Whether a sync with `peer` is in flight.
    pub fn is_open(&self, peer: &PeerId) -> bool {
        self.open.contains_key(peer)
    }

    /// The sync with `peer` brought `n` blocks.
    pub fn added(&mut self, peer: PeerId, n: usize) {
        *self.open.entry(peer).or_default() += n;
    }

    /// The sync with `peer` left blocks to fetch.
    pub fn more_to_fetch(&mut self, peer: PeerId) {
        self.more.insert(peer);
    }

    /// The sync with `peer` failed: whether it may be tried again (its
    /// connection closed, another is up, and it has retries left). If so,
    /// the retry is counted and the blocks so far are returned; the caller
    /// opens it again and gives them back with [`Sessions::restore`].
    pub fn retry(
        &mut self,
        peer: PeerId,
        connection_closed: bool,
        connected: bool,
    ) -> Option<usize> {
        let retries = self.retries.entry(peer).or_default();
        if !(connection_closed && *retries < MAX_SYNC_RETRIES && connected) {
            return None;
        }
        *retries += 1;
        Some(self.open.remove(&peer).unwrap_or(0))
    }

    /// Gives a sync that was opened again its blocks so far.
    pub fn restore(&mut self, peer: PeerId, added: usize) {
        if let Some(n) = self.open.get_mut(&peer) {
            *n = added;
        }
    }

    /// Ends the sync with `peer`.
    pub fn close(&mut self, peer: PeerId) -> Closed {
        self.retries.remove(&peer);
        let added = self.open.remove(&peer).unwrap_or(0);
        let more = self.more.remove(&peer) && added > 0;
        let again = self.again.remove(&peer) || more;
        Closed { added, again }
    }
}

/// The block hashes in `theirs` that `team` lacks, at most
/// [`MAX_BLOCKS_PER_SYNC`], and whether more were left out.
pub fn missing(team: &TeamState, theirs: &[ByteBuf]) -> (Vec<ByteBuf>, bool) {
    let mine = team.hashes();
    let mut missing: Vec<ByteBuf> = theirs
        .iter()
        .filter(|h| <[u8; 32]>::try_from(h.as_slice()).is_ok_and(|h| !mine.contains(&BlockHash(h))))
        .cloned()
        .collect();
    let more = missing.len() > MAX_BLOCKS_PER_SYNC;
    missing.truncate(MAX_BLOCKS_PER_SYNC);
    (missing, more)
}

fn bufs<'a>(items: impl Iterator<Item = &'a [u8]>) -> Vec<ByteBuf> {
    items.map(|b| ByteBuf::from(b.to_vec())).collect()
}

/// The sync part of the team: sessions, contact records, directory
/// records, and when an unknown machine last made it ask a member for
/// blocks.
#[derive(Debug)]
pub struct Sync {
    sessions: Sessions,
    contacts: Contacts,
    /// The team's directory records, this machine's among them.
    pub directory: Published,
    newcomer_sync: Option<Instant>,
    /// When this machine last told its members it moved.
    republished: Option<Instant>,
}

/// The least time between two syncs told because this machine's
/// addresses changed: a network coming up adds its addresses one by one.
pub const REPUBLISH_GAP: Duration = Duration::from_secs(2);

impl Sync {
    /// The last sign of another copy of this machine, if any.
    pub fn another_copy(&self) -> Option<&super::contacts::AnotherCopy> {
        self.contacts.another_copy()
    }
}

impl Sync {
    /// The sync part, publishing this machine's mailboxes from `directory`.
    pub fn new(directory: Published) -> Sync {
        Sync {
            sessions: Sessions::default(),
            contacts: Contacts::default(),
            directory,
            newcomer_sync: None,
            republished: None,
        }
    }

    /// When this machine's addresses or relays changed (a new network, a
    /// relay failed or came back), starts a sync with every connected
    /// member: each takes the new contact record and passes it on; at
    /// most once a [`REPUBLISH_GAP`].
    pub fn republish_if_moved(&mut self, core: &mut TeamCore, net: &mut dyn Network, now: Instant) {
        if !core.am_member()
            || self
                .republished
                .is_some_and(|t| now.duration_since(t) < REPUBLISH_GAP)
            || !self.contacts.moved(net)
        {
            return;
        }
        self.republished = Some(now);
        tracing::info!("this machine's addresses or relays changed; telling the members connected");
        self.announce(core, net);
    }

    /// Whether a sync with `peer` is in flight.
    pub fn is_open(&self, peer: &PeerId) -> bool {
        self.sessions.is_open(peer)
    }

    /// Starts a sync with `peer` (a member: anyone else is refused
    /// before anything is sent).
    pub fn start(&mut self, core: &mut TeamCore, net: &mut dyn Network, peer: PeerId) {
        let Some(team) = core.state() else {
            return;
        };
        let (id, digest) = (team.id(), team.digest());
        if !self.sessions.open(peer) {
            return;
        }
        let request = SyncRequest::Digest {
            team: id.0.to_vec(),
            digest: digest.to_vec(),
            contacts: self.contacts.share(core, net),
            directory: self.directory.holding(core),
        };
        self.send(core, net, peer, request);
    }

    /// Starts a sync with every connected member: each compares digests,
    /// and a member that lacks blocks pulls them.
    pub fn announce(&mut self, core: &mut TeamCore, net: &mut dyn Network) {
        let members: Vec<PeerId> = net
            .connected()
            .into_iter()
            .filter(|p| core.is_member(p))
            .collect();
        for p in members {
            self.start(core, net, p);
        }
    }

    /// The one place sync requests leave this machine, so the one place
    /// that checks they go only to members: a sync carries the team id,
    /// the digest and contact records.
    fn send(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        request: SyncRequest,
    ) {
        if !core.is_member(&peer) {
            return self.done(
                core,
                net,
                peer,
                Err("it is not a member of the team".into()),
            );
        }
        net.send_sync(peer, request);
    }

    /// A sync step to `peer` failed (`why`). One that went on a connection
    /// that closed is tried again while another connection is up: the
    /// closed one was left over from before the peer restarted.
    pub fn on_failed(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        why: String,
        connection_closed: bool,
    ) {
        tracing::debug!(%peer, %why, "sync failed");
        if let Some(added) = self
            .sessions
            .retry(peer, connection_closed, net.is_connected(&peer))
        {
            self.start(core, net, peer);
            // Only if it did start (it ends at once for a non-member).
            self.sessions.restore(peer, added);
            return;
        }
        let why = format!("{why} (if this machine was revoked, members refuse it)");
        self.done(core, net, peer, Err(why));
    }

    /// Ends the sync with `peer`, telling the network (a `connect` may be
    /// waiting), and syncs again if it is to.
    fn done(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        outcome: Result<(), String>,
    ) {
        let Closed { added, again } = self.sessions.close(peer);
        let membership = core.membership(&peer, net);
        for (reply, answer) in net.sync_finished(peer, added, membership.word(), &outcome) {
            core.reply(reply, answer);
        }
        if again && core.is_member(&peer) {
            self.start(core, net, peer);
        }
    }

    /// What a member is answered. Members get answers; nobody else does.
    /// This machine answers even if it has left the team, so members can
    /// fetch its leaving block.
    pub fn on_request(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        request: SyncRequest,
        now: Instant,
    ) -> SyncReply {
        let Some(team) = core.state() else {
            return SyncReply::Refused("not a member of this machine's team".into());
        };
        let asked = match &request {
            SyncRequest::Digest { team, .. } | SyncRequest::Fetch { team, .. } => team,
        };
        if asked[..] != team.id().0 || !team.is_member(&peer) {
            let revoked = team.is_revoked(&peer);
            let why = if revoked {
                "this machine was revoked from the team"
            } else {
                "not a member of this machine's team"
            };
            if asked[..] == team.id().0 && !revoked {
                // It knows the team: perhaps admitted a moment ago.
                self.newcomer_hint(core, net, now);
            }
            return SyncReply::Refused(why.into());
        }
        match request {
            SyncRequest::Digest {
                digest,
                contacts,
                directory,
                ..
            } => {
                let same = digest[..] == team.digest();
                let hashes = bufs(team.hashes().iter().map(|h| &h.0[..]));
                self.contacts.take(core, net, &contacts);
                let contacts = self.contacts.share(core, net);
                // Directory records travel only in answers, a page at a time.
                let (records, more_records) = self.directory.share(core, &directory);
                if same {
                    SyncReply::InSync {
                        contacts,
                        records,
                        more_records,
                    }
                } else {
                    // They may hold blocks this machine lacks: pull too.
                    self.start(core, net, peer);
                    SyncReply::Have {
                        hashes,
                        contacts,
                        records,
                        more_records,
                    }
                }
            }
            SyncRequest::Fetch { hashes, .. } => {
                let wanted: HashSet<&[u8]> = hashes
                    .iter()
                    .take(MAX_BLOCKS_PER_SYNC)
                    .map(|h| h.as_slice())
                    .collect();
                let blocks = bufs(
                    team.blocks()
                        .filter(|b| wanted.contains(&b.hash().0[..]))
                        .map(Block::bytes),
                );
                SyncReply::Blocks { blocks }
            }
        }
    }

    /// A member answered a sync step.
    pub fn on_reply(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        peer: PeerId,
        reply: SyncReply,
    ) {
        match reply {
            SyncReply::InSync {
                contacts,
                records,
                more_records,
            } => {
                self.contacts.take(core, net, &contacts);
                self.take_records(core, peer, &records, more_records);
                self.done(core, net, peer, Ok(()));
            }
            SyncReply::Have {
                hashes,
                contacts,
                records,
                more_records,
            } => {
                self.contacts.take(core, net, &contacts);
                self.take_records(core, peer, &records, more_records);
                let Some(team) = core.state() else {
                    return self.done(core, net, peer, Ok(()));
                };
                let (wanted, more) = missing(team, &hashes);
                if wanted.is_empty() {
                    return self.done(core, net, peer, Ok(()));
                }
                if more {
                    // Another round, once these are in, compares digests again.
                    self.sessions.more_to_fetch(peer);
                }
                let request = SyncRequest::Fetch {
                    team: team.id().0.to_vec(),
                    hashes: wanted,
                };
                self.send(core, net, peer, request);
            }
            SyncReply::Blocks { blocks } => {
                let blocks: Vec<Block> = blocks
                    .iter()
                    .filter_map(|b| Block::from_bytes(b).ok())
                    .collect();
                let added = core.merge_blocks(net, blocks);
                if added > 0 {
                    tracing::info!(%peer, added, "synced team blocks");
                }
                self.sessions.added(peer, added);
                self.done(core, net, peer, Ok(()));
            }
            SyncReply::Refused(why) => {
                tracing::info!(%peer, reason = %why, "sync refused");
                self.done(core, net, peer, Err(why));
            }
        }
    }

    /// Keeps the directory records a member's answer brought; if it left
    /// some for the next page and this one brought any, syncs again once
    /// this sync ends.
    fn take_records(
        &mut self,
        core: &mut TeamCore,
        peer: PeerId,
        records: &[crate::wire::TypedRecord],
        more: bool,
    ) {
        let kept = self.directory.take(core, peer, records);
        if kept > 0 {
            tracing::debug!(%peer, kept, "took directory records");
        }
        if more && kept > 0 {
            // Open while one is in flight: runs again after it.
            self.sessions.open(peer);
        }
    }

    /// A member announced a directory record newer than this machine
    /// holds: syncs with it (it answers with the record).
    pub fn on_directory_announce(
        &mut self,
        core: &mut TeamCore,
        net: &mut dyn Network,
        via: PeerId,
        data: &[u8],
    ) {
        if self.directory.announced(core, data) && core.is_member(&via) {
            self.start(core, net, via);
        }
    }

    /// A machine this one does not know sent mail or a sync naming the
    /// team: it may have been admitted a moment ago. Asks one connected
    /// member (an admin first: it signed the admission) for the team's
    /// blocks, at most once per [`NEWCOMER_SYNC_EVERY`] whatever the
    /// number of unknown machines. The unknown machine is never asked.
    pub fn newcomer_hint(&mut self, core: &mut TeamCore, net: &mut dyn Network, now: Instant) {
        if core.state().is_none()
            || self
                .newcomer_sync
                .is_some_and(|t| now.duration_since(t) < NEWCOMER_SYNC_EVERY)
        {
            return;
        }
        let mut connected: Vec<(bool, PeerId)> = core
            .other_members()
            .into_iter()
            .filter(|(p, _)| net.is_connected(p))
            .map(|(p, admin)| (!admin, p))
            .collect();
        connected.sort();
        if let Some((_, peer)) = connected.first() {
            self.newcomer_sync = Some(now);
            self.start(core, net, *peer);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn a_sync_asked_for_while_one_runs_runs_again_after() {
        let mut s = Sessions::default();
        let p = PeerId::random();
        assert!(s.open(p));
        assert!(!s.open(p), "one at a time");
        assert_eq!(
            s.close(p),
            Closed {
                added: 0,
                again: true
            }
        );
        assert!(s.open(p));
        assert_eq!(
            s.close(p),
            Closed {
                added: 0,
                again: false
            }
        );
        assert!(!s.is_open(&p));
    }

    #[test]
    fn more_to_fetch_syncs_again_only_if_the_round_brought_blocks() {
        let mut s = Sessions::default();
        let p = PeerId::random();
        s.open(p);
        s.more_to_fetch(p);
        s.added(p, 100);
        assert_eq!(
            s.close(p),
            Closed {
                added: 100,
                again: true
            }
        );
        // A member naming hashes it never sends: no loop.
        s.open(p);
        s.more_to_fetch(p);
        assert_eq!(
            s.close(p),
            Closed {
                added: 0,
                again: false
            }
        );
    }

    #[test]
    fn a_closed_connection_is_retried_twice_while_another_is_up() {
        let mut s = Sessions::default();
        let p = PeerId::random();
        s.open(p);
        s.added(p, 3);
        assert_eq!(s.retry(p, false, true), None, "not a closed connection");
        assert_eq!(s.retry(p, true, false), None, "no other connection");
        for _ in 0..MAX_SYNC_RETRIES {
            let added = s.retry(p, true, true).unwrap();
            assert_eq!(added, 3, "the blocks so far are kept");
            assert!(s.open(p));
            s.restore(p, added);
        }
        assert_eq!(s.retry(p, true, true), None, "retries used up");
        assert_eq!(s.close(p).added, 3);
        // Forgotten with the sync: the next one has its retries again.
        s.open(p);
        assert!(s.retry(p, true, true).is_some());
    }

    #[test]
    fn missing_is_bounded_and_skips_what_is_held_or_malformed() {
        let me = agentmesh_protocol::Identity::generate(&mut rand::rng());
        let genesis = Block::sign(
            agentmesh_protocol::team::BlockBody::Genesis(agentmesh_protocol::team::Genesis {
                team_name: agentmesh_protocol::Name::parse("team name", "t").unwrap(),
                founder: me.peer_id(),
                founder_x25519: me.x25519_public(),
                founder_name: agentmesh_protocol::Name::parse("machine name", "a").unwrap(),
                founder_owner: agentmesh_protocol::Owner::parse("ada").unwrap(),
                admins: vec![me.peer_id()],
                created_at: crate::clock::now(),
                nonce: [1; 16],
            }),
            &me,
        )
        .unwrap();
        let held = genesis.hash();
        let team = TeamState::from_genesis(genesis).unwrap();
        let mut theirs: Vec<ByteBuf> = (0..(MAX_BLOCKS_PER_SYNC as u32 + 50))
            .map(|i| {
                let mut h = [0u8; 32];
                h[..4].copy_from_slice(&i.to_be_bytes());
                ByteBuf::from(h.to_vec())
            })
            .collect();
        theirs.push(ByteBuf::from(held.0.to_vec()));
        theirs.push(ByteBuf::from(vec![1, 2, 3]));
        let (wanted, more) = missing(&team, &theirs);
        assert_eq!(wanted.len(), MAX_BLOCKS_PER_SYNC);
        assert!(more);
        assert!(!wanted.iter().any(|h| h.as_slice() == held.0));
        let (wanted, more) = missing(&team, &theirs[..10]);
        assert_eq!((wanted.len(), more), (10, false));
    }
}
