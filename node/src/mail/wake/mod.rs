//! Waking an idle session: each mailbox's settings and budget, the sessions hooks report, the runs started and their supervisor.

pub(in crate::mail) mod decide;
pub(in crate::mail) mod runs;
pub(in crate::mail) mod serve;
pub(in crate::mail) mod wakes;
pub(in crate::mail) mod waking;

/// Waking idle sessions, its parts.
#[derive(Debug)]
pub(in crate::mail) struct Wake {
    /// Which mailboxes wake an idle session, and the sessions hooks
    /// reported.
    pub(in crate::mail) wakes: wakes::Wakes,
    /// The wake runs started.
    pub(in crate::mail) runs: runs::Runs,
}
