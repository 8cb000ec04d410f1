//! Invite tickets, as pasted text and as payload bytes.
#![no_main]

use agentmesh_protocol::Wire;
use agentmesh_protocol::ticket::Ticket;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(ticket) = Ticket::decode(text)
    {
        assert_eq!(Ticket::decode(&ticket.to_string()), Ok(ticket));
    }
    let _ = Ticket::from_bytes(data);
});
