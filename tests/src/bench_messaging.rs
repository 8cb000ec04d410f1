//! `agentmesh-bench messaging`: throughput, latency and memory of real
//! daemons on loopback, next to the raw transport and the crypto floor.
//!
//! With `AGENTMESH_BENCH_SENDER_RESTART` set, the sending daemon is also
//! restarted after the throughput phase and its memory measured again (a
//! diagnostic: how much of its memory is state that survives a restart).
//! `AGENTMESH_BENCH_CACHE_MIB=N` runs both daemons with `store.cache_mib`
//! N (another diagnostic: what sled's cache costs and buys).

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentmesh_node::api::{Event, WhoKind};
use agentmesh_node::net::BehaviourEvent;
use agentmesh_node::wire::{MailOutcome, MailReply, MailRequest};
use agentmesh_protocol::{Body, Header, Identity, Kind, MessageId, TeamId, Timestamp, Who};
use futures::StreamExt;
use libp2p::request_response;
use libp2p::swarm::SwarmEvent;

use crate::{ApiClient, Node, join, wait_for, wait_for_within, who};

/// Concurrent senders in the throughput phase: enough clients that the
/// daemon's group commit has company.
const SENDERS: usize = 128;
/// Offered load of the latency phase.
const LATENCY_RATE: u32 = 100;

/// The figures.
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    /// Messages in the throughput phase.
    pub messages: usize,
    /// Sustained send-to-inbox throughput, messages/s.
    pub throughput_per_s: f64,
    /// The same machines' libp2p request-response, no sealing or storage.
    pub raw_transport_per_s: f64,
    /// seal+sign and verify+open in-process, per second, one core.
    pub crypto_floor_per_s: f64,
    /// The same loop on two threads at once, their rates summed: what
    /// both cores of a 2-core machine allow (the headroom above the
    /// one-core floor).
    pub crypto_floor_2core_per_s: f64,
    /// Send-to-inbox latency at 100 messages/s: median.
    pub p50_ms: f64,
    /// ... and 99th percentile.
    pub p99_ms: f64,
    /// Messages in the latency phase (`--latency-messages`).
    pub latency_messages: usize,
    /// The receiving daemon's resident memory after the run, a full read
    /// of its inbox and a restart (the largest of the three), MiB.
    pub daemon_rss_mib: f64,
    /// The sending daemon's resident memory after the run, MiB.
    pub sender_rss_mib: f64,
    /// The receiver's memory at each step.
    #[serde(flatten)]
    pub receiver: ReceiverMemory,
}

/// The receiving daemon's resident memory, MiB, at each step after the
/// throughput phase.
#[derive(Debug, serde::Serialize)]
pub struct ReceiverMemory {
    /// Once every message is in its inbox.
    pub receiver_rss_mib_after_run: f64,
    /// After `agentmesh inbox --json` read every message (marking each
    /// read), the daemon still running.
    pub receiver_rss_mib_after_read: f64,
    /// After that, stopped and started again: what survives in the store.
    pub receiver_rss_mib_after_restart: f64,
    /// How many messages the read returned.
    pub messages_read: usize,
}

/// `messaging --memory`: the throughput phase alone, then the receiver's
/// full inbox read.
#[derive(Debug, serde::Serialize)]
pub struct Memory {
    /// Messages in the throughput phase.
    pub messages: usize,
    /// Their send-to-inbox throughput, messages/s.
    pub throughput_per_s: f64,
    /// The sending daemon's resident memory once all were delivered, MiB.
    pub sender_rss_mib: f64,
    /// The receiver's.
    #[serde(flatten)]
    pub receiver: ReceiverMemory,
}

/// A process's resident memory (VmRSS), MiB.
///
/// # Panics
/// If the process is gone: a figure of 0 would read as a daemon that
/// holds nothing.
pub fn rss_mib(pid: i32) -> f64 {
    proc_status_mib(pid, "VmRSS")
}

