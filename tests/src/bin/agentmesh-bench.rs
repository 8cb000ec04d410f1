//! `agentmesh-bench`: figures from real daemons on loopback.
//!
//! ```text
//! agentmesh-bench join [--runs N] [--json]
//! agentmesh-bench messaging [--messages N] [--latency-messages M] [--memory] [--json]
//! agentmesh-bench mcp [--sends N] [--json]
//! agentmesh-bench natlab [--trials N] [--only TEXT] [--json]   (as root)
//! agentmesh-bench relay [--reservations N] [--circuits N] [--json]
//! agentmesh-bench bus [--rounds N] [--tune] [--json]
//! agentmesh-bench smoke [--against docs/benchmarks.md] [--json]
//! agentmesh-bench convergence [--nodes 100] [--json]
//! agentmesh-bench idle [--nodes 50] [--seconds 60] [--json]
//! agentmesh-bench soak [--seconds 120] [--seed N] [--json]
//! agentmesh-bench rr-floor [--messages N] [--latency-messages M] [--json]
//! ```
//!
//! `rr-floor`: libp2p's request-response alone, two swarms in this
//! process with the daemon's transport stack, 1 KiB messages' worth of
//! bytes per request: the floor `messaging` is compared with; see
//! `agentmesh_tests::bench_rr_floor`.
//!
//! `convergence`: a revocation and an admission across a team of N
//! daemons; see `agentmesh_tests::bench_convergence`. `idle`: a team of
//! N doing nothing; see `agentmesh_tests::bench_idle`.
//!
//! `smoke`: messaging, the MCP send and the judge briefly, each as a ratio
//! to a floor measured in the same run; with `--against`, exits 1 when a
//! ratio is under half of the one the file records (CI runs it); see
//! `agentmesh_tests::bench_smoke`.
//!
//! `bus`: the broadcast judge's time per pair and its precision and recall
//! per preset on the labelled set's held-out part; `--tune` prints the
//! judge's weights.rs as tuning computes it (`> judge/src/weights.rs`);
//! see `agentmesh_tests::bench_bus`.
//!
//! Arguments are parsed with clap, as the CLI's are: `--help` on any
//! subcommand prints its help and runs nothing. Every daemon (and relay) a
//! benchmark starts ends with it, however it ends, killed with SIGKILL
//! included (`agentmesh_tests::reaper`).
//!
//! `natlab`: hole punching in the NAT lab, per NAT pairing; see
//! `agentmesh_tests::bench_natlab`.
//!
//! `messaging`: see `agentmesh_tests::bench_messaging`.
//!
//! `mcp`: two `agentmesh mcp` servers driven by rmcp's MCP client, attached
//! to two daemons on loopback (the cross-machine path) and then both to one
//! daemon (the same-machine path): sequential `send_message` calls per
//! second, the time from a call to the recipient's channel notification
//! (p50, p99), and the memory of the receiving daemon and its MCP server;
//! see `agentmesh_tests::bench_mcp`. `--json` prints the two-daemon path's
//! figures at the top level and the one-daemon path's under `local`.
//!
//! `join`: founds a team and joins a second machine N times (fresh homes
//! each time), with both people's typing done by pseudo-terminals at once,
//! and reports the time from `agentmesh join` starting to both commands
//! having finished; then the resident memory of an idle daemon (a founder
//! with one member, ten seconds after the last join).
//!
//! Build it with the daemon it measures: `cargo build --release --workspace
//! --bins` (no binary it builds has the test clock), then run
//! `target/release/agentmesh-bench join`.

#![allow(clippy::unwrap_used)] // a benchmark that cannot unwrap has failed

use std::time::{Duration, Instant};

use agentmesh_tests::bench_messaging::rss_mib;
use agentmesh_tests::{Node, read_code, wait_for};
use clap::{Parser, Subcommand};

