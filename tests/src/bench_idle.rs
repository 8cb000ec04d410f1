//! `agentmesh-bench idle`: what a daemon costs while nothing happens, in
//! a team of N on loopback (every member connected to every other, as a
//! team is).
//!
//! - **Ready**: a few members are stopped and started again, each timed
//!   from starting the process to its socket's first `status` answer
//!   (asked every millisecond), and then to its connections to every
//!   other member being back.
//! - **Idle**: with the team meshed again, every daemon's CPU time
//!   (utime + stime of `/proc/PID/stat`) over the idle seconds, as a
//!   percentage of one core, and its resident memory after them
//!   (VmRSS; RssAnon, the daemon's own, and RssFile, mostly the mapped
//!   binary shared with every other agentmesh process).

use std::time::{Duration, Instant};

use agentmesh_node::api::WhoKind;

use crate::bench_convergence::{connected_members, team_of, wait_meshed};
use crate::bench_messaging::proc_status_mib;
use crate::{ApiClient, Node, wait_for, who};

/// Members stopped and started again for the ready figures.
const RESTARTS: usize = 5;

/// The figures.
#[derive(Debug, serde::Serialize)]
pub struct Figures {
    /// Daemons in the team.
    pub nodes: usize,
    /// Idle seconds measured.
    pub seconds: u64,
    /// Start to the socket's first answer: median of the restarts, ms.
    pub ready_ms: f64,
    /// ... the slowest.
    pub ready_max_ms: f64,
    /// Start to connected to every other member again: median, ms.
    pub meshed_ms: f64,
    /// Resident memory after the idle seconds: median daemon, MiB.
    pub rss_mib: f64,
    /// ... the largest.
    pub rss_max_mib: f64,
    /// The median daemon's own memory (RssAnon), MiB.
    pub rss_anon_mib: f64,
    /// The median daemon's mapped files (RssFile: its binary's code and
    /// data, shared with the other agentmesh processes), MiB.
    pub rss_file_mib: f64,
    /// CPU time over the idle seconds, % of one core: the mean daemon.
    pub cpu_percent: f64,
    /// ... the busiest.
    pub cpu_max_percent: f64,
}

/// A process's CPU time so far (user + system), seconds.
///
/// # Panics
/// If the process is gone: a dead daemon must not read as an idle one.
pub fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("process {pid} is gone (its CPU time can't be read): {e}"));
    // Fields after the command name, which is in parentheses and may
    // hold spaces: utime and stime are the 14th and 15th of the line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |i: usize| -> u64 {
        rest.split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("/proc/{pid}/stat has no field {}: {stat}", i + 3))
    };
    (field(11) + field(12)) as f64 / clock_ticks()
}

/// Clock ticks a second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the benchmark: a team of `nodes`, idle for `seconds`.
pub fn run(nodes: usize, seconds: u64) -> Figures {
    assert!(nodes >= 2, "an idle team needs at least 2 daemons");
    let mut team = team_of(nodes);
    wait_meshed(&team);

    let mut ready = vec![];
    let mut meshed = vec![];
    let others = nodes - 1;
    for node in team.iter_mut().skip(1).take(RESTARTS) {
        node.stop();
        let took = node.start_timed();
        let began = Instant::now() - took;
        let mut c = ApiClient::connect_at(&node.home(), who(WhoKind::Human, "bench"));
        wait_for("a restarted member to reach every other again", || {
            (connected_members(&mut c) == others).then_some(())
        });
        ready.push(took.as_secs_f64() * 1000.0);
        meshed.push(began.elapsed().as_secs_f64() * 1000.0);
    }
    wait_meshed(&team);

    eprintln!("(idle for {seconds} s)");
    let pids: Vec<i32> = team.iter().map(Node::pid).collect();
    let before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let began = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds)); // the idle time measured
    let elapsed = began.elapsed().as_secs_f64();
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(p, b)| (cpu_seconds(*p) - b) / elapsed * 100.0)
        .collect();
    let mem = |field: &str| {
        pids.iter()
            .map(|p| proc_status_mib(*p, field))
            .collect::<Vec<f64>>()
    };
    let rss = mem("VmRSS");
    Figures {
        nodes,
        seconds,
        ready_ms: median(ready.clone()),
        ready_max_ms: ready.iter().copied().fold(0.0, f64::max),
        meshed_ms: median(meshed),
        rss_mib: median(rss.clone()),
        rss_max_mib: rss.iter().copied().fold(0.0, f64::max),
        rss_anon_mib: median(mem("RssAnon")),
        rss_file_mib: median(mem("RssFile")),
        cpu_percent: cpu.iter().sum::<f64>() / cpu.len() as f64,
        cpu_max_percent: cpu.iter().copied().fold(0.0, f64::max),
    }
}

/// The figures as lines, each beside its target.
pub fn print(f: &Figures) {
    println!(
        "idle: {} daemons on loopback in one team, every member connected to every other",
        f.nodes
    );
    println!(
        "  ready (start to the socket's first answer): median {:.1} ms (target < 100), slowest {:.1} ms of {RESTARTS} restarts; connected to all others again after {:.0} ms",
        f.ready_ms, f.ready_max_ms, f.meshed_ms
    );
    println!(
        "  CPU over {} idle seconds: {:.2} % of a core, the mean daemon (target < 0.5); busiest {:.2} %",
        f.seconds, f.cpu_percent, f.cpu_max_percent
    );
    println!(
        "  memory: median {:.1} MiB (its own {:.1} MiB, mapped files {:.1} MiB), largest {:.1} MiB",
        f.rss_mib, f.rss_anon_mib, f.rss_file_mib, f.rss_max_mib
    );
}
