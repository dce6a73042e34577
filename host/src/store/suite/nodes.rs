//! The tests of the suite on many stores of one database, as many nodes open it: each job run
//! once, parents released once, and, for PostgreSQL, every node hearing of each change and
//! leases on the server's clock.

use std::sync::Arc;

use super::{Fixture, finished, job, parked};
use crate::engine::{JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitRequest};
use crate::plugin::{CallRequest, Resume};
use crate::store::{JobStore, PostgresStore, StoreError};

/// Nodes: stores of their own on the fixture's database, as separate processes open it.
fn nodes(fixture: &Fixture, count: usize) -> Vec<Arc<dyn JobStore>> {
    (0..count).map(|_| fixture.reopen()).collect()
}

pub(super) fn many_nodes_on_one_database_run_each_job_exactly_once(fixture: &Fixture) {
    let store = fixture.store();
    let ids: Vec<String> = (0..120).map(|n| format!("job-{n:03}")).collect();
    for id in &ids {
        store.create(&job(id)).unwrap();
    }
    let runs = std::thread::scope(|scope| {
        let runners: Vec<_> = nodes(fixture, 4)
            .into_iter()
            .enumerate()
            .map(|(node, store)| {
                scope.spawn(move || {
                    let owner = format!("node-{node}");
                    let mut ran = Vec::new();
                    while let Some(claimed) = store.claim_next(&owner, 60_000).unwrap() {
                        let mut state = claimed.state;
                        state.status = JobStatus::Completed;
                        store
                            .save(&state, &[finished(JobStatus::Completed).into()], &owner)
                            .unwrap();
                        ran.push(state.id);
                    }
                    ran
                })
            })
            .collect();
        runners
            .into_iter()
            .flat_map(|runner| runner.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut sorted = runs.clone();
    sorted.sort();
    assert_eq!(sorted, ids, "every job ran, and none twice");
    for id in &ids {
        assert_eq!(store.load(id).unwrap().1, JobStatus::Completed);
        let events = store.events(id, 0).unwrap();
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1],
            "{id}"
        );
    }
    assert_eq!(store.active_jobs().unwrap(), 0);
}

pub(super) fn children_ending_at_once_on_many_nodes_release_their_parent_exactly_once(
    fixture: &Fixture,
) {
    let nodes = nodes(fixture, 8);
    // Rounds, because which child ends last, and how close behind the others, is up to the
    // scheduler.
    for round in 0..10 {
        let parent = format!("parent-{round}");
        let children: Vec<String> = (0..nodes.len())
            .map(|n| format!("child-{round}-{n}"))
            .collect();
        parent_waiting_for(fixture.store(), &parent, &children);
        // Each child is claimed on a node of its own; they all end at once.
        let claimed: Vec<JobState> = children
            .iter()
            .zip(&nodes)
            .map(|(child, node)| node.claim(child, child, 60_000).unwrap().unwrap().state)
            .collect();
        let start = std::sync::Barrier::new(children.len());
        std::thread::scope(|scope| {
            for (mut state, node) in claimed.into_iter().zip(&nodes) {
                let start = &start;
                scope.spawn(move || {
                    let owner = state.id.clone();
                    state.status = JobStatus::Completed;
                    start.wait();
                    node.save(&state, &[finished(JobStatus::Completed).into()], &owner)
                        .unwrap();
                });
            }
        });
        let store = fixture.store();
        assert_eq!(
            store.load(&parent).unwrap().1,
            JobStatus::Pending,
            "round {round}: the last child to end released its parent"
        );
        let resumed = store.claim(&parent, "r", 60_000).unwrap().unwrap();
        let Some(crate::engine::Answer::Resume(Resume::SubtasksDone(results))) = resumed.resume
        else {
            panic!(
                "the parent resumes with its children's results: {:?}",
                resumed.resume
            );
        };
        let mut ended: Vec<_> = results.iter().map(|r| r.job_id.clone()).collect();
        ended.sort();
        assert_eq!(ended, children);
        assert!(
            results
                .iter()
                .all(|r| r.status == crate::plugin::SubtaskStatus::Completed)
        );
    }
}

/// `parent` parked on its new, pending `children`.
fn parent_waiting_for(store: &dyn JobStore, parent: &str, children: &[String]) {
    store.create(&job(parent)).unwrap();
    for child in children {
        let mut state = job(child);
        state.parent = Some(parent.into());
        store.create(&state).unwrap();
    }
    let mut state = store.claim(parent, "r", 60_000).unwrap().unwrap().state;
    state.status = JobStatus::WaitingSubtasks;
    state.wait = Some(Wait {
        id: 1,
        reason: None,
        request: WaitRequest::Subtasks {
            job_ids: children.to_vec(),
        },
        resume: ResumePoint::ParkedCall {
            call: CallRequest::new("WaitSubTask", serde_json::json!({})),
            plugin: PinnedPlugin {
                name: "subtasks".into(),
                content_hash: "hash-3".into(),
            },
        },
    });
    store.save(&state, &[], "r").unwrap();
}

/// Every node hears of every change to a job's status, its own included, as it commits: a new
/// job, an answer and a park, written through another node.
#[test]
fn postgres_tells_every_node_of_each_change_as_it_commits() {
    let Some(fixture) = Fixture::postgres() else {
        return;
    };
    let mut heard = fixture
        .store()
        .changes()
        .expect("PostgreSQL tells of changes");
    let other = fixture.reopen();
    other.create(&job("j1")).unwrap();
    other.claim("j1", "r", 60_000).unwrap().unwrap();
    other.save(&parked(job("j1")), &[], "r").unwrap();
    other
        .answer("j1", &Resume::Answered("Oslo".into()).into(), Some(1))
        .unwrap();
    let mut next = || next_change(&mut heard);
    let saved = |status| crate::store::JobChange::Saved {
        job: "j1".into(),
        status,
    };
    assert_eq!(next(), saved(JobStatus::Pending), "created");
    assert_eq!(next(), saved(JobStatus::WaitingHuman), "parked");
    assert_eq!(next(), saved(JobStatus::Pending), "answered");
    assert!(
        Fixture::sqlite().store().changes().is_none(),
        "a SQLite store does not claim to hear other processes"
    );
}

/// Leases are written by one node and checked by another: on the database server's clock, so a
/// node whose own clock runs ten minutes ahead still sees another node's lease as live.
#[test]
fn postgres_a_node_whose_clock_runs_ahead_takes_no_live_lease() {
    let Some(fixture) = Fixture::postgres() else {
        return;
    };
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "on-time", 60_000).unwrap().unwrap();
    let ahead = PostgresStore::open(fixture.postgres_url().unwrap()).unwrap();
    ahead.skew_local_clock(10 * 60_000).unwrap();
    assert!(ahead.claim_next("ahead", 60_000).unwrap().is_none());
    assert!(ahead.claim("j1", "ahead", 60_000).unwrap().is_none());
    // A lease that did end on the server's clock is taken.
    store.create(&job("j2")).unwrap();
    store.claim("j2", "dead", -1).unwrap().unwrap();
    assert_eq!(
        ahead.claim_next("ahead", 60_000).unwrap().unwrap().state.id,
        "j2"
    );
}

