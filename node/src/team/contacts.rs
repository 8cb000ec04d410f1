//! Contact records: where each member can be reached, signed by it,
//! carried by every sync so a member that moved is found through whichever
//! member heard from it last.

use agentmesh_protocol::contact::{ContactRecord, SignedContact};
use agentmesh_protocol::{Multiaddr, PeerId};
use serde_bytes::ByteBuf;

use super::network::Network;
use super::state::TeamCore;
use crate::wire::{MAX_CONTACT_BYTES_PER_SYNC, MAX_CONTACTS_PER_SYNC};

/// The addresses and relays this machine's record would name now.
fn current(net: &dyn Network) -> (Vec<Multiaddr>, Vec<Multiaddr>) {
    let mut addrs = net.advertised_addrs();
    addrs.truncate(agentmesh_protocol::contact::MAX_CONTACT_ADDRS);
    let mut relays = net.relays();
    relays.truncate(agentmesh_protocol::contact::MAX_CONTACT_RELAYS);
    (addrs, relays)
}

/// This machine's record and where the next sync starts among the
/// members' records.
#[derive(Debug, Default)]
pub struct Contacts {
    mine: Option<SignedContact>,
    mine_addrs: (Vec<Multiaddr>, Vec<Multiaddr>),
    rotation: usize,
    /// A record of this machine's key that this daemon did not make: a
    /// second copy of this machine runs somewhere.
    another: Option<AnotherCopy>,
    /// Whether this run numbered its record above one it did not make
    /// (once a run: two live copies must not outbid each other for ever).
    raised: bool,
}

/// The last sign of a second daemon running with this machine's key: a
/// contact record signed by it that this daemon did not make (a higher
/// sequence than its own newest, or its own sequence with other
/// addresses), as a member passed it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnotherCopy {
    /// When it was seen.
    pub seen_at: agentmesh_protocol::Timestamp,
    /// The record's sequence number.
    pub seq: u64,
    /// The addresses the other copy published.
    pub addrs: Vec<Multiaddr>,
}

