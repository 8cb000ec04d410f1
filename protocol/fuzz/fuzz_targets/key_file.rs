//! Key files: any bytes are refused or read, and what is read writes back
//! to a file that reads as the same identity.
#![no_main]

use agentmesh_protocol::Identity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = Identity::from_key_file(data) {
        let again =
            Identity::from_key_file(&id.to_key_file()).expect("a written key file reads back");
        assert_eq!(again.peer_id(), id.peer_id());
        assert_eq!(again.x25519_public(), id.x25519_public());
    }
});
