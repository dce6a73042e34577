//! Every outcome kind of the first-party control-flow tools `complete`,
//! `RequestTool`, `WaitSubTask`, `HandIn` and `RunWorker`, run as real components.

use maestro::plugin::{
    ArtifactDraft, CallError, CallRequest, Fact, Outcome, Park, PluginPolicy, Resume, Review,
    SubtaskResult, SubtaskStatus, Terminal, ToolRequest, Verdict, WitVersion, WorkerRequest,
};
use maestro_e2e::{artifacts, call, load, output_json};
use serde_json::json;

#[tokio::test]
async fn complete_ends_or_asks() {
    let plugin = load(artifacts::COMPLETE, PluginPolicy::default()).await;
    let done = call(
        &plugin,
        "complete",
        json!({"status": "done", "summary": "all good"}),
    )
    .await
    .unwrap();
    assert_eq!(
        done,
        Outcome::Terminal(Terminal::Complete("all good".into()))
    );

    let aborted = call(
        &plugin,
        "complete",
        json!({"status": "aborted", "summary": "cannot"}),
    )
    .await
    .unwrap();
    assert_eq!(aborted, Outcome::Terminal(Terminal::Abort("cannot".into())));

    let ask = json!({"status": "needs_user_input", "question": "Which region?"});
    let parked = call(&plugin, "complete", ask.clone()).await.unwrap();
    assert_eq!(parked, Outcome::Park(Park::Ask("Which region?".into())));

    let request = CallRequest::new("complete", ask);
    let answered = plugin
        .invoke(request.clone().resumed(Resume::Answered("EMEA".into())))
        .await
        .unwrap();
    assert_eq!(
        output_json(&answered),
        json!({"question": "Which region?", "answer": "EMEA"})
    );

    let expired = plugin
        .invoke(request.clone().resumed(Resume::Expired))
        .await
        .unwrap();
    assert_eq!(output_json(&expired)["expired"], json!(true));

    let wrong = plugin
        .invoke(request.resumed(Resume::Approved))
        .await
        .unwrap_err();
    assert!(
        matches!(&wrong, CallError::Tool { message, retryable: false } if message.contains("approved")),
        "{wrong}"
    );
}

#[tokio::test]
async fn complete_refuses_bad_input() {
    let plugin = load(artifacts::COMPLETE, PluginPolicy::default()).await;
    let missing = call(&plugin, "complete", json!({"status": "needs_user_input"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, CallError::Tool { message, .. } if message.contains("question")),
        "{missing}"
    );

    // Refused by the schema, before the guest runs.
    let invalid = call(&plugin, "complete", json!({"status": "maybe"}))
        .await
        .unwrap_err();
    match invalid {
        CallError::InvalidArguments { tool, problems } => {
            assert_eq!(tool, "complete");
            assert!(
                problems.iter().any(|p| p.starts_with("/status")),
                "{problems:?}"
            );
        }
        other => panic!("expected invalid arguments, got {other}"),
    }
    let extra = call(
        &plugin,
        "complete",
        json!({"status": "done", "colour": "red"}),
    )
    .await
    .unwrap_err();
    assert!(matches!(extra, CallError::InvalidArguments { .. }));
    let unknown = call(&plugin, "finish", json!({})).await.unwrap_err();
    assert!(
        matches!(&unknown, CallError::UnknownTool { available, .. } if available == &["complete"]),
        "{unknown}"
    );
}

#[tokio::test]
async fn request_tool_parks_with_exact_arguments_and_reports_the_decision() {
    let plugin = load(artifacts::REQUEST_TOOL, PluginPolicy::default()).await;
    let arguments = json!({"tool": "DeleteFile", "reason": "clean up the draft", "arguments": {"path": "/tmp/draft.md", "force": true}});
    let request = CallRequest::new("RequestTool", arguments);
    let parked = plugin.invoke(request.clone()).await.unwrap();
    let Outcome::Park(Park::ToolRequest(ToolRequest {
        tool,
        reason,
        arguments,
    })) = parked
    else {
        panic!("expected a tool-request park, got {parked:?}");
    };
    assert_eq!(
        (tool.as_str(), reason.as_str()),
        ("DeleteFile", "clean up the draft")
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&arguments).unwrap(),
        json!({"path": "/tmp/draft.md", "force": true})
    );

    let approved = output_json(
        &plugin
            .invoke(request.clone().resumed(Resume::Approved))
            .await
            .unwrap(),
    );
    assert_eq!(approved["decision"], "approved");
    assert_eq!(
        approved["arguments"],
        json!({"path": "/tmp/draft.md", "force": true})
    );

    let denied = output_json(
        &plugin
            .invoke(request.clone().resumed(Resume::Denied("too risky".into())))
            .await
            .unwrap(),
    );
    assert_eq!(denied["decision"], "denied");
    assert_eq!(denied["reason"], "too risky");

    let expired = output_json(
        &plugin
            .invoke(request.clone().resumed(Resume::Expired))
            .await
            .unwrap(),
    );
    assert_eq!(expired["decision"], "expired");

    let wrong = plugin
        .invoke(request.resumed(Resume::LoggedIn("sid=1".into())))
        .await
        .unwrap_err();
    assert!(matches!(
        wrong,
        CallError::Tool {
            retryable: false,
            ..
        }
    ));
}