fn one_join(a: &Node, b: &Node) -> Duration {
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let start = Instant::now();
    let mut j = b.pty(&["join", &ticket, "--name", &b.name, "--owner", "Bob"]);
    let pairing = read_code(&mut j, "Pairing code");
    let mut adm = a.pty(&["admit"]);
    adm.exp_string("Type the pairing code").unwrap();
    adm.send_line(&pairing).unwrap();
    read_code(&mut adm, "Team code");
    read_code(&mut j, "Team code");
    j.exp_string("[y/N]").unwrap();
    j.send_line("y").unwrap();
    j.exp_string("Joined team").unwrap();
    adm.exp_string("is now a member").unwrap();
    j.exp_eof().unwrap();
    adm.exp_eof().unwrap();
    start.elapsed()
}

/// `mcp`'s figures as lines, each beside its target (issue 10).
fn print_mcp(f: &agentmesh_tests::bench_mcp::Figures) {
    for (title, p) in [
        ("two daemons on loopback (cross-machine path)", &f.remote),
        ("one daemon (same-machine path)", &f.local),
    ] {
        println!("agentmesh mcp, {title}: {} sequential 1 KiB sends", p.sends);
        println!(
            "  send_message calls: {:.0}/s (target >= 400/s); a call takes p50 {:.2} ms, p99 {:.2} ms; {} of {} results carried the recipient's first answer",
            p.sends_per_s, p.call_p50_ms, p.call_p99_ms, p.first_answers, p.sends
        );
        println!(
            "  call to the recipient's channel notification: p50 {:.2} ms (target <= 10), p99 {:.2} ms (target <= 50), max {:.2} ms",
            p.e2e_p50_ms, p.e2e_p99_ms, p.e2e_max_ms
        );
        println!(
            "  receiving daemon + its MCP server: {:.1} MiB (target < 50; daemon {:.1}, MCP server {:.1}, peak {:.1})",
            p.rss_mib, p.daemon_rss_mib, p.mcp_rss_mib, p.peak_rss_mib
        );
        match p.sender_daemon_rss_mib {
            Some(d) => println!(
                "  sending daemon {d:.1} MiB, sending MCP server {:.1} MiB",
                p.sender_mcp_rss_mib
            ),
            None => println!("  sending MCP server {:.1} MiB", p.sender_mcp_rss_mib),
        }
    }
    println!(
        "(for comparison, issue 10: the best-known agent-mail MCP server, on this machine: ~11 sends/s, p50 ~100 ms, ~230 MiB)"
    );
}

