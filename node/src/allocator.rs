//! The node binary's allocator: jemalloc, its background purging, and two gauges.
//!
//! Why not the system allocator: ingest allocates a request's records on one of many blocking
//! threads and frees them on others (the encode workers, the publisher). glibc's malloc gives
//! each of those threads an arena and keeps what they free; at 64 tenants it held 1 022 MB
//! while 258 MB was in use. jemalloc returns freed pages to the system on a decay clock, run
//! by a background thread, and with it the node took the realistic corpus 1.4x faster
//! (`xtask/loadgen/PROFILE.md`, "The allocator: jemalloc").

#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
pub(crate) use jemalloc::start;

#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
mod jemalloc {
    use std::time::Duration;

    #[global_allocator]
    static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

    /// How often the gauges are read.
    const EVERY: Duration = Duration::from_secs(1);

    /// How long freed pages stay dirty (kept for reuse) before the background thread returns
    /// them to the system; jemalloc's default is 10 s. A partition's records are freed in one
    /// go when it is published, and at 64 tenants 10 s of those kept 150-250 MB resident above
    /// what was allocated (`xtask/loadgen/PROFILE.md`, "Memory at 64 tenants, again").
    const DIRTY_DECAY_MS: isize = 1_000;

    /// Turns on jemalloc's background thread, which returns decayed pages to the system
    /// without an allocating thread having to, and spawns a task on `runtime` that publishes
    /// [`ourios_node::metrics::MEMORY_ALLOCATED`] and [`ourios_node::metrics::MEMORY_RESIDENT`]
    /// every second. A failure is logged and costs only those: the allocator works without
    /// them.
    pub(crate) fn start(runtime: &tokio::runtime::Handle) {
        if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
            tracing::warn!(
                error = %e,
                "jemalloc's background thread did not start; freed pages return to the system \
                 only as threads allocate"
            );
        }
        if let Err(e) = set_dirty_decay(DIRTY_DECAY_MS) {
            tracing::warn!(
                error = %e,
                "jemalloc's dirty decay could not be set; freed pages stay resident for its \
                 default of 10 s"
            );
        }
        runtime.spawn(async {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // The statistics are a snapshot taken when the epoch advances.
                if tikv_jemalloc_ctl::epoch::advance().is_err() {
                    continue;
                }
                if let (Ok(allocated), Ok(resident)) = (
                    tikv_jemalloc_ctl::stats::allocated::read(),
                    tikv_jemalloc_ctl::stats::resident::read(),
                ) {
                    metrics::gauge!(ourios_node::metrics::MEMORY_ALLOCATED).set(allocated as f64);
                    metrics::gauge!(ourios_node::metrics::MEMORY_RESIDENT).set(resident as f64);
                }
            }
        });
    }

    /// Sets the dirty decay of the arenas that exist and of those made later.
    fn set_dirty_decay(ms: isize) -> tikv_jemalloc_ctl::Result<()> {
        use tikv_jemalloc_ctl::{Access, AsName};
        "arenas.dirty_decay_ms\0".name().write(ms)?;
        for i in 0..tikv_jemalloc_ctl::arenas::narenas::read()? {
            // An arena not yet initialised has no setting to change (it takes the default
            // above when it is made): the error is expected, not a failure.
            let _ = format!("arena.{i}.dirty_decay_ms\0")
                .as_str()
                .name()
                .write(ms);
        }
        Ok(())
    }
}

/// Without the `jemalloc` feature, or where jemalloc does not build, the system allocator
/// serves and there are no gauges.
#[cfg(not(all(feature = "jemalloc", not(target_env = "msvc"))))]
pub(crate) fn start(_runtime: &tokio::runtime::Handle) {}
