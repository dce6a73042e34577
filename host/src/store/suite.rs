//! One test suite for every store: each test here runs against SQLite (a file in a temporary
//! folder) and against PostgreSQL (a database of its own in the cluster that
//! `MAESTRO_TEST_POSTGRES` names, dropped afterwards). Without that variable the PostgreSQL
//! half says it was skipped; `.ci/test` always sets it.

use std::sync::Arc;

use crate::engine::{
    JobEvent, JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitReason, WaitRequest,
};
use crate::plugin::{CallRequest, Resume};
use crate::store::{CancelOutcome, JobStore, PostgresStore, SqliteStore, StoreError, StoreFuture};

/// A store under test, and how to reach its database behind its back.
pub(crate) struct Fixture {
    store: Arc<dyn JobStore>,
    database: Database,
}

enum Database {
    Sqlite {
        path: std::path::PathBuf,
        _dir: tempfile::TempDir,
    },
    Postgres {
        admin: String,
        url: String,
        name: String,
    },
}

/// The cluster the PostgreSQL tests use: `MAESTRO_TEST_POSTGRES` (a URL whose user may create
/// databases), or `None` when it is not set.
pub(crate) fn postgres_admin_url() -> Option<String> {
    std::env::var("MAESTRO_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
}

/// `url` with its database replaced by `name`.
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

/// A new, empty database in the test cluster; its URL.
pub(crate) fn new_postgres_database(admin: &str, name: &str) -> String {
    let mut client = ::postgres::Client::connect(admin, ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("MAESTRO_TEST_POSTGRES={admin} does not answer: {e}"));
    client
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .unwrap();
    with_database(admin, name)
}

impl Fixture {
    pub(crate) fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/jobs.db");
        Self {
            store: Arc::new(SqliteStore::open(&path).unwrap()),
            database: Database::Sqlite { path, _dir: dir },
        }
    }

    /// `None` when no cluster is given.
    pub(crate) fn postgres() -> Option<Self> {
        let Some(admin) = postgres_admin_url() else {
            eprintln!("skipped: MAESTRO_TEST_POSTGRES is not set (.ci/postgres start sets it)");
            return None;
        };
        let name = format!("maestro_test_{}", uuid::Uuid::now_v7().simple());
        let url = new_postgres_database(&admin, &name);
        Some(Self {
            store: Arc::new(PostgresStore::open(&url).unwrap()),
            database: Database::Postgres { admin, url, name },
        })
    }

    pub(crate) fn store(&self) -> &dyn JobStore {
        &*self.store
    }

    /// A second store on the same database, as another process opens it.
    pub(crate) fn reopen(&self) -> Arc<dyn JobStore> {
        match &self.database {
            Database::Sqlite { path, .. } => Arc::new(SqliteStore::open(path).unwrap()),
            Database::Postgres { url, .. } => Arc::new(PostgresStore::open(url).unwrap()),
        }
    }

    /// The URL of a PostgreSQL fixture's database.
    pub(crate) fn postgres_url(&self) -> Option<&str> {
        match &self.database {
            Database::Postgres { url, .. } => Some(url),
            Database::Sqlite { .. } => None,
        }
    }

    /// Overwrites the stored state of `id` with text that is not a state.
    pub(crate) fn break_state(&self, id: &str) {
        match &self.database {
            Database::Sqlite { path, .. } => {
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute("UPDATE jobs SET state = '{not json' WHERE id = ?1", [id])
                    .unwrap();
            }
            Database::Postgres { url, .. } => {
                ::postgres::Client::connect(url, ::postgres::NoTls)
                    .unwrap()
                    .execute("UPDATE jobs SET state = '{not json' WHERE id = $1", &[&id])
                    .unwrap();
            }
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Database::Postgres { admin, name, .. } = &self.database
            && let Ok(mut client) = ::postgres::Client::connect(admin, ::postgres::NoTls)
        {
            let _ = client.batch_execute(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"));
        }
    }
}

/// A `#[test]` per backend for each test of the suite.
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $test() {
                super::$test(&super::Fixture::sqlite());
            })*
        }
        mod postgres {
            $(#[test]
            fn $test() {
                if let Some(fixture) = super::Fixture::postgres() {
                    super::$test(&fixture);
                }
            })*
        }
    };
}

