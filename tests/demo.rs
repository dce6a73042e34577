//! The README's main command, as CI runs it: the demo's every step exits as it should (the
//! second approval refused), and each walk ends as the README says — the research job completed
//! after its login, the approval job completed, the review job completed with one fact, the
//! version accepted after a revision.

use maestro::engine::{JobEvent, JobStatus};
use maestro::phase::ArtifactStatus;
use maestro::store::{JobStore, SqliteStore};

#[test]
fn the_demo_walks_every_piece_to_its_end() {
    let demo = maestro_e2e::demo::run();
    let failed: Vec<&String> = demo
        .steps
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(title, _)| title)
        .collect();
    assert!(failed.is_empty(), "steps failed: {failed:?}");
    assert_eq!(demo.steps.len(), 10);
    let store = SqliteStore::open(&demo.store).unwrap();
    for job in [&demo.research, &demo.approval, &demo.review] {
        let (state, status) = store.load(job).unwrap();
        assert_eq!(status, JobStatus::Completed, "{job}: {:?}", state.result);
    }
    // The page behind the login reached the model: BrowseWeb's answer after the resume, not
    // the script's summary, holds what only the logged-in page shows.
    let research_log: Vec<JobEvent> = store
        .events(&demo.research, 0)
        .unwrap()
        .into_iter()
        .map(|stored| stored.event)
        .collect();
    let resumed = research_log
        .iter()
        .position(|event| matches!(event, JobEvent::Resumed { .. }))
        .expect("the login resumed the job");
    let page = research_log[resumed..]
        .iter()
        .find_map(|event| match event {
            JobEvent::ToolAnswered {
                tool,
                content,
                is_error: false,
                ..
            } if tool == "BrowseWeb" => Some(content),
            _ => None,
        });
    assert!(
        page.is_some_and(|page| page.contains("Secret numbers: 42")),
        "it read the page behind the login: {research_log:?}"
    );
    let (review, _) = store.load(&demo.review).unwrap();
    let session = review.phase_session().unwrap();
    let statuses: Vec<ArtifactStatus> = session.artifacts().iter().map(|a| a.status()).collect();
    assert_eq!(
        statuses,
        [ArtifactStatus::RevisionRequested, ArtifactStatus::Accepted]
    );
    assert_eq!(session.facts().len(), 1);
    // The session never reached the log.
    let log = serde_json::to_string(&store.events(&demo.research, 0).unwrap()).unwrap();
    assert!(!log.contains(maestro_e2e::site::GOOD_SESSION), "{log}");
}
