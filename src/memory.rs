//! What the process asks of glibc's allocator (docs/design.md §4.6,
//! Memory): tunables set once before any thread starts, and a thread that
//! gives freed memory back to the system every second. Both exist because
//! of how this process allocates — a few large buffers (a batch's NDJSON, up
//! to `sync.batch_bytes`) made and freed again and again, beside many small
//! ones (each raw document of a page, each document in flight) of very
//! different lifetimes — and because what glibc keeps after freeing grows
//! with a run's length, which the memory target (flat in N) forbids. On
//! other platforms and C libraries both are no-ops.

use std::time::Duration;

/// How often freed memory is given back: well below how long a large run
/// holds its pages and batches (seconds each), and rare enough that the
/// work (a walk of the free lists, under each arena's lock) costs nothing
/// measurable.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(1);

/// glibc's malloc tuned for this process's allocations.
///
/// - Two arenas: by default a thread that allocates under contention gets
///   an arena of its own (up to 8 per core), each keeping what is freed in it
///   for later, and a long run's peak RSS grows with the arenas
///   (docs/benchmarks.md, "Memory").
/// - A fixed mmap threshold of 1 MiB: by default the threshold follows the
///   largest block freed (up to 32 MiB), so after the first batch is freed
///   every later one is carved from an arena's heap and, freed, stays there
///   as holes among small blocks, and the trim threshold doubles with it:
///   the process keeps many times what it uses. Fixed,
///   a large buffer is its own mapping, returned to the system when freed.
///
/// Call before any other thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets tunables of glibc's allocator; called
    // before any other thread exists, so nothing allocates concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Starts a thread that calls `malloc_trim(0)` every [`GIVE_BACK_EVERY`]:
/// the whole free pages inside the arenas' heaps go back to the system.
/// malloc returns memory on its own only from the top of a heap, and a
/// page's thousands of small raw documents, freed, leave holes below the
/// longer-lived documents in flight that it keeps for good: mid-run at 1M,
/// 24.8 MB held for 13.9 MB in use, and one `malloc_trim` took RSS from
/// 48.5 to 41.1 MB. The thread only sleeps and trims; it allocates nothing.
pub fn give_back_periodically() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let started = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| loop {
                std::thread::sleep(GIVE_BACK_EVERY);
                // SAFETY: malloc_trim only releases free memory; glibc
                // takes each arena's lock itself.
                unsafe {
                    libc::malloc_trim(0);
                }
            });
        if let Err(error) = started {
            tracing::debug!(%error, "could not start the thread that gives freed memory back");
        }
    }
}
