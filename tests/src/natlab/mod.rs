//! # The NAT lab
//!
//! Two hosts, each behind its own NAT router, and a public relay, built
//! from Linux network namespaces on this one machine, for tests and
//! benchmarks of relayed and hole-punched connections. `docs/natlab.md`
//! has the picture and the reasons; in short:
//!
//! ```text
//!                 pub: bridge br0, 198.51.100.0/24 (the "internet")
//!        ┌──────────────────────┼───────────────────────┐
//!  relay 198.51.100.1   router A wan 198.51.100.2   router B wan 198.51.100.3
//!  (agentmesh-relay)    router A lan 10.0.1.1       router B lan 10.0.2.1
//!                                │                       │
//!                        host A 10.0.1.2         host B 10.0.2.2
//! ```
//!
//! The relay has a namespace of its own ([`Host::Relay`]); `pub` holds
//! only the bridge and runs nothing. Each router masquerades what leaves
//! its WAN leg ([`Nat`]) and silently drops whatever arrives there
//! unsolicited, as home routers do. Forwarding is on in the two router
//! namespaces only; nothing is attached to the root namespace, and no
//! namespace has a route out of the lab, so nothing a test runs in it can
//! reach a real network.
//!
//! ```no_run
//! use agentmesh_tests::Node;
//! use agentmesh_tests::natlab::{Host, Nat, RelayProc, lab_or_skip};
//!
//! let Some(lab) = lab_or_skip("my_test", Nat::EndpointIndependent, Nat::Symmetric) else {
//!     return;
//! };
//! let relay = RelayProc::start(&lab, &["--max-circuits", "4"]);
//! let mut a = Node::new("alpha");
//! a.listen = vec!["/ip4/0.0.0.0/tcp/4001".into()];
//! a.wrapper = lab.wrapper(Host::A);
//! a.start();
//! a.ok(&["connect", &relay.tcp_addr()]);
//! // Dropping them kills the daemons and the relay, then removes every
//! // namespace (declared first, the lab is dropped last).
//! ```
//!
//! Making a lab needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip`
//! (iproute2) and `iptables` (Debian's `iptables`, the nf_tables backend
//! works). [`lab_or_skip`] turns "can't here" into a printed skip, except
//! under CI.
//!
//! Every namespace is named `amnat<pid>.<start>-<n>-<role>` (`start` the
//! process's start time, `n` counting the labs this process made), so labs
//! in parallel test threads and in concurrent test processes never
//! collide. A lab is torn down on drop, during a panic's unwinding too;
//! labs a killed process left behind (that process no longer running) are
//! removed by the next [`Lab::new`] anywhere.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::wait_for;

/// The relay's address on the public bridge.
pub const RELAY_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// Router A's WAN address: what the outside sees host A's traffic come from.
pub const ROUTER_A_WAN_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// Router B's WAN address.
pub const ROUTER_B_WAN_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);
/// Router A's LAN address, host A's default gateway.
pub const ROUTER_A_LAN_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 1);
/// Router B's LAN address, host B's default gateway.
pub const ROUTER_B_LAN_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
/// Host A's (private) address.
pub const HOST_A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 1, 2);
/// Host B's (private) address.
pub const HOST_B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The port [`RelayProc`] listens on, TCP and QUIC.
pub const RELAY_PORT: u16 = 4001;

/// The environment variable that points [`RelayProc`] at another
/// `agentmesh-relay` binary.
pub const RELAY_BIN_ENV: &str = "AGENTMESH_TEST_RELAY_BIN";

/// How long tearing down one namespace may wait for its processes to die.
const KILL_DEADLINE: Duration = Duration::from_secs(10);

/// How a router maps its LAN hosts' connections to its WAN address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nat {
    /// Endpoint-independent mapping: `MASQUERADE`, which keeps a host's
    /// source port when it is free, so every remote sees the same
    /// `WAN:port`. Hole punching works through it.
    EndpointIndependent,
    /// Symmetric: `MASQUERADE --random-fully`, a random source port for
    /// every new connection, so what the relay observes is useless to
    /// anyone else. Hole punching fails; relayed connections still work.
    Symmetric,
}

