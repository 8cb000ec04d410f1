//! What keeps mail from running away: hop and pair loops, taint, which replies to this machine's own asks pass unheld, and retention.

pub(in crate::mail) mod answers;
pub(in crate::mail) mod loops;
pub(in crate::mail) mod retention;
pub(in crate::mail) mod taint;

/// What keeps mail from running away, its parts.
#[derive(Debug)]
pub(in crate::mail) struct Guard {
    /// Hops, pairs, and taint.
    pub(in crate::mail) loops: loops::Loops,
    pub(in crate::mail) retention: retention::Retention,
}
