//! The tests of the suite on one store: what each change does and refuses.

use super::{
    Fixture, completed, finished, job, job_ids, parked, results, run_to_end, said, texts,
    waiting_worker,
};
use crate::engine::{JobEvent, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitRequest};
use crate::plugin::{CallRequest, Resume};
use crate::store::{CancelOutcome, StoreError, TimedEvent};

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
    store.save(&state, &[entered.into()], "r").unwrap();
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed).into()], "r")
        .unwrap();
    let reopened = fixture.reopen();
    let store = &*reopened;
    let events = store.events("j1", 0).unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(events[1].event, finished(JobStatus::Completed));
    assert_eq!(store.events("j1", 1).unwrap().len(), 1);
    assert_eq!(store.load("j1").unwrap().1, JobStatus::Completed);
}

pub(super) fn a_runs_events_keep_when_they_happened_and_the_rest_when_written(fixture: &Fixture) {
    let store = fixture.store();
    store.create(&job("j1")).unwrap();
    store.claim("j1", "r", 60_000).unwrap().unwrap();
    let mut state = job("j1");
    state.status = JobStatus::Completed;
    let entered = JobEvent::MovementEntered {
        movement: "chat".into(),
        count: 1,
    };
    // Two events of one run, long before the save (a tool call that took 1.5 s in between).
    let run = [
        TimedEvent {
            event: entered.clone(),
            at_ms: Some(1_000),
        },
        TimedEvent {
            event: finished(JobStatus::Completed),
            at_ms: Some(2_500),
        },
    ];
    store.save(&state, &run, "r").unwrap();
    let reopened = fixture.reopen();
    let events = reopened.events("j1", 0).unwrap();
    let times: Vec<i64> = events.iter().map(|e| e.at_ms).collect();
    assert_eq!(times, [1_000, 2_500]);
    assert_eq!(events[0].event, entered);
    // An event without a time of its own takes its save's: now, on the store's clock.
    store.create(&job("j2")).unwrap();
    store.claim("j2", "r", 60_000).unwrap().unwrap();
    let mut state = job("j2");
    state.status = JobStatus::Completed;
    store
        .save(&state, &[finished(JobStatus::Completed).into()], "r")
        .unwrap();
    let written = store.events("j2", 0).unwrap()[0].at_ms;
    assert!(written > 1_600_000_000_000, "the save's time: {written}");
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
            &[finished(JobStatus::Completed).into()],
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

pub(super) fn a_secret_is_made_once_and_shared_by_every_process_that_opens_the_store(
    fixture: &Fixture,
) {
    let first = fixture.store().secret("mcp.request-state").unwrap();
    assert_eq!(first.len(), 32);
    assert_ne!(first, [0u8; 32]);
    let again = fixture.reopen().secret("mcp.request-state").unwrap();
    assert_eq!(again, first, "another process must see the same secret");
    let other = fixture.store().secret("another").unwrap();
    assert_ne!(other, first, "each secret is made on its own");
}

pub(super) fn a_one_time_token_is_spent_once_on_any_node_and_forgotten_when_it_ends(
    fixture: &Fixture,
) {
    let store = fixture.store();
    let elsewhere = fixture.reopen();
    let later = now() + 600_000;
    // Two processes spending the same token at once: exactly one of them does.
    let spent = results([
        store.spend_once("answer-1", later),
        elsewhere.spend_once("answer-1", later),
    ]);
    let spent: Vec<bool> = spent.into_iter().map(Result::unwrap).collect();
    assert_eq!(spent.iter().filter(|&&first| first).count(), 1, "{spent:?}");
    assert_eq!(
        results([store.spend_once("answer-1", later)])[0]
            .as_ref()
            .unwrap(),
        &false
    );
    assert_eq!(
        results([store.spend_once("answer-2", later)])[0]
            .as_ref()
            .unwrap(),
        &true
    );
    // A token whose time ended is forgotten at the next spend: it could not be presented.
    let past = now() - 1;
    assert_eq!(
        results([store.spend_once("old", past)])[0]
            .as_ref()
            .unwrap(),
        &true
    );
    assert_eq!(
        results([store.spend_once("old", later)])[0]
            .as_ref()
            .unwrap(),
        &true
    );
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
