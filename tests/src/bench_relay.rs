//! `agentmesh-bench relay`: what one relay process holds per idle
//! reservation, and how fast it opens circuits.
//!
//! ```text
//!  clients (this process, one swarm each, from 127.0.x.y sources,
//!  8 per source: the default per-IP cap)
//!     ── TCP, Noise, yamux, identify, ping ──> agentmesh-relay (a process)
//!     ── reserve, then stay idle ──>           its RSS: before / after
//!  then: client i ── circuit through the relay ──> client j, one ping over
//!        it, closed; as many at once as the relay's circuit caps allow
//! ```
//!
//! The relay is the real binary (`target/release/agentmesh-relay` beside
//! this one), started with its defaults except the global limits, raised to
//! hold every client (`--max-reservations`, `--max-connections`,
//! `--max-circuits`). Each client is a standard libp2p relay client, as the
//! daemon's is (TCP, Noise, yamux, identify, ping), so the relay holds for
//! it what it holds for a daemon. The open-file limit is raised to its hard
//! limit first (the relay inherits it).

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::multiaddr::Protocol;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, PeerId, Swarm, identify, noise, ping, relay, yamux};
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::bench_messaging::rss_mib;

/// Reservations one source holds: the relay's default per-IP cap.
pub const PER_SOURCE: usize = 8;

/// Handshakes under way at once (the relay admits 128 pending).
const CONNECTING_AT_ONCE: usize = 64;

/// How long the held reservations are watched, idle, for the relay's CPU.
const IDLE_WINDOW: Duration = Duration::from_secs(20);

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Reservations asked for.
    pub asked: usize,
    /// Reservations held when the memory was read.
    pub reservations: usize,
    /// Sources (127.0.x.y addresses) they came from.
    pub sources: usize,
    /// Seconds from the first dial to the last reservation.
    pub reserve_s: f64,
    /// The relay's resident memory before any client, bytes.
    pub rss_bytes_before: u64,
    /// ... holding the reservations, idle, bytes.
    pub rss_bytes_after: u64,
    /// (after − before) / reservations.
    pub rss_bytes_per_reservation: f64,
    /// The relay's CPU while holding them idle (pings, renewals), percent
    /// of one core.
    pub relay_cpu_percent: f64,
    /// Circuits opened, each used by one ping and closed.
    pub circuits: usize,
    /// Circuits opened and used a second.
    pub circuits_per_s: f64,
    /// The relay's CPU while opening them, percent of one core.
    pub relay_cpu_percent_circuits: f64,
    /// The open-file limit the run had (raised to its hard limit).
    pub open_file_limit: u64,
}

#[derive(NetworkBehaviour)]
struct Client {
    relay: relay::client::Behaviour,
    identify: identify::Behaviour,
    ping: ping::Behaviour,
}

/// What a client task is asked to do.
enum Ask {
    /// Open a circuit to `peer` through the relay at `via`, ping it once,
    /// close it; answer whether it worked.
    Circuit {
        via: Multiaddr,
        peer: PeerId,
        done: oneshot::Sender<bool>,
    },
}

/// Raises the open-file limit to the hard limit; the limit now.
pub fn raise_open_files() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        eprintln!("raised the open-file limit from {soft} to {hard} (the relay inherits it)");
        return hard;
    }
    soft
}

/// A process's CPU time (user + system), seconds.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: state is field 3, utime 14,
    // stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    (ticks(14) + ticks(15)) / hz
}

fn rss_bytes(pid: u32) -> u64 {
    (rss_mib(pid as i32) * 1024.0 * 1024.0) as u64
}

/// The relay process, killed on drop.
struct RelayChild(Child);

