//! The sync protocol as a member reads another's request and answer, and
//! the records and blocks they carry.
#![no_main]

use agentmesh_fuzz::read_both;
use agentmesh_node::wire::{
    DIRECTORY_RECORD, MAX_BLOCKS_PER_SYNC, MAX_CONTACTS_PER_SYNC, MAX_RECORDS_PER_SYNC, SYNC,
    SYNC_LIMITS, SyncReply, SyncRequest, TypedRecord,
};
use agentmesh_protocol::contact::SignedContact;
use agentmesh_protocol::directory::SignedDirectory;
use agentmesh_protocol::team::{Block, MAX_TEAM_BLOCKS};
use libfuzzer_sys::fuzz_target;
use serde_bytes::ByteBuf;

fn contacts(contacts: &[ByteBuf]) {
    assert!(contacts.len() <= MAX_CONTACTS_PER_SYNC);
    for c in contacts {
        let _ = SignedContact::from_bytes_unverified(c);
    }
}

fn records(records: &[TypedRecord]) {
    assert!(records.len() <= MAX_RECORDS_PER_SYNC);
    for r in records.iter().filter(|r| r.kind == DIRECTORY_RECORD) {
        let _ = SignedDirectory::from_bytes_unverified(&r.bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    let (request, reply) = read_both::<SyncRequest, SyncReply>(SYNC, SYNC_LIMITS, data);
    match request {
        Some(SyncRequest::Digest {
            contacts: c,
            directory,
            ..
        }) => {
            contacts(&c);
            assert!(directory.len() <= MAX_RECORDS_PER_SYNC);
        }
        Some(SyncRequest::Fetch { hashes, .. }) => assert!(hashes.len() <= MAX_BLOCKS_PER_SYNC),
        None => {}
    }
    match reply {
        Some(SyncReply::InSync {
            contacts: c,
            records: r,
            ..
        }) => {
            contacts(&c);
            records(&r);
        }
        Some(SyncReply::Have {
            hashes,
            contacts: c,
            records: r,
            ..
        }) => {
            assert!(hashes.len() <= MAX_TEAM_BLOCKS);
            contacts(&c);
            records(&r);
        }
        Some(SyncReply::Blocks { blocks }) => {
            assert!(blocks.len() <= MAX_BLOCKS_PER_SYNC);
            for b in blocks {
                let _ = Block::from_bytes(&b);
            }
        }
        _ => {}
    }
});