/// A memory figure of `/proc/PID/status` (`VmRSS`, `VmHWM`…), MiB.
///
/// # Panics
/// If the process is gone or has no such field.
pub fn proc_status_mib(pid: i32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("process {pid} is gone (its memory can't be read): {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .unwrap_or_else(|| panic!("/proc/{pid}/status has no {field}"))
}

/// Counts the messages arriving at `node` and when each did.
pub(crate) struct Observer {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Observer {
    pub(crate) fn start(node: &Node) -> Observer {
        let mut c = ApiClient::attach(node, who(WhoKind::Agent, "observer"), None);
        let home = node.home();
        let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let sink = seen.clone();
        std::thread::spawn(move || {
            loop {
                match c.next_event_forever() {
                    Some(Event::Message { message }) => {
                        sink.lock()
                            .expect("not poisoned")
                            .entry(message.id)
                            .or_insert_with(Instant::now);
                    }
                    // A client that fell behind attaches again after the
                    // last message it was sent; the daemon replays the rest.
                    // They count as arriving now (later than they did, which
                    // only makes the figures worse).
                    Some(Event::Lagged { after_seq, .. }) => {
                        c = ApiClient::attach_at(
                            &home,
                            who(WhoKind::Agent, "observer"),
                            None,
                            Some(after_seq),
                        );
                    }
                    Some(_) => {}
                    None => return,
                }
            }
        });
        Observer { seen }
    }

    pub(crate) fn count(&self) -> usize {
        self.seen.lock().expect("not poisoned").len()
    }

    pub(crate) fn at(&self, id: &str) -> Option<Instant> {
        self.seen.lock().expect("not poisoned").get(id).copied()
    }
}

pub(crate) fn text_1k(i: usize) -> String {
    let mut t = format!("message {i} ");
    while t.len() < 1024 {
        t.push('x');
    }
    t
}

/// The crypto floor: seal+sign then verify+open of a 1 KiB body, per second.
pub(crate) fn crypto_floor() -> f64 {
    let mut rng = rand::rng();
    let (a, b) = (Identity::generate(&mut rng), Identity::generate(&mut rng));
    let now = Timestamp::from_unix_millis(1_800_000_000_000);
    let header = Header {
        id: MessageId([1; 16]),
        team: TeamId([2; 32]),
        from: a.peer_id(),
        to: b.peer_id(),
        kind: Kind::Tell,
        in_reply_to: None,
        thread: MessageId([1; 16]),
        hop: 0,
        taint: false,
        sent_at: now,
        expires_at: now.saturating_add(Duration::from_secs(3600)),
    };
    let body = Body {
        who: Who {
            kind: agentmesh_protocol::WhoKind::Agent,
            name: "bench".into(),
            session_id: None,
            task: None,
        },
        from_mailbox: None,
        to_mailbox: None,
        text: text_1k(0),
        attachments: vec![],
    };
    // 2,000 rounds. An unoptimised build (the suite's) stops after half
    // a second once 20 have run: its figure only has to exist.
    let enough = if cfg!(debug_assertions) {
        Duration::from_millis(500)
    } else {
        Duration::MAX
    };
    let (most, least) = (2000, 20);
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < most && (rounds < least || start.elapsed() < enough) {
        let env = agentmesh_protocol::seal(&a, &b.x25519_public(), &header, &body, &mut rng)
            .expect("seals");
        agentmesh_protocol::open(&env.to_wire(), &b, now).expect("opens");
        rounds += 1;
    }
    f64::from(rounds) / start.elapsed().as_secs_f64()
}

/// [`crypto_floor`] on two threads at once, their rates summed.
pub(crate) fn crypto_floor_2core() -> f64 {
    std::thread::scope(|s| {
        let both = [s.spawn(crypto_floor), s.spawn(crypto_floor)];
        both.into_iter()
            .map(|t| t.join().expect("a crypto floor thread"))
            .sum()
    })
}

/// The raw transport: the daemon's own swarm, in-process, carrying batches
/// of 1 KiB blobs over loopback TCP to a peer that answers at once.
fn raw_transport(messages: usize) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut rng = rand::rng();
        let (ia, ib) = (Identity::generate(&mut rng), Identity::generate(&mut rng));
        let mut a = agentmesh_node::net::build(agentmesh_node::libp2p_keypair(&ia), false)
            .expect("a swarm");
        let mut b = agentmesh_node::net::build(agentmesh_node::libp2p_keypair(&ib), false)
            .expect("a swarm");
        b.listen_on("/ip4/127.0.0.1/tcp/0".parse().expect("an address"))
            .expect("listens");
        let addr = loop {
            if let SwarmEvent::NewListenAddr { address, .. } = b.select_next_some().await {
                break address;
            }
        };
        tokio::spawn(async move {
            loop {
                if let SwarmEvent::Behaviour(BehaviourEvent::Mail(
                    request_response::Event::Message {
                        message:
                            request_response::Message::Request {
                                request, channel, ..
                            },
                        ..
                    },
                )) = b.select_next_some().await
                {
                    let outcomes = vec![MailOutcome::accepted(false); request.envelopes.len()];
                    let _ = b
                        .behaviour_mut()
                        .mail
                        .send_response(channel, MailReply { outcomes });
                }
            }
        });
        let batch = agentmesh_node::wire::MAX_BATCH_ENVELOPES.min(600 * 1024 / 1100);
        let blob = serde_bytes::ByteBuf::from(vec![7u8; 1100]);
        let peer = ib.peer_id();
        a.add_peer_address(peer, addr);
        let mut done = 0;
        let mut in_flight = 0;
        let start = Instant::now();
        // Two batches in flight, as the courier keeps one per peer plus the
        // next one ready.
        while done < messages {
            while in_flight < 2 && done + in_flight * batch < messages {
                a.behaviour_mut().mail.send_request(
                    &peer,
                    MailRequest {
                        envelopes: vec![blob.clone(); batch],
                    },
                );
                in_flight += 1;
            }
            if let SwarmEvent::Behaviour(BehaviourEvent::Mail(request_response::Event::Message {
                message: request_response::Message::Response { response, .. },
                ..
            })) = a.select_next_some().await
            {
                done += response.outcomes.len();
                in_flight -= 1;
            }
        }
        done as f64 / start.elapsed().as_secs_f64()
    })
}

