//! Daemons a benchmark starts end with it, however it ends: finished,
//! interrupted (Ctrl-C, SIGTERM), panicked or killed with SIGKILL.
//!
//! ```text
//!  agentmesh-bench ── spawns ──> agentmesh-bench reap   (its own process group,
//!        │  stdin: a pipe only the bench holds            which Ctrl-C at the
//!        │  "home PATH" lines: homes to remove            terminal does not reach)
//!        └── spawns daemons and relays INTO the reaper's process group
//!  the bench ends, by any means ── the kernel closes the pipe ── EOF:
//!        the reaper SIGTERMs every other process of its group, waits,
//!        SIGKILLs what is left, removes the homes still there, exits
//! ```
//!
//! Only an outside process can act after a SIGKILL, and a pipe's end is
//! the one thing the kernel is sure to close when the bench goes.
//! `PR_SET_PDEATHSIG` would need `unsafe` (`pre_exec`), which the
//! workspace denies, and fires when the spawning *thread* ends, not the
//! process. Tests never start a reaper: their daemons stay in the test's
//! own process group, as before, and `Node`'s drop ends them.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The argument that makes `agentmesh-bench` the reaper.
pub const REAPER_ARG: &str = "reap";

/// How long the group gets to stop on SIGTERM before SIGKILL: a daemon
/// gives its tasks 5 s, then its flusher 5 s.
const GRACE: Duration = Duration::from_secs(12);

/// The reaper's process group, once started.
static GROUP: OnceLock<i32> = OnceLock::new();
/// The write end of the reaper's pipe: held (never closed) for the life
/// of the process.
static PIPE: Mutex<Option<ChildStdin>> = Mutex::new(None);

/// Starts the reaper for this process (once; later calls do nothing).
/// From then on every daemon a [`crate::Node`] starts, and every relay the
/// NAT lab starts, joins the reaper's process group.
pub fn start() -> std::io::Result<()> {
    if GROUP.get().is_some() {
        return Ok(());
    }
    let mut child = Command::new(std::env::current_exe()?)
        .arg(REAPER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()?;
    let group = i32::try_from(child.id()).map_err(std::io::Error::other)?;
    *PIPE.lock().unwrap_or_else(|e| e.into_inner()) = child.stdin.take();
    let _ = GROUP.set(group);
    // Never waited for: it outlives this process by design, and init
    // reaps it.
    drop(child);
    Ok(())
}

/// Puts what `command` starts into the reaper's process group, if there
/// is a reaper.
pub fn adopt(command: &mut Command) {
    if let Some(&group) = GROUP.get() {
        command.process_group(group);
    }
}

/// Tells the reaper to remove `home` if it is still there at the end.
pub fn track_home(home: &Path) {
    let mut pipe = PIPE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pipe.as_mut() {
        let _ = writeln!(p, "home {}", home.display());
    }
}

/// The reaper itself: waits for its standard input to close (the bench
/// ended), then ends every other process of its group and removes the
/// homes it was told of.
pub fn run() -> ! {
    let me = std::process::id() as i32;
    let mut homes: Vec<PathBuf> = vec![];
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Some(h) = line.strip_prefix("home ") {
            homes.push(PathBuf::from(h));
        }
    }
    let others = || group_members(me).into_iter().filter(|p| *p != me);
    for pid in others() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let start = Instant::now();
    while others().next().is_some() && start.elapsed() < GRACE {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in others() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    for h in homes {
        let _ = std::fs::remove_dir_all(h);
    }
    std::process::exit(0)
}

/// The processes of process group `group`, from /proc: the fifth field of
/// `/proc/PID/stat`, after the command name in parentheses (which may hold
/// spaces and parentheses itself, hence the last `)`).
fn group_members(group: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                return false;
            };
            // state, ppid, pgrp; a zombie is gone already.
            let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
            fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
        })
        .collect()
}