/// A machine in the lab that runs programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// Behind router A, at [`HOST_A_IP`].
    A,
    /// Behind router B, at [`HOST_B_IP`].
    B,
    /// On the public bridge with no NAT, at [`RELAY_IP`]: where
    /// [`RelayProc`] runs, and where a test can run any outside machine.
    Relay,
}

impl Host {
    /// This machine's own address.
    pub fn ip(self) -> Ipv4Addr {
        match self {
            Host::A => HOST_A_IP,
            Host::B => HOST_B_IP,
            Host::Relay => RELAY_IP,
        }
    }

    /// The address the public bridge sees this machine's traffic come
    /// from: its router's WAN address, or the relay's own.
    pub fn public_ip(self) -> Ipv4Addr {
        match self {
            Host::A => ROUTER_A_WAN_IP,
            Host::B => ROUTER_B_WAN_IP,
            Host::Relay => RELAY_IP,
        }
    }
}

/// Every namespace of a lab, for [`Lab::netns`] and [`Lab::command`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Netns {
    /// The public bridge; runs nothing.
    Public,
    /// The relay's machine ([`Host::Relay`]).
    Relay,
    /// Router A (NAT, forwarding on).
    RouterA,
    /// Router B.
    RouterB,
    /// Host A.
    HostA,
    /// Host B.
    HostB,
}

impl Netns {
    /// Every namespace, in the order a lab makes them.
    pub const ALL: [Netns; 6] = [
        Netns::Public,
        Netns::Relay,
        Netns::RouterA,
        Netns::RouterB,
        Netns::HostA,
        Netns::HostB,
    ];

    fn role(self) -> &'static str {
        match self {
            Netns::Public => "pub",
            Netns::Relay => "relay",
            Netns::RouterA => "ra",
            Netns::RouterB => "rb",
            Netns::HostA => "ha",
            Netns::HostB => "hb",
        }
    }

    fn of(host: Host) -> Netns {
        match host {
            Host::A => Netns::HostA,
            Host::B => Netns::HostB,
            Host::Relay => Netns::Relay,
        }
    }
}

/// The prefix of every lab namespace; then `<pid>.<start>-<n>-<role>`.
const PREFIX: &str = "amnat";

static LABS: AtomicU32 = AtomicU32::new(0);

/// A NAT lab: six network namespaces, torn down on drop (every process
/// in them killed, then the namespaces deleted).
#[derive(Debug)]
pub struct Lab {
    /// The namespaces made so far, in [`Netns::ALL`] order.
    made: Vec<String>,
    nat: (Nat, Nat),
}

/// Runs `program args`, in namespace `ns` if given; its stdout, or what
/// went wrong.
fn run(ns: Option<&str>, program: &str, args: &[&str]) -> Result<String, String> {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    };
    let shown = || match ns {
        Some(ns) => format!("`ip netns exec {ns} {program} {}`", args.join(" ")),
        None => format!("`{program} {}`", args.join(" ")),
    };
    let out = c
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", shown()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            shown(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(None, "ip", args)
}

/// The namespaces `ip netns list` shows, names only.
pub fn netns_list() -> Result<Vec<String>, String> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}

/// Kills every process in namespace `ns` with SIGKILL until none is left
/// (or [`KILL_DEADLINE`] passes), then deletes it.
fn destroy(ns: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let pids: Vec<i32> = ip(&["netns", "pids", ns])?
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        if start.elapsed() > KILL_DEADLINE {
            return Err(format!(
                "processes {pids:?} in namespace {ns} still run {KILL_DEADLINE:?} after SIGKILL"
            ));
        }
        for pid in pids {
            // Gone already is fine.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // A killed process leaves the namespace once it has exited (a
        // zombie is no longer in it); poll.
        std::thread::sleep(Duration::from_millis(10));
    }
    ip(&["netns", "del", ns]).map(drop)
}

/// The owner part of this process's namespace names: `<pid>.<start>`,
/// the start time telling a reused pid from the process that made a lab.
fn owner(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: the start time is the 22nd field, the
    // 20th after the command name (which may hold spaces).
    let start = stat.rsplit_once(") ")?.1.split_whitespace().nth(19)?;
    Some(format!("{pid}.{start}"))
}

