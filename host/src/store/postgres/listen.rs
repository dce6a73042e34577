//! Hearing of other nodes' changes: a thread with a connection of its own that `LISTEN`s on the
//! channels the changes notify (see `rows.rs`: each write of a job's status sends
//! `"<status> <id>"` on one, each publication of a plugin version its name on the other; both
//! are delivered at commit).
//!
//! Invariant: a notification is only a hint to look again; every decision is taken on the rows.
//! When the connection breaks, the thread says [`JobChange::Missed`] once it is back, since
//! notifications sent meanwhile are lost, and connects again with a growing pause. It also
//! measures this node's clock against the server's again every minute (`clock.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Config, NoTls};
use tokio::sync::broadcast;

use super::clock::{DbClock, REMEASURE, SERVER_NOW};
use super::rows::describe;
use crate::engine::JobStatus;
use crate::store::JobChange;

/// The channel of job changes.
pub(super) const CHANNEL: &str = "maestro_jobs";

/// The channel of published plugin versions.
pub(super) const PLUGIN_CHANNEL: &str = "maestro_plugins";

/// How often the thread looks whether its store was dropped.
const STOP_CHECK: Duration = Duration::from_millis(250);

/// The longest pause between two attempts to connect.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// The listening thread; it stops soon after this is dropped.
pub(super) struct Listener {
    changes: broadcast::Sender<JobChange>,
    stop: Arc<AtomicBool>,
}

impl Listener {
    /// Starts listening; returns once the first attempt to `LISTEN` succeeded or failed, so a
    /// change committed after this returns is heard.
    pub fn start(config: Config, label: Arc<str>, clock: Arc<DbClock>) -> Self {
        let (changes, _) = broadcast::channel(4096);
        let stop = Arc::new(AtomicBool::new(false));
        let (sender, stopped) = (changes.clone(), stop.clone());
        let (tried, first_try) = std::sync::mpsc::channel();
        let started = std::thread::Builder::new()
            .name("maestro-pg-listen".into())
            .spawn(move || listen(&config, &label, &clock, &sender, &stopped, tried));
        match started {
            Ok(_) => {
                let _ = first_try.recv();
            }
            Err(error) => {
                tracing::warn!("cannot start the thread that hears other nodes' changes: {error}")
            }
        }
        Self { changes, stop }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<JobChange> {
        self.changes.subscribe()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn listen(
    config: &Config,
    label: &str,
    clock: &DbClock,
    changes: &broadcast::Sender<JobChange>,
    stop: &AtomicBool,
    tried: std::sync::mpsc::Sender<()>,
) {
    let mut pause = Duration::from_millis(100);
    let mut connected_before = false;
    while !stop.load(Ordering::Relaxed) {
        let listening = config.connect(NoTls).and_then(|mut client| {
            client
                .batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {PLUGIN_CHANNEL}"))
                .map(|()| client)
        });
        let _ = tried.send(());
        let mut client = match listening {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(
                    "store {label}: cannot listen for other nodes' changes ({}); trying again in \
                     {} ms",
                    describe(&error),
                    pause.as_millis()
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
                continue;
            }
        };
        pause = Duration::from_millis(100);
        if connected_before {
            let _ = changes.send(JobChange::Missed);
        }
        connected_before = true;
        let mut measured = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if measured.elapsed() >= REMEASURE {
                measured = std::time::Instant::now();
                let remeasured = clock.measure(|| {
                    client
                        .query_one(SERVER_NOW, &[])
                        .and_then(|row| row.try_get::<_, i64>(0))
                });
                if let Err(error) = remeasured {
                    tracing::warn!(
                        "store {label}: cannot read the server's clock ({})",
                        describe(&error)
                    );
                }
            }
            let next = client.notifications().timeout_iter(STOP_CHECK).next();
            match next {
                Ok(Some(notification)) => {
                    if let Some(change) = parse(notification.channel(), notification.payload()) {
                        let _ = changes.send(change);
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        "store {label}: stopped hearing other nodes' changes ({}); connecting \
                         again",
                        describe(&error)
                    );
                    break;
                }
                Ok(None) if client.is_closed() => break,
                Ok(None) => {}
            }
        }
    }
}

/// `"<status> <id>"` on the jobs' channel and a plugin's name on the plugins' channel, as the
/// statements send them.
fn parse(channel: &str, payload: &str) -> Option<JobChange> {
    if channel == PLUGIN_CHANNEL {
        return Some(JobChange::Plugin {
            name: payload.to_owned(),
        });
    }
    let (status, job) = payload.split_once(' ')?;
    Some(JobChange::Saved {
        job: job.to_owned(),
        status: JobStatus::parse(status)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_names_the_status_then_the_job() {
        assert_eq!(
            parse(CHANNEL, "pending job-01ab"),
            Some(JobChange::Saved {
                job: "job-01ab".into(),
                status: JobStatus::Pending
            })
        );
        assert_eq!(parse(CHANNEL, "nonsense"), None);
        assert_eq!(parse(CHANNEL, "flying job-1"), None);
        assert_eq!(
            parse(PLUGIN_CHANNEL, "echo"),
            Some(JobChange::Plugin {
                name: "echo".into()
            })
        );
    }
}
