//! The daemon's allocator: glibc's malloc, with one arena.
//!
//! glibc gives each thread that finds an arena busy an arena of its own,
//! up to eight a core, and memory freed in an arena stays there for that
//! arena's next allocations. The daemon's threads (the runtime's workers,
//! sled's flusher and its writer, the store's flush thread) each fill and
//! free their own, so after a burst of mail the freed memory of one arena
//! could not serve another: with 100,000 messages received and read, the
//! receiving daemon held 86 MiB with the default arenas and 65 MiB with
//! one, the sender 95 and 79 (docs/benchmarks.md, "Bounded memory"). It
//! costs throughput at full load, when the threads wait for the one
//! arena's lock: about 4 % at 30,000 messages, 10 % at 100,000. The
//! daemon's load is agents' mail, far below that; its memory is with the
//! person all day. `GLIBC_TUNABLES=glibc.malloc.arena_max=16` in the
//! daemon's environment gives the throughput back.
//!
//! One arena still keeps what the daemon freed: glibc gives memory back
//! to the system only from the top of its heap, so the pages of a burst's
//! freed buffers (a sender's batches, a carrier's intake) stay resident
//! among live ones. [`start_giving_back`] starts a thread that looks once
//! a second at how much is free (`mallinfo2`) and, when 2 MiB more is free
//! than the least it saw since its last trim, asks glibc to release the
//! free pages (`malloc_trim`): after 100,000 messages the sender held 79
//! MiB, and 62 MiB once trimmed. Its own thread, not the runtime's: both
//! calls walk glibc's free lists, and the network loop must not wait for
//! them.
//!
//! These are the workspace's only `unsafe` calls: glibc functions with no
//! preconditions (`mallopt` made before the daemon starts any thread).
//! Elsewhere (musl, macOS) they are not made.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
use std::time::Duration;

/// How often the daemon looks at what its allocator holds free.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// Free bytes beyond the least free since the last trim that make a trim
/// worth its cost (it walks the free lists and releases their pages).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_ABOVE: usize = 2 * 1024 * 1024;

/// Sets glibc's arena count to one, unless the environment already set it
/// (`GLIBC_TUNABLES=glibc.malloc.arena_max=N` or `MALLOC_ARENA_MAX`): a
/// person's own setting wins. Says what it did, for the log.
pub fn one_arena() -> &'static str {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::var("GLIBC_TUNABLES")
            .is_ok_and(|t| t.contains("glibc.malloc.arena_max"))
            || std::env::var_os("MALLOC_ARENA_MAX").is_some();
        if tuned {
            return "the environment's arena count";
        }
        #[expect(unsafe_code, reason = "mallopt, a glibc call with no preconditions")]
        // SAFETY: mallopt takes two integers and changes an allocator
        // setting; it touches no memory of ours.
        let set = unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
        if set == 1 {
            "one arena"
        } else {
            "glibc's default arenas (it refused one)"
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    "the system's"
}

/// Starts the thread that gives freed memory back while the daemon runs
/// (see the module's notes); it lives as long as the process. Elsewhere
/// than glibc it starts nothing.
pub fn start_giving_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let looks = std::thread::Builder::new()
            .name("agentmesh-trim".into())
            .spawn(|| {
                let mut trimmer = Trimmer::new();
                loop {
                    std::thread::sleep(LOOK_EVERY); // the period between looks
                    trimmer.look();
                }
            });
        if let Err(e) = looks {
            tracing::warn!(error = %e, "cannot start the thread that gives freed memory back; the daemon runs without it");
        }
    }
}

/// The least free since the last trim.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
struct Trimmer {
    least_free: usize,
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
impl Trimmer {
    fn new() -> Self {
        Trimmer {
            least_free: free_bytes(),
        }
    }

    /// One look: trims when [`TRIM_ABOVE`] more is free than the least
    /// free since the last trim. Whether it trimmed.
    fn look(&mut self) -> bool {
        let free = free_bytes();
        if free <= self.least_free.saturating_add(TRIM_ABOVE) {
            // Memory reused since: the next rise is measured from here.
            self.least_free = self.least_free.min(free);
            return false;
        }
        let released = trim();
        self.least_free = free_bytes();
        tracing::trace!(free, released, "trimmed the heap");
        true
    }
}

/// Bytes glibc holds free in its heap (resident or given back already).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn free_bytes() -> usize {
    #[expect(unsafe_code, reason = "mallinfo2, a glibc call with no preconditions")]
    // SAFETY: mallinfo2 takes nothing and returns a struct of counts.
    let info = unsafe { libc::mallinfo2() };
    info.fordblks
}

/// Releases the free pages of glibc's heap; whether any were released.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() -> bool {
    #[expect(
        unsafe_code,
        reason = "malloc_trim, a glibc call with no preconditions"
    )]
    // SAFETY: malloc_trim takes an integer and releases free pages of
    // glibc's own heap; it touches no memory of ours.
    let released = unsafe { libc::malloc_trim(0) };
    released == 1
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    /// This process's own resident memory (not its mapped files), KiB.
    fn rss_anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    #[test]
    fn a_burst_freed_below_live_memory_is_given_back() {
        let mut trimmer = Trimmer::new();
        // 64 MiB in 1 KiB pieces, each written (resident), then all freed
        // but the last few: they keep the freed memory below the heap's
        // top, where glibc does not give it back by itself.
        let mut burst: Vec<Vec<u8>> = (0..65_536).map(|i| vec![i as u8; 1024]).collect();
        let live = burst.split_off(burst.len() - 16);
        drop(burst);
        let before = rss_anon_kib();
        assert!(trimmer.look(), "64 MiB freed is worth a trim");
        let after = rss_anon_kib();
        assert!(
            before.saturating_sub(after) > 32 * 1024,
            "resident {before} KiB before the trim, {after} KiB after"
        );
        assert!(!trimmer.look(), "nothing more freed: no second trim");
        drop(live);
    }
}
