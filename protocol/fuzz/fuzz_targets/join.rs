//! Join requests and offers, and the codes typed by people.
#![no_main]

use agentmesh_protocol::Wire;
use agentmesh_protocol::join::{Code, JoinOffer, JoinRequest, codes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let request = JoinRequest::from_bytes(data);
    let offer = JoinOffer::from_bytes(data);
    if let (Ok(r), Ok(o)) = (request, offer) {
        let _ = codes(&r, &o);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Code::parse(text);
    }
});