on_every_store!(
    a_created_job_is_pending_and_claimed_once,
    an_expired_lease_lets_another_runner_take_the_job,
    a_runner_that_lost_its_lease_cannot_save_and_a_dead_run_can_be_cancelled,
    a_wait_is_answered_exactly_once,
    saves_append_numbered_events_and_keep_them,
    cancel_ends_a_waiting_job_but_not_a_finished_one,
    list_is_newest_first_and_filters_by_status,
    an_expired_wait_resumes_with_expired_and_an_answered_one_does_not,
    an_unreadable_job_is_set_aside_instead_of_offered_for_ever,
    every_claim_sets_an_unreadable_job_aside,
    a_refused_save_still_hands_the_runner_its_next_job,
    an_answer_the_jobs_session_refuses_is_not_recorded,
    a_workers_question_is_answered_only_through_its_parent,
    a_parent_waiting_for_its_worker_hears_of_its_question_at_once,
    prune_deletes_whole_finished_trees_that_ended_before_the_cutoff_and_nothing_else,
    longest_waiting_is_by_when_the_wait_began_not_when_the_job_was_made,
    a_conversation_saved_in_parts_reads_back_whole_even_after_an_insert_before_its_end,
    a_job_cancelled_before_its_first_save_keeps_its_conversation,
    many_nodes_on_one_database_run_each_job_exactly_once,
    children_ending_at_once_on_many_nodes_release_their_parent_exactly_once,
);

pub(super) fn job(id: &str) -> JobState {
    JobState::new(id.into(), "chat", "chat", "hello".into())
}

/// `job` parked on an ASK, as the engine leaves it: its session stepped through the start and
/// the park too.
pub(super) fn parked(mut job: JobState) -> JobState {
    job.status = JobStatus::WaitingHuman;
    let wait = Wait {
        id: 1,
        reason: Some(WaitReason::Input),
        request: WaitRequest::Question {
            question: "Which city?".into(),
        },
        resume: ResumePoint::ParkedCall {
            call: CallRequest::new("complete", serde_json::json!({})),
            plugin: PinnedPlugin {
                name: "complete".into(),
                content_hash: "hash-1".into(),
            },
        },
    };
    let session = job.session.as_mut().unwrap();
    for event in [
        JobEvent::Started {
            piece: "chat".into(),
            input: "hello".into(),
            parent: None,
            max_burst: 12,
            acceptance: Default::default(),
            choose_from: Vec::new(),
            intake: None,
        },
        JobEvent::Parked {
            wait: wait.id,
            status: JobStatus::WaitingHuman,
            resume_movement: "chat".into(),
            reason: wait.reason,
            request: wait.request.clone(),
        },
    ] {
        session.observe(&job.id, &event).unwrap();
    }
    job.wait = Some(wait);
    job
}

pub(super) fn finished(status: JobStatus) -> JobEvent {
    JobEvent::Finished {
        status,
        detail: "x".into(),
    }
}

pub(super) fn a_created_job_is_pending_and_claimed_once(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    let (state, status) = store.load("j1").unwrap();
    assert_eq!((state.id.as_str(), status), ("j1", JobStatus::Pending));
    let claimed = store.claim("j1", "runner-a", 60_000).unwrap().unwrap();
    assert_eq!(claimed.resume, None);
    assert!(
        store.claim("j1", "runner-b", 60_000).unwrap().is_none(),
        "the lease holds"
    );
    assert!(matches!(store.load("nope"), Err(StoreError::NotFound(_))));
}

pub(super) fn an_expired_lease_lets_another_runner_take_the_job(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "dead-runner", -1).unwrap().unwrap();
    assert!(store.claim("j1", "runner-b", 60_000).unwrap().is_some());
}

