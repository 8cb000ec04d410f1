//! The network: the event loop that alone owns the libp2p swarm, its
//! behaviour and codec, the peer table.

pub mod behaviour;
pub mod codec;
pub mod peers;

pub use behaviour::{
    Behaviour, BehaviourEvent, BuildError, JOIN_PROTOCOL, KAD_PROTOCOL, MAIL_PROTOCOL,
    MAX_CONNECTIONS, SYNC_PROTOCOL, blocks_topic, build,
};

// The node's event loop moves here (the split's next step); its mail
// carriage is named from here already.
pub use crate::node::{Carry, Delivered, Handle, MAIL_EVENTS, MailEvent, MailLink, Undelivered};