/// Removes labs that processes no longer running left behind (a test
/// binary killed with SIGKILL never drops its labs).
fn sweep_stale() {
    let Ok(names) = netns_list() else { return };
    for ns in names {
        let Some(made_by) = ns
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        let Some(pid) = made_by
            .split('.')
            .next()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if owner(pid).as_deref() != Some(made_by)
            && let Err(e) = destroy(&ns)
            // Another lab being made sweeps too: gone is gone.
            && netns_list().is_ok_and(|l| l.contains(&ns))
        {
            eprintln!("natlab: cannot remove the stale namespace {ns}: {e}");
        }
    }
}

impl Lab {
    /// Makes a lab with host A behind a NAT of kind `a` and host B behind
    /// one of kind `b`. On failure, whatever was made is removed again and
    /// the error says which command failed and why.
    pub fn new(a: Nat, b: Nat) -> Result<Lab, String> {
        sweep_stale();
        let n = LABS.fetch_add(1, Ordering::Relaxed);
        let me = owner(std::process::id()).ok_or("cannot read /proc/self/stat")?;
        let mut lab = Lab {
            made: Vec::new(),
            nat: (a, b),
        };
        match lab.build(&format!("{PREFIX}{me}-{n}-")) {
            Ok(()) => Ok(lab),
            Err(why) => match lab.teardown() {
                Ok(()) => Err(why),
                Err(more) => Err(format!("{why}; then, cleaning up: {more}")),
            },
        }
    }