pub(super) fn a_runner_that_lost_its_lease_cannot_save_and_a_dead_run_can_be_cancelled(
    fixture: &Fixture,
) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "slow-runner", -1).unwrap().unwrap();
    // Its lease ran out, so no live run is left to ask: it ends now.
    assert_eq!(
        store.cancel("j1", "the run died").unwrap(),
        CancelOutcome::Cancelled
    );
    let (state, status) = store.load("j1").unwrap();
    assert_eq!(
        (status, state.result.as_deref()),
        (JobStatus::Cancelled, Some("the run died"))
    );
    let last = store.events("j1", 0).unwrap().pop().unwrap().event;
    assert!(
        matches!(&last, JobEvent::Finished { status: JobStatus::Cancelled, detail } if detail == "the run died"),
        "{last:?}"
    );
    assert!(store.claim("j1", "runner-b", 60_000).unwrap().is_none());
    store.create(&job("j2")).unwrap();
    store.claim("j2", "slow-runner", -1).unwrap().unwrap();
    store.claim("j2", "runner-b", 60_000).unwrap().unwrap();
    let lost = store.save(&job("j2"), &[], "slow-runner").unwrap_err();
    assert!(matches!(lost, StoreError::LeaseLost { .. }), "{lost}");
    assert!(run_to_end(store.renew("j2", "slow-runner", 60_000)).is_err());
    run_to_end(store.renew("j2", "runner-b", 60_000)).unwrap();
}

pub(super) fn a_wait_is_answered_exactly_once(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap();
    store.save(&parked(job("j1")), &[], "r").unwrap();
    assert_eq!(
        store.list(Some(JobStatus::WaitingHuman), 10).unwrap()[0]
            .wait_reason
            .as_deref(),
        Some("input")
    );

    let wrong = store
        .answer("j1", &Resume::Approved.into(), None)
        .unwrap_err();
    assert!(matches!(wrong, StoreError::WrongAnswer { .. }), "{wrong}");
    let stale = store
        .answer("j1", &Resume::Answered("x".into()).into(), Some(2))
        .unwrap_err();
    assert!(stale.to_string().contains("not on park 2"), "{stale}");
    store
        .answer("j1", &Resume::Answered("Paris".into()).into(), Some(1))
        .unwrap();
    let second = store
        .answer("j1", &Resume::Answered("Rome".into()).into(), None)
        .unwrap_err();
    assert!(second.to_string().contains("already answered"), "{second}");

    let claimed = store.claim("j1", "r", 60_000).unwrap().unwrap();
    assert_eq!(
        claimed.resume,
        Some(Resume::Answered("Paris".into()).into())
    );
    assert_eq!(
        claimed.state.status,
        JobStatus::WaitingHuman,
        "the engine sees the wait"
    );
}

pub(super) fn saves_append_numbered_events_and_keep_them(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap().unwrap();
    let mut state = job("j1");
    state.status = JobStatus::Running;
    let entered = JobEvent::MovementEntered {
        movement: "chat".into(),
        count: 1,
    };
    store.save(&state, &[entered], "r").unwrap();
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed)], "r")
        .unwrap();
    let reopened = fixture.reopen();
    let store = &*reopened;
    let events = store.events("j1", 0).unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(events[1].event, finished(JobStatus::Completed));
    assert_eq!(store.events("j1", 1).unwrap().len(), 1);
    assert_eq!(store.load("j1").unwrap().1, JobStatus::Completed);
}

