//! The offline demo: real pieces from `pieces/` run by `maestro run` with the scripted model,
//! on the first-party tools built from `plugins/`, against a small web site on 127.0.0.1.
//!
//! 1. The research piece reads a public page with BrowseWeb (a tool output), hits a login wall
//!    and parks `waiting_human (browser_login)`; `maestro jobs login` hands over the session and
//!    the parked call resumes in its movement, reads the page, and the piece completes.
//! 2. The approval piece parks on RequestTool; `maestro jobs approve` lets it finish.
//! 3. The review piece starts a worker that drafts a report; the job parks for its review
//!    (`review_artifact`); `maestro jobs revise` sends it back and the worker drafts again;
//!    `maestro jobs accept` makes the new version a fact, the worker ends and the job cites it.
//!
//! Run it with `cargo run --release -p maestro-e2e --example demo`.

use std::path::Path;
use std::process::ExitCode;

use maestro_e2e::artifacts;
use maestro_e2e::site::{GOOD_SESSION, Site};

fn main() -> ExitCode {
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

    let mut ok = step(
        "The research piece: a page read, then a login wall parks the job",
        &with(
            &["run", "research", "--input", "How did the quarter go?"],
            &script,
        ),
    );
    let parked = job_ids(&store, "waiting_human");
    ok &= step(
        "From any shell: hand over the browser session; the parked BrowseWeb call resumes",
        &with(&["jobs", "login", &parked[0], GOOD_SESSION], &script),
    );

    let approval = repo
        .join("pieces/scripts/approval.yaml")
        .display()
        .to_string();
    ok &= step(
        "The approval piece: RequestTool parks the job until a human decides",
        &with(
            &["run", "approval", "--input", "Rotate the staging API key"],
            &approval,
        ),
    );
    let parked = job_ids(&store, "waiting_human");
    ok &= step(
        "Approve it: the job resumes in its movement and completes",
        &with(&["jobs", "approve", &parked[0]], &approval),
    );
    let review = repo
        .join("pieces/scripts/review.yaml")
        .display()
        .to_string();
    ok &= step(
        "The review piece: a worker drafts a report, and the job waits for its review",
        &with(&["run", "review", "--input", "Tides of the Tagus"], &review),
    );
    let parked = top_level(&store, "waiting_human");
    ok &= step(
        "Ask for a revision: the worker drafts a second version",
        &with(
            &["jobs", "revise", &parked[0], "Add the spring tides."],
            &review,
        ),
    );
    ok &= step(
        "Accept it: the version is a fact, the worker ends and the job cites it",
        &with(&["jobs", "accept", &parked[0]], &review),
    );
    ok &= step(
        "Every version of the report, with its status",
        &[
            "jobs".into(),
            "artifacts".into(),
            parked[0].clone(),
            "--store".into(),
            store.clone(),
        ],
    );
    ok &= step(
        "Every job, as the store keeps it",
        &[
            "jobs".into(),
            "list".into(),
            "--store".into(),
            store.clone(),
        ],
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("demo: a step failed");
        ExitCode::FAILURE
    }
}

/// Ids of the store's jobs with `status`, newest first.
fn job_ids(store: &str, status: &str) -> Vec<String> {
    use maestro::engine::JobStatus;
    use maestro::store::{JobStore, SqliteStore};
    let store = SqliteStore::open(store).expect("store opens");
    store
        .list(JobStatus::parse(status), 10)
        .expect("jobs list")
        .into_iter()
        .map(|job| job.id)
        .collect()
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

fn step(title: &str, args: &[String]) -> bool {
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
    code == ExitCode::SUCCESS
}
