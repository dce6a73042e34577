//! An engine over the real first-party components (plus `echo`), a scripted model and a piece
//! written inline: what the engine tests drive.

use std::path::Path;
use std::sync::Arc;

use maestro::engine::{
    Answer, CancelFlag, Engine, EngineLimits, JobEvent, JobState, PieceRunResult,
    RecordingObserver, ToolCatalog,
};
use maestro::llm::{Message, ScriptedModel};
use maestro::piece::parse_piece;
use maestro::plugin::{Policy, Resume};

use crate::{artifacts, runtime};

pub struct Harness {
    pub engine: Engine,
    pub model: Arc<ScriptedModel>,
    pub observer: RecordingObserver,
    pub cancel: CancelFlag,
}

/// Loads `complete`, `browse_web`, `request_tool`, `wait_subtask` and `echo` under the policy
/// `policy_toml`, and an engine running `piece_yaml` with the model playing `script_yaml`.
pub async fn harness(
    piece_yaml: &str,
    script_yaml: &str,
    policy_toml: &str,
    limits: EngineLimits,
) -> Harness {
    harness_with(piece_yaml, script_yaml, policy_toml, limits, &[]).await
}

/// [`harness`] with more plugins beside the first-party ones and `echo`.
pub async fn harness_with(
    piece_yaml: &str,
    script_yaml: &str,
    policy_toml: &str,
    limits: EngineLimits,
    extra: &[&str],
) -> Harness {
    let policy = Policy::parse(policy_toml, "test-policy.toml").expect("test policy parses");
    let mut plugins = Vec::new();
    for path in artifacts::FIRST_PARTY
        .iter()
        .chain([&artifacts::ECHO])
        .chain(extra)
    {
        let name = Path::new(path).file_stem().unwrap().to_string_lossy();
        let plugin = runtime()
            .load_file(Path::new(path), policy.for_plugin(&name))
            .await
            .unwrap_or_else(|err| panic!("{path} loads: {err}"));
        plugins.push(Arc::new(plugin));
    }
    let catalog = ToolCatalog::new(plugins).expect("no tool is offered twice");
    let piece = parse_piece(piece_yaml, "test-piece.yaml").expect("test piece parses");
    let model =
        Arc::new(ScriptedModel::parse(script_yaml, "test-script.yaml").expect("script parses"));
    let engine = Engine::new(model.clone(), Arc::new(catalog), [piece], limits)
        .unwrap_or_else(|err| panic!("test piece lints clean: {err}"));
    Harness {
        engine,
        model,
        observer: RecordingObserver::default(),
        cancel: CancelFlag::default(),
    }
}

impl Harness {
    /// A new job of the (only) piece.
    pub fn job(&self, input: &str) -> JobState {
        let piece = self.engine.pieces().next().unwrap().name.value.clone();
        self.engine
            .new_job("job-1".into(), Some(&piece), input.into())
            .unwrap()
    }

    pub async fn run(&self, job: &mut JobState, resume: Option<Resume>) -> PieceRunResult {
        self.answer(job, resume.map(Into::into)).await
    }

    /// [`Harness::run`] with any answer, the engine's own ones included.
    pub async fn answer(&self, job: &mut JobState, answer: Option<Answer>) -> PieceRunResult {
        self.engine
            .run(job, answer, &self.observer, &self.cancel)
            .await
            .expect("the job is runnable")
    }

    pub fn events(&self, job: &JobState) -> Vec<JobEvent> {
        self.observer.of(&job.id)
    }

    /// The content of the tool answers the model was last shown, oldest first.
    pub fn tool_answers_seen(&self) -> Vec<(String, String, bool)> {
        let requests = self.model.requests();
        let last = requests.last().expect("the model was asked");
        last.messages
            .iter()
            .filter_map(|message| match message {
                Message::Tool {
                    name,
                    content,
                    is_error,
                    ..
                } => Some((name.clone(), content.clone(), *is_error)),
                _ => None,
            })
            .collect()
    }
}
