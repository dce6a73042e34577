//! The inbox page walks the seed's typical path in a real headless Chromium: a card for each
//! waiting reason — choose a piece, fill in the intake, approve the worker, answer the worker's
//! question, review its report (rendered as text, not HTML), ask for a revision without an
//! instruction and give it, accept the new version — until the job completes.

mod common;
mod serve_support;

use fantoccini::{Client, Locator};
use serde_json::json;
use serve_support::browser::{Chromedriver, browser};
use serve_support::{STATE_WAIT, TOKEN, commission_server};

/// The job's card once it shows a wait of `kind`.
async fn card(page: &Client, job: &str, kind: &str) -> fantoccini::elements::Element {
    page.wait()
        .at_most(STATE_WAIT)
        .for_element(Locator::Css(&format!(
            "article[data-job='{job}'][data-kind='{kind}']"
        )))
        .await
        .unwrap_or_else(|error| panic!("no {kind} card for {job}: {error}"))
}

async fn click(card: &fantoccini::elements::Element, css: &str) {
    card.find(Locator::Css(css))
        .await
        .unwrap_or_else(|error| panic!("{css}: {error}"))
        .click()
        .await
        .unwrap();
}

async fn type_into(card: &fantoccini::elements::Element, css: &str, text: &str) {
    card.find(Locator::Css(css))
        .await
        .unwrap_or_else(|error| panic!("{css}: {error}"))
        .send_keys(text)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_walks_a_job_from_its_piece_to_its_accepted_report() {
    let server = commission_server();
    let (status, job) = server
        .post("/v1/jobs", json!({ "input": "A report for the council." }))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();

    let driver = Chromedriver::start();
    let page = browser(&driver).await;
    page.goto(&server.url(&format!("/#token={TOKEN}")))
        .await
        .unwrap();

    let choose = card(&page, &id, "skill_selection").await;
    click(
        &choose,
        "button[data-action='choose'][data-piece='commission']",
    )
    .await;

    let intake = card(&page, &id, "intake").await;
    let prompt = intake.find(Locator::Css("p.prompt")).await.unwrap();
    assert_eq!(
        prompt.text().await.unwrap(),
        "What should the report be about, and who will read it?"
    );
    type_into(&intake, "input[name='slot:topic']", "Lisbon trams").await;
    click(&intake, "button[data-action='intake']").await;

    let approval = card(&page, &id, "tool_approval").await;
    let asked_by = approval.find(Locator::Css("p.asked-by")).await.unwrap();
    assert!(
        asked_by.text().await.unwrap().contains("piece"),
        "the piece holds it"
    );
    click(&approval, "button[data-action='approve']").await;

    let question = card(&page, &id, "worker_question").await;
    let asked = question.find(Locator::Css("p.question")).await.unwrap();
    assert_eq!(
        asked.text().await.unwrap(),
        "Who will read the report on the Lisbon trams?"
    );
    type_into(&question, "textarea[name='text']", "The city council").await;
    click(&question, "button[data-action='answer']").await;

    let review = card(&page, &id, "artifact_review").await;
    let body = review
        .find(Locator::Css("pre.artifact-body"))
        .await
        .unwrap();
    assert_eq!(
        body.attr("data-rendered").await.unwrap().as_deref(),
        Some("text")
    );
    let shown = body.text().await.unwrap();
    assert!(
        shown.starts_with("# The Lisbon trams"),
        "Markdown shown as text: {shown}"
    );
    let screenshot = page.screenshot().await.unwrap();
    std::fs::write(
        std::path::Path::new(maestro_plugins::DIR).join("../inbox-review.png"),
        screenshot,
    )
    .unwrap();
    // Ask for a revision without saying what to change: the job waits for the instruction.
    click(&review, "button[data-action='revise']").await;

    let revision = card(&page, &id, "revision_instruction").await;
    type_into(&revision, "textarea[name='instruction']", "Name the lines.").await;
    click(&revision, "button[data-action='revise']").await;

    // The second version, from the worker, revises the first.
    let job = server
        .wait_for(&id, "reviewing the second draft", |job| {
            job["wait"]["request"]["kind"] == "artifact_review"
                && !job["wait"]["request"]["revises"].is_null()
        })
        .await;
    let wait = job["wait"]["id"].to_string();
    let revised = page
        .wait()
        .at_most(STATE_WAIT)
        .for_element(Locator::Css(&format!(
            "article[data-job='{id}'][data-kind='artifact_review'][data-wait='{wait}']"
        )))
        .await
        .unwrap();
    let body = revised
        .find(Locator::Css("pre.artifact-body"))
        .await
        .unwrap();
    assert!(body.text().await.unwrap().contains("28E"));
    click(&revised, "button[data-action='accept']").await;

    let done = server
        .wait_for(&id, "completed", |job| job["status"] == "completed")
        .await;
    assert_eq!(done["phase"], "done");
    let artifacts = server.get(&format!("/v1/jobs/{id}/artifacts")).await;
    let facts = artifacts["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|artifact| artifact["fact"] == true)
        .count();
    assert_eq!(facts, 1);
    page.close().await.unwrap();
}