/// Two daemons of two owners on loopback, in one team: a sender and a
/// receiver.
pub(crate) fn pair() -> (Node, Node) {
    let mut a = Node::new("sender");
    let mut b = Node::new("receiver");
    a.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
    b.listen = vec!["/ip4/127.0.0.1/tcp/0".into()];
    // Diagnostic: both daemons with another sled cache (`store.cache_mib`).
    if let Ok(mib) = std::env::var("AGENTMESH_BENCH_CACHE_MIB") {
        for n in [&a, &b] {
            n.ok(&["config", "set", "store.cache_mib", &mib]);
        }
    }
    a.start();
    b.start();
    a.ok(&["team", "create", "bench", "--owner", "Ada"]);
    join(&a, &b, "Ada");
    (a, b)
}

/// Throughput: [`SENDERS`] clients of `a` sending about `messages` 1 KiB
/// messages to the receiver at once, as fast as answers come, until the
/// `observer` of the receiver has seen them all; (messages a second, how
/// many were sent).
pub(crate) fn throughput(a: &Node, observer: &Observer, messages: usize) -> (f64, usize) {
    let before = observer.count();
    let start = Instant::now();
    let per = messages.div_ceil(SENDERS);
    let threads: Vec<_> = (0..SENDERS)
        .map(|s| {
            let mut c = ApiClient::attach(a, who(WhoKind::Agent, &format!("s{s}")), None);
            std::thread::spawn(move || {
                for i in 0..per {
                    c.send("@receiver", &text_1k(s * per + i))
                        .expect("send accepted");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a sender thread");
    }
    let sends_done = start.elapsed();
    let total = per * SENDERS;
    wait_for_within(
        "every message to reach the receiver's inbox",
        Duration::from_secs(3600),
        || (observer.count() >= before + total).then_some(()),
    );
    let per_s = total as f64 / start.elapsed().as_secs_f64();
    eprintln!(
        "(sends answered after {:.1} s; all in the inbox after {:.1} s)",
        sends_done.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    (per_s, total)
}

/// Runs the whole benchmark with `messages` in the throughput phase and
/// `latency_messages` in the latency phase.
pub fn run(messages: usize, latency_messages: usize) -> Figures {
    let crypto_floor_per_s = crypto_floor();
    let crypto_floor_2core_per_s = crypto_floor_2core();
    let raw_transport_per_s = raw_transport(messages.clamp(10_000, 50_000));

    let (mut a, mut b) = pair();
    let observer = Observer::start(&b);
    let (throughput_per_s, total) = throughput(&a, &observer, messages);
    let sender_rss_mib = rss_mib(a.pid());
    if std::env::var_os("AGENTMESH_BENCH_SENDER_RESTART").is_some() {
        // Diagnostic: how much of the sender's memory survives a restart.
        a.stop();
        a.start();
        eprintln!(
            "(sender memory: {sender_rss_mib:.1} MiB after the run, {:.1} MiB after a restart)",
            rss_mib(a.pid())
        );
    }

    // Latency at a fixed offered load.
    let mut c = ApiClient::attach(&a, who(WhoKind::Agent, "paced"), None);
    let mut sent = vec![];
    let interval = Duration::from_secs(1) / LATENCY_RATE;
    let begin = Instant::now();
    for i in 0..latency_messages {
        let due = begin + interval * i as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait); // pacing the offered load, not synchronisation
        }
        let at = Instant::now();
        let id = c.send("@receiver", &text_1k(i)).expect("send accepted");
        sent.push((id, at));
    }
    let latencies: Vec<f64> = wait_for("the paced messages to arrive", || {
        let l: Option<Vec<f64>> = sent
            .iter()
            .map(|(id, at)| {
                observer
                    .at(id)
                    .map(|r| r.duration_since(*at).as_secs_f64() * 1000.0)
            })
            .collect();
        l
    });
    let mut sorted = latencies;
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
    let (p50_ms, p99_ms) = (pct(0.50), pct(0.99));

    let receiver = receiver_memory(&mut b, total);
    let rss = receiver
        .receiver_rss_mib_after_run
        .max(receiver.receiver_rss_mib_after_read)
        .max(receiver.receiver_rss_mib_after_restart);

    Figures {
        messages: total,
        throughput_per_s,
        raw_transport_per_s,
        crypto_floor_per_s,
        crypto_floor_2core_per_s,
        p50_ms,
        p99_ms,
        latency_messages,
        daemon_rss_mib: rss,
        sender_rss_mib,
        receiver,
    }
}

/// `messaging --memory`: `messages` through the throughput phase, the
/// sender's memory once all are delivered, then the receiver's after the
/// run, a full inbox read and a restart.
///
/// With `AGENTMESH_BENCH_HOLD` set to a path, the daemons are left
/// running after the read (the receiver's pid and home printed) until that file is removed: a
/// diagnostic, for a heap profiler or gdb to look at them.
pub fn memory(messages: usize) -> Memory {
    let (a, mut b) = pair();
    let observer = Observer::start(&b);
    let (throughput_per_s, total) = throughput(&a, &observer, messages);
    let sender_rss_mib = rss_mib(a.pid());
    let receiver = receiver_memory(&mut b, total);
    Memory {
        messages: total,
        throughput_per_s,
        sender_rss_mib,
        receiver,
    }
}

/// The receiver's memory after the run, after reading its whole inbox
/// (`total` messages at least) and after a restart.
fn receiver_memory(b: &mut Node, total: usize) -> ReceiverMemory {
    let after_run = rss_mib(b.pid());
    let read = b.inbox_all().len();
    assert!(
        read >= total,
        "the receiver's inbox holds {read} of {total}"
    );
    let after_read = rss_mib(b.pid());
    if let Some(hold) = std::env::var_os("AGENTMESH_BENCH_HOLD") {
        let hold = std::path::PathBuf::from(hold);
        std::fs::write(&hold, b.pid().to_string()).expect("the hold file is written");
        eprintln!(
            "(holding: receiver pid {} in {}, the sender beside it; remove {} to go on)",
            b.pid(),
            b.home().display(),
            hold.display()
        );
        while hold.exists() {
            std::thread::sleep(Duration::from_millis(200)); // a person's pace, not synchronisation
        }
    }
    b.stop();
    b.start();
    let after_restart = rss_mib(b.pid());
    eprintln!(
        "(receiver memory: {after_run:.1} MiB after the run, {after_read:.1} MiB after reading {read} messages, {after_restart:.1} MiB after a restart)"
    );
    ReceiverMemory {
        receiver_rss_mib_after_run: after_run,
        receiver_rss_mib_after_read: after_read,
        receiver_rss_mib_after_restart: after_restart,
        messages_read: read,
    }
}
