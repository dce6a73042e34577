//! The store's one writer: a thread that owns the write connection and commits every change
//! queued while the previous commit ran in a single transaction (group commit).
//!
//! Invariant: a caller hears of its change only after the transaction holding it committed, or
//! with the error that refused it. Each change of a batch of several runs in its own savepoint,
//! so a refused (or panicking) change leaves no trace while the others of its batch commit.
//! A commit costs about the same for one change as for fifty (the WAL frames of the pages the
//! batch touched, two file locks), which is where the throughput of many runners comes from.
//! Copying the WAL back into the database file (the checkpoint) is mostly a second thread's
//! work. That copy runs beside the writer's commits, so it never catches up by itself: once the
//! WAL is long, the writer copies the few frames left between two batches, and its next commit
//! starts the WAL over from its beginning instead of growing the file.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvError, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::Db;
use crate::store::StoreError;

/// At most this many changes share a transaction, so one commit never holds the others' answers
/// for long.
const MAX_BATCH: usize = 256;

/// How long an idle writer keeps looking for work before it sleeps: a caller that just had its
/// answer often sends again within microseconds.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// How long a caller whose change is alone looks for its answer before it sleeps.
pub(super) const LONE_COMMIT_WAIT: Duration = Duration::from_micros(200);

/// How often the checkpointer copies committed pages into the database file, when there were
/// commits since its last pass.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// WAL frames (of a page each) past which the writer finishes the checkpoint, so the WAL
/// starts over: about 16 MiB with 4 KiB pages.
const RESTART_WAL_FRAMES: i64 = 4000;

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
    /// Runs the change inside the open transaction.
    fn apply(self: Box<Self>, db: &Db, connection: &Connection) -> Box<dyn Applied>;
    /// Answers the caller without running the change (the transaction could not start).
    fn refuse(self: Box<Self>, error: StoreError);
}

/// A change that ran, holding its result until the commit says whether it stands.
trait Applied: Send {
    fn succeeded(&self) -> bool;
    fn deliver(self: Box<Self>, commit: Result<(), &StoreError>);
}

struct Pending<B, R> {
    body: B,
    reply: R,
}

struct Done<T, R> {
    result: Result<T, StoreError>,
    reply: R,
}

impl<T, B, R> Change for Pending<B, R>
where
    T: Send + 'static,
    B: FnOnce(&Db, &Connection) -> Result<T, StoreError> + Send,
    R: FnOnce(Result<T, StoreError>) + Send + 'static,
{
    fn apply(self: Box<Self>, db: &Db, connection: &Connection) -> Box<dyn Applied> {
        Box::new(Done {
            result: (self.body)(db, connection),
            reply: self.reply,
        })
    }

    fn refuse(self: Box<Self>, error: StoreError) {
        (self.reply)(Err(error));
    }
}

impl<T, R> Applied for Done<T, R>
where
    T: Send,
    R: FnOnce(Result<T, StoreError>) + Send,
{
    fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    fn deliver(self: Box<Self>, commit: Result<(), &StoreError>) {
        (self.reply)(match commit {
            Ok(()) => self.result,
            Err(error) => self.result.and(Err(error.clone())),
        });
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
            std::thread::Builder::new()
                .name("maestro-store-checkpointer".into())
                .spawn(move || checkpoint_loop(&checkpoints, &shared, &stopped))
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
        B: FnOnce(&Db, &Connection) -> Result<T, StoreError> + Send + 'static,
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
        let change: Box<dyn Change> = Box::new(Pending { body, reply });
        if let Err(unsent) = self.sender.send(Message::Change(change))
            && let Message::Change(change) = unsent.0
        {
            change.refuse(db.change_lost());
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

/// Checkpoints while commits come in, until the writer stops.
fn checkpoint_loop(connection: &Connection, checkpoints: &Checkpoints, stop: &Receiver<()>) {
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_EVERY) {
        if !checkpoints.committed.swap(false, Ordering::AcqRel) {
            continue;
        }
        match checkpoint(connection) {
            Ok(frames) if frames >= RESTART_WAL_FRAMES => {
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

/// Runs and commits `batch`; says whether anything was committed.
fn commit_batch(db: &Db, connection: &Connection, batch: Vec<Box<dyn Change>>) -> bool {
    let run = |sql: &str| -> Result<(), StoreError> {
        connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
            .map(drop)
            .map_err(|e| db.db_error(e))
    };
    if let Err(error) = run("BEGIN IMMEDIATE") {
        for change in batch {
            change.refuse(error.clone());
        }
        return false;
    }
    // A lone change needs no savepoint: if it fails, the whole transaction is rolled back.
    let alone = batch.len() == 1;
    let mut applied: Vec<Box<dyn Applied>> = Vec::with_capacity(batch.len());
    // A savepoint that could not be closed leaves the transaction in doubt: nothing commits.
    let mut broken = None;
    for change in batch {
        if !alone && let Err(error) = run("SAVEPOINT change") {
            change.refuse(error);
            continue;
        }
        let succeeded = match catch_unwind(AssertUnwindSafe(|| change.apply(db, connection))) {
            Ok(done) => {
                let succeeded = done.succeeded();
                applied.push(done);
                succeeded
            }
            // The change's reply went with its panic, so its caller hears that the writer
            // dropped it; the others go on.
            Err(_) => {
                tracing::error!("a store change panicked; it was rolled back");
                false
            }
        };
        let closed = match (alone, succeeded) {
            (true, _) => Ok(()),
            (false, true) => run("RELEASE change"),
            (false, false) => run("ROLLBACK TO change").and_then(|()| run("RELEASE change")),
        };
        if let Err(error) = closed {
            broken.get_or_insert(error);
        }
    }
    let keep = applied.iter().any(|done| done.succeeded());
    let committed = match broken {
        Some(error) => Err(error),
        None if keep => run("COMMIT"),
        None => Ok(()),
    };
    if committed.is_err() || !keep {
        // Whatever failed above, no transaction stays open on the connection.
        let _ = connection.execute_batch("ROLLBACK");
    }
    for done in applied {
        done.deliver(committed.as_ref().map(|_| ()));
    }
    keep && committed.is_ok()
}
