//! One recipient's queue in the courier: what waits, what is on its way,
//! and when the next attempt may go.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::{MAX_IN_FLIGHT, backoff};

/// One recipient's queue: what waits, what is on its way, and when the
/// next attempt may go.
#[derive(Debug, Default)]
pub(in crate::mail) struct PeerQueue {
    /// Ids waiting, oldest first (those on their way included).
    pub(super) pending: VecDeque<String>,
    /// Batches on their way.
    pub(super) in_flight: usize,
    /// The ids in those batches.
    pub(super) sending: HashSet<String>,
    /// Failed attempts in a row.
    pub(super) failures: u32,
    /// No attempt before this.
    pub(super) next_try: Option<Instant>,
    /// Reached only through relays: one batch at a time, each at most
    /// [`crate::wire::MAX_RELAYED_BATCH_BYTES`] (two at once could together pass a
    /// circuit's limit again and again).
    pub(super) relayed: bool,
}

impl PeerQueue {
    /// Whether another batch may go at `now`.
    pub(in crate::mail) fn open(&self, now: Instant) -> bool {
        let most = if self.relayed { 1 } else { MAX_IN_FLIGHT };
        self.in_flight < most && self.next_try.is_none_or(|t| t <= now)
    }

    /// Whether a batch should go at `now`: it may, and mail waits that is
    /// not on its way. A queue with nothing scheduled but mail waiting
    /// (loaded at start-up, or its last batch answered busy for some) is
    /// due too: nothing else would wake it.
    pub(in crate::mail) fn due(&self, now: Instant) -> bool {
        self.open(now) && self.pending.len() > self.sending.len()
    }

    /// Whether it can be forgotten.
    pub(in crate::mail) fn idle(&self) -> bool {
        self.pending.is_empty() && self.in_flight == 0
    }

    /// Ids waiting and not on their way, oldest first.
    pub(super) fn unsent(&self) -> impl Iterator<Item = &String> {
        self.pending.iter().filter(|id| !self.sending.contains(*id))
    }

    /// A batch of `ids` went.
    pub(super) fn launched(&mut self, ids: &[String]) {
        self.in_flight += 1;
        self.sending.extend(ids.iter().cloned());
    }

    /// A connection came up: whatever failed before, try now.
    pub(in crate::mail) fn connected(&mut self) {
        self.failures = 0;
        self.next_try = None;
    }

    /// The batch of `ids` was answered at `now`; `failed` if it did not get
    /// through (no answer, or busy). The wait before the next attempt, if
    /// it backs off.
    pub(in crate::mail) fn answered(
        &mut self,
        ids: &[String],
        failed: bool,
        now: Instant,
    ) -> Option<Duration> {
        self.in_flight = self.in_flight.saturating_sub(1);
        for id in ids {
            self.sending.remove(id);
        }
        if !failed {
            self.connected();
            return None;
        }
        let wait = backoff(self.failures);
        self.failures += 1;
        self.next_try = Some(now + wait);
        Some(wait)
    }

    /// Nothing goes before `now + wait` (the store could not read an
    /// envelope; it may recover).
    pub(super) fn pause(&mut self, now: Instant, wait: Duration) {
        self.next_try = Some(now + wait);
    }

    /// How long until `id` is tried again, if it waits for a retry.
    pub(in crate::mail) fn retry_in(&self, id: &str, now: Instant) -> Option<Duration> {
        if self.sending.contains(id) {
            return None;
        }
        self.next_try.map(|t| t.saturating_duration_since(now))
    }
}
