//! Three `maestro work` nodes on one PostgreSQL database run 300 jobs that park and are
//! answered; the database is restarted mid-run (`pg_ctl restart`). The nodes connect again
//! with growing pauses and finish every job, each exactly once: nothing is lost or repeated.
//!
//! Alone in its test binary: the restart cuts every connection to the test cluster.

mod cluster_support;
mod common;
mod postgres_support;
mod worker_support;

use cluster_support::{Cluster, JOBS};

#[test]
fn three_nodes_ride_out_a_database_restart_and_finish_every_job_once() {
    let Some(database) = postgres_support::database() else {
        return;
    };
    // Half the jobs are answered only after the restart: they park before it, wait through
    // it and resume after it, whatever the machine's speed.
    let cluster = Cluster::start(database, true);
    cluster.wait_for_completed(JOBS / 6);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/postgres");
    let restarted = std::process::Command::new(script)
        .arg("restart")
        .status()
        .unwrap();
    assert!(restarted.success(), "the test cluster restarts");
    let done = cluster.completed();
    eprintln!("the database restarted with {done:?} of {JOBS} jobs completed");
    cluster.answer_the_rest();
    let logs = cluster.finish_and_check();
    assert!(
        logs.iter()
            .any(|log| log.contains("stopped hearing other nodes' changes")),
        "the nodes lost their connections: {logs:#?}"
    );
    cluster_support::assert_the_outage_was_said_sparingly(&logs);
}
