//! The store's connections to PostgreSQL: a few threads, each owning one connection, that run
//! the store's work in turn.
//!
//! Invariant: a caller hears of its change only after its transaction committed, or with the
//! error that refused it, and a refused change was rolled back. A change that a deadlock or a
//! serialization failure rolled back runs again from the start (the database made no part of
//! it), and so does one whose `BEGIN` failed on a connection that broke while it waited in the
//! pool (nothing of it reached the server); any other failure is the caller's answer, for a
//! commit whose outcome the server did not say may have happened. A connection that broke is
//! dropped and made
//! again for the next piece of work, so a restarted server is reached again without a restart
//! of maestro; until it answers, work fails at once with why, and the callers' own backoff
//! paces the retries.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::{Client, Config, NoTls};

use super::rows::{PgRows, Statements, describe, is_retryable};
use crate::store::StoreError;
use crate::telemetry;

/// How many times a change rolled back by a deadlock or serialization failure runs again.
const RETRIES: usize = 8;

/// One connection and what it prepared.
pub(super) struct Connection {
    config: Config,
    pub label: Arc<str>,
    client: Option<(Client, Statements)>,
}

impl Connection {
    pub fn new(config: Config, label: Arc<str>) -> Self {
        Self {
            config,
            label,
            client: None,
        }
    }

    fn error(&self, message: String) -> StoreError {
        StoreError::Database {
            path: self.label.to_string(),
            message,
        }
    }

    /// The open connection, made again if it broke.
    pub fn client(&mut self) -> Result<(&mut Client, &mut Statements), StoreError> {
        if self
            .client
            .as_ref()
            .is_some_and(|(client, _)| client.is_closed())
        {
            self.client = None;
        }
        if self.client.is_none() {
            let client = self
                .config
                .connect(NoTls)
                .map_err(|e| self.error(format!("cannot connect: {}", describe(&e))))?;
            self.client = Some((client, Statements::default()));
        }
        let (client, statements) = self.client.as_mut().expect("connected above");
        Ok((client, statements))
    }

    /// Whether the last failure closed the connection, so the next piece of work makes a new
    /// one.
    pub fn is_broken(&self) -> bool {
        self.client.is_none()
    }

    /// A failure of `error` kind on this connection: if it broke the connection, the next
    /// piece of work connects again.
    pub fn failed(&mut self, error: &postgres::Error) -> StoreError {
        if error.is_closed()
            || self
                .client
                .as_ref()
                .is_some_and(|(client, _)| client.is_closed())
        {
            self.client = None;
        }
        self.error(describe(error))
    }

    /// Runs `body` as one transaction and commits it; runs it again when the database rolled
    /// it back for a deadlock or a serialization failure.
    pub fn change<T>(
        &mut self,
        body: &mut dyn FnMut(&mut PgRows<'_, '_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let label = self.label.clone();
        let started = Instant::now();
        for attempt in 0.. {
            let may_retry = attempt < RETRIES;
            let (client, statements) = self.client()?;
            match attempt_change(client, statements, &label, body, may_retry) {
                Attempt::Done(result) => {
                    if result.is_ok() {
                        telemetry::committed("postgres", 1, started.elapsed());
                    }
                    return result;
                }
                Attempt::Failed(error) => return Err(self.failed(&error)),
                Attempt::NotBegun(error) => {
                    // The connection broke while it waited in the pool (a server restart
                    // ends every connection): nothing of the change reached the server, so it
                    // runs on a new connection.
                    let error = self.failed(&error);
                    if !may_retry {
                        return Err(error);
                    }
                }
                Attempt::RolledBack => {
                    std::thread::sleep(Duration::from_millis(1 << attempt.min(6)));
                }
            }
        }
        unreachable!("the attempts end with the last one's result")
    }
}

/// How one run of a change ended.
enum Attempt<T> {
    /// Committed, or refused by the change and rolled back.
    Done(Result<T, StoreError>),
    /// The database failed.
    Failed(postgres::Error),
    /// The transaction could not begin (the connection broke): nothing of it reached the
    /// server.
    NotBegun(postgres::Error),
    /// Rolled back for a deadlock or a serialization failure: run it again.
    RolledBack,
}

fn attempt_change<T>(
    client: &mut Client,
    statements: &mut Statements,
    label: &str,
    body: &mut dyn FnMut(&mut PgRows<'_, '_>) -> Result<T, StoreError>,
    may_retry: bool,
) -> Attempt<T> {
    let mut tx = match client.transaction() {
        Ok(tx) => tx,
        Err(error) => return Attempt::NotBegun(error),
    };
    let mut rows = PgRows {
        tx: &mut tx,
        statements,
        label,
        retry: false,
    };
    let result = body(&mut rows);
    if rows.retry && may_retry {
        return Attempt::RolledBack;
    }
    match result {
        Ok(value) => match tx.commit() {
            Ok(()) => Attempt::Done(Ok(value)),
            Err(error) if is_retryable(&error) && may_retry => Attempt::RolledBack,
            Err(error) => Attempt::Failed(error),
        },
        // A rollback that fails leaves a closed connection, which the next piece of work
        // makes again.
        Err(error) => {
            let _ = tx.rollback();
            Attempt::Done(Err(error))
        }
    }
}

/// Work for a pool thread.
type Work = Box<dyn FnOnce(&mut Connection) + Send>;

/// Where work waits for the pool's threads. Cheap to clone; the threads stop once every clone
/// is gone and the work queued before is done.
#[derive(Clone)]
pub(super) struct Pool {
    sender: Sender<Work>,
}

impl Pool {
    pub fn start(config: &Config, label: &Arc<str>, size: usize) -> Result<Self, StoreError> {
        let (sender, receiver) = std::sync::mpsc::channel::<Work>();
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..size {
            let connection = Connection::new(config.clone(), label.clone());
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("maestro-pg-{index}"))
                .spawn(move || work_loop(connection, &receiver))
                .map_err(|e| StoreError::Database {
                    path: label.to_string(),
                    message: format!("cannot start a store thread: {e}"),
                })?;
        }
        Ok(Self { sender })
    }

    /// Queues `work`; it runs on the next free connection. When the pool stopped, `work` is
    /// dropped, and with it the caller's reply.
    pub fn submit(&self, work: Work) {
        let _ = self.sender.send(work);
    }
}

fn work_loop(mut connection: Connection, receiver: &Mutex<Receiver<Work>>) {
    loop {
        let work = match receiver.lock() {
            Ok(receiver) => receiver.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(work) = work else { return };
        // A panicking piece of work drops its reply, so its caller hears the store dropped it;
        // the connection may be mid-transaction, so it goes too.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mut connection))).is_err()
        {
            tracing::error!("a store change panicked; it was rolled back");
            connection.client = None;
        }
    }
}
