//! Signed directory records and their gossip announcement.
#![no_main]

use agentmesh_protocol::Wire;
use agentmesh_protocol::directory::{DirectoryAnnounce, DirectoryRecord, SignedDirectory};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = SignedDirectory::from_bytes(data);
    if let Ok(r) = DirectoryRecord::from_bytes(data) {
        // What decodes re-encodes to what decodes the same.
        assert_eq!(DirectoryRecord::from_bytes(&r.to_bytes()).ok(), Some(r));
    }
    let _ = DirectoryAnnounce::from_bytes(data);
});
