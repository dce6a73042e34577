//! An approval given through a tool's own `tool-request` is a one-shot grant: bound to the job,
//! the tool, the plugin version serving it and the exact arguments shown. The matching call
//! runs once without a second park; any other call of that tool is gated (when the policy wants
//! approval) or refused.

use maestro::engine::{EngineLimits, JobStatus, PieceRunResult, ResumePoint};
use maestro::plugin::Resume;
use maestro_e2e::engine::harness;

const APPROVAL: &str = r#"
name: approval
initial_movement: apply
max_movements: 1
movements:
  - name: apply
    instructions: Ask before you echo; echo exactly what was approved.
    tools: [RequestTool, echo, complete]
"#;

const ASK_THEN_ECHO: &str = r#"
turns:
  - tool_calls:
      - name: RequestTool
        arguments: { tool: echo, reason: "say hi", arguments: { text: "hi" } }
  - tool_calls:
      - name: echo
        arguments: { text: "something else" }
  - tool_calls:
      - name: echo
        arguments: { text: "hi" }
  - tool_calls:
      - name: echo
        arguments: { text: "hi" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "done" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_request_runs_its_exact_call_once_and_refuses_others() {
    let h = harness(APPROVAL, ASK_THEN_ECHO, "", EngineLimits::default()).await;
    let mut job = h.job("Say hi");
    let parked = h.run(&mut job, None).await;
    assert_eq!(parked.status(), JobStatus::WaitingHuman);
    let result = h.run(&mut job, Some(Resume::Approved)).await;
    assert_eq!(result.status(), JobStatus::Completed, "{result:?}");
    let echoes: Vec<(String, bool)> = h
        .tool_answers_seen()
        .into_iter()
        .filter(|(tool, ..)| tool == "echo")
        .map(|(_, content, is_error)| (content, is_error))
        .collect();
    assert_eq!(echoes.len(), 3, "{echoes:?}");
    // Other arguments: refused while the grant stands.
    assert!(echoes[0].1, "{echoes:?}");
    assert!(
        echoes[0]
            .0
            .contains(r#"only with the arguments {"text":"hi"}"#),
        "{echoes:?}"
    );
    // The approved call runs; the grant is then used up, and echo (which needs no approval
    // from the policy) is free again.
    assert_eq!(echoes[1], ("hi".into(), false));
    assert_eq!(echoes[2], ("hi".into(), false));
    assert!(job.grants.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn under_a_policy_that_wants_approval_the_granted_call_does_not_park_again() {
    let script = r#"
turns:
  - tool_calls:
      - name: RequestTool
        arguments: { tool: echo, reason: "say hi", arguments: { text: "hi" } }
  - tool_calls:
      - name: echo
        arguments: { text: "hi" }
  - tool_calls:
      - name: echo
        arguments: { text: "hi" }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "done" }
"#;
    let policy = "[plugins.echo]\nrequire_approval = true\n";
    let h = harness(APPROVAL, script, policy, EngineLimits::default()).await;
    let mut job = h.job("Say hi");
    assert_eq!(
        h.run(&mut job, None).await.status(),
        JobStatus::WaitingHuman
    );
    // Approved once: the exact call runs at once; the same call again is a new call and
    // waits at the policy's gate.
    let result = h.run(&mut job, Some(Resume::Approved)).await;
    let PieceRunResult::WaitingHuman { wait, .. } = &result else {
        panic!("the second echo must wait at the gate, got {result:?}");
    };
    assert!(matches!(wait.resume, ResumePoint::ApprovalGate { .. }));
    let echoes: Vec<_> = h
        .tool_answers_seen()
        .into_iter()
        .filter(|(tool, ..)| tool == "echo")
        .collect();
    assert_eq!(echoes, vec![("echo".into(), "hi".into(), false)]);
    assert!(job.grants.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_request_grants_nothing() {
    let h = harness(APPROVAL, ASK_THEN_ECHO, "", EngineLimits::default()).await;
    let mut job = h.job("Say hi");
    h.run(&mut job, None).await;
    let result = h.run(&mut job, Some(Resume::Denied("no".into()))).await;
    assert_eq!(result.status(), JobStatus::Completed, "{result:?}");
    assert!(job.grants.is_empty());
    // Nothing was granted, so nothing is refused: echo needs no approval.
    let refused = h
        .tool_answers_seen()
        .into_iter()
        .filter(|(tool, _, is_error)| tool == "echo" && *is_error)
        .count();
    assert_eq!(refused, 0);
}