pub(super) fn cancel_ends_a_waiting_job_but_not_a_finished_one(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap();
    // A live run is asked to stop; its runner sees the request when it renews its lease.
    assert_eq!(
        store.cancel("j1", "stop").unwrap(),
        CancelOutcome::Requested
    );
    // Asked again, with another reason: the first stands.
    assert_eq!(
        store.cancel("j1", "another reason").unwrap(),
        CancelOutcome::Requested
    );
    assert_eq!(
        run_to_end(store.renew("j1", "r", 60_000))
            .unwrap()
            .as_deref(),
        Some("stop"),
        "the runner learns of the request and its reason"
    );
    // The run parks before it stopped: the cancel wins, with its reason, and the park is never
    // offered.
    store.save(&parked(job("j1")), &[], "r").unwrap();
    let (state, status) = store.load("j1").unwrap();
    assert_eq!((status, state.wait), (JobStatus::Cancelled, None));
    assert_eq!(state.result.as_deref(), Some("stop"));
    let events = store.events("j1", 0).unwrap();
    assert!(matches!(
        &events.last().unwrap().event,
        JobEvent::Finished {
            status: JobStatus::Cancelled,
            ..
        }
    ));
    assert!(
        store
            .list(Some(JobStatus::WaitingHuman), 10)
            .unwrap()
            .is_empty()
    );

    // A waiting job is cancelled at once, with the reason given.
    store.create(&job("j2")).unwrap();
    store.claim("j2", "r", 60_000).unwrap();
    store.save(&parked(job("j2")), &[], "r").unwrap();
    assert_eq!(
        store.cancel("j2", "operator said stop").unwrap(),
        CancelOutcome::Cancelled
    );
    let (state, status) = store.load("j2").unwrap();
    assert_eq!((status, state.wait), (JobStatus::Cancelled, None));
    assert_eq!(state.result.as_deref(), Some("operator said stop"));
    let again = store.cancel("j1", "again").unwrap_err();
    assert!(again.to_string().contains("cancelled"), "{again}");
    let answer = store
        .answer("j1", &Resume::Answered("late".into()).into(), None)
        .unwrap_err();
    assert!(matches!(answer, StoreError::NotWaiting { .. }), "{answer}");
}

pub(super) fn list_is_newest_first_and_filters_by_status(fixture: &Fixture) {
    let store = fixture.store();
    for id in ["a", "b", "c"] {
        store.create(&job(id)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    store.claim("b", "r", 60_000).unwrap();
    store.save(&parked(job("b")), &[], "r").unwrap();
    let all: Vec<String> = store
        .list(None, 10)
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(all, ["c", "b", "a"]);
    let waiting = store.list(Some(JobStatus::WaitingHuman), 10).unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].id, "b");
}

pub(super) fn an_expired_wait_resumes_with_expired_and_an_answered_one_does_not(fixture: &Fixture) {
    let store = fixture.store();
    for id in ["late", "answered", "forever"] {
        store.create(&job(id)).unwrap();
        store.claim(id, "r", 60_000).unwrap();
        let mut parked = parked(job(id));
        parked.wait_expires_at_ms = (id != "forever").then_some(0);
        store.save(&parked, &[], "r").unwrap();
    }
    assert_eq!(
        store.active_jobs().unwrap(),
        2,
        "expiring waits come back by themselves"
    );
    store
        .answer("answered", &Resume::Answered("on time".into()).into(), None)
        .unwrap();
    assert_eq!(run_to_end(store.expire_waits()).unwrap(), 1);
    let late = store.claim("late", "r", 60_000).unwrap().unwrap();
    assert_eq!(late.resume, Some(Resume::Expired.into()));
    let answered = store.claim("answered", "r", 60_000).unwrap().unwrap();
    assert_eq!(
        answered.resume,
        Some(Resume::Answered("on time".into()).into())
    );
    assert_eq!(store.load("forever").unwrap().1, JobStatus::WaitingHuman);
}

pub(super) fn an_unreadable_job_is_set_aside_instead_of_offered_for_ever(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("broken")).unwrap();
    store.create(&job("fine")).unwrap();
    fixture.break_state("broken");
    let first = store.claim_next("r", 60_000).unwrap();
    assert!(first.is_none(), "the broken job is not handed out");
    assert_eq!(
        store.list(Some(JobStatus::Error), 10).unwrap()[0].id,
        "broken"
    );
    let next = store.claim_next("r", 60_000).unwrap().unwrap();
    assert_eq!(next.state.id, "fine");
}