impl Drop for RelayChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_relay(dir: &std::path::Path, clients: usize, circuits: usize) -> (RelayChild, Multiaddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("/ip4/127.0.0.1/tcp/{port}");
    // The key first (peer-id creates it), then the relay reading it.
    let id = Command::new(crate::natlab::relay_bin())
        .args([
            "--identity",
            dir.join("relay.key").to_str().unwrap(),
            "peer-id",
        ])
        .output()
        .unwrap();
    let peer: PeerId = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
    let mut command = Command::new(crate::natlab::relay_bin());
    command
        .args([
            "--identity",
            dir.join("relay.key").to_str().unwrap(),
            "--listen",
            &listen,
            "--external-addr",
            &listen,
            "--max-reservations",
            &(clients + 16).to_string(),
            "--max-connections",
            &(clients + 64).to_string(),
            "--max-circuits",
            &circuits.max(16).to_string(),
            "--log-format",
            "json",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(dir.join("relay.log"))
                .map_or_else(|_| Stdio::null(), Stdio::from),
        );
    crate::reaper::adopt(&mut command);
    let child = RelayChild(
        command
            .spawn()
            .expect("the relay binary (build it with --release)"),
    );
    let addr: Multiaddr = format!("{listen}/p2p/{peer}").parse().unwrap();
    crate::wait_for("the relay to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    });
    (child, addr)
}

/// The `n`th source address: 127.0.1.1, 127.0.1.2, … (skipping .0 and
/// .255 of each /24).
fn source(n: usize) -> Ipv4Addr {
    let hosts = 254;
    Ipv4Addr::new(127, 0, 1 + (n / hosts) as u8, 1 + (n % hosts) as u8)
}

fn client_swarm(from: Ipv4Addr) -> Swarm<Client> {
    libp2p::SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_other_transport(|key| crate::from_ip::upgraded(from.into(), key))
        .unwrap()
        .with_relay_client(noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|key, relay| Client {
            relay,
            identify: identify::Behaviour::new(identify::Config::new(
                agentmesh_protocol::IDENTIFY_PROTOCOL.into(),
                key.public(),
            )),
            ping: ping::Behaviour::new(ping::Config::new()),
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(3600)))
        .build()
}

/// One client: reserves on `relay`, says so on `reserved`, then serves
/// [`Ask`]s until the run ends.
async fn client(
    mut swarm: Swarm<Client>,
    relay: Multiaddr,
    reserved: mpsc::Sender<PeerId>,
    mut asks: mpsc::Receiver<Ask>,
    connecting: Arc<Semaphore>,
) {
    let me = *swarm.local_peer_id();
    let permit = connecting.acquire_owned().await.ok();
    swarm
        .listen_on(relay.clone().with(Protocol::P2pCircuit))
        .unwrap();
    let mut permit = permit;
    let mut circuit: Option<(PeerId, oneshot::Sender<bool>)> = None;
    loop {
        tokio::select! {
            ask = asks.recv() => match ask {
                Some(Ask::Circuit { via, peer, done }) => {
                    let addr = via.with(Protocol::P2pCircuit).with(Protocol::P2p(peer));
                    let opts = libp2p::swarm::dial_opts::DialOpts::peer_id(peer)
                        .addresses(vec![addr])
                        .condition(libp2p::swarm::dial_opts::PeerCondition::Always)
                        .build();
                    if swarm.dial(opts).is_err() {
                        let _ = done.send(false);
                    } else {
                        circuit = Some((peer, done));
                    }
                }
                None => return,
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::Behaviour(ClientEvent::Relay(
                    relay::client::Event::ReservationReqAccepted { renewal: false, .. },
                )) => {
                    permit.take();
                    let _ = reserved.send(me).await;
                }
                SwarmEvent::ListenerClosed { .. } => {
                    permit.take();
                }
                SwarmEvent::Behaviour(ClientEvent::Ping(ping::Event { peer, connection, result: Ok(_) }))
                    if circuit.as_ref().is_some_and(|(p, _)| *p == peer) =>
                {
                    if let Some((_, done)) = circuit.take() {
                        let _ = done.send(true);
                    }
                    swarm.close_connection(connection);
                }
                SwarmEvent::OutgoingConnectionError { peer_id: Some(p), .. }
                    if circuit.as_ref().is_some_and(|(c, _)| *c == p) =>
                {
                    if let Some((_, done)) = circuit.take() {
                        let _ = done.send(false);
                    }
                }
                _ => {}
            },
        }
    }
}

/// Runs the benchmark: `clients` idle reservations, then `circuits`
/// circuits.
pub fn run(clients: usize, circuits: usize) -> Figures {
    let open_file_limit = raise_open_files();
    let need = (clients as u64) * 3 + 256;
    if open_file_limit < need {
        eprintln!(
            "warning: the open-file limit ({open_file_limit}) is under the ~{need} this run needs; raise it (ulimit -Hn) or ask for fewer"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let (relay, addr) = start_relay(dir.path(), clients, circuits);
    let pid = relay.0.id();
    std::thread::sleep(Duration::from_secs(1));
    let rss_bytes_before = rss_bytes(pid);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Each client says "reserved" once.
    let (reserved_tx, mut reserved_rx) = mpsc::channel(clients.max(1));
    // Every client task, ended when this ends (dropped with it).
    let mut tasks = tokio::task::JoinSet::new();
    let connecting = Arc::new(Semaphore::new(CONNECTING_AT_ONCE));
    let mut handles = vec![];
    let start = Instant::now();
    let mut peers = vec![];
    rt.block_on(async {
        for n in 0..clients {
            let swarm = client_swarm(source(n / PER_SOURCE));
            // The driver asks one circuit of a client at a time.
            let (tx, rx) = mpsc::channel(2);
            peers.push(*swarm.local_peer_id());
            handles.push(tx);
            tasks.spawn(client(
                swarm,
                addr.clone(),
                reserved_tx.clone(),
                rx,
                Arc::clone(&connecting),
            ));
        }
    });
    let mut held = 0;
    let reserve_s = rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60 + clients as u64 / 20);
        while held < clients {
            match tokio::time::timeout_at(deadline, reserved_rx.recv()).await {
                Ok(Some(_)) => {
                    held += 1;
                    if held % 1000 == 0 {
                        eprintln!(
                            "{held} of {clients} reserved ({:.1} s)",
                            start.elapsed().as_secs_f64()
                        );
                    }
                }
                _ => break,
            }
        }
        start.elapsed().as_secs_f64()
    });
    if held < clients {
        eprintln!("only {held} of {clients} reservations were granted in time");
        if let Ok(log) = std::fs::read_to_string(dir.path().join("relay.log")) {
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            eprintln!("the relay's last words: {tail:#?}");
        }
    }
    // Idle: the relay pings and the clients renew; nothing else.
    let cpu0 = cpu_s(pid);
    let idle_from = Instant::now();
    rt.block_on(async { tokio::time::sleep(IDLE_WINDOW).await });
    let relay_cpu_percent = (cpu_s(pid) - cpu0) / idle_from.elapsed().as_secs_f64() * 100.0;
    let rss_bytes_after = rss_bytes(pid);
    eprintln!(
        "{held} reservations held; the relay's memory {:.1} MiB → {:.1} MiB",
        rss_bytes_before as f64 / 1048576.0,
        rss_bytes_after as f64 / 1048576.0
    );
    // Circuits: client i to client i + half, as many at once as the
    // per-source cap lets every source have (one each).
    let circuits = if held < 2 { 0 } else { circuits };
    let cpu0 = cpu_s(pid);
    let from = Instant::now();
    let opened = rt.block_on(async {
        let mut opened = 0;
        let sources = held.div_ceil(PER_SOURCE).max(1);
        let at_once = 16.min(circuits.max(1)).min(sources * 2);
        let mut pending = futures::stream::FuturesUnordered::new();
        let mut next = 0;
        while opened < circuits && (next < circuits || !pending.is_empty()) {
            while pending.len() < at_once && next < circuits {
                // Sources spread: client k·PER_SOURCE opens, each from its
                // own source.
                // Sources first, then the next client of each: the
                // circuits in flight come from different clients, at most
                // two from a source (the relay lets a source have 4).
                let source = next % sources;
                let i = (source * PER_SOURCE + (next / sources) % PER_SOURCE) % held;
                // Another peer each time: a pair's last circuit may still
                // be closing.
                let j = (i + 1 + next % (held - 1)) % held;
                let (done, answer) = oneshot::channel();
                let _ = handles[i].try_send(Ask::Circuit {
                    via: addr.clone(),
                    peer: peers[j],
                    done,
                });
                pending.push(tokio::time::timeout(Duration::from_secs(20), answer));
                next += 1;
            }
            match pending.next().await {
                Some(Ok(Ok(true))) => opened += 1,
                Some(_) => {}
                None => break,
            }
        }
        opened
    });
    let took = from.elapsed().as_secs_f64();
    let relay_cpu_percent_circuits = (cpu_s(pid) - cpu0) / took * 100.0;
    drop(handles);
    rt.block_on(async { tasks.shutdown().await });
    drop(rt);
    drop(relay);
    Figures {
        asked: clients,
        reservations: held,
        sources: clients.div_ceil(PER_SOURCE),
        reserve_s,
        rss_bytes_before,
        rss_bytes_after,
        rss_bytes_per_reservation: rss_bytes_after.saturating_sub(rss_bytes_before) as f64
            / held.max(1) as f64,
        relay_cpu_percent,
        circuits: opened,
        circuits_per_s: opened as f64 / took,
        relay_cpu_percent_circuits,
        open_file_limit,
    }
}
