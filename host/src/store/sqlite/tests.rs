use super::schema::MIGRATIONS;
use super::*;
use crate::engine::{
    Answer, JobEvent, JobState, JobStatus, PinnedPlugin, ResumePoint, Wait, WaitReason, WaitRequest,
};
use crate::plugin::{CallRequest, Resume};
use crate::store::StoreError;
use crate::store::suite::{finished, job, job_ids, parked, results, said, texts};

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("nested/jobs.db")).unwrap();
    (dir, store)
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
fn a_new_store_has_512_byte_pages_and_one_made_with_4_kib_pages_keeps_them() {
    let page_size = |path: &std::path::Path| -> i64 {
        let connection = rusqlite::Connection::open(path).unwrap();
        connection
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.db");
    drop(SqliteStore::open(&new).unwrap());
    assert_eq!(page_size(&new), 512);

    let old = dir.path().join("old.db");
    let connection = rusqlite::Connection::open(&old).unwrap();
    connection
        .execute_batch("PRAGMA page_size = 4096; PRAGMA journal_mode = WAL; CREATE TABLE t (x);")
        .unwrap();
    drop(connection);
    let store = SqliteStore::open(&old).unwrap();
    store.create(&job("kept")).unwrap();
    drop(store);
    assert_eq!(page_size(&old), 4096);
    let store = SqliteStore::open(&old).unwrap();
    assert_eq!(store.load("kept").unwrap().0.id, "kept");
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
            "INSERT INTO jobs (id, piece, status, movement, created_at_ms, updated_at_ms) \
             VALUES (?1, 'chat', 'pending', 'chat', 0, 0)",
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
            "INSERT INTO jobs (id, piece, status, movement, created_at_ms, updated_at_ms) \
             VALUES (?1, 'chat', 'pending', 'chat', 0, 0)",
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
fn events_of_a_first_schema_store_keep_their_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(MIGRATIONS[0]).unwrap();
    old.pragma_update(None, "user_version", 1).unwrap();
    old.execute(
        "INSERT INTO jobs (id, piece, status, movement, state, created_at_ms, updated_at_ms) \
         VALUES ('j1', 'chat', 'pending', 'chat', ?1, 7, 7)",
        [serde_json::to_string(&job("j1")).unwrap()],
    )
    .unwrap();
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
    store.claim("j1", "r", 60_000).unwrap().unwrap();
    let three = [JobStatus::Running, JobStatus::Running, JobStatus::Completed]
        .map(|status| finished(status).into());
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

/// What `change` adds to the store's write-ahead log, emptied first: the pages its commit wrote.
fn wal_bytes_of(path: &std::path::Path, change: impl FnOnce()) -> u64 {
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
    change();
    std::fs::metadata(&wal).unwrap().len()
}

/// What one save of `state` adds to the store's write-ahead log.
fn wal_bytes_of_save(path: &std::path::Path, store: &SqliteStore, state: &JobState) -> u64 {
    let event = JobEvent::MovementEntered {
        movement: "chat".into(),
        count: 1,
    };
    wal_bytes_of(path, || store.save(state, &[event.into()], "r").unwrap())
}

#[test]
fn an_answer_and_a_claim_write_as_much_for_a_large_state_as_for_a_small_one() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    let mut written = Vec::new();
    for (id, input) in [("small", "hello".to_owned()), ("large", scrambled(20_000))] {
        let mut state = job(id);
        state.input = input;
        store.create(&state).unwrap();
        store.claim(id, "r", 60_000).unwrap().unwrap();
        store.save(&parked(state), &[], "r").unwrap();
        let answer = Answer::Resume(Resume::Answered("Oslo".into()));
        let answered = wal_bytes_of(&path, || store.answer(id, &answer, Some(1)).unwrap());
        let claimed = wal_bytes_of(&path, || {
            store.claim(id, "r", 60_000).unwrap().unwrap();
        });
        written.push((answered, claimed));
    }
    // Pages of 512 bytes: the large state, packed, is still thirty of them, which a change of
    // a row holding it would write again.
    let ((small_answer, small_claim), (large_answer, large_claim)) = (written[0], written[1]);
    assert!(
        large_answer <= small_answer + 2_048 && large_claim <= small_claim + 2_048,
        "the large state's answer wrote {large_answer} bytes and claim {large_claim}, the small \
         one's {small_answer} and {small_claim}"
    );
}

/// `len` letters that compress about as well as prose does (a third), not to nothing.
fn scrambled(len: usize) -> String {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from(b'a' + (seed % 26) as u8)
        })
        .collect()
}

