//! Any bytes given to `open` are refused or opened, never a panic.
#![no_main]

use std::sync::LazyLock;

use agentmesh_protocol::{Identity, Timestamp, open};
use libfuzzer_sys::fuzz_target;

static ME: LazyLock<Identity> = LazyLock::new(|| Identity::from_secrets(&[1; 32], &[2; 32]));

fuzz_target!(|data: &[u8]| {
    // Judge at a time most generated headers fall around.
    let _ = open(data, &ME, Timestamp::from_unix_millis(1_795_996_800_000));
});