    fn build(&mut self, prefix: &str) -> Result<(), String> {
        for ns in Netns::ALL {
            let name = format!("{prefix}{}", ns.role());
            ip(&["netns", "add", &name])?;
            self.made.push(name);
            ip(&["-n", self.netns(ns), "link", "set", "lo", "up"])?;
        }
        let public = self.netns(Netns::Public);
        // The "internet": one bridge, every public machine a port on it.
        ip(&["-n", public, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", public, "link", "set", "br0", "up"])?;
        // Each veth is made inside its namespaces (`ip -n NS link add …
        // peer … netns OTHER`), never in the root namespace, so its names
        // only need to be unique within the lab.
        let plug = |ns: &str, dev: &str, port: &str, addr: &str| -> Result<(), String> {
            ip(&[
                "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", public,
            ])?;
            ip(&["-n", public, "link", "set", port, "master", "br0", "up"])?;
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"]).map(drop)
        };
        plug(
            self.netns(Netns::Relay),
            "eth0",
            "p-relay",
            &format!("{RELAY_IP}/24"),
        )?;
        for (router, host, wan, lan, host_ip, port, nat) in [
            (
                Netns::RouterA,
                Netns::HostA,
                ROUTER_A_WAN_IP,
                ROUTER_A_LAN_IP,
                HOST_A_IP,
                "p-ra",
                self.nat.0,
            ),
            (
                Netns::RouterB,
                Netns::HostB,
                ROUTER_B_WAN_IP,
                ROUTER_B_LAN_IP,
                HOST_B_IP,
                "p-rb",
                self.nat.1,
            ),
        ] {
            let (r, h) = (self.netns(router), self.netns(host));
            plug(r, "wan", port, &format!("{wan}/24"))?;
            ip(&[
                "-n", r, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", h,
            ])?;
            ip(&["-n", r, "addr", "add", &format!("{lan}/24"), "dev", "lan"])?;
            ip(&["-n", r, "link", "set", "lan", "up"])?;
            ip(&[
                "-n",
                h,
                "addr",
                "add",
                &format!("{host_ip}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", h, "link", "set", "eth0", "up"])?;
            ip(&["-n", h, "route", "add", "default", "via", &lan.to_string()])?;
            // The router has no default route: a packet for another LAN
            // (10.0.x) or anywhere else is unroutable on this internet, as
            // it is on the real one.
            run(Some(r), "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
            let iptables = |args: &[&str]| {
                run(Some(r), "iptables", args).map_err(|e| {
                    format!("{e} (is iptables installed? Debian: apt-get install iptables)")
                })
            };
            let mut masquerade = vec![
                "-t",
                "nat",
                "-A",
                "POSTROUTING",
                "-o",
                "wan",
                "-j",
                "MASQUERADE",
            ];
            if nat == Nat::Symmetric {
                masquerade.push("--random-fully");
            }
            iptables(&masquerade)?;
            // Unsolicited inbound is dropped without a word, on the router
            // itself (INPUT) and on the way to the host (FORWARD). Without
            // the INPUT rule the router's kernel answers an early SYN with
            // a RST, or keeps a conntrack entry for an early UDP packet
            // and remaps the host's port: hole punching then fails.
            for chain in ["INPUT", "FORWARD"] {
                iptables(&[
                    "-A",
                    chain,
                    "-i",
                    "wan",
                    "-m",
                    "conntrack",
                    "--ctstate",
                    "ESTABLISHED,RELATED",
                    "-j",
                    "ACCEPT",
                ])?;
                iptables(&["-A", chain, "-i", "wan", "-j", "DROP"])?;
            }
        }
        Ok(())
    }

    /// Kills every process in the lab and deletes its namespaces, last
    /// made first; tries them all, then says what failed.
    fn teardown(&mut self) -> Result<(), String> {
        let mut problems = Vec::new();
        while let Some(ns) = self.made.pop() {
            if let Err(e) = destroy(&ns) {
                problems.push(e);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// The name of namespace `ns`.
    pub fn netns(&self, ns: Netns) -> &str {
        let i = Netns::ALL.iter().position(|n| *n == ns).unwrap_or(0);
        &self.made[i]
    }

    /// The names of all the lab's namespaces.
    pub fn namespaces(&self) -> Vec<String> {
        self.made.clone()
    }

    /// The kind of NAT in front of `host` (`None` for [`Host::Relay`]).
    pub fn nat(&self, host: Host) -> Option<Nat> {
        match host {
            Host::A => Some(self.nat.0),
            Host::B => Some(self.nat.1),
            Host::Relay => None,
        }
    }

    /// The command to run a program on `host`: `ip netns exec NS`, for
    /// [`crate::Node::wrapper`].
    pub fn wrapper(&self, host: Host) -> Vec<String> {
        ["ip", "netns", "exec", self.netns(Netns::of(host))]
            .map(str::to_owned)
            .to_vec()
    }

    /// `program` as a command run in namespace `ns`, not yet started: to
    /// look at a router (`iptables -L -v -n`) or run a tool on a host.
    pub fn command(&self, ns: Netns, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.netns(ns), program]);
        c
    }

    /// Gives `host` the address `to` in place of `from` under whatever
    /// runs there, as a laptop that wakes on another network: the old
    /// address removed, the new one added, the default route through its
    /// router again. The router's NAT follows (it masquerades whatever
    /// leaves its WAN leg); what it tracked for the old address is left to
    /// time out, as a home router's is. Panics for [`Host::Relay`].
    pub fn renumber(&self, host: Host, from: Ipv4Addr, to: Ipv4Addr) -> Result<(), String> {
        let ns = self.netns(Netns::of(host));
        let gateway = match host {
            Host::A => ROUTER_A_LAN_IP,
            Host::B => ROUTER_B_LAN_IP,
            Host::Relay => panic!("the relay is not renumbered"),
        };
        ip(&[
            "-n",
            ns,
            "addr",
            "del",
            &format!("{from}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "addr", "add", &format!("{to}/24"), "dev", "eth0"])?;
        ip(&[
            "-n",
            ns,
            "route",
            "replace",
            "default",
            "via",
            &gateway.to_string(),
        ])
        .map(drop)
    }

    /// The relay's address, [`RELAY_IP`].
    pub fn relay_ip(&self) -> Ipv4Addr {
        RELAY_IP
    }

    /// `host`'s own address ([`Host::ip`]).
    pub fn host_ip(&self, host: Host) -> Ipv4Addr {
        host.ip()
    }

    /// The connections `host`'s router has translated and still tracks
    /// (TCP and UDP, host A's or B's only: not packets it dropped). Panics
    /// for [`Host::Relay`], which has no router.
    pub fn mappings(&self, host: Host) -> Vec<Mapping> {
        let table = run(
            Some(self.netns(Self::router_of(host))),
            "cat",
            &["/proc/net/nf_conntrack"],
        )
        .unwrap();
        table
            .lines()
            .filter_map(|line| {
                // `ipv4 2 tcp 6 431999 ESTABLISHED src=10.0.1.2
                // dst=198.51.100.1 sport=4001 dport=4001 src=198.51.100.1
                // dst=198.51.100.2 sport=4001 dport=4001 [ASSURED] …`: the
                // original direction, then the reply's.
                let words: Vec<&str> = line.split_whitespace().collect();
                let protocol = (*words.get(2)?).to_owned();
                let field = |key: &str, nth: usize| -> Option<&str> {
                    words.iter().filter_map(|w| w.strip_prefix(key)).nth(nth)
                };
                let addr = |ip: &str, port: &str, nth: usize| -> Option<SocketAddrV4> {
                    Some(SocketAddrV4::new(
                        field(ip, nth)?.parse().ok()?,
                        field(port, nth)?.parse().ok()?,
                    ))
                };
                let private = addr("src=", "sport=", 0)?;
                let remote = addr("dst=", "dport=", 0)?;
                let public = addr("dst=", "dport=", 1)?;
                (private.ip() == &host.ip() && public.ip() == &host.public_ip()).then_some(
                    Mapping {
                        protocol,
                        private,
                        public,
                        remote,
                    },
                )
            })
            .collect()
    }

    fn router_of(host: Host) -> Netns {
        match host {
            Host::A => Netns::RouterA,
            Host::B => Netns::RouterB,
            Host::Relay => panic!("the relay has no router"),
        }
    }

    /// How many packets arriving on the WAN leg of `host`'s router were
    /// dropped as unsolicited so far (the INPUT and FORWARD DROP rules'
    /// counters). Panics for [`Host::Relay`], which has no router.
    pub fn dropped_inbound(&self, host: Host) -> u64 {
        let rules = run(
            Some(self.netns(Self::router_of(host))),
            "iptables-save",
            &["-c", "-t", "filter"],
        )
        .unwrap();
        // Lines like `[3:180] -A INPUT -i wan -j DROP`.
        rules
            .lines()
            .filter(|l| l.ends_with("-i wan -j DROP"))
            .map(|l| {
                l.strip_prefix('[')
                    .and_then(|l| l.split(':').next())
                    .and_then(|p| p.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("unexpected iptables-save line: {l}"))
            })
            .sum()
    }
}

/// One connection a router has translated, as its connection tracking
/// table (`/proc/net/nf_conntrack` in its namespace) records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// `tcp` or `udp`.
    pub protocol: String,
    /// The host's side: its address and source port.
    pub private: SocketAddrV4,
    /// What the remote sees: the router's WAN address and the port the
    /// NAT chose (the same as the host's under
    /// [`Nat::EndpointIndependent`] when it was free, random under
    /// [`Nat::Symmetric`]).
    pub public: SocketAddrV4,
    /// The remote end.
    pub remote: SocketAddrV4,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            if std::thread::panicking() {
                eprintln!("natlab: cleaning up the lab failed: {e}");
            } else {
                panic!("natlab: cleaning up the lab failed: {e}");
            }
        }
    }
}

/// A lab, or `None` after printing
/// `SKIPPED {test}: cannot make network namespaces here: {why}` where one
/// can't be made (not root, no `ip` or `iptables`). Under CI (`CI=true`)
/// a skip is a failure: it panics instead.
pub fn lab_or_skip(test: &str, a: Nat, b: Nat) -> Option<Lab> {
    match Lab::new(a, b) {
        Ok(lab) => Some(lab),
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: cannot make network namespaces under CI: {why}"
            );
            eprintln!("SKIPPED {test}: cannot make network namespaces here: {why}");
            None
        }
    }
}

mod relay;
pub mod team;

pub use relay::*;
