//! The offline demo: starts a small web site on 127.0.0.1, then drives the
//! real `maestro plugin` commands against the first-party tools built from
//! `plugins/`: deny-by-default, a page read, a login park and its resume, a
//! tool-request park and its approval, a subtask park and its results, the
//! end of a job, and a runaway plugin stopped by its CPU limit.
//!
//! Run it with `cargo run --release -p maestro-e2e --example demo`.

use std::path::Path;

use maestro_e2e::artifacts;
use maestro_e2e::site::{GOOD_SESSION, Site};

fn main() {
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

    let work = tempfile::tempdir().expect("temp dir");
    let policy = work.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "# Grants for the demo; everything else stays denied.\n\
             [plugins.browse_web]\nhttp_allow = [\"{authority}\"]\ntimeout_ms = 10000\n\n\
             [plugins.hostile]\ncpu_ms = 200\n"
        ),
    )
    .expect("write policy");
    let policy = policy.to_str().expect("utf-8 path");
    let plugin = |name: &str| {
        Path::new(artifacts::DIR)
            .join(format!("{name}.wasm"))
            .display()
            .to_string()
    };
    let browse = plugin("browse_web");

    step(
        "The plugin folder, as the host sees it",
        &["plugin", "list", artifacts::DIR],
    );
    step(
        "BrowseWeb without a policy: deny-by-default refuses the request",
        &[
            "plugin",
            "call",
            &browse,
            "BrowseWeb",
            "--args",
            &format!(r#"{{"url":"{base}/public"}}"#),
        ],
    );
    step(
        "BrowseWeb with the site on the allowlist: title and readable text",
        &[
            "plugin",
            "call",
            &browse,
            "BrowseWeb",
            "--args",
            &format!(r#"{{"url":"{base}/public"}}"#),
            "--policy",
            policy,
        ],
    );
    let private = format!(r#"{{"url":"{base}/private"}}"#);
    step(
        "A page behind a login wall: the call parks browser-login",
        &[
            "plugin",
            "call",
            &browse,
            "BrowseWeb",
            "--args",
            &private,
            "--policy",
            policy,
            "--call-id",
            "demo-login",
        ],
    );
    step(
        "The human logged in: the same call resumes with the session and reads the page",
        &[
            "plugin",
            "call",
            &browse,
            "BrowseWeb",
            "--args",
            &private,
            "--policy",
            policy,
            "--call-id",
            "demo-login",
            "--resume",
            &format!(r#"{{"logged-in":"{GOOD_SESSION}"}}"#),
        ],
    );
    let request = r#"{"tool":"DeleteBranch","reason":"the feature is merged","arguments":{"branch":"feature/x"}}"#;
    step(
        "RequestTool parks until a human approves the exact arguments",
        &[
            "plugin",
            "call",
            &plugin("request_tool"),
            "RequestTool",
            "--args",
            request,
            "--call-id",
            "demo-approve",
        ],
    );
    step(
        "Approved",
        &[
            "plugin",
            "call",
            &plugin("request_tool"),
            "RequestTool",
            "--args",
            request,
            "--call-id",
            "demo-approve",
            "--resume",
            r#""approved""#,
        ],
    );
    let wait = r#"{"job_ids":["job-1","job-2"]}"#;
    step(
        "WaitSubTask parks on child jobs",
        &[
            "plugin",
            "call",
            &plugin("wait_subtask"),
            "WaitSubTask",
            "--args",
            wait,
        ],
    );
    step(
        "The children ended: their results, the aborted one reported as such",
        &[
            "plugin",
            "call",
            &plugin("wait_subtask"),
            "WaitSubTask",
            "--args",
            wait,
            "--resume",
            r#"{"subtasks-done":[{"job_id":"job-1","status":"completed","output":"3 sources"},{"job_id":"job-2","status":"aborted","output":"site down"}]}"#,
        ],
    );
    step(
        "complete ends the job (terminal)",
        &[
            "plugin",
            "call",
            &plugin("complete"),
            "complete",
            "--args",
            r#"{"status":"done","summary":"report written"}"#,
        ],
    );
    step(
        "A runaway plugin is stopped by its CPU limit; the host goes on",
        &[
            "plugin",
            "call",
            &plugin("hostile"),
            "spin",
            "--policy",
            policy,
        ],
    );
}

fn step(title: &str, args: &[&str]) {
    println!("\n== {title}");
    let shown: Vec<String> = args
        .iter()
        .map(|arg| {
            if arg.contains([' ', '{', '"']) {
                format!("'{arg}'")
            } else {
                arg.to_string()
            }
        })
        .collect();
    println!("$ maestro {}", shown.join(" "));
    let code = maestro::cli::run(std::iter::once("maestro").chain(args.iter().copied()));
    if code == std::process::ExitCode::from(1) {
        println!("(exit status 1: the call ended in an error)");
    } else if code != std::process::ExitCode::SUCCESS {
        println!("(exit status 2: bad input)");
    }
}
