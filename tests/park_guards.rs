//! Parks that would never end, or that would read what is not the job's: a wait for jobs that
//! are not the job's own subtasks is refused, and a tool that parks again every time it is
//! resumed is stopped by the park limit.

use maestro::engine::{EngineLimits, Guard, PieceRunResult};
use maestro::plugin::{Resume, SubtaskResult, SubtaskStatus};
use maestro_e2e::artifacts;
use maestro_e2e::engine::harness_with;

const WAITER: &str = r#"
name: waiter
initial_movement: wait
max_movements: 1
movements:
  - name: wait
    instructions: Wait for the subtasks, then finish with complete.
    tools: [WaitSubTask, park_subtasks, complete]
    rules: []
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_job_may_wait_only_for_its_own_subtasks() {
    let script = r#"
turns:
  - tool_calls:
      - name: WaitSubTask
        arguments: { job_ids: ["job-of-someone-else"] }
  - tool_calls:
      - name: WaitSubTask
        arguments: { job_ids: ["job-1"] }
  - tool_calls:
      - name: complete
        arguments: { status: done, summary: "gave up" }
"#;
    let h = harness_with(
        WAITER,
        script,
        "",
        EngineLimits::default(),
        &[artifacts::HOSTILE],
    )
    .await;
    let mut job = h.job("Wait");
    job.children = vec!["my-child".into()];
    let result = h.run(&mut job, None).await;
    assert_eq!(
        result,
        PieceRunResult::Completed {
            output: "gave up".into()
        },
        "neither wait may park"
    );
    let answers = h.tool_answers_seen();
    assert_eq!(answers.len(), 2, "{answers:?}");
    for ((tool, content, is_error), stranger) in
        answers.iter().zip(["job-of-someone-else", "job-1"])
    {
        assert_eq!(tool, "WaitSubTask");
        assert!(*is_error, "{content}");
        assert!(content.contains("bad-outcome"), "{content}");
        assert!(
            content.contains(&format!("{stranger} is not a subtask of this job")),
            "{content}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_parks_on_every_resume_hits_the_park_limit() {
    let script = r#"
turns:
  - tool_calls:
      - name: park_subtasks
        arguments: { job_ids: ["my-child"] }
"#;
    let limits = EngineLimits {
        max_parks_per_movement: 5,
        ..EngineLimits::default()
    };
    let h = harness_with(WAITER, script, "", limits, &[artifacts::HOSTILE]).await;
    let mut job = h.job("Wait");
    job.children = vec!["my-child".into()];
    let done = || {
        Resume::SubtasksDone(vec![SubtaskResult {
            job_id: "my-child".into(),
            status: SubtaskStatus::Completed,
            output: "done".into(),
            facts: vec![],
        }])
    };
    let mut result = h.run(&mut job, None).await;
    let mut parks = 0;
    while matches!(result, PieceRunResult::WaitingSubtasks { .. }) {
        parks += 1;
        assert!(parks <= 5, "parked past the limit");
        // The child has ended: the store releases the job at once, with no model turn.
        result = h.run(&mut job, Some(done())).await;
    }
    assert_eq!(parks, 5);
    let PieceRunResult::Aborted { guard, reason } = result else {
        panic!("the sixth park must abort, got {result:?}");
    };
    assert_eq!(guard, Some(Guard::ParkLimit));
    assert!(
        reason.contains("parked 6 times, the most allowed (5)"),
        "{reason}"
    );
}