#[tokio::test]
async fn wait_subtask_parks_on_children_and_returns_their_results() {
    let plugin = load(artifacts::WAIT_SUBTASK, PluginPolicy::default()).await;
    let request = CallRequest::new(
        "WaitSubTask",
        json!({"job_ids": ["job-a", "job-b", "job-c"]}),
    );
    let parked = plugin.invoke(request.clone()).await.unwrap();
    assert_eq!(
        parked,
        Outcome::Park(Park::Subtasks(vec![
            "job-a".into(),
            "job-b".into(),
            "job-c".into()
        ]))
    );

    let result = |id: &str, status, output: &str| SubtaskResult {
        job_id: id.into(),
        status,
        output: output.into(),
        facts: vec![],
    };
    // A child's facts (its accepted artifacts) come with its result: WaitSubTask is a 0.2.0 tool.
    let mut found = result("job-a", SubtaskStatus::Completed, "found 3 papers");
    found.facts.push(Fact {
        artifact_id: "art-1".into(),
        kind: "list".into(),
        title: "Papers".into(),
        media_type: "text/plain".into(),
        body: "three papers".into(),
    });
    let done = plugin
        .invoke(request.clone().resumed(Resume::SubtasksDone(vec![
            result("job-b", SubtaskStatus::Aborted, "source unreachable"),
            found,
            result("job-x", SubtaskStatus::Completed, "not awaited"),
        ])))
        .await
        .unwrap();
    let report = output_json(&done);
    assert_eq!(
        report["results"],
        json!([
            {"job_id": "job-a", "status": "completed", "output": "found 3 papers", "facts": [
                {"artifact_id": "art-1", "kind": "list", "title": "Papers",
                 "media_type": "text/plain", "body": "three papers"}
            ]},
            {"job_id": "job-b", "status": "aborted", "output": "source unreachable", "facts": []},
        ])
    );
    assert_eq!(report["missing"], json!(["job-c"]));
    assert_eq!(report["all_completed"], json!(false));

    let expired = plugin
        .invoke(request.resumed(Resume::Expired))
        .await
        .unwrap_err();
    assert!(matches!(
        expired,
        CallError::Tool {
            retryable: false,
            ..
        }
    ));

    let empty = plugin
        .invoke(CallRequest::new("WaitSubTask", json!({"job_ids": []})))
        .await
        .unwrap_err();
    assert!(matches!(empty, CallError::InvalidArguments { .. }));
}

#[tokio::test]
async fn every_first_party_plugin_loads_and_describes_its_tool() {
    let expected = ["complete", "BrowseWeb", "RequestTool", "WaitSubTask"];
    for (path, tool) in artifacts::FIRST_PARTY.iter().zip(expected) {
        let plugin = load(path, PluginPolicy::default()).await;
        let names: Vec<_> = plugin.specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [tool], "{path}");
        let spec = &plugin.specs()[0];
        assert!(!spec.description.is_empty());
        assert_eq!(spec.parameters["type"], "object");
        assert_eq!(plugin.content_hash().len(), 64);
    }
}

