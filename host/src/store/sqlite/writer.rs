//! The store's one writer: a thread that owns the write connection and commits every change
//! queued while the previous commit ran in a single transaction (group commit).
//!
//! Invariant: a caller hears of its change only after the transaction holding it committed, or
//! with the error that refused it, and a refused (or panicking) change leaves no trace while the
//! others of its batch commit. Changes refuse by checking before they write, so a batch first
//! runs without savepoints; only a change that fails after writing costs a replay of its batch
//! with a savepoint around each change.
//!
//! A commit costs about the same for one change as for fifty (the WAL frames of the pages the
//! batch touched, two file locks), which is where the throughput of many runners comes from.
//! Copying the WAL back into the database file (the checkpoint) is mostly a second thread's
//! work. That copy runs beside the writer's commits, so it never catches up by itself: once the
//! WAL is long, the writer copies the few frames left between two batches, and its next commit
//! starts the WAL over from its beginning instead of growing the file.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvError, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::Db;
use crate::store::StoreError;
use crate::telemetry;

/// At most this many changes share a transaction, so one commit never holds the others' answers
/// for long.
const MAX_BATCH: usize = 256;

/// How long an idle writer keeps looking for work before it sleeps: a caller that just had its
/// answer often sends again within microseconds.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// How long a caller whose change is alone looks for its answer before it sleeps.
pub(super) const LONE_COMMIT_WAIT: Duration = Duration::from_micros(200);

/// How often the checkpointer copies committed pages into the database file, when there were
/// commits since its last pass. Each pass copies every page written since the last one once,
/// however often it was written meanwhile, and a busy store writes the same pages again and
/// again (the status index's last page, the log's last page, the rows of the jobs in flight).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// The WAL's length past which the writer finishes the checkpoint, so the WAL starts over (a
/// quarter of `journal_size_limit`). A short bound copies hot pages as often as it is reached:
/// with 4,000 frames (2 MiB of 512-byte pages) and a pass every 100 ms, the cycle bench wrote
/// 11 KB a cycle, against 10 KB with a pass a second and this bound.
const RESTART_WAL_BYTES: i64 = 16 << 20;

/// What the writer and the checkpointer tell each other.
#[derive(Default)]
struct Checkpoints {
    /// The writer committed since the checkpointer's last pass.
    committed: AtomicBool,
    /// The WAL is long: the writer should finish the checkpoint between two batches.
    finish: AtomicBool,
}

/// A change waiting for the writer.
trait Change: Send {
    /// Runs the change inside the open transaction and keeps its result; says whether it
    /// succeeded. Run again when its batch is replayed; a change that panicked is not.
    fn run(&mut self, db: &Db, tx: &Tx<'_>) -> bool;
    /// Answers the caller: the kept result if `commit` is `Ok`, else the change's own error or
    /// the commit's.
    fn answer(self: Box<Self>, db: &Db, commit: Result<(), &StoreError>);
}

/// Where a change is in its batch.
enum Progress<T> {
    Waiting,
    /// Also what a body that panicked leaves behind.
    Running,
    Ran(Result<T, StoreError>),
}

struct Pending<T, B, R> {
    body: B,
    progress: Progress<T>,
    reply: R,
}

impl<T, B, R> Change for Pending<T, B, R>
where
    T: Send + 'static,
    B: FnMut(&Db, &Tx<'_>) -> Result<T, StoreError> + Send,
    R: FnOnce(Result<T, StoreError>) + Send + 'static,
{
    fn run(&mut self, db: &Db, tx: &Tx<'_>) -> bool {
        if matches!(self.progress, Progress::Running) {
            return false;
        }
        self.progress = Progress::Running;
        let result = (self.body)(db, tx);
        let succeeded = result.is_ok();
        self.progress = Progress::Ran(result);
        succeeded
    }

    fn answer(self: Box<Self>, db: &Db, commit: Result<(), &StoreError>) {
        (self.reply)(match (self.progress, commit) {
            (Progress::Ran(result), Ok(())) => result,
            (Progress::Ran(result), Err(error)) => result.and(Err(error.clone())),
            (Progress::Waiting, Err(error)) => Err(error.clone()),
            (Progress::Running, _) | (Progress::Waiting, Ok(())) => Err(db.change_lost()),
        });
    }
}

/// The writer's open transaction, as a change sees it: the connection, and how changes are
/// kept apart.
pub(super) struct Tx<'c> {
    connection: &'c Connection,
    /// Every change (and every part undone on its own) runs in a savepoint.
    savepoints: bool,
    /// Without savepoints, a part of a change failed after writing: the batch must be replayed
    /// with them.
    spoiled: Cell<bool>,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.connection
    }
}

