//! The carry protocol as a carrier reads a handoff and a recipient reads
//! a delivery, and the envelopes they carry.
#![no_main]

use agentmesh_fuzz::read_both;
use agentmesh_node::wire::{CARRY, CARRY_LIMITS, CarryRequest, MAX_BATCH_ENVELOPES, MailReply};
use agentmesh_protocol::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (request, reply) = read_both::<CarryRequest, MailReply>(CARRY, CARRY_LIMITS, data);
    if let Some(request) = request {
        assert!(request.envelopes().len() <= MAX_BATCH_ENVELOPES + 1);
        for e in request.envelopes() {
            let _ = Envelope::from_wire(e);
        }
    }
    if let Some(reply) = reply {
        assert!(reply.outcomes.len() <= MAX_BATCH_ENVELOPES + 1);
    }
});