#[test]
fn a_saves_texts_are_kept_packed_together_and_its_log_row_goes_after_every_earlier_one() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    // Saved in an order that is not the jobs' ids': each row of the log goes after the last
    // one written, not among its job's neighbours.
    for (id, question) in [
        ("c", "Which city?"),
        ("a", "Which year?"),
        ("b", "And then?"),
    ] {
        store.create(&job(id)).unwrap();
        let mut state = store.claim(id, "r", 60_000).unwrap().unwrap().state;
        state.conversation.push(said(question));
        state.input = "a line of input".repeat(20);
        let event = JobEvent::Transition {
            from: "chat".repeat(40),
            to: "chat".repeat(40),
        };
        store.save(&parked(state), &[event.into()], "r").unwrap();
    }
    let file = Connection::open(&path).unwrap();
    let rows: Vec<(String, String, String, i64)> = file
        .prepare("SELECT job_id, typeof(events), typeof(messages), length(events) FROM saves ORDER BY id")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let order: Vec<&str> = rows.iter().map(|row| row.0.as_str()).collect();
    assert_eq!(order, ["c", "a", "b"], "{rows:?}");
    // A save's messages are packed with its events, in one column.
    for (_, events, messages, length) in &rows {
        assert_eq!(
            (events.as_str(), messages.as_str()),
            ("blob", "null"),
            "{rows:?}"
        );
        assert!(*length < 100, "{rows:?}");
    }
    let states: Vec<String> = file
        .prepare(
            "SELECT typeof(COALESCE(j.state, s.state)) FROM jobs j \
             LEFT JOIN job_states s ON s.id = j.id",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(states, ["blob", "blob", "blob"]);
    // And they read back whole.
    let (loaded, _) = store.load("c").unwrap();
    assert_eq!(texts(&loaded), ["hello", "Which city?"]);
    assert_eq!(loaded.input, "a line of input".repeat(20));
    let events = store.events("c", 0).unwrap();
    assert!(
        matches!(&events[..], [one] if matches!(&one.event, JobEvent::Transition { from, .. } if from.len() == 160)),
        "{events:?}"
    );
}

/// What `id`'s `jobs` row and `job_states` row hold as its state (`None`: nothing), packed.
fn state_places(path: &std::path::Path, id: &str) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT CAST(j.state AS BLOB), CAST(s.state AS BLOB) FROM jobs j \
             LEFT JOIN job_states s ON s.id = j.id WHERE j.id = ?1",
            [id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap()
}

#[test]
fn a_saved_state_that_fits_its_jobs_row_goes_there_and_a_larger_one_to_a_row_of_its_own() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    store.create(&job("j1")).unwrap();
    let (in_row, created) = state_places(&path, "j1");
    assert!(
        in_row.is_none() && created.is_some(),
        "created in job_states"
    );

    let mut state = store.claim("j1", "r", 60_000).unwrap().unwrap().state;
    state.input = scrambled(20_000);
    store.save(&parked(state.clone()), &[], "r").unwrap();
    let (in_row, large) = state_places(&path, "j1");
    assert!(in_row.is_none(), "too large for the row");
    let large = large.unwrap();
    assert!(large.len() > 10_000 && Some(&large) != created.as_ref());
    assert_eq!(store.load("j1").unwrap().0.input, state.input);

    let answer = Answer::Resume(Resume::Answered("Oslo".into()));
    store.answer("j1", &answer, Some(1)).unwrap();
    let mut state = store.claim("j1", "r", 60_000).unwrap().unwrap().state;
    state.input = "hello".into();
    state.wait = None;
    state.status = JobStatus::Completed;
    store.save(&state, &[], "r").unwrap();
    let (in_row, left) = state_places(&path, "j1");
    let in_row = in_row.expect("a small state is saved in the row");
    assert!(in_row.len() <= super::rows::inline_state_bytes(512));
    // The row's state is the one read; the larger one before it was not written again.
    assert_eq!(left.as_ref(), Some(&large));
    let (loaded, _) = store.load("j1").unwrap();
    assert_eq!(
        (loaded.input.as_str(), loaded.status),
        ("hello", JobStatus::Completed)
    );
}

/// `state`, claimed after a park, parked again as the engine would: its session from the start.
fn parked_again(mut state: JobState) -> JobState {
    state.session = job(&state.id).session;
    parked(state)
}

