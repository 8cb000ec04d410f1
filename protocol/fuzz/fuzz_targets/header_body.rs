//! The header and body decoders, and re-encoding what they accept.
#![no_main]

use agentmesh_protocol::{Body, Header, Wire};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::from_bytes(data) {
        assert_eq!(
            h.to_bytes(),
            data,
            "accepted header bytes must be canonical"
        );
    }
    if let Ok(b) = Body::from_bytes(data) {
        assert_eq!(b.to_bytes(), data, "accepted body bytes must be canonical");
    }
});
