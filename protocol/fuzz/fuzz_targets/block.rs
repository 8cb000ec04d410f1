//! Team blocks: decode, and apply whatever decodes to a team.
#![no_main]

use agentmesh_protocol::team::{Block, TeamId, TeamState};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(block) = Block::from_bytes(data) {
        assert_eq!(block.bytes(), data);
        let mut state = TeamState::new(block.team());
        let _ = state.apply(block.clone());
        let _ = TeamState::new(TeamId([0; 32])).apply(block);
    }
});