/// agentmesh-bench: figures from real daemons on loopback (see
/// docs/benchmarks.md). Build it with the daemon it measures: `cargo build
/// --release --workspace --bins`.
#[derive(Debug, Parser)]
#[command(name = "agentmesh-bench")]
struct Cli {
    /// Print the figures as one JSON object.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Found a team and join a second machine N times, both people's
    /// typing done by pseudo-terminals; then an idle daemon's memory.
    Join {
        /// How many joins (fresh homes each time).
        #[arg(long, value_name = "N", default_value_t = 10, value_parser = at_least_one())]
        runs: usize,
    },
    /// Two daemons on loopback: sustained throughput of 1 KiB messages,
    /// the raw transport and crypto floors, latency at 100 messages/s,
    /// memory.
    Messaging {
        /// How many messages.
        #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = at_least_one())]
        messages: usize,
        /// How many messages in the latency phase, at 100 a second.
        #[arg(long, value_name = "M", default_value_t = 1000, value_parser = at_least_one(), conflicts_with = "memory")]
        latency_messages: usize,
        /// Memory only: the throughput phase, then the receiver's full
        /// inbox read (`receiver_rss_mib_after_read`, `sender_rss_mib`).
        #[arg(long)]
        memory: bool,
    },
    /// Two `agentmesh mcp` servers driven by an MCP client: send_message
    /// calls per second, call to channel notification, memory.
    Mcp {
        /// How many sequential sends.
        #[arg(long, value_name = "N", default_value_t = 2000, value_parser = at_least_one())]
        sends: usize,
    },
    /// Hole punching in the NAT lab, per NAT pairing (as root).
    Natlab {
        /// Trials per pairing.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one())]
        trials: usize,
        /// Only the pairings whose name contains TEXT.
        #[arg(long, value_name = "TEXT")]
        only: Option<String>,
    },
    /// One relay process: its memory per idle reservation (clients from
    /// many 127.0.x.y sources, 8 each) and circuits opened a second.
    /// Raises its own open-file limit.
    Relay {
        /// Idle reservations to hold.
        #[arg(long, value_name = "N", default_value_t = 1000, value_parser = at_least_one())]
        reservations: usize,
        /// Circuits to open (each used by one ping, then closed).
        #[arg(long, value_name = "N", default_value_t = 500, value_parser = at_least_one())]
        circuits: usize,
    },
    /// The broadcast judge: time per (broadcast, mailbox) pair, precision
    /// and recall per preset on the labelled set's held-out part.
    Bus {
        /// Judge every held-out pair this many times for the timings.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one())]
        rounds: usize,
        /// Time this many broadcasts from one machine to 3 machines with
        /// 10 mailboxes each (after one untimed).
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one())]
        broadcasts: usize,
        /// Print the judge's weights.rs as tuning on the tuning part
        /// computes it, and nothing else.
        #[arg(long)]
        tune: bool,
    },
    /// Wake runs: from a send to the reply of the run it woke, with a
    /// stand-in agent CLI (agentmesh's part of the latency).
    Wake {
        /// How many messages, one at a time, each waking one run.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = at_least_one())]
        runs: usize,
    },
    /// Carrying: a carrier holding N messages for a recipient that
    /// reconnects (time until all are in its inbox, the carrier's
    /// memory), and the time from a send to the sender's `delivered`.
    Carry {
        /// How many messages the carrier holds (at most 100,000, the most
        /// `carrier.per_sender` allows).
        #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
        messages: usize,
        /// How many sends, one at a time, to time to `delivered` (both
        /// machines online).
        #[arg(long, value_name = "N", default_value_t = 200, value_parser = at_least_one())]
        receipts: usize,
    },
    /// N daemons on loopback in one team: the time until a revocation
    /// is refused, with connections closed, by every member, and until
    /// an admission reaches every member.
    Convergence {
        /// How many daemons (50 when memory forbids more; said so).
        #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(3..))]
        nodes: usize,
    },
    /// A team of N on loopback, idle: a daemon's start to ready, its CPU
    /// and its memory.
    Idle {
        /// How many daemons in the team.
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..))]
        nodes: usize,
        /// Idle seconds measured.
        #[arg(long, value_name = "S", default_value_t = 60, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(1..))]
        seconds: u64,
    },
    /// A crash soak: five daemons (one a carrier) and a relay, an agent
    /// on each, while a seeded schedule kills and suspends them and
    /// revokes one; then the invariant checker. Exits 1 on any breach.
    Soak {
        /// How long the traffic and the faults last.
        #[arg(long, value_name = "S", default_value_t = 120, value_parser = clap::builder::RangedU64ValueParser::<u64>::new().range(30..))]
        seconds: u64,
        /// The schedule's and the agents' seed (default: from the clock,
        /// printed so that a failing run can be replayed).
        #[arg(long, value_name = "N")]
        seed: Option<u64>,
    },
    /// libp2p request-response alone on loopback, with the daemon's
    /// transport stack and no agentmesh work: requests the size of a
    /// 1 KiB message's, 128 in flight, then latency at 100 requests/s.
    /// The floor `messaging` is compared with.
    RrFloor {
        /// How many requests in the throughput phase.
        #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = at_least_one())]
        messages: usize,
        /// How many requests in the latency phase, one at a time.
        #[arg(long, value_name = "M", default_value_t = 1000, value_parser = at_least_one())]
        latency_messages: usize,
    },
    /// Messaging, the MCP send and the judge, briefly (about ten seconds),
    /// each as a ratio to a floor measured in the same run.
    Smoke {
        /// Fail (exit 1) when a ratio is under half of the one this file
        /// records on its line `smoke ratios: NAME VALUE, ...`.
        #[arg(long, value_name = "FILE")]
        against: Option<std::path::PathBuf>,
    },
    /// The reaper every run starts (internal): ends the run's daemons
    /// once the run has ended.
    #[command(name = "reap", hide = true)]
    Reap,
}

/// A count of at least one: a benchmark of nothing has no figures.
fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..)
}

