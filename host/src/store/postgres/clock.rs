//! The database's clock, as every node reads it: leases, expiries and the times of rows are
//! written by many nodes and compared by others, so they are all on the database server's clock,
//! not on each node's own.
//!
//! Invariant: [`DbClock::now`] is the node's clock plus the offset last measured against the
//! server (at open, and again every [`REMEASURE`] by the listening thread while the store
//! listens); the offset's error is
//! half a round trip, far below a lease.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::rules_now_ms;

/// How often the offset is measured again (clocks drift; an operator may set one).
pub(super) const REMEASURE: Duration = Duration::from_secs(60);

/// What the server's clock says, as milliseconds since the Unix epoch.
pub(super) const SERVER_NOW: &str = "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint";

#[derive(Default)]
pub(super) struct DbClock {
    /// The server's clock minus this node's, in milliseconds.
    offset: AtomicI64,
    /// A node clock set this far wrong, to test that it does not matter.
    #[cfg(test)]
    skew: AtomicI64,
}

impl DbClock {
    /// This node's clock.
    fn local(&self) -> i64 {
        #[cfg(test)]
        return rules_now_ms() + self.skew.load(Ordering::Relaxed);
        #[cfg(not(test))]
        rules_now_ms()
    }

    /// The server's time now.
    pub fn now(&self) -> i64 {
        self.local() + self.offset.load(Ordering::Relaxed)
    }

    /// Measures the offset with `read_server`, which returns the server's time.
    pub fn measure<E>(&self, read_server: impl FnOnce() -> Result<i64, E>) -> Result<(), E> {
        let before = self.local();
        let server = read_server()?;
        let after = self.local();
        self.offset
            .store(server - (before + after) / 2, Ordering::Relaxed);
        Ok(())
    }

    #[cfg(test)]
    pub fn skew_local_clock(&self, by_ms: i64) {
        self.skew.store(by_ms, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_clock_set_wrong_reads_the_servers_time_once_measured() {
        let clock = DbClock::default();
        clock.skew_local_clock(-3_600_000);
        let server = rules_now_ms();
        clock.measure(|| Ok::<_, ()>(server)).unwrap();
        assert!(
            (clock.now() - rules_now_ms()).abs() < 1_000,
            "{}",
            clock.now() - server
        );
    }
}