/// A plugin version published by one node is heard by another and read back as the cluster's;
/// the last publication wins, a removal is recorded, and a version whose bytes no node can
/// fetch cannot be published.
#[test]
fn postgres_tells_every_node_which_plugin_version_serves() {
    let Some(fixture) = Fixture::postgres() else {
        return;
    };
    let mut heard = fixture
        .store()
        .changes()
        .expect("PostgreSQL tells of changes");
    let other = fixture.reopen();
    let refused = other.publish_plugin("echo", Some("not-kept"));
    assert!(
        matches!(refused, Err(StoreError::Database { .. })),
        "{refused:?}"
    );
    other.keep_component("h1", "echo", b"one").unwrap();
    other.keep_component("h2", "echo", b"two").unwrap();
    other.publish_plugin("echo", Some("h1")).unwrap();
    other.publish_plugin("echo", Some("h2")).unwrap();
    other.publish_plugin("gone", None).unwrap();
    let mut next = || next_change(&mut heard);
    let plugin = |name: &str| crate::store::JobChange::Plugin { name: name.into() };
    assert_eq!(next(), plugin("echo"));
    assert_eq!(next(), plugin("echo"));
    assert_eq!(next(), plugin("gone"));
    let published = fixture.store().published_plugins().unwrap();
    let versions: Vec<(&str, Option<&str>)> = published
        .iter()
        .map(|record| (record.name.as_str(), record.content_hash.as_deref()))
        .collect();
    assert_eq!(versions, [("echo", Some("h2")), ("gone", None)]);
    assert!(
        Fixture::sqlite()
            .store()
            .published_plugins()
            .unwrap()
            .is_empty()
    );
}

/// A database of schema 3, whose jobs kept their state in their own row, moves each state to
/// `job_states` when a node of today's schema opens it: the jobs load as they were, and run on.
#[test]
fn postgres_schema_3_jobs_keep_their_state_when_it_moves_to_its_own_table() {
    let Some(fixture) = Fixture::postgres() else {
        return;
    };
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap().unwrap();
    store.save(&parked(job("j1")), &[], "r").unwrap();
    let before = store.load("j1").unwrap();
    // Back to schema 3's layout, as a database written by the previous release holds it.
    let url = fixture.postgres_url().unwrap().to_owned();
    std::thread::spawn(move || {
        ::postgres::Client::connect(&url, ::postgres::NoTls)
            .unwrap()
            .batch_execute(
                "ALTER TABLE jobs ADD COLUMN state TEXT; \
                 UPDATE jobs SET state = (SELECT state FROM job_states s WHERE s.id = jobs.id); \
                 ALTER TABLE jobs ALTER COLUMN state SET NOT NULL; \
                 DROP TABLE job_states; DROP TABLE secrets; DROP TABLE spent; \
                 UPDATE maestro_schema SET version = 3;",
            )
            .unwrap();
    })
    .join()
    .unwrap();
    let upgraded = PostgresStore::open(fixture.postgres_url().unwrap()).unwrap();
    assert_eq!(upgraded.load("j1").unwrap(), before);
    upgraded
        .answer("j1", &Resume::Answered("Oslo".into()).into(), Some(1))
        .unwrap();
    assert!(upgraded.claim("j1", "r2", 60_000).unwrap().is_some());
}

/// The next change `heard` tells of, waited for up to 30 s.
fn next_change(
    heard: &mut tokio::sync::broadcast::Receiver<crate::store::JobChange>,
) -> crate::store::JobChange {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(30), heard.recv()).await
        })
        .expect("the change is heard")
        .unwrap()
}
