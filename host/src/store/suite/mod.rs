//! One test suite for every store: each test here runs against SQLite (a file in a temporary
//! folder) and against PostgreSQL (a database of its own in the cluster that
//! `MAESTRO_TEST_POSTGRES` names, dropped afterwards). Without that variable the PostgreSQL
//! half says it was skipped; `.ci/test` always sets it.

use std::sync::Arc;

mod cases;
mod nodes;

use crate::engine::{
    JobEvent, JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitReason, WaitRequest,
};
use crate::plugin::CallRequest;
use crate::store::{JobStore, PostgresStore, SqliteStore, StoreError, StoreFuture};

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
                    .execute(
                        "UPDATE job_states SET state = '{not json' WHERE id = $1",
                        &[&id],
                    )
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
    ($($part:ident :: $test:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $test() {
                super::$part::$test(&super::Fixture::sqlite());
            })*
        }
        mod postgres {
            $(#[test]
            fn $test() {
                if let Some(fixture) = super::Fixture::postgres() {
                    super::$part::$test(&fixture);
                }
            })*
        }
    };
}

on_every_store!(
    cases::a_created_job_is_pending_and_claimed_once,
    cases::an_expired_lease_lets_another_runner_take_the_job,
    cases::a_runner_that_lost_its_lease_cannot_save_and_a_dead_run_can_be_cancelled,
    cases::a_wait_is_answered_exactly_once,
    cases::saves_append_numbered_events_and_keep_them,
    cases::a_runs_events_keep_when_they_happened_and_the_rest_when_written,
    cases::cancel_ends_a_waiting_job_but_not_a_finished_one,
    cases::list_is_newest_first_and_filters_by_status,
    cases::an_expired_wait_resumes_with_expired_and_an_answered_one_does_not,
    cases::an_unreadable_job_is_set_aside_instead_of_offered_for_ever,
    cases::every_claim_sets_an_unreadable_job_aside,
    cases::a_refused_save_still_hands_the_runner_its_next_job,
    cases::an_answer_the_jobs_session_refuses_is_not_recorded,
    cases::a_workers_question_is_answered_only_through_its_parent,
    cases::a_parent_waiting_for_its_worker_hears_of_its_question_at_once,
    cases::prune_deletes_whole_finished_trees_that_ended_before_the_cutoff_and_nothing_else,
    cases::longest_waiting_is_by_when_the_wait_began_not_when_the_job_was_made,
    cases::a_conversation_saved_in_parts_reads_back_whole_even_after_an_insert_before_its_end,
    cases::a_job_cancelled_before_its_first_save_keeps_its_conversation,
    cases::a_secret_is_made_once_and_shared_by_every_process_that_opens_the_store,
    cases::a_one_time_token_is_spent_once_on_any_node_and_forgotten_when_it_ends,
    nodes::many_nodes_on_one_database_run_each_job_exactly_once,
    nodes::children_ending_at_once_on_many_nodes_release_their_parent_exactly_once,
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

/// A worker of `parent`, parked on a question as the engine leaves it.
pub(super) fn waiting_worker(store: &dyn JobStore, parent: &str, id: &str) {
    let mut worker = job(id);
    worker.parent = Some(parent.into());
    worker.reviewed_by_parent = true;
    store.create(&worker).unwrap();
    store.claim(id, "r", 60_000).unwrap();
    store.save(&parked(worker), &[], "r").unwrap();
}

/// `id` (created with `parent`) run to `Completed`, with one event.
pub(super) fn completed(store: &dyn JobStore, id: &str, parent: Option<&str>) {
    let mut state = job(id);
    state.parent = parent.map(Into::into);
    store.create(&state).unwrap();
    store.claim(id, "r", 60_000).unwrap().unwrap();
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed).into()], "r")
        .unwrap();
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
