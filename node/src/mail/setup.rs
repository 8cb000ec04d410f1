//! What the mail actor is started with, and its start: its state loaded
//! from the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::*;

/// What the mail actor is started with.
#[derive(Debug)]
pub struct MailSetup {
    /// This machine.
    pub me: Identity,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The team as the team's owner publishes it: names, owners, keys.
    pub directory: watch::Receiver<Arc<Directory>>,
    /// The network, which carries batches.
    pub net: CarryHandle,
    /// What the network emits for mail.
    pub link: MailLink,
    /// The group commit every write that must be durable goes through.
    pub commit: GroupCommit,
    /// How long a sent message stays deliverable.
    pub lifetime: Duration,
    /// How long audit entries are kept.
    pub audit_retention: Duration,
    /// Hops and the pair limit.
    pub loops: LoopRules,
    /// Replies to one of this machine's asks that pass unheld from
    /// another person's machine.
    pub replies_per_ask: u32,
    /// The preset of mailboxes that chose none (`[bus] preset`).
    pub preset: crate::api::Preset,
    /// How broadcasts are judged (`[bus] judge_command`).
    pub judge: crate::judge::JudgeWith,
    /// Where this machine's mailboxes are published for the directory.
    pub local_directory: watch::Sender<Arc<crate::team::records::LocalDirectory>>,
    /// `[wake]`.
    pub wake: crate::config::WakeRules,
    /// The daemon's home (what a wake run's AGENTMESH_HOME names).
    pub home: std::path::PathBuf,
    /// `carry` and `[carrier]`.
    pub carry: crate::config::CarryRules,
    /// Stops the actor.
    pub cancel: CancellationToken,
}

/// The actor's inboxes, read only by its loop.
#[derive(Debug)]
pub(super) struct Inboxes {
    pub(super) rx: mpsc::Receiver<MailIn>,
    pub(super) link: MailLink,
    /// What waited for a flush, handed back once it is durable.
    pub(super) flushed: mpsc::UnboundedReceiver<AfterFlush>,
    /// Sessions attaching and leaving.
    pub(super) presence: mpsc::UnboundedReceiver<profiles::Presence>,
}

/// Loads the mail actor's state from the store; its handle, and the
/// task to run (it ends when `setup.cancel` fires or an inbox closes).
#[expect(
    clippy::disallowed_methods,
    reason = "flushed: sent from the flusher's thread, which may neither block nor drop work made durable, one per flush that has work waiting (bounded by MAIL_QUEUE ops and the batches in flight); presence: sent from a session guard's Drop, at most two per attached client"
)]
pub(super) fn start(
    setup: MailSetup,
) -> Result<(MailHandle, impl Future<Output = ()> + use<>), StoreError> {
    let MailSetup {
        me,
        store,
        directory,
        net,
        link,
        commit,
        lifetime,
        audit_retention,
        loops,
        replies_per_ask,
        preset,
        judge,
        local_directory,
        wake,
        home,
        carry,
        cancel,
    } = setup;
    let (tx, rx) = mpsc::channel(MAIL_QUEUE);
    let (flushed_tx, flushed) = mpsc::unbounded_channel();
    let last_seq = store.last_inbox_seq()?;
    let fanout = fanout::Fanout::new(last_seq);
    let mut courier = courier::Courier::default();
    courier.hand_off_after(carry.handoff_after);
    courier.load(store.outbox()?);
    let carrying = carrying::Carrying::load(carry, store.carried()?);
    let consent = consent::Consent::load(store.as_ref())?;
    let unread = unread::Unread::load(store.as_ref())?;
    let profiles = profiles::Profiles::load(store.as_ref(), preset, local_directory)?;
    let taints = taint::Taints::load(store.as_ref())?;
    let limits = (wake.max_runs, wake.run_limit);
    let runs = runs::Runs::load(store.as_ref(), limits, &home, now())?;
    let receipts = receipts::Receipts::load(store.as_ref())?;
    let wakes = wakes::Wakes::load(store.as_ref(), wake, home)?;
    let (presence_tx, presence) = mpsc::unbounded_channel();
    let bus_queue = bus::Queue::new(judge, store.broadcasts()?);
    let mut mail = Mail {
        clerk: Clerk {
            shared: Shared {
                store,
                dir: directory,
                log: AuditLog::new(commit),
            },
            net,
            later: Later {
                flushed: flushed_tx,
                tasks: JoinSet::new(),
            },
        },
        post: post::Post {
            mailroom: mailroom::Mailroom::new(me.clone(), lifetime),
            courier,
            inbox: inbox::Inbox::new(me, last_seq).replies_per_ask(replies_per_ask),
            unread,
            receipts,
            carrying,
            fanout,
        },
        consent,
        guard: guard::Guard {
            loops: loops::Loops::new(loops, taints),
            retention: retention::Retention::new(audit_retention, Instant::now()),
        },
        bus: bus::Bus {
            queue: bus_queue,
            profiles,
        },
        wake: wake::Wake { wakes, runs },
    };
    mail.ready();
    let (events, newest, summary) = mail.post.fanout.ends();
    let handle = MailHandle {
        tx,
        presence: presence_tx,
        events,
        newest,
        summary,
    };
    let inboxes = Inboxes {
        rx,
        link,
        flushed,
        presence,
    };
    Ok((handle, mail.run(inboxes, cancel)))
}