fn main() {
    let cli = Cli::parse();
    if let Bench::Reap = cli.command {
        agentmesh_tests::reaper::run();
    }
    // From here on, nothing this run starts outlives it.
    if let Err(e) = agentmesh_tests::reaper::start() {
        eprintln!("error: cannot start the reaper that ends this run's daemons with it: {e}");
        std::process::exit(1);
    }
    let json = cli.json;
    match cli.command {
        Bench::Join { runs } => join(runs, json),
        Bench::Messaging {
            messages,
            memory: true,
            ..
        } => messaging_memory(messages, json),
        Bench::Messaging {
            messages,
            latency_messages,
            ..
        } => messaging(messages, latency_messages, json),
        Bench::Mcp { sends } => {
            let f = agentmesh_tests::bench_mcp::run(sends);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                print_mcp(&f);
            }
        }
        Bench::Natlab { trials, only } => natlab(trials, only.as_deref(), json),
        Bench::Relay {
            reservations,
            circuits,
        } => relay(reservations, circuits, json),
        Bench::Bus { tune: true, .. } => print!("{}", agentmesh_tests::bench_bus::tuned_weights()),
        Bench::Bus {
            rounds, broadcasts, ..
        } => bus(rounds, broadcasts, json),
        Bench::Wake { runs } => {
            let f = agentmesh_tests::bench_wake::run(runs);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                println!(
                    "wake: {} messages to an idle mailbox, each woke one run of a stand-in CLI: send to reply p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
                    f.runs, f.reply_p50_ms, f.reply_p90_ms, f.reply_max_ms
                );
            }
        }
        Bench::Carry { messages, receipts } => {
            let f = agentmesh_tests::bench_carry::run(messages, receipts);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                println!(
                    "carry: {} messages held by a carrier, all in the reconnected recipient's inbox {:.2} s after the connect (per message p50 {:.0} ms, p99 {:.0} ms)",
                    f.carried, f.drain_s, f.drain_p50_ms, f.drain_p99_ms
                );
                println!(
                    "  carrier memory: {:.1} MiB idle, {:.1} MiB holding them, {:.1} MiB after a restart holding them",
                    f.carrier_idle_rss_mib, f.carrier_rss_mib, f.carrier_restarted_rss_mib
                );
                println!(
                    "receipts: {} sends on loopback, send to `delivered` in the sender's outbox p50 {:.1} ms, p99 {:.1} ms",
                    f.receipts, f.receipt_p50_ms, f.receipt_p99_ms
                );
            }
        }
        Bench::Convergence { nodes } => {
            let f = agentmesh_tests::bench_convergence::run(nodes);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                agentmesh_tests::bench_convergence::print(&f);
            }
        }
        Bench::Idle { nodes, seconds } => {
            let f = agentmesh_tests::bench_idle::run(nodes, seconds);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                agentmesh_tests::bench_idle::print(&f);
            }
        }
        Bench::RrFloor {
            messages,
            latency_messages,
        } => {
            let f = agentmesh_tests::bench_rr_floor::run(messages, latency_messages);
            if json {
                println!("{}", serde_json::to_string(&f).unwrap());
            } else {
                agentmesh_tests::bench_rr_floor::print(&f);
            }
        }
        Bench::Smoke { against } => smoke(against.as_deref(), json),
        Bench::Soak { seconds, seed } => soak(seconds, seed, json),
        Bench::Reap => unreachable!("handled above"),
    }
}

fn smoke(against: Option<&std::path::Path>, json: bool) {
    use agentmesh_tests::bench_smoke;
    // Read first: a missing or malformed record fails before a minute of
    // measuring.
    let recorded = against.map(|path| {
        let doc = std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("error: cannot read {}: {e}", path.display());
            std::process::exit(1);
        });
        bench_smoke::recorded(&doc).unwrap_or_else(|e| {
            eprintln!("error: {}: {e}", path.display());
            std::process::exit(1);
        })
    });
    let f = bench_smoke::run();
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
    } else {
        println!(
            "smoke ({:.0} s): crypto floor {:.0}/s on one core",
            f.seconds, f.crypto_floor_per_s
        );
        println!(
            "  messaging {:.0} messages/s: messaging_ratio {:.3}",
            f.messaging_per_s, f.messaging_ratio
        );
        println!(
            "  MCP send_message {:.0}/s, the same send through the local API {:.0}/s: mcp_ratio {:.3}",
            f.mcp_sends_per_s, f.api_sends_per_s, f.mcp_ratio
        );
        println!(
            "  judge {:.0} pairs/s: bus_ratio {:.3}",
            f.judge_pairs_per_s, f.bus_ratio
        );
    }
    if let Some(recorded) = recorded {
        let slow = bench_smoke::regressions(&f, &recorded);
        for s in &slow {
            eprintln!("regression: {s}");
        }
        if !slow.is_empty() {
            std::process::exit(1);
        }
        eprintln!("smoke: every ratio is at least half of the one recorded");
    }
}