impl Tx<'_> {
    /// Runs `body`, a part of a change that may fail while the rest goes on, so that a failure
    /// leaves no trace of it.
    pub(super) fn undone_on_error<T>(
        &self,
        db: &Db,
        body: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if !self.savepoints {
            let before = self.total_changes();
            let result = body();
            if result.is_err() && self.total_changes() != before {
                self.spoiled.set(true);
            }
            return result;
        }
        let run = |sql: &str| execute(db, self, sql);
        run("SAVEPOINT part")?;
        let result = body();
        if result.is_err() {
            run("ROLLBACK TO part")?;
        }
        run("RELEASE part")?;
        result
    }
}

/// What the writer receives.
enum Message {
    Change(Box<dyn Change>),
    /// Commit what came before, then stop: changes sent later are dropped, and their callers
    /// hear that the writer dropped them.
    Stop,
}

/// The handle on the writer and checkpointer threads; dropping it lets the writer commit what
/// is queued, and both stop.
pub(super) struct Writer {
    queue: Queue,
    threads: Vec<JoinHandle<()>>,
}

/// Where changes wait for the writer. Cheap to clone: a store call that must write again after
/// its first change committed (a claim of an unreadable row) holds one.
#[derive(Clone)]
pub(super) struct Queue {
    sender: Sender<Message>,
    /// Changes submitted whose callers have not had their answer yet.
    unanswered: Arc<AtomicUsize>,
}

impl Writer {
    /// `connection` writes (its automatic checkpoints are turned off here); `checkpoints` is a
    /// second connection on the same file for the checkpointer.
    pub(super) fn start(
        db: Arc<Db>,
        connection: Connection,
        checkpoints: Connection,
    ) -> Result<Self, String> {
        connection
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| e.to_string())?;
        let spawn_failed = |e: std::io::Error| format!("cannot start the store's threads: {e}");
        let (queue, messages) = std::sync::mpsc::channel();
        let (checkpoint_stop, stopped) = std::sync::mpsc::channel::<()>();
        let shared = Arc::new(Checkpoints::default());
        let checkpointer = {
            let shared = shared.clone();
            let restart_frames = RESTART_WAL_BYTES / db.page_size.max(512) as i64;
            std::thread::Builder::new()
                .name("maestro-store-checkpointer".into())
                .spawn(move || checkpoint_loop(&checkpoints, &shared, &stopped, restart_frames))
                .map_err(spawn_failed)?
        };
        let writer = std::thread::Builder::new()
            .name("maestro-store-writer".into())
            .spawn(move || {
                write_loop(&db, &connection, &messages, &shared);
                drop(checkpoint_stop);
            })
            .map_err(spawn_failed)?;
        Ok(Self {
            queue: Queue {
                sender: queue,
                unanswered: Arc::default(),
            },
            threads: vec![writer, checkpointer],
        })
    }

    pub(super) fn queue(&self) -> &Queue {
        &self.queue
    }
}

