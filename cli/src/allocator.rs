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
//! This is the workspace's one `unsafe` call: a glibc function with no
//! preconditions, made before the daemon starts any thread. Elsewhere
//! (musl, macOS) it does nothing.

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
