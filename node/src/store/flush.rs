//! Group commit: the one way writes that must be durable reach the disk.
//!
//! ```text
//!  mail actor ── submit(writes, then) ──┐
//!  audit log  ── submit(writes, then) ──┤   sync channel (bounded: back-pressure)
//!                                       v
//!              flusher thread: take every job waiting, write them in one
//!              batch per tree, flush once, then run each job's `then`
//! ```
//!
//! Every writer waiting when a flush starts is covered by it, and no actor
//! ever waits for the disk: what waited for durability runs as the job's
//! `then` (typically a send back into the actor's own inbox).

use std::sync::Arc;
use std::time::Duration;

use super::{AskRecord, AuditEntry, OutboxRecord, Store};

/// Writers waiting for a flush at once; a full queue makes the submitter
/// wait (back-pressure, bounded).
pub const FLUSH_QUEUE: usize = 4096;

/// Writes that wait for the next flush.
#[derive(Debug, Default)]
pub struct Writes {
    /// Outbox records.
    pub outbox: Vec<OutboxRecord>,
    /// Audit entries.
    pub audit: Vec<AuditEntry>,
    /// Asks sent (their replies pass unheld).
    pub asks: Vec<AskRecord>,
}

impl Writes {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.outbox.is_empty() && self.audit.is_empty() && self.asks.is_empty()
    }

    fn extend(&mut self, other: Writes) {
        self.outbox.extend(other.outbox);
        self.audit.extend(other.audit);
        self.asks.extend(other.asks);
    }
}

/// What runs once a job's writes are durable. It runs on the flusher
/// thread, so it only hands work back (a channel send), never blocks.
pub type Done = Box<dyn FnOnce() + Send>;

struct Job {
    writes: Writes,
    then: Option<Done>,
}

/// A cloneable handle to the flusher thread, which stops once every handle
/// is dropped and the jobs queued before are written.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    tx: std::sync::mpsc::SyncSender<Job>,
}

impl GroupCommit {
    /// Starts the flusher thread over `store`; the handle to submit to,
    /// and the thread (joined at shutdown).
    pub fn start(store: Arc<dyn Store>) -> (GroupCommit, std::thread::JoinHandle<()>) {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(FLUSH_QUEUE);
        let thread = std::thread::Builder::new()
            .name("agentmesh-flush".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut jobs = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        jobs.push(more);
                    }
                    let mut all = Writes::default();
                    let mut done = vec![];
                    for job in jobs {
                        all.extend(job.writes);
                        done.extend(job.then);
                    }
                    write_durably(store.as_ref(), &all);
                    for then in done {
                        then();
                    }
                }
            })
            .expect("a thread can be spawned at start");
        (GroupCommit { tx }, thread)
    }

    /// Queues `writes`; `then` runs once they are durable. Waits while the
    /// queue is full (back-pressure); after shutdown the writes are lost
    /// only if the flusher is gone, which happens after every actor stopped.
    pub fn submit(&self, writes: Writes, then: Option<Done>) {
        let _ = self.tx.send(Job { writes, then });
    }

    /// Queues `writes` unless the queue is full, without waiting: for the
    /// network's loop, which must never wait for the disk. A full queue
    /// hands both back to try again later.
    pub fn try_submit(
        &self,
        writes: Writes,
        then: Option<Done>,
    ) -> Result<(), (Writes, Option<Done>)> {
        use std::sync::mpsc::TrySendError;
        match self.tx.try_send(Job { writes, then }) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => Ok(()),
            Err(TrySendError::Full(job)) => Err((job.writes, job.then)),
        }
    }
}

/// A group commit whose queue holds `capacity` jobs and is never written:
/// unit tests take the jobs out themselves (a disk that stalls).
#[cfg(test)]
pub(crate) fn stalled(capacity: usize) -> (GroupCommit, Stalled) {
    let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
    (GroupCommit { tx }, Stalled(rx))
}

/// The other end of a [`stalled`] group commit.
#[cfg(test)]
pub(crate) struct Stalled(std::sync::mpsc::Receiver<Job>);

#[cfg(test)]
impl Stalled {
    /// The next job queued, if any: its writes and what waits for them.
    pub(crate) fn take(&self) -> Option<(Writes, Option<Done>)> {
        self.0.try_recv().ok().map(|j| (j.writes, j.then))
    }
}

/// Nothing is acknowledged that is not durable: a failed write (a full
/// disk) is tried again, with growing pauses, while everything behind it
/// waits. Writers feel it as back-pressure; nothing is dropped.
fn write_durably(store: &dyn Store, all: &Writes) {
    let mut pause = Duration::from_millis(100);
    while let Err(e) = store
        .put_asks(&all.asks)
        .and_then(|()| store.put_outbox(&all.outbox))
        .and_then(|()| store.audit_many(&all.audit))
        .and_then(|()| store.flush())
    {
        tracing::error!(error = %e, retry_in = ?pause, "writing durably failed; nothing is acknowledged until it succeeds");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}
