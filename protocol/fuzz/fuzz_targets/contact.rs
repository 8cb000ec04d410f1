//! Signed contact records.
#![no_main]

use agentmesh_protocol::Wire;
use agentmesh_protocol::contact::{ContactRecord, SignedContact};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = SignedContact::from_bytes(data);
    let _ = ContactRecord::from_bytes(data);
});
