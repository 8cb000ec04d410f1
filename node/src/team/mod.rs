//! The team: its state and every membership action, the one published
//! [`Directory`], the founder's desk of join requests.

pub mod desk;
pub mod directory;

pub use directory::{Directory, Machine};
