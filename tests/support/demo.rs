//! The offline demo, as a function the example and a test both run: real pieces from `pieces/`
//! run by `maestro run` with the scripted model, on the first-party tools built from `plugins/`,
//! against a small web site on 127.0.0.1.
//!
//! 1. The research piece reads a public page with BrowseWeb (a tool output), hits a login wall
//!    and parks `waiting_human (browser_login)`; `maestro jobs login` hands over the session and
//!    the parked call resumes in its movement, reads the page, and the piece completes.
//! 2. The approval piece parks on RequestTool; `maestro jobs approve` lets it finish, and a
//!    second approval is refused.
//! 3. The review piece starts a worker that drafts a report; the job parks for its review
//!    (`review_artifact`); `maestro jobs revise` sends it back and the worker drafts again;
//!    `maestro jobs accept` makes the new version a fact, the worker ends and the job cites it.

use std::path::Path;
use std::process::ExitCode;

use crate::artifacts;
use crate::site::{GOOD_SESSION, Site};

/// What the demo did: each step with whether `maestro` exited as the step expects, and the
/// store it left, for whoever checks the outcome.
pub struct Demo {
    pub steps: Vec<(String, bool)>,
    pub store: String,
    /// The jobs each walk started: research, approval, review.
    pub research: String,
    pub approval: String,
    pub review: String,
    _work: tempfile::TempDir,
}

impl Demo {
    pub fn ok(&self) -> bool {
        self.steps.iter().all(|(_, ok)| *ok)
    }
}

/// Runs every step, printing each command and what it printed.
pub fn run() -> Demo {
    let (site_tx, site_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        rt.block_on(async {
            let site = Site::start().await;
            site_tx
                .send((site.url(""), site.authority()))
                .expect("demo is waiting");
            std::future::pending::<()>().await;
        });
    });
    let (base, authority) = site_rx.recv().expect("site starts");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf();
    let pieces = repo.join("pieces").display().to_string();
    let work = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: String| {
        let path = work.path().join(name);
        std::fs::write(&path, text).expect("write demo file");
        path.display().to_string()
    };
    let policy = write(
        "policy.toml",
        format!(
            "# Only BrowseWeb gets network access, and only to the demo site.\n[plugins.browse_web]\nhttp_allow = [\"{authority}\"]\n"
        ),
    );
    // The script holds the site's URL, whose port is chosen at start: it is written here.
    let script = write(
        "research-script.yaml",
        format!(
            r#"turns:
  - text: "Plan: read the public report, then the members-only dashboard."
  - tool_calls: [{{ name: BrowseWeb, arguments: {{ url: "{base}/public" }} }}]
  - tool_calls: [{{ name: BrowseWeb, arguments: {{ url: "{base}/private" }} }}]
  - tool_calls: [{{ name: transition, arguments: {{ next: write, reason: "both sources read" }} }}]
  - tool_calls:
      - name: complete
        arguments: {{ status: done, summary: "Revenue grew 12% this quarter; the dashboard's key figure is 42." }}
"#
        ),
    );
    let store = work.path().join("jobs.db").display().to_string();
    let common = [
        "--plugins",
        artifacts::DIR,
        "--pieces",
        &pieces,
        "--policy",
        &policy,
        "--store",
        &store,
    ];
    let with = |args: &[&str], model: &str| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(["--model".to_owned(), format!("scripted:{model}")]);
        all.extend(common.iter().map(|a| a.to_string()));
        all
    };

    let mut steps = Vec::new();
    let mut step = |title: &str, args: &[String], expected: u8| {
        let ok = step(title, args, expected);
        steps.push((title.to_owned(), ok));
    };
    step(
        "The research piece: a page read, then a login wall parks the job",
        &with(
            &["run", "research", "--input", "How did the quarter go?"],
            &script,
        ),
        0,
    );
    let research = top_level(&store, "waiting_human").remove(0);
    step(
        "From any shell: hand over the browser session; the parked BrowseWeb call resumes",
        &with(&["jobs", "login", &research, GOOD_SESSION], &script),
        0,
    );

    let approval = repo
        .join("pieces/scripts/approval.yaml")
        .display()
        .to_string();
    step(
        "The approval piece: RequestTool parks the job until a human decides",
        &with(
            &["run", "approval", "--input", "Rotate the staging API key"],
            &approval,
        ),
        0,
    );
    let approval_job = top_level(&store, "waiting_human").remove(0);
    step(
        "Approve it: the job resumes in its movement and completes",
        &with(&["jobs", "approve", &approval_job], &approval),
        0,
    );
    step(
        "Approve it again: refused, an answer is applied once",
        &with(&["jobs", "approve", &approval_job], &approval),
        2,
    );
    let review = repo
        .join("pieces/scripts/review.yaml")
        .display()
        .to_string();
    step(
        "The review piece: a worker drafts a report, and the job waits for its review",
        &with(&["run", "review", "--input", "Tides of the Tagus"], &review),
        0,
    );
    let review_job = top_level(&store, "waiting_human").remove(0);
    step(
        "Ask for a revision: the worker drafts a second version",
        &with(
            &["jobs", "revise", &review_job, "Add the spring tides."],
            &review,
        ),
        0,
    );
    step(
        "Accept it: the version is a fact, the worker ends and the job cites it",
        &with(&["jobs", "accept", &review_job], &review),
        0,
    );
    step(
        "Every version of the report, with its status",
        &[
            "jobs".into(),
            "artifacts".into(),
            review_job.clone(),
            "--store".into(),
            store.clone(),
        ],
        0,
    );
    step(
        "Every job, as the store keeps it",
        &[
            "jobs".into(),
            "list".into(),
            "--store".into(),
            store.clone(),
        ],
        0,
    );
    Demo {
        steps,
        store,
        research,
        approval: approval_job,
        review: review_job,
        _work: work,
    }
}

/// Ids of the store's top-level jobs (not subtasks, not workers) with `status`, newest first.
fn top_level(store: &str, status: &str) -> Vec<String> {
    use maestro::engine::JobStatus;
    use maestro::store::{JobStore, SqliteStore};
    let store = SqliteStore::open(store).expect("store opens");
    store
        .list(JobStatus::parse(status), 10)
        .expect("jobs list")
        .into_iter()
        .filter(|job| job.parent.is_none())
        .map(|job| job.id)
        .collect()
}

/// Runs `maestro` with `args`; whether it exited with `expected`.
fn step(title: &str, args: &[String], expected: u8) -> bool {
    println!("\n== {title}");
    let shown: Vec<String> = args
        .iter()
        .map(|arg| {
            if arg.contains([' ', '{', '"', '?']) {
                format!("'{arg}'")
            } else {
                arg.clone()
            }
        })
        .collect();
    println!("$ maestro {}", shown.join(" "));
    let code = maestro::cli::run(std::iter::once("maestro".to_owned()).chain(args.iter().cloned()));
    code == ExitCode::from(expected)
}