impl Contacts {
    /// This machine's contact record, remade when its addresses change.
    fn mine(&mut self, core: &TeamCore, net: &dyn Network) -> Option<&SignedContact> {
        let now = current(net);
        if self.mine.is_none() || now != self.mine_addrs {
            let (addrs, relays) = now.clone();
            // Durable before the record leaves: a number is never used
            // twice, even across a crash, so a record of this key that
            // this daemon did not make is another copy's.
            let seq = match core
                .store
                .next_contact_seq()
                .and_then(|s| core.store.flush().map(|()| s))
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot number a contact record");
                    return self.mine.as_ref();
                }
            };
            let record = ContactRecord {
                peer: core.me.peer_id(),
                seq,
                addrs,
                relays,
                at: core.wall(),
            };
            self.mine = SignedContact::sign(record, &core.me).ok();
            self.mine_addrs = now;
        }
        self.mine.as_ref()
    }

    /// The records a sync message carries: this machine's, and the latest
    /// held for each current member, within the bytes one message may
    /// carry; when they don't all fit, each sync starts further along, so
    /// every record travels in turn.
    pub fn share(&mut self, core: &TeamCore, net: &dyn Network) -> Vec<ByteBuf> {
        let mut out: Vec<ByteBuf> = self
            .mine(core, net)
            .map(|c| ByteBuf::from(c.bytes().to_vec()))
            .into_iter()
            .collect();
        let members: Vec<PeerId> = core.other_members().into_iter().map(|(p, _)| p).collect();
        let mut bytes = out.iter().map(|b| b.len()).sum::<usize>();
        let n = members.len().max(1);
        let start = self.rotation % n;
        self.rotation = self.rotation.wrapping_add(1);
        for peer in members.iter().cycle().skip(start).take(members.len()) {
            if out.len() >= MAX_CONTACTS_PER_SYNC {
                break;
            }
            if let Ok(Some(record)) = core.store.contact(peer) {
                if bytes + record.len() > MAX_CONTACT_BYTES_PER_SYNC {
                    break;
                }
                bytes += record.len();
                out.push(ByteBuf::from(record));
            }
        }
        out
    }

    /// Whether this machine's addresses or reserved relays differ from
    /// those its last record named (once it made one): it moved, a relay
    /// failed or another took over.
    pub fn moved(&self, net: &dyn Network) -> bool {
        self.mine.is_some() && current(net) != self.mine_addrs
    }

    /// The last sign of another copy of this machine, if any.
    pub fn another_copy(&self) -> Option<&AnotherCopy> {
        self.another.as_ref()
    }

    /// A record of this machine's own key from a member, numbered at or
    /// above this daemon's newest and not it: another copy of this
    /// machine made it (numbers are durable before a record leaves, so
    /// no run of this daemon made it), noted for `status` and logged once
    /// per record. Members prefer it, so this daemon's next record goes
    /// above it (once a run: a home restored from a backup is then found
    /// at its new addresses).
    fn own(&mut self, core: &TeamCore, net: &dyn Network, contact: &SignedContact) {
        let Some(mine) = self.mine(core, net) else {
            return;
        };
        let theirs = contact.record();
        let ours_seq = mine.record().seq;
        if theirs.seq < ours_seq || contact.bytes() == mine.bytes() {
            return;
        }
        let seq = theirs.seq;
        let addrs = theirs.addrs.clone();
        if !self.raised {
            self.raised = true;
            match core.store.raise_contact_seq(seq) {
                Ok(()) => self.mine = None,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renumber this machine's contact record")
                }
            }
        }
        let known = self
            .another
            .as_ref()
            .is_some_and(|a| a.seq == seq && a.addrs == addrs);
        if !known {
            let shown: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            tracing::warn!(
                seq,
                addrs = %shown.join(" "),
                "another daemon runs with this machine's key: a member passed on a contact record of it that this daemon did not make; each copy gets part of the mail and neither all of it. Stop one of them for good (docs/operations.md, \"Two copies of one machine\")"
            );
        }
        self.another = Some(AnotherCopy {
            seen_at: core.wall(),
            seq,
            addrs,
        });
    }

    /// Keeps the records that verify, name a member, and supersede what
    /// is stored; their addresses go to the address book. A record of
    /// this machine's own key that it did not make is noted (another copy
    /// of this machine runs).
    pub fn take(&mut self, core: &TeamCore, net: &mut dyn Network, contacts: &[ByteBuf]) {
        for bytes in contacts.iter().take(MAX_CONTACTS_PER_SYNC) {
            // Every sync carries every record its sender holds, mostly the
            // ones held here already: what a record claims is read first,
            // and only one that would be kept is verified.
            let Ok(claim) = SignedContact::from_bytes_unverified(bytes) else {
                tracing::debug!("ignoring a contact record that does not decode");
                continue;
            };
            let peer = claim.record().peer;
            let own = peer == core.me.peer_id();
            if !own && !core.is_member(&peer) {
                continue;
            }
            let held = core.store.contact(&peer).ok().flatten();
            if held.as_deref() == Some(&bytes[..]) {
                continue;
            }
            let newer = held
                .and_then(|b| SignedContact::from_bytes_unverified(&b).ok())
                .is_none_or(|old| claim.supersedes(&old));
            if !own && !newer {
                continue;
            }
            let Ok(contact) = SignedContact::from_bytes(bytes) else {
                tracing::debug!("ignoring a contact record that does not verify");
                continue;
            };
            if own {
                self.own(core, net, &contact);
                continue;
            }
            if let Err(e) = core.store.put_contact(&peer, contact.bytes()) {
                tracing::warn!(error = %e, "cannot store a contact record");
                continue;
            }
            net.add_addresses(peer, &reach_addrs(contact.record()));
            // Where a member is reached is news: try it now rather than
            // at the next redial (so the directory can say it is
            // reachable, and mail to it goes, without waiting 20 s).
            if !net.is_connected(&peer) {
                net.dial(peer);
            }
        }
    }
}

/// Where a contact record says its machine is reached: its direct
/// addresses, and a circuit through each of its relays.
pub fn reach_addrs(record: &ContactRecord) -> Vec<Multiaddr> {
    let circuits = record
        .relays
        .iter()
        .map(|r| r.clone().with(libp2p::multiaddr::Protocol::P2pCircuit));
    record.addrs.iter().cloned().chain(circuits).collect()
}
