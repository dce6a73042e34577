//! A world of jobs as `maestro work` runs them, in one test: a SQLite store in a temporary
//! folder, the real first-party components, the shipped pieces (`pieces/`), a scripted model,
//! the store's subtask spawner and a worker that runs every runnable job until none is left.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use maestro::engine::{
    Answer, CancelFlag, Engine, EngineLimits, JobEvent, JobState, JobStatus, ToolCatalog,
    job_session,
};
use maestro::llm::ScriptedModel;
use maestro::phase::{RuntimePhase, RuntimeSession, WaitingKind};
use maestro::piece::load_dir;
use maestro::plugin::{Policy, Runtime, RuntimeConfig};
use maestro::store::{JobStore, SqliteStore, StoreError, new_job_id};
use maestro::worker::{StoreSpawner, Worker, WorkerConfig};
use tokio::sync::Notify;

use crate::{artifacts, cache_dir};

/// The shipped pieces.
pub fn pieces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .join("pieces")
}

pub struct World {
    pub store: Arc<SqliteStore>,
    pub engine: Arc<Engine>,
    pub model: Arc<ScriptedModel>,
    wake: Arc<Notify>,
    _dir: tempfile::TempDir,
}

impl World {
    /// The shipped pieces over the first-party plugins, the model playing `script` (a file of
    /// `pieces/scripts/` or YAML text), under `policy_toml`.
    pub async fn new(script: &str, policy_toml: &str) -> Self {
        Self::with_pieces(script, policy_toml, &[]).await
    }

    /// [`World::new`] with more pieces (file name, YAML) beside the shipped ones.
    pub async fn with_pieces(script: &str, policy_toml: &str, extra: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("jobs.db")).unwrap());
        // A runtime of its own: the spawner it serves subtasks with is this world's.
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let policy = Policy::parse(policy_toml, "test-policy.toml").unwrap();
        let mut plugins = Vec::new();
        for path in artifacts::FIRST_PARTY.iter().chain([&artifacts::ECHO]) {
            let name = Path::new(path).file_stem().unwrap().to_string_lossy();
            let plugin = runtime
                .load_file(Path::new(path), policy.for_plugin(&name))
                .await
                .unwrap_or_else(|err| panic!("{path} loads: {err}"));
            plugins.push(Arc::new(plugin));
        }
        let catalog = ToolCatalog::new(plugins).unwrap();
        let (mut pieces, errors) = load_dir(pieces_dir());
        assert!(errors.is_empty(), "{errors:?}");
        let extra_dir = dir.path().join("pieces");
        std::fs::create_dir(&extra_dir).unwrap();
        for (name, yaml) in extra {
            std::fs::write(extra_dir.join(name), yaml).unwrap();
        }
        let (more, errors) = load_dir(&extra_dir);
        assert!(errors.is_empty(), "{errors:?}");
        pieces.extend(more);
        let model = Arc::new(match script.strip_suffix(".yaml") {
            Some(name) if !script.contains('\n') => {
                ScriptedModel::from_file(pieces_dir().join("scripts").join(format!("{name}.yaml")))
                    .unwrap()
            }
            _ => ScriptedModel::parse(script, "test-script.yaml").unwrap(),
        });
        let wake = Arc::new(Notify::new());
        let spawner = Arc::new(StoreSpawner::new(store.clone(), &pieces, wake.clone()));
        runtime.set_subtask_spawner(spawner.clone());
        let engine = Engine::new(
            model.clone(),
            Arc::new(catalog),
            pieces,
            EngineLimits::default(),
        )
        .unwrap_or_else(|err| panic!("the shipped pieces lint clean: {err}"))
        .with_child_jobs(spawner);
        Self {
            store,
            engine: Arc::new(engine),
            model,
            wake,
            _dir: dir,
        }
    }

    /// Stores a new job of `piece` (none: a human chooses) with `input`.
    pub fn start(&self, piece: Option<&str>, input: &str) -> String {
        let job = self
            .engine
            .new_job(new_job_id(), piece, input.into())
            .unwrap();
        self.store.create(&job).unwrap();
        job.id
    }

    /// Runs every runnable job until none is left: every job then waits for a human or ended.
    pub async fn settle(&self) {
        let worker = Arc::new(Worker::new(
            self.store.clone(),
            self.engine.clone(),
            WorkerConfig {
                runners: 2,
                lease: Duration::from_secs(30),
                idle_poll: Duration::from_millis(5),
                name: "world".into(),
                wait_expiry: None,
            },
            self.wake.clone(),
        ));
        let run = worker.run(CancelFlag::default(), true);
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("the jobs settle");
    }

    /// Records `answer` for `job` (its current wait) and settles.
    pub async fn answer(&self, job: &str, answer: impl Into<Answer>) {
        self.try_answer(job, answer)
            .unwrap_or_else(|error| panic!("{job}: {error}"));
        self.settle().await;
    }

    /// Records `answer` for `job`'s current wait, or says why not.
    pub fn try_answer(&self, job: &str, answer: impl Into<Answer>) -> Result<(), StoreError> {
        let wait = self.job(job).wait.map(|wait| wait.id);
        self.store.answer(job, &answer.into(), wait)
    }

    pub fn job(&self, id: &str) -> JobState {
        self.store.load(id).unwrap().0
    }

    pub fn status(&self, id: &str) -> JobStatus {
        self.store.load(id).unwrap().1
    }

    pub fn log(&self, id: &str) -> Vec<JobEvent> {
        self.store
            .events(id, 0)
            .unwrap()
            .into_iter()
            .map(|stored| stored.event)
            .collect()
    }

    /// The job's session, folded from its stored log; checks on the way that the log folds and
    /// that the session kept with the job is that fold.
    pub fn session(&self, id: &str) -> RuntimeSession {
        let folded = job_session(id, &self.log(id)).unwrap_or_else(|error| panic!("{error}"));
        let job = self.job(id);
        assert_eq!(
            job.phase_session(),
            Some(&folded.without_history()),
            "job {id}: the session kept with the job is the fold of its log"
        );
        folded
    }

    /// `waiting_user/<reason>`, `running` or `done` as the phase machine labels the job.
    pub fn phase(&self, id: &str) -> (RuntimePhase, Option<WaitingKind>) {
        let label = self.session(id).phase_label();
        (label.phase, label.waiting)
    }

    /// The children of `id`, oldest first.
    pub fn children(&self, id: &str) -> Vec<String> {
        self.store.children(id).unwrap()
    }

    /// `id` and every job below it.
    pub fn tree(&self, id: &str) -> Vec<String> {
        let mut all = vec![id.to_owned()];
        let mut next = 0;
        while next < all.len() {
            let children = self.children(&all[next]);
            all.extend(children);
            next += 1;
        }
        all
    }
}