fn bus(rounds: usize, broadcasts: usize, json: bool) {
    let f = agentmesh_tests::bench_bus::run(rounds, broadcasts);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
        return;
    }
    println!(
        "judge: {} held-out pairs x {} rounds: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms per pair (first, with the data parsed: {:.1} ms)",
        f.pairs, f.rounds, f.judge_p50_ms, f.judge_p99_ms, f.judge_max_ms, f.judge_first_ms
    );
    println!(
        "  the largest pair (64 KiB broadcast, 1 KiB profile, five 1 KiB notes): {:.2} ms",
        f.judge_largest_ms
    );
    for s in &f.presets {
        println!(
            "  {:8} precision {:.1}%  recall {:.1}%  ({} of {} relevant, {} irrelevant delivered)",
            s.preset.as_str(),
            100.0 * s.precision,
            100.0 * s.recall,
            s.true_positives,
            s.relevant,
            s.false_positives
        );
    }
    println!(
        "  hosted classifier's bar: recall {:.0}% at precision {:.0}%",
        100.0 * f.hosted_recall,
        100.0 * f.hosted_precision
    );
    println!(
        "broadcast to 3 machines x 10 mailboxes ({} delivered, the rest dropped), {} broadcasts: last copy in its inbox after p50 {:.1} ms, p99 {:.1} ms",
        f.delivered_per_broadcast, f.broadcasts, f.broadcast_p50_ms, f.broadcast_p99_ms
    );
}

fn messaging(messages: usize, latency_messages: usize, json: bool) {
    let f = agentmesh_tests::bench_messaging::run(messages, latency_messages);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
        return;
    }
    println!("messages: {} of 1 KiB, two daemons on loopback", f.messages);
    println!("sustained throughput: {:.0} messages/s", f.throughput_per_s);
    println!(
        "raw libp2p request-response: {:.0} messages/s",
        f.raw_transport_per_s
    );
    println!(
        "crypto floor (seal+sign, verify+open, one core): {:.0} messages/s; two threads at once: {:.0} messages/s",
        f.crypto_floor_per_s, f.crypto_floor_2core_per_s
    );
    let floor = f.raw_transport_per_s.min(f.crypto_floor_per_s);
    println!(
        "throughput / min(raw, crypto): {:.2}",
        f.throughput_per_s / floor
    );
    println!(
        "latency at 100 messages/s: p50 {:.2} ms, p99 {:.2} ms",
        f.p50_ms, f.p99_ms
    );
    print_receiver(&f.receiver);
    println!("sending daemon memory: {:.1} MiB", f.sender_rss_mib);
}

fn messaging_memory(messages: usize, json: bool) {
    let f = agentmesh_tests::bench_messaging::memory(messages);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
        return;
    }
    println!(
        "messages: {} of 1 KiB, two daemons on loopback, {:.0} messages/s",
        f.messages, f.throughput_per_s
    );
    println!(
        "sending daemon memory once all were delivered: {:.1} MiB",
        f.sender_rss_mib
    );
    print_receiver(&f.receiver);
}

fn print_receiver(r: &agentmesh_tests::bench_messaging::ReceiverMemory) {
    println!(
        "receiving daemon memory: {:.1} MiB after the run, {:.1} MiB after reading its {} messages, {:.1} MiB after a restart",
        r.receiver_rss_mib_after_run,
        r.receiver_rss_mib_after_read,
        r.messages_read,
        r.receiver_rss_mib_after_restart
    );
}

