//! `agentmesh-bench` as a command: its arguments are parsed like the
//! CLI's (`--help` runs nothing), and the daemons a run starts end with
//! it, even when it is killed.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentmesh_tests::{DEADLINE, TMPDIR_ENV, built_bin, wait_for};

/// The benchmark binary, with nodes' homes made in `homes`.
fn bench(homes: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(built_bin("agentmesh-bench"));
    c.args(args)
        .env(TMPDIR_ENV, homes)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

/// Waits for `child` to exit, at most `within`; its output.
fn finish(mut child: std::process::Child, within: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > within {
            let _ = child.kill();
            panic!("still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The entries of a folder.
fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn bus_prints_the_judges_figures_and_tune_prints_the_committed_weights() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &["bus", "--rounds", "1", "--broadcasts", "2", "--json"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "judge_p50_ms",
        "judge_p99_ms",
        "balanced_recall",
        "balanced_precision",
        "broadcast_p50_ms",
    ] {
        assert!(f[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {f}");
    }
    assert_eq!(f["broadcasts"], 2, "{f}");
    // Some of the 30 mailboxes get it, and not all.
    let delivered = f["delivered_per_broadcast"].as_u64().unwrap();
    assert!((1..30).contains(&delivered), "{f}");
    // The same figures the held-out test computes.
    let (all, split) = agentmesh_judge::tune::committed();
    let held = agentmesh_judge::tune::part(&all, &split.held_out);
    let balanced = agentmesh_judge::tune::score(&held, agentmesh_judge::Preset::Balanced);
    assert_eq!(f["balanced_recall"].as_f64(), Some(balanced.recall));
    assert_eq!(f["pairs"], held.len());
    let out = bench(homes.path(), &["bus", "--tune"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../judge/src/weights.rs"
    ))
    .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}

#[test]
fn wake_prints_the_send_to_reply_figures() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(homes.path(), &["wake", "--runs", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["runs"], 2, "{f}");
    let (p50, max) = (
        f["reply_p50_ms"].as_f64().unwrap(),
        f["reply_max_ms"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= max, "{f}");
}

#[test]
fn carry_prints_the_drain_memory_and_receipt_figures() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &["carry", "--messages", "20", "--receipts", "3", "--json"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["carried"], 20, "{f}");
    assert_eq!(f["receipts"], 3, "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert!(num("drain_s") > 0.0, "{f}");
    assert!(num("drain_p50_ms") <= num("drain_p99_ms"), "{f}");
    assert!(num("carrier_rss_mib") > 1.0, "{f}");
    assert!(num("receipt_p50_ms") > 0.0, "{f}");
    assert!(num("receipt_p50_ms") <= num("receipt_p99_ms"), "{f}");
}

#[test]
fn messaging_reports_throughput_beside_both_crypto_floors() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &[
            "messaging",
            "--messages",
            "300",
            "--latency-messages",
            "100",
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    for k in [
        "throughput_per_s",
        "raw_transport_per_s",
        "crypto_floor_per_s",
        "crypto_floor_2core_per_s",
    ] {
        assert!(num(k) > 0.0, "{k} in {f}");
    }
    assert!(num("p50_ms") > 0.0 && num("p50_ms") <= num("p99_ms"), "{f}");
    assert_eq!(f["latency_messages"], 100, "{f}");
}

#[test]
fn messaging_memory_reads_the_whole_inbox_and_reports_both_daemons() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &["messaging", "--memory", "--messages", "300", "--json"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 128 senders, each the same share: 300 rounds up to 384.
    assert_eq!(f["messages"], 384, "{f}");
    assert_eq!(f["messages_read"], 384, "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert!(num("throughput_per_s") > 0.0, "{f}");
    for k in [
        "sender_rss_mib",
        "receiver_rss_mib_after_run",
        "receiver_rss_mib_after_read",
        "receiver_rss_mib_after_restart",
    ] {
        assert!(num(k) > 1.0, "{k} in {f}");
    }
}

#[test]
fn convergence_times_a_revocation_and_an_admission_across_a_team() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(homes.path(), &["convergence", "--nodes", "4", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["nodes"], 4, "{f}");
    assert_eq!(f["nodes_asked"], 4, "{f}");
    assert!(f["reduced"].is_null(), "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    for change in ["revocation", "admission"] {
        let (p50, p99, max) = (
            num(&format!("{change}_p50_s")),
            num(&format!("{change}_p99_s")),
            num(&format!("{change}_max_s")),
        );
        // Measured, in order, and within the minute a watch waits.
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max && max < 60.0, "{f}");
        // The daemons' clocks put each change no later than a watcher saw
        // it (each figure is truncated to the millisecond).
        let seen = num(&format!("{change}_seen_p99_s"));
        assert!(
            p99 <= seen + 0.002,
            "{change}: p99 {p99} s, seen {seen} s: {f}"
        );
    }
    assert!(
        num("revocation_max_s") <= num("revocation_seen_max_s") + 0.002,
        "{f}"
    );
    // Every member's own log gave its figure.
    assert_eq!(f["revocation_from_watch"], 0, "{f}");
    assert_eq!(f["admission_from_watch"], 0, "{f}");
    assert!(num("poll_round_ms") > 0.0, "{f}");
    assert!(num("poll_round_ms") <= num("poll_round_max_ms"), "{f}");
    let rss = f["rss_mib"].as_array().unwrap();
    assert!(rss[0].as_f64().unwrap() > 1.0, "{f}");
}

#[test]
fn rr_floor_measures_libp2p_request_response_alone() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &[
            "rr-floor",
            "--messages",
            "2000",
            "--latency-messages",
            "20",
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["messages"], 2000, "{f}");
    assert_eq!(f["in_flight"], 128, "{f}");
    assert_eq!(f["latency_messages"], 20, "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    // A sealed, signed 1 KiB message's mail request: the text and more.
    assert!(num("request_bytes") > 1024.0, "{f}");
    assert!(num("throughput_per_s") > 0.0, "{f}");
    assert!(
        num("latency_p50_ms") > 0.0 && num("latency_p50_ms") <= num("latency_p99_ms"),
        "{f}"
    );
    // Nothing of agentmesh's ran: no home was made.
    assert_eq!(entries(homes.path()), Vec::<String>::new(), "{f}");
}

#[test]
fn idle_reports_a_teams_ready_time_cpu_and_memory() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &["idle", "--nodes", "3", "--seconds", "2", "--json"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["nodes"], 3, "{f}");
    assert_eq!(f["seconds"], 2, "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert!(
        num("ready_ms") > 0.0 && num("ready_ms") <= num("ready_max_ms"),
        "{f}"
    );
    assert!(num("meshed_ms") >= num("ready_ms"), "{f}");
    assert!(
        num("rss_mib") > 1.0 && num("rss_mib") <= num("rss_max_mib"),
        "{f}"
    );
    // The daemon's own memory and its mapped files make up its resident set.
    let parts = num("rss_anon_mib") + num("rss_file_mib");
    assert!((parts - num("rss_mib")).abs() < 2.0, "{f}");
    assert!((0.0..100.0).contains(&num("cpu_percent")), "{f}");
    assert!(num("cpu_percent") <= num("cpu_max_percent"), "{f}");
}

#[test]
fn relay_holds_reservations_from_many_sources_and_counts_their_cost() {
    let homes = tempfile::tempdir().unwrap();
    let out = bench(
        homes.path(),
        &[
            "relay",
            "--reservations",
            "40",
            "--circuits",
            "10",
            "--json",
        ],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 40 reservations, 8 a source: 5 sources, within the relay's per-IP
    // cap, all granted.
    assert_eq!(
        (&f["reservations"], &f["sources"]),
        (&40.into(), &5.into()),
        "{f}"
    );
    assert_eq!(f["circuits"], 10, "{f}");
    let num = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{k} in {f}"));
    assert!(num("rss_bytes_after") > num("rss_bytes_before"), "{f}");
    assert!(num("rss_bytes_per_reservation") > 0.0, "{f}");
    assert!(num("circuits_per_s") > 0.0, "{f}");
    assert!(num("relay_cpu_percent") >= 0.0, "{f}");
    assert!(num("open_file_limit") > 0.0, "{f}");
}

#[test]
fn every_subcommands_help_prints_help_and_runs_nothing() {
    let homes = tempfile::tempdir().unwrap();
    for sub in [
        "join",
        "messaging",
        "mcp",
        "natlab",
        "relay",
        "bus",
        "wake",
        "carry",
        "convergence",
        "idle",
        "rr-floor",
    ] {
        let child = bench(homes.path(), &[sub, "--help"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Help takes milliseconds; a benchmark would run for minutes.
        let out = finish(child, DEADLINE);
        assert!(out.status.success(), "{sub} --help: {out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            stdout.contains(&format!("Usage: agentmesh-bench {sub}")),
            "{sub}: {stdout}"
        );
        assert!(stdout.contains("--json"), "{sub}: {stdout}");
        assert_eq!(
            entries(homes.path()),
            Vec::<String>::new(),
            "{sub} made a home"
        );
    }
    let out = bench(homes.path(), &["messaging", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("[default: 100000]")
    );
    // A bad argument is a usage error, before anything runs.
    for args in [
        &["messaging", "--messages", "many"][..],
        &["join", "--runs", "0"],
        &["fly"],
    ] {
        let out = bench(homes.path(), args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error: "),
            "{args:?}: {out:?}"
        );
    }
    assert_eq!(entries(homes.path()), Vec::<String>::new());
}

/// The `agentmesh daemon` processes whose parent is `parent`.
fn daemons_of(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            ppid == Some(parent) && args.contains(&&b"daemon"[..])
        })
        .collect()
}

/// Whether process `pid` is still there (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        == Some(false)
}

#[test]
fn a_benchmark_killed_or_stopped_leaves_no_daemon_behind() {
    for signal in [
        nix::sys::signal::Signal::SIGKILL,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let homes = tempfile::tempdir().unwrap();
        // Many joins: it is still running when it is stopped.
        let child = bench(homes.path(), &["join", "--runs", "1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let bench_pid = child.id();
        let daemons = wait_for("the benchmark's two daemons", || {
            let d = daemons_of(bench_pid);
            (d.len() >= 2).then_some(d)
        });
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(bench_pid as i32), signal).unwrap();
        let status = finish(child, DEADLINE).status;
        assert!(!status.success(), "{signal}: {status}");
        wait_for(&format!("its daemons to end after {signal}"), || {
            daemons.iter().all(|p| !alive(*p)).then_some(())
        });
        // And their homes are removed.
        wait_for(&format!("its homes to be removed after {signal}"), || {
            entries(homes.path()).is_empty().then_some(())
        });
    }
}