/// The state is parsed by the caller after the claim committed, so an unreadable one is set
/// aside by a second change: on every path that claims.
pub(super) fn every_claim_sets_an_unreadable_job_aside(fixture: &Fixture) {
    let store = fixture.store();
    for id in ["by-id", "async", "handoff", "fine"] {
        store.create(&job(id)).unwrap();
    }
    store.claim("fine", "other", 60_000).unwrap().unwrap();
    for id in ["by-id", "async", "handoff"] {
        fixture.break_state(id);
    }
    let status = |id: &str| store.summary(id).unwrap().status;

    let refused = store.claim("by-id", "r", 60_000).unwrap_err();
    assert!(
        matches!(&refused, StoreError::Corrupt { job, .. } if job == "by-id"),
        "{refused}"
    );
    assert_eq!(status("by-id"), JobStatus::Error);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let claimed = runtime
        .block_on(store.claim_next_async("r", 60_000))
        .unwrap();
    assert!(claimed.is_none());
    assert_eq!(status("async"), JobStatus::Error);

    let (mut fine, _) = store.load("fine").unwrap();
    fine.status = JobStatus::Running;
    let handoff = runtime
        .block_on(store.save_and_claim_next(&fine, &[], "other", 60_000))
        .unwrap();
    handoff.saved.unwrap();
    assert!(handoff.next.unwrap().is_none());
    assert_eq!(status("handoff"), JobStatus::Error);
    assert_eq!(status("fine"), JobStatus::Running, "the save stood");
}

/// The ids of every job in `store`, sorted.
pub(super) fn job_ids(store: &dyn JobStore) -> Vec<String> {
    let mut ids: Vec<_> = store
        .list(None, 100)
        .unwrap()
        .into_iter()
        .map(|job| job.id)
        .collect();
    ids.sort();
    ids
}

/// Runs one change to its end.
pub(super) fn run_to_end<T>(change: StoreFuture<T>) -> Result<T, StoreError> {
    results([change]).pop().expect("one result")
}

/// Runs the changes to their ends, in order.
pub(super) fn results<T>(
    queued: impl IntoIterator<Item = StoreFuture<T>>,
) -> Vec<Result<T, StoreError>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    queued
        .into_iter()
        .map(|change| runtime.block_on(change))
        .collect()
}

pub(super) fn a_refused_save_still_hands_the_runner_its_next_job(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("lost")).unwrap();
    store.claim("lost", "slow", -1_000).unwrap().unwrap();
    // The lease ran out: another runner took the job.
    store.claim_next("fast", 60_000).unwrap().unwrap();
    store.create(&job("next")).unwrap();
    let mut state = job("lost");
    state.status = JobStatus::Completed;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let handoff = runtime
        .block_on(store.save_and_claim_next(
            &state,
            &[finished(JobStatus::Completed)],
            "slow",
            60_000,
        ))
        .unwrap();
    assert!(
        matches!(handoff.saved, Err(StoreError::LeaseLost { .. })),
        "{:?}",
        handoff.saved
    );
    assert_eq!(handoff.next.unwrap().unwrap().state.id, "next");
    assert_eq!(store.load("lost").unwrap().1, JobStatus::Running);
    assert!(
        store.events("lost", 0).unwrap().is_empty(),
        "nothing of the refused save stays"
    );
}

pub(super) fn an_answer_the_jobs_session_refuses_is_not_recorded(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap();
    // The wait says it takes an answer, but the session never parked: the log would not fold.
    let mut unparked = parked(job("j1"));
    unparked.session = job("j1").session;
    store.save(&unparked, &[], "r").unwrap();
    let refused = store
        .answer("j1", &Resume::Answered("Paris".into()).into(), None)
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("its session refuses it: event #0 `resumed` rejected in phase `idle`"),
        "{refused}"
    );
    assert_eq!(store.load("j1").unwrap().1, JobStatus::WaitingHuman);
}

