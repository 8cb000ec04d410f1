//! The reports a machine sends a sender: receipts and a broadcast's
//! counts, as bytes and as the body of an envelope.
#![no_main]

use agentmesh_protocol::envelope::Counts;
use agentmesh_protocol::receipt::Receipt;
use agentmesh_protocol::{Body, Wire};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Receipt::from_bytes(data) {
        let again = Receipt::from_bytes(&r.to_bytes()).expect("a receipt written reads back");
        assert_eq!(again, r, "a receipt must read back as it was");
    }
    if let Ok(c) = Counts::from_bytes(data) {
        let again = Counts::from_bytes(&c.to_bytes()).expect("counts written read back");
        assert_eq!(again, c, "counts must read back as they were");
    }
    if let Ok(body) = Body::from_bytes(data) {
        let _ = Receipt::from_body(&body);
        let _ = Counts::from_body(&body);
    }
});
