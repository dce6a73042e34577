//! The approval inbox in a real headless Chromium, driven through chromedriver: the page signs
//! in with a token from its URL, shows a waiting tool request with its exact arguments, shows a
//! job that parks after the page opened (live, from the event stream), and an approval clicked
//! on the page resumes the job to its end.

mod common;
mod serve_support;

use std::time::{Duration, Instant};

use fantoccini::Locator;
use serde_json::Value;
use serve_support::browser::{Chromedriver, browser};
use serve_support::{APPROVAL_SCRIPT, STATE_WAIT, ServerFolder, TOKEN, TestServer, approval_piece};

#[tokio::test(flavor = "multi_thread")]
async fn approving_on_the_inbox_page_resumes_the_job() {
    let server = TestServer::start(ServerFolder::new(
        &[approval_piece()],
        APPROVAL_SCRIPT,
        &[maestro_plugins::COMPLETE, maestro_plugins::REQUEST_TOOL],
        true,
    ));
    let first = server.start_job("approval", "Rotate the staging key").await;
    let parked = server
        .wait_for(&first, "parked", |job| job["status"] == "waiting_human")
        .await;
    let arguments = parked["wait"]["request"]["arguments"]
        .as_str()
        .unwrap()
        .to_owned();

    let driver = Chromedriver::start();
    let page = browser(&driver).await;
    page.goto(&server.url(&format!("/#token={TOKEN}")))
        .await
        .unwrap();
    let wait = || page.wait().at_most(STATE_WAIT);

    let card = wait()
        .for_element(Locator::Css(&format!("article[data-job='{first}']")))
        .await
        .expect("the waiting job's card");
    let shown = card
        .find(Locator::Css("pre.arguments"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(shown, arguments, "the page shows the exact arguments");
    let tool = card.find(Locator::Css("code.tool")).await.unwrap();
    assert_eq!(tool.text().await.unwrap(), "RotateKey");
    // RequestTool's own request, told apart from the policy's gate.
    let asked_by = card.find(Locator::Css("p.asked-by")).await.unwrap();
    assert!(
        asked_by
            .text()
            .await
            .unwrap()
            .starts_with("A tool asks for permission"),
        "{}",
        asked_by.text().await.unwrap()
    );
    // The token came from the URL and left the address bar.
    let address = page.current_url().await.unwrap();
    assert!(!address.as_str().contains(TOKEN), "{address}");
    wait()
        .for_element(Locator::Css("#connection.live"))
        .await
        .expect("the live stream connects");

    // A job that parks while the page is open appears without a reload.
    let second = server
        .start_job("approval", "Rotate the production key")
        .await;
    wait()
        .for_element(Locator::Css(&format!("article[data-job='{second}']")))
        .await
        .expect("the new job's card, from the live stream");

    card.find(Locator::Css("button[data-action='approve']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let done = server
        .wait_for(&first, "completed", |job: &Value| {
            job["status"] == "completed"
        })
        .await;
    assert_eq!(done["phase"], "done");

    // The approved job leaves the page; the other one still waits there.
    // The ids are read in one script: a card the page removes between a
    // `find_all` and a later `attr` would be a stale element.
    let deadline = Instant::now() + STATE_WAIT;
    loop {
        let shown = page
            .execute(
                "return [...document.querySelectorAll('article.job')].map((card) => card.dataset.job);",
                Vec::new(),
            )
            .await
            .unwrap();
        let jobs: Vec<String> = serde_json::from_value(shown).unwrap();
        if jobs == [second.clone()] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page still shows {jobs:?}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let count = page.find(Locator::Id("count")).await.unwrap();
    assert_eq!(count.text().await.unwrap(), "1");
    page.close().await.unwrap();
    assert_eq!(
        server.get(&format!("/v1/jobs/{second}")).await["status"],
        "waiting_human"
    );
}
