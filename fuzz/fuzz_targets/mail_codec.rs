//! The mail protocol as a member reads another's batch and the answer to
//! its own, and the envelopes a batch carries.
#![no_main]

use agentmesh_fuzz::read_both;
use agentmesh_node::wire::{MAIL, MAIL_LIMITS, MAX_BATCH_ENVELOPES, MailReply, MailRequest};
use agentmesh_protocol::Envelope;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (request, reply) = read_both::<MailRequest, MailReply>(MAIL, MAIL_LIMITS, data);
    if let Some(batch) = request {
        // One over is kept while decoding, so an oversized batch is told apart.
        assert!(batch.envelopes.len() <= MAX_BATCH_ENVELOPES + 1);
        for e in &batch.envelopes {
            let _ = Envelope::from_wire(e);
        }
    }
    if let Some(reply) = reply {
        assert!(reply.outcomes.len() <= MAX_BATCH_ENVELOPES + 1);
    }
});