#[test]
fn a_jobs_log_is_read_through_its_chain_whatever_was_saved_between_its_saves() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    let ids = ["a", "b", "c"];
    for id in ids {
        store.create(&job(id)).unwrap();
    }
    // Each job saved three times, in turn, so that no two saves of a job are neighbours; the
    // second save of `a` adds a message and no event, a row that ends where the one before did.
    for round in 1..=3_usize {
        for id in ids {
            let mut state = store.claim(id, "r", 60_000).unwrap().unwrap().state;
            state.conversation.push(said(&format!("{id}{round}")));
            let events = if (id, round) == ("a", 2) { 0 } else { round };
            let events: Vec<_> = (0..events)
                .map(|count| {
                    JobEvent::MovementEntered {
                        movement: format!("{id}{round}"),
                        count: count as u32,
                    }
                    .into()
                })
                .collect();
            store.save(&parked_again(state), &events, "r").unwrap();
            let answer = Answer::Resume(Resume::Answered("Oslo".into()));
            store.answer(id, &answer, Some(1)).unwrap();
        }
    }
    let movements = |id: &str, after: u64| -> Vec<(u64, String)> {
        let events = store.events(id, after).unwrap();
        events
            .into_iter()
            .map(|stored| match stored.event {
                JobEvent::MovementEntered { movement, .. } => (stored.seq, movement),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let expected = |id: &str| -> Vec<(u64, String)> {
        let rounds: &[usize] = if id == "a" {
            &[1, 3, 3, 3]
        } else {
            &[1, 2, 2, 3, 3, 3]
        };
        rounds
            .iter()
            .enumerate()
            .map(|(n, round)| (n as u64 + 1, format!("{id}{round}")))
            .collect()
    };
    for id in ids {
        let all = expected(id);
        // From every point: the walk stops where the events asked for begin, and no sooner.
        for after in 0..=all.len() + 1 {
            assert_eq!(
                movements(id, after as u64),
                all[after.min(all.len())..],
                "{id} after {after}"
            );
        }
        assert_eq!(
            texts(&store.load(id).unwrap().0),
            [
                "hello".to_owned(),
                format!("{id}1"),
                format!("{id}2"),
                format!("{id}3")
            ]
        );
    }
    let file = Connection::open(&path).unwrap();
    let indexes: i64 = file
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'saves'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(
        indexes, 0,
        "the log is found through its chain, not an index"
    );

    // Deleting a job deletes its chain, and nothing of another's.
    let mut ended = store.claim("b", "r", 60_000).unwrap().unwrap().state;
    ended.status = JobStatus::Completed;
    store
        .save(&ended, &[finished(JobStatus::Completed).into()], "r")
        .unwrap();
    assert_eq!(store.prune(i64::MAX, 10).unwrap(), 1);
    let left: Vec<String> = file
        .prepare("SELECT DISTINCT job_id FROM saves ORDER BY job_id")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(left, ["a", "c"]);
    for id in ["a", "c"] {
        assert_eq!(movements(id, 0), expected(id));
    }
}

#[test]
fn a_save_late_in_a_long_conversation_writes_no_more_than_an_early_one() {
    let (dir, store) = store();
    let path = dir.path().join("nested/jobs.db");
    store.create(&job("j1")).unwrap();
    let mut state = store.claim("j1", "r", 60_000).unwrap().unwrap().state;
    state.status = JobStatus::Running;
    let mut written = Vec::new();
    // Every turn the same size: its number in three digits.
    for turn in 1..=300 {
        state.conversation.push(crate::llm::Message::Assistant {
            text: Some(format!("Turn {turn:03}: looking that up.")),
            tool_calls: vec![crate::llm::ToolCall {
                id: format!("call-{turn:03}"),
                name: "echo".into(),
                arguments: r#"{"text":"a line of about sixty characters, as a tool gets it"}"#
                    .into(),
            }],
        });
        state.conversation.push(crate::llm::Message::Tool {
            call_id: format!("call-{turn:03}"),
            name: "echo".into(),
            content: "a line of about sixty characters, as a tool gets it".into(),
            is_error: false,
        });
        written.push(wal_bytes_of_save(&path, &store, &state));
        // A runner's next save starts from what the store holds, as a claim hands it.
        state = store.load("j1").unwrap().0;
    }
    let mean = |turns: std::ops::RangeInclusive<usize>| {
        let window = &written[turns.start() - 1..*turns.end()];
        window.iter().sum::<u64>() / window.len() as u64
    };
    // Means of fifty saves each. A save writes its job's row and state and the log's last
    // page, which holds two or three saves' rows, and now and then splits a B-tree page. Past
    // turn 127 each of a row's numbers (its batch, its first event and message) takes a byte
    // more, and three rows share a page less often: at most a page (a 536-byte frame) more.
    let (early, late) = (mean(3..=52), mean(251..=300));
    assert!(
        late <= early + 536,
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