impl Queue {
    /// Queues `body`; `reply` gets its result once its transaction has committed (or failed).
    /// Says whether the change is alone, with no other waiting for the writer: its answer then
    /// comes within a lone commit's time.
    pub(super) fn submit<T, B, R>(&self, db: &Db, body: B, reply: R) -> bool
    where
        T: Send + 'static,
        B: FnMut(&Db, &Tx<'_>) -> Result<T, StoreError> + Send + 'static,
        R: FnOnce(Result<T, StoreError>) + Send + 'static,
    {
        let alone = self.unanswered.fetch_add(1, Ordering::AcqRel) == 0;
        // Counts the change as answered when its reply runs, or is dropped with a change that
        // panicked.
        let answered = Unanswered(self.unanswered.clone());
        let reply = move |outcome| {
            drop(answered);
            reply(outcome);
        };
        let change: Box<dyn Change> = Box::new(Pending {
            body,
            progress: Progress::Waiting,
            reply,
        });
        if let Err(unsent) = self.sender.send(Message::Change(change))
            && let Message::Change(change) = unsent.0
        {
            change.answer(db, Err(&db.change_lost()));
        }
        alone
    }
}

struct Unanswered(Arc<AtomicUsize>);

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.queue.sender.send(Message::Stop);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn write_loop(
    db: &Db,
    connection: &Connection,
    messages: &Receiver<Message>,
    checkpoints: &Checkpoints,
) {
    let mut stopping = false;
    while !stopping && let Ok(Message::Change(first)) = recv_soon(messages, SPIN_BEFORE_SLEEP) {
        if checkpoints.finish.swap(false, Ordering::AcqRel)
            && let Err(error) = checkpoint(connection)
        {
            tracing::warn!("store checkpoint: {error}");
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match messages.try_recv() {
                Ok(Message::Change(change)) => batch.push(change),
                Ok(Message::Stop) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if commit_batch(db, connection, batch) {
            checkpoints.committed.store(true, Ordering::Release);
        }
    }
}

/// Receives from `channel`, looking again for up to `spin` before sleeping: waking a sleeping
/// thread costs tens of microseconds on a virtual machine, about what a lone commit takes.
pub(super) fn recv_soon<T>(channel: &Receiver<T>, spin: Duration) -> Result<T, RecvError> {
    let until = Instant::now() + spin;
    loop {
        match channel.try_recv() {
            Ok(value) => return Ok(value),
            Err(TryRecvError::Disconnected) => return Err(RecvError),
            Err(TryRecvError::Empty) if Instant::now() < until => std::thread::yield_now(),
            Err(TryRecvError::Empty) => return channel.recv(),
        }
    }
}

/// Checkpoints while commits come in, until the writer stops; past `restart_frames` (the WAL's
/// restart bound in pages), asks the writer to finish.
fn checkpoint_loop(
    connection: &Connection,
    checkpoints: &Checkpoints,
    stop: &Receiver<()>,
    restart_frames: i64,
) {
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if !checkpoints.committed.swap(false, Ordering::AcqRel) {
            continue;
        }
        match checkpoint(connection) {
            Ok(frames) if frames >= restart_frames => {
                checkpoints.finish.store(true, Ordering::Release);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!("store checkpoint: {error}"),
        }
    }
}

/// Copies committed WAL frames into the database file without waiting for a writer or a
/// reader; returns the WAL's length in frames.
fn checkpoint(connection: &Connection) -> rusqlite::Result<i64> {
    connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
}

/// Runs one statement that takes no parameters and returns no rows, like `SAVEPOINT part`.
fn execute(db: &Db, connection: &Connection, sql: &str) -> Result<(), StoreError> {
    connection
        .prepare_cached(sql)
        .and_then(|mut statement| statement.execute([]))
        .map(drop)
        .map_err(|e| db.db_error(e))
}

/// Runs and commits `batch`; says whether anything was committed.
///
/// The changes first run one after another with no savepoint, which is right as long as every
/// change that fails has written nothing: changes refuse by checking before they write. When one
/// fails after writing (or panics), the transaction is rolled back and the batch replayed with a
/// savepoint around each change; one that panicked is not run again.
fn commit_batch(db: &Db, connection: &Connection, mut batch: Vec<Box<dyn Change>>) -> bool {
    let run = |sql: &str| execute(db, connection, sql);
    let started = Instant::now();
    let mut savepoints = false;
    let committed = loop {
        if let Err(error) = run("BEGIN IMMEDIATE") {
            break Err(error);
        }
        let tx = Tx {
            connection,
            savepoints,
            spoiled: Cell::new(false),
        };
        let ran = if savepoints {
            run_apart(db, &tx, &mut batch)
        } else {
            run_together(db, &tx, &mut batch)
        };
        match ran {
            Ran::Spoiled => {
                let _ = connection.execute_batch("ROLLBACK");
                savepoints = true;
            }
            Ran::Kept => match run("COMMIT") {
                Ok(()) => break Ok(true),
                Err(error) => {
                    let _ = connection.execute_batch("ROLLBACK");
                    break Err(error);
                }
            },
            Ran::NothingKept => {
                let _ = connection.execute_batch("ROLLBACK");
                break Ok(false);
            }
            // A savepoint that could not be closed leaves the transaction in doubt.
            Ran::Broken(error) => {
                let _ = connection.execute_batch("ROLLBACK");
                break Err(error);
            }
        }
    };
    if let Ok(true) = committed {
        telemetry::committed("sqlite", batch.len(), started.elapsed());
    }
    let outcome = committed.as_ref().map(|_| ());
    for change in batch {
        change.answer(db, outcome);
    }
    committed.unwrap_or(false)
}

/// How a batch's changes ran.
enum Ran {
    /// Some succeeded: commit.
    Kept,
    /// Every change failed, leaving nothing to commit.
    NothingKept,
    /// Without savepoints, a change failed after writing or panicked: replay with them.
    Spoiled,
    Broken(StoreError),
}

/// Runs `change`, catching a panic (its caller hears that the writer dropped the change).
fn run_caught(db: &Db, tx: &Tx<'_>, change: &mut Box<dyn Change>) -> Option<bool> {
    let ran = catch_unwind(AssertUnwindSafe(|| change.run(db, tx)));
    if ran.is_err() {
        tracing::error!("a store change panicked; it was rolled back");
    }
    ran.ok()
}

/// The fast way: no savepoints, spoiled by a change that fails after writing.
fn run_together(db: &Db, tx: &Tx<'_>, batch: &mut [Box<dyn Change>]) -> Ran {
    let mut kept = false;
    for change in batch.iter_mut() {
        let before = tx.total_changes();
        match run_caught(db, tx, change) {
            Some(true) if !tx.spoiled.get() => kept = true,
            Some(false) if !tx.spoiled.get() && tx.total_changes() == before => {}
            _ => return Ran::Spoiled,
        }
    }
    if kept { Ran::Kept } else { Ran::NothingKept }
}

/// Each change in its own savepoint, so a failed (or panicking) one leaves no trace while the
/// others of its batch commit.
fn run_apart(db: &Db, tx: &Tx<'_>, batch: &mut [Box<dyn Change>]) -> Ran {
    let run = |sql: &str| execute(db, tx, sql);
    let mut kept = false;
    for change in batch.iter_mut() {
        if let Err(error) = run("SAVEPOINT change") {
            return Ran::Broken(error);
        }
        let succeeded = run_caught(db, tx, change).unwrap_or(false);
        kept |= succeeded;
        let closed = if succeeded {
            run("RELEASE change")
        } else {
            run("ROLLBACK TO change").and_then(|()| run("RELEASE change"))
        };
        if let Err(error) = closed {
            return Ran::Broken(error);
        }
    }
    if kept { Ran::Kept } else { Ran::NothingKept }
}
