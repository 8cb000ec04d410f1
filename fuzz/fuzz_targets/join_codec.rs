//! The join protocol as a founder reads a joiner's message and a joiner
//! reads the founder's answer, and what each carries.
#![no_main]

use agentmesh_fuzz::read_both;
use agentmesh_node::wire::{JOIN, JOIN_LIMITS, JoinMsg, JoinReply};
use agentmesh_protocol::Wire;
use agentmesh_protocol::join::{JoinOffer, JoinRequest};
use agentmesh_protocol::team::Block;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (msg, reply) = read_both::<JoinMsg, JoinReply>(JOIN, JOIN_LIMITS, data);
    if let Some(JoinMsg::Request(bytes)) = msg {
        let _ = JoinRequest::from_bytes(&bytes);
    }
    match reply {
        Some(JoinReply::Offer(bytes)) => {
            let _ = JoinOffer::from_bytes(&bytes);
        }
        Some(JoinReply::Admitted(blocks)) => {
            assert!(blocks.len() <= agentmesh_node::wire::MAX_ADMITTED_BLOCKS);
            for b in blocks {
                let _ = Block::from_bytes(&b);
            }
        }
        _ => {}
    }
});
