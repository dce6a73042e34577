//! Three `maestro work` nodes on one PostgreSQL database run 300 jobs that park and are
//! answered; one node is SIGKILLed mid-run. The others take its jobs up once its leases end:
//! every job ends exactly once, each step of its log once and in order, and a parked job nobody
//! answered is left alone.

mod cluster_support;
mod common;
mod postgres_support;
mod worker_support;

use cluster_support::{Cluster, JOBS};

#[test]
fn three_nodes_run_every_job_exactly_once_when_one_is_killed_mid_run() {
    let Some(database) = postgres_support::database() else {
        return;
    };
    let mut cluster = Cluster::start(database, false);
    cluster.wait_for_completed(JOBS / 3);
    cluster.kill(0);
    cluster.finish_and_check();
}
