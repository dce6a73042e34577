//! `host.spawn-subtask` served by the store: a child job is a row with its parent set, run by
//! the same workers as every other job.
//!
//! Invariant: spawning is idempotent per call: the child's id is derived from the parent job,
//! the call id and the spawn's index within the call (a call's worker takes an index no spawn
//! has), so a call that runs again (after a crash, or a resume) finds the child it already
//! started instead of starting another. A job nested
//! [`MAX_SUBTASK_DEPTH`] deep starts no more children, so a piece that spawns itself ends, and
//! a job starts at most [`MAX_CHILDREN_PER_JOB`]. The checks read the store off the async
//! threads, from summary columns.

/// How deep subtasks nest: a top-level job is at depth 0, its children at 1, and a job at this
/// depth may not spawn.
pub const MAX_SUBTASK_DEPTH: u32 = 4;

/// Children one job may start over its life: as many as one park may wait for.
pub const MAX_CHILDREN_PER_JOB: usize = crate::plugin::MAX_AWAITED_SUBTASKS;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::engine::{Answer, ChildJobs, JobState, JobsFuture, child_job_id};
use crate::piece::Piece;
use crate::plugin::{SpawnContext, SubtaskSpawner};
use crate::store::{JobStore, StoreError};

/// What a child job needs from its piece.
#[derive(Debug, Clone)]
struct PieceEntry {
    initial_movement: String,
    origin: String,
}

pub struct StoreSpawner {
    store: Arc<dyn JobStore>,
    pieces: Arc<BTreeMap<String, PieceEntry>>,
    wake: Arc<Notify>,
}

impl StoreSpawner {
    pub fn new<'a>(
        store: Arc<dyn JobStore>,
        pieces: impl IntoIterator<Item = &'a Piece>,
        wake: Arc<Notify>,
    ) -> Self {
        let pieces = pieces
            .into_iter()
            .map(|piece| {
                let entry = PieceEntry {
                    initial_movement: piece.initial_movement.value.clone(),
                    origin: piece.origin.display().to_string(),
                };
                (piece.name.value.clone(), entry)
            })
            .collect();
        Self {
            store,
            pieces: Arc::new(pieces),
            wake,
        }
    }
}

/// Checks a spawn against the pieces, the depth and fan-out limits and the store (reads
/// only; blocking). A `worker`'s questions and drafts are answered at its parent.
fn plan(
    store: &dyn JobStore,
    pieces: &BTreeMap<String, PieceEntry>,
    parent: &SpawnContext,
    piece: &str,
    input: String,
    worker: bool,
) -> Result<Planned, String> {
    let entry = pieces.get(piece).ok_or_else(|| {
        let known: Vec<&str> = pieces.keys().map(String::as_str).collect();
        format!(
            "no piece named `{piece}`; known pieces: {}",
            known.join(", ")
        )
    })?;
    let id = child_job_id(&parent.job_id, &parent.call_id, parent.index);
    let depth = depth(store, &parent.job_id)?;
    if depth >= MAX_SUBTASK_DEPTH {
        return Err(format!(
            "job {} is a subtask {depth} levels deep, the most allowed ({MAX_SUBTASK_DEPTH}); \
             do this work in this job instead of starting another",
            parent.job_id
        ));
    }
    match store.summary(&id) {
        Ok(existing) if existing.parent.as_deref() == Some(parent.job_id.as_str()) => {
            return Ok(Planned::Started(id));
        }
        Ok(_) => return Err(format!("job id {id} is already taken by another job")),
        Err(StoreError::NotFound(_)) => {}
        Err(error) => return Err(error.to_string()),
    }
    let started = store.children(&parent.job_id).map_err(|e| e.to_string())?;
    if started.len() >= MAX_CHILDREN_PER_JOB {
        return Err(format!(
            "job {} has started {} subtasks, the most one job may ({MAX_CHILDREN_PER_JOB})",
            parent.job_id,
            started.len()
        ));
    }
    let mut child = JobState::new(id.clone(), piece, &entry.initial_movement, input);
    child.parent = Some(parent.job_id.clone());
    child.piece_origin = entry.origin.clone();
    child.reviewed_by_parent = worker;
    Ok(Planned::New(Box::new(child)))
}

/// What a spawn comes to.
enum Planned {
    /// This call started the child before (it runs again after a crash or a resume).
    Started(String),
    /// A child to store.
    New(Box<JobState>),
}

/// How many ancestors `job_id` has (0 for a top-level job), from summary rows.
fn depth(store: &dyn JobStore, job_id: &str) -> Result<u32, String> {
    let mut depth = 0;
    let mut current = job_id.to_owned();
    // Bounded: a cycle in corrupt data cannot loop for ever.
    while depth <= MAX_SUBTASK_DEPTH {
        match store.summary(&current).map_err(|e| e.to_string())?.parent {
            Some(parent) => {
                depth += 1;
                current = parent;
            }
            None => break,
        }
    }
    Ok(depth)
}

impl StoreSpawner {
    /// Plans a child off the async threads and stores it (or finds the one this call started).
    fn start(
        &self,
        parent: SpawnContext,
        piece: String,
        input: String,
        worker: bool,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> {
        let (store, pieces, wake) = (self.store.clone(), self.pieces.clone(), self.wake.clone());
        Box::pin(async move {
            let planned = {
                let store = store.clone();
                tokio::task::spawn_blocking(move || {
                    plan(store.as_ref(), &pieces, &parent, &piece, input, worker)
                })
                .await
                .map_err(|error| format!("spawn-subtask failed: {error}"))?
            };
            match planned? {
                Planned::Started(id) => Ok(id),
                Planned::New(child) => {
                    store
                        .create_async(&child)
                        .await
                        .map_err(|error| error.to_string())?;
                    wake.notify_one();
                    Ok(child.id)
                }
            }
        })
    }
}

impl SubtaskSpawner for StoreSpawner {
    fn spawn(
        &self,
        parent: SpawnContext,
        piece: String,
        input: String,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> {
        self.start(parent, piece, input, false)
    }
}

/// The spawn index a call's worker takes: never one of `spawn-subtask`'s (at most 64 a call).
const WORKER_INDEX: u32 = u32::MAX;

impl ChildJobs for StoreSpawner {
    fn children(&self, parent: &str) -> Vec<String> {
        self.store.children(parent).unwrap_or_else(|error| {
            tracing::error!(%parent, "cannot list child jobs: {error}");
            Vec::new()
        })
    }