/// A worker of `parent`, parked on a question as the engine leaves it.
pub(super) fn waiting_worker(store: &dyn JobStore, parent: &str, id: &str) {
    let mut worker = job(id);
    worker.parent = Some(parent.into());
    worker.reviewed_by_parent = true;
    store.create(&worker).unwrap();
    store.claim(id, "r", 60_000).unwrap();
    store.save(&parked(worker), &[], "r").unwrap();
}

pub(super) fn a_workers_question_is_answered_only_through_its_parent(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("parent")).unwrap();
    waiting_worker(store, "parent", "worker");
    let direct = store
        .answer("worker", &Resume::Answered("me".into()).into(), None)
        .unwrap_err();
    assert!(
        direct.to_string().contains("a worker of job `parent`"),
        "{direct}"
    );
    let forwarded = |from: &str| {
        crate::engine::Answer::Engine(crate::engine::EngineAnswer::Forwarded {
            from: from.into(),
            answer: Box::new(Resume::Answered("the council".into()).into()),
        })
    };
    let stranger = store
        .answer("worker", &forwarded("someone-else"), Some(1))
        .unwrap_err();
    assert!(
        stranger.to_string().contains("not its worker"),
        "{stranger}"
    );
    store
        .answer("worker", &forwarded("parent"), Some(1))
        .unwrap();
    // The worker gets the answer itself, as if a human had given it there.
    let claimed = store.claim("worker", "r", 60_000).unwrap().unwrap();
    assert_eq!(
        claimed.resume,
        Some(Resume::Answered("the council".into()).into())
    );
}

pub(super) fn a_parent_waiting_for_its_worker_hears_of_its_question_at_once(fixture: &Fixture) {
    let store = fixture.store();
    // The worker asked while its parent still ran; the parent then parks on it.
    store.create(&job("parent")).unwrap();
    waiting_worker(store, "parent", "worker");
    store.claim("parent", "r", 60_000).unwrap();
    let mut parent = job("parent");
    parent.status = JobStatus::WaitingSubtasks;
    parent.wait = Some(Wait {
        id: 1,
        reason: None,
        request: WaitRequest::Worker {
            worker: "worker".into(),
        },
        resume: ResumePoint::ParkedCall {
            call: CallRequest::new("RunWorker", serde_json::json!({})),
            plugin: PinnedPlugin {
                name: "run_worker".into(),
                content_hash: "hash-2".into(),
            },
        },
    });
    store.save(&parent, &[], "r").unwrap();
    assert_eq!(store.load("parent").unwrap().1, JobStatus::Pending);
    let claimed = store.claim("parent", "r", 60_000).unwrap().unwrap();
    let Some(crate::engine::Answer::Engine(crate::engine::EngineAnswer::Worker(
        crate::engine::WorkerNews::Asked {
            worker,
            wait,
            question,
        },
    ))) = claimed.resume
    else {
        panic!("the parent hears of the question: {:?}", claimed.resume);
    };
    assert_eq!(
        (worker.as_str(), wait, question.as_str()),
        ("worker", 1, "Which city?")
    );
}

/// `id` (created with `parent`) run to `Completed`, with one event.
pub(super) fn completed(store: &dyn JobStore, id: &str, parent: Option<&str>) {
    let mut state = job(id);
    state.parent = parent.map(Into::into);
    store.create(&state).unwrap();
    store.claim(id, "r", 60_000).unwrap().unwrap();
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed)], "r")
        .unwrap();
}

