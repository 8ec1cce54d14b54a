//! The one wall clock of a replica: every decision that needs the time (command stamps, token
//! expiry, webhook timestamps, prune and progress deadlines) reads it here, so that the
//! deterministic simulation, which sets its own with [`set_clock`], reaches all of them. A leaf
//! module: it uses nothing else of the crate.

/// The wall clock replicas read: the system's, unless [`set_clock`] chose another for this
/// process.
static CLOCK: std::sync::OnceLock<fn() -> std::time::SystemTime> = std::sync::OnceLock::new();

/// The current wall-clock time ([`set_clock`]).
pub fn system_now() -> std::time::SystemTime {
    CLOCK
        .get()
        .map_or_else(std::time::SystemTime::now, |clock| clock())
}

/// Makes every replica of this process read the wall clock from `clock`: the deterministic
/// simulation's, so that a seed replays the same commands. Only the first call counts.
pub fn set_clock(clock: fn() -> std::time::SystemTime) {
    let _ = CLOCK.set(clock);
}

/// The wall clock in whole seconds since the epoch.
pub(crate) fn unix_now() -> i64 {
    system_now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The current time as RFC 3339, stamped into commands by their proposer.
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(system_now()).to_string()
}
