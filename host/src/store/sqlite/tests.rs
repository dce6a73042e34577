use super::*;
use crate::engine::{
    JobEvent, JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitReason, WaitRequest,
};
use crate::plugin::{CallRequest, Resume};
use crate::store::{CancelOutcome, StoreError};

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("nested/jobs.db")).unwrap();
    (dir, store)
}

fn job(id: &str) -> JobState {
    JobState::new(id.into(), "chat", "chat", "hello".into())
}

/// `job` parked on an ASK, as the engine leaves it: its session stepped through the start and
/// the park too.
fn parked(mut job: JobState) -> JobState {
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

fn finished(status: JobStatus) -> JobEvent {
    JobEvent::Finished {
        status,
        detail: "x".into(),
    }
}

#[test]
fn a_created_job_is_pending_and_claimed_once() {
    let (_dir, store) = store();
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

#[test]
fn an_expired_lease_lets_another_runner_take_the_job() {
    let (_dir, store) = store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "dead-runner", -1).unwrap().unwrap();
    assert!(store.claim("j1", "runner-b", 60_000).unwrap().is_some());
}

#[test]
fn a_runner_that_lost_its_lease_cannot_save_and_a_dead_run_can_be_cancelled() {
    let (_dir, store) = store();
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

#[test]
fn a_wait_is_answered_exactly_once() {
    let (_dir, store) = store();
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

#[test]
fn saves_append_numbered_events_and_keep_them() {
    let (dir, store) = store();
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
    drop(store);
    let store = SqliteStore::open(dir.path().join("nested/jobs.db")).unwrap();
    let events = store.events("j1", 0).unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(events[1].event, finished(JobStatus::Completed));
    assert_eq!(store.events("j1", 1).unwrap().len(), 1);
    assert_eq!(store.load("j1").unwrap().1, JobStatus::Completed);
}

#[test]
fn cancel_ends_a_waiting_job_but_not_a_finished_one() {
    let (_dir, store) = store();
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

#[test]
fn list_is_newest_first_and_filters_by_status() {
    let (_dir, store) = store();
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

#[test]
fn a_store_from_a_newer_maestro_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let connection = rusqlite::Connection::open(&path).unwrap();
    connection.pragma_update(None, "user_version", 99).unwrap();
    drop(connection);
    let error = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(
        error.contains("schema version 99") && error.contains("jobs.db"),
        "{error}"
    );
}

#[test]
fn an_expired_wait_resumes_with_expired_and_an_answered_one_does_not() {
    let (_dir, store) = store();
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

#[test]
fn an_unreadable_job_is_set_aside_instead_of_offered_for_ever() {
    let (dir, store) = store();
    store.create(&job("broken")).unwrap();
    store.create(&job("fine")).unwrap();
    let connection = rusqlite::Connection::open(dir.path().join("nested/jobs.db")).unwrap();
    connection
        .execute(
            "UPDATE jobs SET state = '{not json' WHERE id = 'broken'",
            [],
        )
        .unwrap();
    drop(connection);
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
#[test]
fn every_claim_sets_an_unreadable_job_aside() {
    let (dir, store) = store();
    for id in ["by-id", "async", "handoff", "fine"] {
        store.create(&job(id)).unwrap();
    }
    store.claim("fine", "other", 60_000).unwrap().unwrap();
    let connection = rusqlite::Connection::open(dir.path().join("nested/jobs.db")).unwrap();
    connection
        .execute("UPDATE jobs SET state = '{not json' WHERE id <> 'fine'", [])
        .unwrap();
    drop(connection);
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

/// Holds the writer inside a change until the returned sender is dropped, so that the changes
/// queued meanwhile share its next transaction.
fn hold_writer(store: &SqliteStore) -> std::sync::mpsc::Sender<()> {
    let (release, held) = std::sync::mpsc::channel::<()>();
    let (holding, started) = std::sync::mpsc::channel();
    store.writer.queue().submit(
        &store.db,
        move |_, _| {
            holding.send(()).unwrap();
            let _ = held.recv();
            Ok(())
        },
        |_: Result<(), StoreError>| {},
    );
    started.recv().unwrap();
    release
}

/// A change that inserts the job `id`, then fails as `ending` says.
fn insert_then(
    store: &SqliteStore,
    id: &'static str,
    ending: Option<&'static str>,
) -> StoreFuture<()> {
    store.write_async(move |db, tx| {
        tx.exec_cached(
            "INSERT INTO jobs (id, piece, status, movement, state, created_at_ms, updated_at_ms) \
             VALUES (?1, 'chat', 'pending', 'chat', '{}', 0, 0)",
            [id],
        )
        .map_err(|e| db.db_error(e))?;
        match ending {
            None => Ok(()),
            Some("panic") => panic!("a change that panics"),
            Some(message) => Err(StoreError::WrongAnswer {
                job: id.into(),
                message: message.into(),
            }),
        }
    })
}

#[test]
fn changes_queued_together_commit_together_and_a_failed_one_leaves_no_trace() {
    let (_dir, store) = store();
    let release = hold_writer(&store);
    let queued = [
        insert_then(&store, "kept-1", None),
        insert_then(&store, "refused", Some("no")),
        insert_then(&store, "panicked", Some("panic")),
        insert_then(&store, "kept-2", None),
    ];
    drop(release);
    let results = results(queued);
    assert!(results[0].is_ok() && results[3].is_ok(), "{results:?}");
    assert!(
        matches!(&results[1], Err(StoreError::WrongAnswer { message, .. }) if message == "no"),
        "{results:?}"
    );
    let lost = results[2].as_ref().unwrap_err().to_string();
    assert!(lost.contains("dropped the change"), "{lost}");
    assert_eq!(job_ids(&store), ["kept-1", "kept-2"]);
    // The writer lives on after a panic.
    store.create(&job("after")).unwrap();
}

/// The ids of every job in `store`, sorted.
fn job_ids(store: &SqliteStore) -> Vec<String> {
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
fn run_to_end<T>(change: StoreFuture<T>) -> Result<T, StoreError> {
    results([change]).pop().expect("one result")
}

/// Runs the changes to their ends, in order.
fn results<T>(queued: impl IntoIterator<Item = StoreFuture<T>>) -> Vec<Result<T, StoreError>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    queued
        .into_iter()
        .map(|change| runtime.block_on(change))
        .collect()
}

#[test]
fn a_change_that_panics_first_in_its_batch_leaves_the_others_standing() {
    let (_dir, store) = store();
    let release = hold_writer(&store);
    let queued = [
        insert_then(&store, "panicked", Some("panic")),
        insert_then(&store, "kept-1", None),
        // Refused before writing anything.
        store.write_async(|_, _| {
            Err(StoreError::WrongAnswer {
                job: "checked".into(),
                message: "no".into(),
            })
        }),
        insert_then(&store, "kept-2", None),
    ];
    drop(release);
    let results = results(queued);
    let lost = results[0].as_ref().unwrap_err().to_string();
    assert!(lost.contains("dropped the change"), "{lost}");
    assert!(results[1].is_ok() && results[3].is_ok(), "{results:?}");
    assert!(
        matches!(&results[2], Err(StoreError::WrongAnswer { job, .. }) if job == "checked"),
        "{results:?}"
    );
    assert_eq!(job_ids(&store), ["kept-1", "kept-2"]);
}

#[test]
fn a_part_that_fails_after_writing_is_undone_while_its_change_stands() {
    let (_dir, store) = store();
    let insert = |tx: &Tx<'_>, db: &Db, id: &str| {
        tx.exec_cached(
            "INSERT INTO jobs (id, piece, status, movement, state, created_at_ms, updated_at_ms) \
             VALUES (?1, 'chat', 'pending', 'chat', '{}', 0, 0)",
            [id],
        )
        .map(drop)
        .map_err(|e| db.db_error(e))
    };
    let release = hold_writer(&store);
    let queued = [
        insert_then(&store, "before", None),
        store.write_async(move |db, tx| {
            let part = tx.undone_on_error(db, || {
                insert(tx, db, "part")?;
                Err::<(), _>(StoreError::NotFound("part".into()))
            });
            assert!(matches!(part, Err(StoreError::NotFound(_))), "{part:?}");
            insert(tx, db, "whole")
        }),
        insert_then(&store, "after", None),
    ];
    drop(release);
    let results = results(queued);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(job_ids(&store), ["after", "before", "whole"]);
}

#[test]
fn a_refused_save_still_hands_the_runner_its_next_job() {
    let (_dir, store) = store();
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

#[test]
fn events_of_a_first_schema_store_keep_their_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(MIGRATIONS[0]).unwrap();
    old.pragma_update(None, "user_version", 1).unwrap();
    for (seq, event) in [
        (1, finished(JobStatus::Running)),
        (2, finished(JobStatus::Aborted)),
    ] {
        old.execute(
            "INSERT INTO events (job_id, seq, at_ms, event) VALUES ('j1', ?1, 7, ?2)",
            params![seq, serde_json::to_string(&event).unwrap()],
        )
        .unwrap();
    }
    drop(old);
    let store = SqliteStore::open(&path).unwrap();
    let events = store.events("j1", 0).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!((events[1].seq, events[1].at_ms), (2, 7));
    assert_eq!(events[1].event, finished(JobStatus::Aborted));
    // A save of three events continues the numbering, and `after` may fall inside it.
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap().unwrap();
    let three = [JobStatus::Running, JobStatus::Running, JobStatus::Completed].map(finished);
    let mut state = job("j1");
    state.status = JobStatus::Completed;
    store.save(&state, &three, "r").unwrap();
    let after_four = store.events("j1", 4).unwrap();
    assert_eq!(
        after_four.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![5]
    );
    assert_eq!(after_four[0].event, finished(JobStatus::Completed));
    assert_eq!(store.events("j1", 0).unwrap().len(), 5);
}

#[test]
fn an_answer_the_jobs_session_refuses_is_not_recorded() {
    let (_dir, store) = store();
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
fn waiting_worker(store: &SqliteStore, parent: &str, id: &str) {
    let mut worker = job(id);
    worker.parent = Some(parent.into());
    worker.reviewed_by_parent = true;
    store.create(&worker).unwrap();
    store.claim(id, "r", 60_000).unwrap();
    store.save(&parked(worker), &[], "r").unwrap();
}

#[test]
fn a_workers_question_is_answered_only_through_its_parent() {
    let (_dir, store) = store();
    store.create(&job("parent")).unwrap();
    waiting_worker(&store, "parent", "worker");
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

#[test]
fn a_parent_waiting_for_its_worker_hears_of_its_question_at_once() {
    let (_dir, store) = store();
    // The worker asked while its parent still ran; the parent then parks on it.
    store.create(&job("parent")).unwrap();
    waiting_worker(&store, "parent", "worker");
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

#[test]
fn a_login_session_does_not_stay_in_the_file_once_its_run_took_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let secret = "sid=the-session-nobody-may-find-later";
    {
        let store = SqliteStore::open(&path).unwrap();
        let mut waiting = job("j1");
        store.create(&waiting).unwrap();
        store.claim("j1", "r", 60_000).unwrap();
        waiting.status = JobStatus::WaitingHuman;
        let wait = Wait {
            id: 1,
            reason: Some(WaitReason::BrowserLogin),
            request: WaitRequest::BrowserLogin {
                url: "https://example.com/login".into(),
                reason: "401".into(),
            },
            resume: ResumePoint::ParkedCall {
                call: CallRequest::new("BrowseWeb", serde_json::json!({})),
                plugin: PinnedPlugin {
                    name: "browse_web".into(),
                    content_hash: "h".into(),
                },
            },
        };
        waiting.session = None; // no session check: only the file is under test
        waiting.wait = Some(wait);
        store.save(&waiting, &[], "r").unwrap();
        store
            .answer("j1", &Resume::LoggedIn(secret.into()).into(), Some(1))
            .unwrap();
        let claimed = store.claim("j1", "r", 60_000).unwrap().unwrap();
        assert_eq!(claimed.resume, Some(Resume::LoggedIn(secret.into()).into()));
        let mut done = claimed.state;
        done.status = JobStatus::Completed;
        done.wait = None;
        store.save(&done, &[], "r").unwrap();
    }
    // The store is closed: its log was checkpointed into the file, which is all that is left.
    let mut bytes = std::fs::read(&path).unwrap();
    for sidecar in ["jobs.db-wal", "jobs.db-shm"] {
        if let Ok(more) = std::fs::read(dir.path().join(sidecar)) {
            bytes.extend(more);
        }
    }
    let found = bytes
        .windows(secret.len())
        .any(|window| window == secret.as_bytes());
    assert!(!found, "the session is still in the store's files");
}

/// `id` (created with `parent`) run to `Completed`, with one event.
fn completed(store: &SqliteStore, id: &str, parent: Option<&str>) {
    let mut state = job(id);
    state.parent = parent.map(Into::into);
    store.create(&state).unwrap();
    store.claim(id, "r", 60_000).unwrap().unwrap();
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed)], "r")
        .unwrap();
}

#[test]
fn prune_deletes_whole_finished_trees_that_ended_before_the_cutoff_and_nothing_else() {
    let (_dir, store) = store();
    // The oldest finished job has a child that still waits: its tree is not over.
    completed(&store, "busy", None);
    waiting_worker(&store, "busy", "busy-child");
    completed(&store, "done", None);
    completed(&store, "done-child", Some("done"));
    completed(&store, "done-too", None);
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
    assert_eq!(job_ids(&store), vec!["busy", "busy-child", "waiting"]);
    assert!(!store.events("busy", 0).unwrap().is_empty());
}

#[test]
fn longest_waiting_is_by_when_the_wait_began_not_when_the_job_was_made() {
    let (_dir, store) = store();
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

fn said(text: &str) -> crate::llm::Message {
    crate::llm::Message::User { text: text.into() }
}

fn texts(job: &JobState) -> Vec<String> {
    job.conversation
        .iter()
        .map(|message| match message {
            crate::llm::Message::User { text } => text.clone(),
            other => panic!("not a user message: {other:?}"),
        })
        .collect()
}

#[test]
fn a_conversation_saved_in_parts_reads_back_whole_even_after_an_insert_before_its_end() {
    let (dir, store) = store();
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
    drop(store);
    let store = SqliteStore::open(dir.path().join("nested/jobs.db")).unwrap();
    let (stored, _) = store.load("j1").unwrap();
    assert_eq!(texts(&stored), ["hello", "between", "one", "two", "four"]);
    assert_eq!(stored.conversation.unsaved().len(), 0);
}

/// What one save of `state` adds to the store's write-ahead log, emptied first: the pages the
/// save's commit wrote.
fn wal_bytes_of_save(path: &std::path::Path, store: &SqliteStore, state: &JobState) -> u64 {
    let wal = path.with_extension("db-wal");
    let side = Connection::open(path).unwrap();
    loop {
        let (busy, _, _): (i64, i64, i64) = side
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .unwrap();
        if busy == 0 && std::fs::metadata(&wal).map_or(0, |m| m.len()) == 0 {
            break;
        }
        std::thread::yield_now();
    }
    let event = JobEvent::MovementEntered {
        movement: "chat".into(),
        count: 1,
    };
    store.save(state, &[event], "r").unwrap();
    std::fs::metadata(&wal).unwrap().len()
}

#[test]
fn a_save_late_in_a_long_conversation_writes_no_more_than_an_early_one() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    store.create(&job("j1")).unwrap();
    let mut state = store.claim("j1", "r", 60_000).unwrap().unwrap().state;
    state.status = JobStatus::Running;
    let mut written = Vec::new();
    for turn in 1..=300 {
        state.conversation.push(crate::llm::Message::Assistant {
            text: Some(format!("Turn {turn}: looking that up.")),
            tool_calls: vec![crate::llm::ToolCall {
                id: format!("call-{turn}"),
                name: "echo".into(),
                arguments: r#"{"text":"a line of about sixty characters, as a tool gets it"}"#
                    .into(),
            }],
        });
        state.conversation.push(crate::llm::Message::Tool {
            call_id: format!("call-{turn}"),
            name: "echo".into(),
            content: "a line of about sixty characters, as a tool gets it".into(),
            is_error: false,
        });
        written.push(wal_bytes_of_save(&path, &store, &state));
        // A runner's next save starts from what the store holds, as a claim hands it.
        state = store.load("j1").unwrap().0;
    }
    let median = |turns: std::ops::RangeInclusive<usize>| {
        let mut window: Vec<u64> = written[turns.start() - 1..*turns.end()].to_vec();
        window.sort();
        window[window.len() / 2]
    };
    // Medians of fifty saves each: now and then a save also splits a B-tree page (three or
    // four pages more), as often late as early, and a median is the save that does not.
    let (early, late) = (median(3..=52), median(251..=300));
    assert!(
        late <= early,
        "a save near turn 300 wrote {late} bytes, one near turn 3 {early}: {written:?}"
    );
    assert_eq!(store.load("j1").unwrap().0.conversation.len(), 601);
}

#[test]
fn a_second_schema_store_keeps_its_jobs_and_conversations_after_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let mut parked_job = parked(job("j1"));
    parked_job.conversation.push(said("Which city?"));
    {
        let old = Connection::open(&path).unwrap();
        old.execute_batch(MIGRATIONS[0]).unwrap();
        old.execute_batch(MIGRATIONS[1]).unwrap();
        old.pragma_update(None, "user_version", 2).unwrap();
        // As the second schema stored a job: the whole state, conversation included.
        for (id, state) in [
            ("j1", serde_json::to_string(&parked_job).unwrap()),
            ("j2", "{ not json".to_owned()),
        ] {
            old.execute(
                "INSERT INTO jobs (id, piece, status, movement, state, created_at_ms, \
                 updated_at_ms) VALUES (?1, 'chat', 'waiting_human', 'chat', ?2, 1, 1)",
                params![id, state],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    let (loaded, status) = store.load("j1").unwrap();
    assert_eq!(status, JobStatus::WaitingHuman);
    assert_eq!(loaded, parked_job);
    assert_eq!(texts(&loaded), ["hello", "Which city?"]);
    // The answer is checked against the stored state and the job resumes with it whole.
    store
        .answer(
            "j1",
            &Answer::Resume(Resume::Answered("Oslo".into())),
            Some(1),
        )
        .unwrap();
    let claimed = store.claim("j1", "r", 60_000).unwrap().unwrap();
    assert_eq!(texts(&claimed.state), ["hello", "Which city?"]);
    // A state that did not parse before the upgrade still does not, and says so.
    assert!(matches!(
        store.load("j2"),
        Err(StoreError::Corrupt { job, .. }) if job == "j2"
    ));
}

#[test]
fn a_job_cancelled_before_its_first_save_keeps_its_conversation() {
    let (_dir, store) = store();
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