pub(super) fn prune_deletes_whole_finished_trees_that_ended_before_the_cutoff_and_nothing_else(
    fixture: &Fixture,
) {
    let store = fixture.store();
    // The oldest finished job has a child that still waits: its tree is not over.
    completed(store, "busy", None);
    waiting_worker(store, "busy", "busy-child");
    completed(store, "done", None);
    completed(store, "done-child", Some("done"));
    completed(store, "done-too", None);
    store.create(&job("waiting")).unwrap();
    store.claim("waiting", "r", 60_000).unwrap();
    store.save(&parked(job("waiting")), &[], "r").unwrap();

    assert_eq!(store.prune(0, 100).unwrap(), 0, "nothing ended before 1970");
    assert_eq!(
        store.prune(i64::MAX, 1).unwrap(),
        2,
        "one tree: the oldest over, whole"
    );
    assert!(matches!(
        store.load("done-child"),
        Err(StoreError::NotFound(_))
    ));
    assert!(store.events("done", 0).unwrap().is_empty());
    assert!(store.load("done-too").is_ok(), "the limit held");
    assert_eq!(store.prune(i64::MAX, 100).unwrap(), 1);
    assert_eq!(job_ids(store), vec!["busy", "busy-child", "waiting"]);
    assert!(!store.events("busy", 0).unwrap().is_empty());
}

pub(super) fn longest_waiting_is_by_when_the_wait_began_not_when_the_job_was_made(
    fixture: &Fixture,
) {
    let store = fixture.store();
    for id in ["j1", "j2", "j3"] {
        store.create(&job(id)).unwrap();
    }
    for id in ["j2", "j3", "j1"] {
        store.claim(id, "r", 60_000).unwrap().unwrap();
        store.save(&parked(job(id)), &[], "r").unwrap();
        // Distinct timestamps, so the order is not left to the ids.
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    let ids = |jobs: Vec<crate::store::JobSummary>| -> Vec<String> {
        jobs.into_iter().map(|job| job.id).collect()
    };
    assert_eq!(ids(store.longest_waiting(1).unwrap()), ["j2"]);
    assert_eq!(ids(store.longest_waiting(10).unwrap()), ["j2", "j3", "j1"]);
}

pub(super) fn said(text: &str) -> crate::llm::Message {
    crate::llm::Message::User { text: text.into() }
}

pub(super) fn texts(job: &JobState) -> Vec<String> {
    job.conversation
        .iter()
        .map(|message| match message {
            crate::llm::Message::User { text } => text.clone(),
            other => panic!("not a user message: {other:?}"),
        })
        .collect()
}

pub(super) fn a_conversation_saved_in_parts_reads_back_whole_even_after_an_insert_before_its_end(
    fixture: &Fixture,
) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    let mut state = store.claim("j1", "r", 60_000).unwrap().unwrap().state;
    state.status = JobStatus::Running;
    state.conversation.push(said("one"));
    store.save(&state, &[], "r").unwrap();
    // Saved again from the same value: the messages are not doubled.
    state.conversation.push(said("two"));
    store.save(&state, &[], "r").unwrap();
    assert_eq!(texts(&store.load("j1").unwrap().0), ["hello", "one", "two"]);

    let mut state = store.load("j1").unwrap().0;
    state.conversation.push(said("four"));
    state.conversation.insert(1, said("between"));
    store.save(&state, &[], "r").unwrap();
    let reopened = fixture.reopen();
    let store = &*reopened;
    let (stored, _) = store.load("j1").unwrap();
    assert_eq!(texts(&stored), ["hello", "between", "one", "two", "four"]);
    assert_eq!(stored.conversation.unsaved().len(), 0);
}

pub(super) fn a_job_cancelled_before_its_first_save_keeps_its_conversation(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    assert_eq!(
        store.cancel("j1", "not needed").unwrap(),
        CancelOutcome::Cancelled
    );
    let (cancelled, status) = store.load("j1").unwrap();
    assert_eq!(status, JobStatus::Cancelled);
    assert_eq!(texts(&cancelled), ["hello"]);
    assert_eq!(cancelled.result.as_deref(), Some("not needed"));
}

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
                            .save(&state, &[finished(JobStatus::Completed)], &owner)
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
                    node.save(&state, &[finished(JobStatus::Completed)], &owner)
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut next = || {
        runtime
            .block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(30), heard.recv()).await
            })
            .expect("the change is heard")
            .unwrap()
    };
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
