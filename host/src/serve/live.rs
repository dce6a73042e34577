//! Live events: the server-wide feed, and each job's durable event stream.
//!
//! Invariant: a job's stream sends exactly the events in the store, in order, each once, with
//! its sequence number as the SSE id; a client that reconnects with `Last-Event-ID` (or
//! `?after=`) gets every later event and nothing twice. Live notices only say *when* to read the
//! store again, so a missed notice delays an event (by at most the poll interval) but never
//! loses it. The server-wide feed is live only: a slow client skips notices, never blocks a job.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::Event;
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::broadcast;

use super::plugins::PluginStatus;
use crate::engine::{JobEvent, JobStatus, Observer};
use crate::store::{JobChange, JobStore};

/// How long a job stream waits for a notice before it reads the store anyway (another process
/// may have written it).
const POLL: Duration = Duration::from_millis(500);

/// One notice of the server-wide feed.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Notice {
    /// Something happened in a running job (not yet durable).
    Job {
        job: String,
        event: JobEvent,
    },
    /// A job's state changed in the store (a run saved, an answer, a cancel, a new job).
    Saved {
        job: String,
        status: JobStatus,
    },
    Plugin(PluginStatus),
}

impl Notice {
    fn name(&self) -> &'static str {
        match self {
            Notice::Job { .. } => "job",
            Notice::Saved { .. } => "saved",
            Notice::Plugin(_) => "plugin",
        }
    }
}

/// Fans notices out to every listener. Also the worker's observer.
pub struct Hub {
    sender: broadcast::Sender<Notice>,
    /// The store tells of every job written by any process, this one's included: `saved`
    /// notices come from it alone, once each.
    saved_from_store: bool,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(1024).0,
            saved_from_store: false,
        }
    }
}

impl Hub {
    /// A hub whose `saved` notices are the store's changes, which [`forward_changes`] brings.
    pub fn fed_by_store() -> Self {
        Self {
            saved_from_store: true,
            ..Self::default()
        }
    }

    pub fn publish(&self, notice: Notice) {
        if self.saved_from_store && matches!(notice, Notice::Saved { .. }) {
            return;
        }
        // No listener is not an error.
        let _ = self.sender.send(notice);
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.sender.subscribe()
    }
}

/// Publishes the store's changes (any process's) as `saved` notices: a job stream of a job
/// that another node runs reads it again at once, and the feed shows the whole cluster.
pub async fn forward_changes(mut changes: broadcast::Receiver<JobChange>, hub: Arc<Hub>) {
    loop {
        match changes.recv().await {
            Ok(JobChange::Saved { job, status }) => {
                let _ = hub.sender.send(Notice::Saved { job, status });
            }
            // Job streams read the store again by themselves within their poll; a plugin that
            // changes here is announced by the plugin host once it serves.
            Ok(JobChange::Missed | JobChange::Plugin { .. })
            | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Observer for Hub {
    fn on_event(&self, job_id: &str, event: &JobEvent) {
        self.publish(Notice::Job {
            job: job_id.to_owned(),
            event: event.clone(),
        });
    }

    fn on_saved(&self, job_id: &str, status: JobStatus) {
        self.publish(Notice::Saved {
            job: job_id.to_owned(),
            status,
        });
    }
}

/// The server-wide feed as SSE events.
pub fn feed(hub: &Hub) -> impl Stream<Item = Result<Event, Infallible>> + use<> {
    let receiver = hub.subscribe();
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = match receiver.recv().await {
            Ok(notice) => Event::default()
                .event(notice.name())
                .json_data(&notice)
                .unwrap_or_else(|_| Event::default().comment("unserializable notice")),
            Err(broadcast::error::RecvError::Lagged(skipped)) => {
                Event::default().event("lagged").data(skipped.to_string())
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(event), receiver))
    })
}

struct JobStream {
    store: Arc<dyn JobStore>,
    job: String,
    after: u64,
    notices: broadcast::Receiver<Notice>,
    ready: VecDeque<Event>,
    ended: bool,
}

/// The events of `job` after sequence number `after`, then each new one as it is saved; ends
/// with an `end` event once the job has ended and every event was sent.
pub fn job_stream(
    store: Arc<dyn JobStore>,
    hub: &Hub,
    job: String,
    after: u64,
) -> impl Stream<Item = Result<Event, Infallible>> + use<> {
    // Subscribed before the first read, so no save between the two goes unnoticed.
    let state = JobStream {
        store,
        job,
        after,
        notices: hub.subscribe(),
        ready: VecDeque::new(),
        ended: false,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.ready.pop_front() {
                return Some((Ok(event), state));
            }
            if state.ended {
                return None;
            }
            state.read_store().await;
            if state.ready.is_empty() && !state.ended {
                state.wait_for_notice().await;
            }
        }
    })
}

impl JobStream {
    /// Reads off the async threads: a stream that reconnects from the start reads the
    /// whole log.
    async fn read_store(&mut self) {
        let (store, job, after) = (self.store.clone(), self.job.clone(), self.after);
        let read = tokio::task::spawn_blocking(move || {
            // The status is read first: a save writes the status and its events together, so
            // when it is final here, every event is already there to read below. The summary
            // has it without parsing the job's state.
            let status = store.summary(&job)?.status;
            Ok::<_, crate::store::StoreError>((status, store.events(&job, after)?))
        })
        .await;
        let (status, events) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(error)) => return self.fail(error.to_string()),
            Err(error) => return self.fail(format!("the store read failed: {error}")),
        };
        for stored in &events {
            self.after = stored.seq;
            // One serialization gives both the data and the event's name.
            match serde_json::to_value(stored) {
                Ok(value) => {
                    let name = value["event"].as_str().unwrap_or("event").to_owned();
                    self.ready.push_back(
                        Event::default()
                            .id(stored.seq.to_string())
                            .event(name)
                            .data(value.to_string()),
                    );
                }
                Err(error) => self.fail(format!("event {}: {error}", stored.seq)),
            }
        }
        if events.is_empty() && status.is_final() {
            self.ready.push_back(
                Event::default()
                    .event("end")
                    .data(serde_json::json!({ "status": status }).to_string()),
            );
            self.ended = true;
        }
    }

    fn fail(&mut self, message: String) {
        self.ready.push_back(
            Event::default()
                .event("error")
                .data(serde_json::json!({ "message": message }).to_string()),
        );
        self.ended = true;
    }

    async fn wait_for_notice(&mut self) {
        let deadline = tokio::time::sleep(POLL);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => return,
                notice = self.notices.recv() => match notice {
                    Ok(Notice::Saved { job, .. }) if job == self.job => return,
                    // A running job's events become readable only when its run is saved.
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        deadline.as_mut().await;
                        return;
                    }
                },
            }
        }
    }
}
