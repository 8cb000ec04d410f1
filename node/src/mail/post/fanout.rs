//! The fan-out: events to every attached client, the newest announced
//! seq, and the summary `status` shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{broadcast, watch};

use crate::api::Event;
use crate::mail::MailSummary;

pub use crate::api::EVENT_QUEUE;

/// What attached clients hear, and what `status` reads.
#[derive(Debug)]
pub(in crate::mail) struct Fanout {
    events: broadcast::Sender<Event>,
    /// The seq of the newest message announced.
    newest: Arc<AtomicU64>,
    summary: watch::Sender<MailSummary>,
}

impl Fanout {
    /// A fan-out whose newest message so far is `last_seq`.
    pub(in crate::mail) fn new(last_seq: u64) -> Fanout {
        Fanout {
            events: broadcast::channel(EVENT_QUEUE).0,
            newest: Arc::new(AtomicU64::new(last_seq)),
            summary: watch::channel(MailSummary::default()).0,
        }
    }

    /// What a handle reads: the events to subscribe to, the newest seq,
    /// the summary.
    pub(in crate::mail) fn ends(
        &self,
    ) -> (
        broadcast::Sender<Event>,
        Arc<AtomicU64>,
        watch::Receiver<MailSummary>,
    ) {
        (
            self.events.clone(),
            self.newest.clone(),
            self.summary.subscribe(),
        )
    }

    /// Tells every attached client.
    pub(in crate::mail) fn emit(&self, events: Vec<Event>) {
        for e in events {
            let seq = match &e {
                Event::Message { message } => Some(message.seq),
                _ => None,
            };
            // No attached client is not an error.
            let _ = self.events.send(e);
            // Advanced only once the message is stored and announced: a
            // client attaching "from now on" must not skip a message whose
            // event is still to come.
            if let Some(seq) = seq {
                self.newest.fetch_max(seq, Ordering::Relaxed);
            }
        }
    }

    /// Publishes `now` if it changed.
    pub(in crate::mail) fn publish(&self, now: MailSummary) {
        self.summary.send_if_modified(|s| {
            let changed = *s != now;
            *s = now;
            changed
        });
    }
}