    fn start_worker(
        &self,
        parent: &str,
        call_id: &str,
        plugin: &str,
        piece: &str,
        input: &str,
    ) -> JobsFuture<String> {
        let context = SpawnContext {
            plugin: plugin.into(),
            job_id: parent.to_owned(),
            call_id: call_id.to_owned(),
            index: WORKER_INDEX,
        };
        self.start(context, piece.to_owned(), input.to_owned(), true)
    }

    fn answer(&self, job: &str, answer: Answer, wait: u32) -> JobsFuture<()> {
        let (store, wake) = (self.store.clone(), self.wake.clone());
        let answered = store.answer_async(job, &answer, Some(wait));
        Box::pin(async move {
            answered.await.map_err(|error| error.to_string())?;
            wake.notify_one();
            Ok(())
        })
    }

    fn cancel(&self, job: &str, reason: &str) -> JobsFuture<()> {
        let cancelled = self.store.cancel_async(job, reason);
        Box::pin(async move {
            match cancelled.await {
                Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
                Err(error) => Err(error.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteStore;

    #[tokio::test]
    async fn a_subtask_at_the_depth_limit_starts_no_child() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn JobStore> =
            Arc::new(SqliteStore::open(dir.path().join("j.db")).unwrap());
        let piece = crate::piece::parse_piece(
            "name: again\ninitial_movement: a\nmax_movements: 1\nmovements:\n  - name: a\n    instructions: x\n    tools: []\n",
            "again.yaml",
        )
        .unwrap();
        let spawner = StoreSpawner::new(store.clone(), [&piece], Arc::new(Notify::new()));
        let top = JobState::new("job-top".into(), "again", "a", "go".into());
        store.create(&top).unwrap();
        let mut parent = top.id.clone();
        for level in 1..=MAX_SUBTASK_DEPTH {
            let context = SpawnContext {
                job_id: parent.clone(),
                call_id: "call-0".into(),
                index: 0,
                plugin: "spawn_subtask".into(),
            };
            let child = spawner
                .spawn(context.clone(), "again".into(), "deeper".into())
                .await
                .unwrap_or_else(|error| panic!("level {level}: {error}"));
            // Spawning again from the same call finds the child it started.
            let again = spawner
                .spawn(context, "again".into(), "deeper".into())
                .await;
            assert_eq!(again.as_ref(), Ok(&child));
            assert_eq!(
                store.children(&parent).unwrap(),
                std::slice::from_ref(&child)
            );
            parent = child;
        }
        let context = SpawnContext {
            job_id: parent.clone(),
            call_id: "call-0".into(),
            index: 0,
            plugin: "spawn_subtask".into(),
        };
        let error = spawner
            .spawn(context, "again".into(), "deeper".into())
            .await
            .unwrap_err();
        assert!(error.contains("4 levels deep"), "{error}");
        assert!(store.children(&parent).unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_job_starts_at_most_its_share_of_children() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn JobStore> =
            Arc::new(SqliteStore::open(dir.path().join("j.db")).unwrap());
        let piece = crate::piece::parse_piece(
            "name: part\ninitial_movement: a\nmax_movements: 1\nmovements:\n  - name: a\n    instructions: x\n    tools: []\n",
            "part.yaml",
        )
        .unwrap();
        let spawner = StoreSpawner::new(store.clone(), [&piece], Arc::new(Notify::new()));
        store
            .create(&JobState::new("job-fan".into(), "part", "a", "go".into()))
            .unwrap();
        let from_call = |call: usize| SpawnContext {
            job_id: "job-fan".into(),
            call_id: format!("call-{call}"),
            index: 0,
            plugin: "spawn_subtask".into(),
        };
        for call in 0..MAX_CHILDREN_PER_JOB {
            spawner
                .spawn(from_call(call), "part".into(), "x".into())
                .await
                .unwrap_or_else(|error| panic!("child {call}: {error}"));
        }
        let error = spawner
            .spawn(from_call(MAX_CHILDREN_PER_JOB), "part".into(), "x".into())
            .await
            .unwrap_err();
        assert!(error.contains("has started 256 subtasks"), "{error}");
        assert_eq!(
            store.children("job-fan").unwrap().len(),
            MAX_CHILDREN_PER_JOB
        );
        // A call that runs again still finds the child it started.
        assert!(
            spawner
                .spawn(from_call(0), "part".into(), "x".into())
                .await
                .is_ok()
        );
    }

    #[test]
    fn child_ids_are_stable_per_call_and_index() {
        assert_eq!(
            child_job_id("job-a", "call-1", 0),
            child_job_id("job-a", "call-1", 0)
        );
        assert_ne!(
            child_job_id("job-a", "call-1", 0),
            child_job_id("job-a", "call-1", 1)
        );
        assert_ne!(
            child_job_id("job-a", "call-1", 0),
            child_job_id("job-b", "call-1", 0)
        );
        assert_eq!(child_job_id("job-a", "call-1", 0).len(), 4 + 32);
    }
}
