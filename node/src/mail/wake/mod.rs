//! Waking an idle session: each mailbox's settings and budget, the sessions hooks report, the runs started and their supervisor.

pub(in crate::mail) mod runs;
pub(in crate::mail) mod wakes;
pub(in crate::mail) mod waking;