fn relay(reservations: usize, circuits: usize, json: bool) {
    let f = agentmesh_tests::bench_relay::run(reservations, circuits);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
        return;
    }
    println!(
        "agentmesh-relay: {} of {} idle reservations from {} sources, granted in {:.1} s",
        f.reservations, f.asked, f.sources, f.reserve_s
    );
    println!(
        "  memory {:.1} MiB before, {:.1} MiB holding them: {:.0} bytes a reservation ({:.1} KiB; target <= 16 KiB)",
        f.rss_bytes_before as f64 / 1048576.0,
        f.rss_bytes_after as f64 / 1048576.0,
        f.rss_bytes_per_reservation,
        f.rss_bytes_per_reservation / 1024.0
    );
    println!(
        "  CPU holding them idle: {:.1}% of a core",
        f.relay_cpu_percent
    );
    println!(
        "  circuits: {} opened, used and closed, {:.0}/s, CPU {:.0}% of a core",
        f.circuits, f.circuits_per_s, f.relay_cpu_percent_circuits
    );
    println!("  open-file limit: {}", f.open_file_limit);
}

fn natlab(trials: usize, only: Option<&str>, json: bool) {
    let f = agentmesh_tests::bench_natlab::run(trials, only);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
        return;
    }
    for p in &f.pairings {
        println!("{}: {} trials", p.pairing, p.trials);
        println!(
            "  direct by DCUtR: {} of {} ({:.0}%), after p50 {:.0} ms, p90 {:.0} ms (from the first send)",
            p.upgraded,
            p.trials,
            p.upgraded_share * 100.0,
            p.upgrade_ms.p50,
            p.upgrade_ms.p90
        );
        println!(
            "  first message after join: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            p.join_first_message_ms.p50, p.join_first_message_ms.p90, p.join_first_message_ms.max
        );
        println!(
            "  first message after both restarted (dial through the relay): p50 {:.1} ms, p90 {:.1} ms",
            p.first_message_ms.p50, p.first_message_ms.p90
        );
        println!(
            "  later messages: direct p50 {:.2} ms ({} msgs), relayed p50 {:.2} ms ({} msgs)",
            p.direct_latency_ms.p50,
            p.direct_latency_ms.n,
            p.relayed_latency_ms.p50,
            p.relayed_latency_ms.n
        );
        println!("  delivered {} of {}", p.delivered, p.sent);
    }
}

fn join(runs: usize, json: bool) {
    let mut times = vec![];
    let mut last = None;
    for _ in 0..runs {
        let mut a = Node::new("founder");
        let mut b = Node::new("joiner");
        a.start();
        b.start();
        a.ok(&["team", "create", "bench", "--owner", "Ada"]);
        times.push(one_join(&a, &b));
        last = Some((a, b));
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (a, b) = last.unwrap();
    wait_for("the joiner to see the founder", || {
        b.peer_row(&a.peer_id())
            .filter(|r| r["connection"] == "direct")
    });
    std::thread::sleep(Duration::from_secs(10)); // idle: nothing to wait *for*; this is the measurement
    let a_rss = rss_mib(a.pid());
    let b_rss = rss_mib(b.pid());
    let median = ms(times[times.len() / 2]);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "runs": runs,
                "join_ms_min": ms(times[0]),
                "join_ms_median": median,
                "join_ms_max": ms(times[times.len() - 1]),
                "idle_founder_rss_mib": a_rss,
                "idle_member_rss_mib": b_rss,
            })
        );
    } else {
        println!(
            "join, end to end on loopback ({runs} runs): min {:.0} ms, median {median:.0} ms, max {:.0} ms",
            ms(times[0]),
            ms(times[times.len() - 1])
        );
        println!(
            "idle daemon resident memory: founder {:.1} MiB, member {:.1} MiB",
            a_rss, b_rss
        );
    }
}

fn soak(seconds: u64, seed: Option<u64>, json: bool) {
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let f = agentmesh_tests::soak::run(seconds, seed);
    if json {
        println!("{}", serde_json::to_string(&f).unwrap());
    } else {
        agentmesh_tests::soak::print(&f);
    }
    if !f.verdict.clean() {
        eprintln!(
            "the soak broke an invariant; replay it with: agentmesh-bench soak --seconds {seconds} --seed {seed}"
        );
        std::process::exit(1);
    }
}