#[tokio::test]
async fn hand_in_parks_with_its_draft_and_reports_each_verdict() {
    let plugin = load(artifacts::HAND_IN, PluginPolicy::default()).await;
    assert_eq!(plugin.wit_version(), WitVersion::V0_2_0);
    let request = CallRequest::new(
        "HandIn",
        json!({"kind": "report", "title": "Q3", "body": "Revenue rose."}),
    );
    let parked = plugin.invoke(request.clone()).await.unwrap();
    assert_eq!(
        parked,
        Outcome::Park(Park::Artifact(ArtifactDraft {
            kind: "report".into(),
            title: "Q3".into(),
            media_type: "text/markdown".into(),
            body: "Revenue rose.".into(),
            revises: None,
        }))
    );
    let reviewed = |verdict| {
        Resume::Reviewed(Review {
            artifact_id: "art-7".into(),
            verdict,
        })
    };
    for (verdict, status, said) in [
        (Verdict::Accepted, "accepted", "It is a fact now"),
        (Verdict::Rejected("too long".into()), "rejected", "too long"),
        (
            Verdict::RevisionRequested("shorter".into()),
            "revision_requested",
            "shorter",
        ),
    ] {
        let done = plugin
            .invoke(request.clone().resumed(reviewed(verdict)))
            .await
            .unwrap();
        let report = output_json(&done);
        assert_eq!(report["artifact_id"], "art-7");
        assert_eq!(report["status"], status);
        assert!(report.to_string().contains(said), "{report}");
    }
    let expired = plugin
        .invoke(request.clone().resumed(Resume::Expired))
        .await
        .unwrap_err();
    assert!(
        matches!(expired, CallError::Tool { ref message, .. } if message.contains("nobody reviewed")),
        "{expired}"
    );
    let wrong = plugin
        .invoke(request.resumed(Resume::Approved))
        .await
        .unwrap_err();
    assert!(
        wrong
            .to_string()
            .contains("cannot be resumed with approved"),
        "{wrong}"
    );
}

#[tokio::test]
async fn run_worker_parks_to_start_its_worker_and_reports_its_end_with_facts() {
    let plugin = load(artifacts::RUN_WORKER, PluginPolicy::default()).await;
    let request = CallRequest::new("RunWorker", json!({"piece": "report", "input": "tides"}));
    let parked = plugin.invoke(request.clone()).await.unwrap();
    assert_eq!(
        parked,
        Outcome::Park(Park::Worker(WorkerRequest {
            piece: "report".into(),
            input: "tides".into(),
        }))
    );
    let ended = SubtaskResult {
        job_id: "job-w".into(),
        status: SubtaskStatus::Completed,
        output: "done".into(),
        facts: vec![Fact {
            artifact_id: "art-2".into(),
            kind: "report".into(),
            title: "Tides".into(),
            media_type: "text/markdown".into(),
            body: "Two a day.".into(),
        }],
    };
    let done = plugin
        .invoke(request.clone().resumed(Resume::WorkerDone(ended)))
        .await
        .unwrap();
    let report = output_json(&done);
    assert_eq!(report["status"], "completed");
    assert_eq!(report["facts"][0]["artifact_id"], "art-2");
    assert_eq!(report["facts"][0]["body"], "Two a day.");
    let expired = plugin
        .invoke(request.resumed(Resume::Expired))
        .await
        .unwrap_err();
    assert!(expired.to_string().contains("was cancelled"), "{expired}");
}

#[tokio::test]
async fn a_0_1_0_tool_is_never_resumed_with_what_only_0_2_0_parks_produce() {
    let plugin = load(artifacts::COMPLETE, PluginPolicy::default()).await;
    assert_eq!(plugin.wit_version(), WitVersion::V0_1_0);
    let request = CallRequest::new(
        "complete",
        json!({"status": "needs_user_input", "question": "?"}),
    )
    .resumed(Resume::Reviewed(Review {
        artifact_id: "art-1".into(),
        verdict: Verdict::Accepted,
    }));
    let error = plugin.invoke(request).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("a maestro:tool@0.1.0 component cannot be resumed with `reviewed`"),
        "{error}"
    );
}
