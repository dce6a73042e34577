//! A login over the API: a job that hits a login wall parks, `POST /v1/jobs/{id}/login` hands
//! over the session, the parked BrowseWeb call reads the page with it, and the session is in
//! no event the API shows.

mod common;
mod serve_support;

use serde_json::json;
use serve_support::{SESSION, has_ended, reading_server};

#[tokio::test(flavor = "multi_thread")]
async fn a_login_given_to_the_api_resumes_the_call_with_the_session_and_the_log_never_shows_it() {
    let (site, server, private) = reading_server().await;

    let id = server.start_job("read", "read the private page").await;
    let parked = server
        .wait_for(&id, "waiting", |job| job["status"] == "waiting_human")
        .await;
    assert_eq!(parked["wait"]["reason"], "browser_login", "{parked}");
    assert_eq!(parked["wait"]["request"]["url"], private, "{parked}");

    let (status, body) = server
        .post(
            &format!("/v1/jobs/{id}/login"),
            json!({ "session": SESSION, "wait": parked["wait"]["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let done = server.wait_for(&id, "ended", has_ended).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.log());

    let events = server
        .request(reqwest::Method::GET, &format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!events.contains(SESSION), "{events}");
    assert!(
        events.contains("Balance: 1,234"),
        "the page reached the model: {events}"
    );
    let with_cookie = site
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|request| {
            request
                .headers
                .get("cookie")
                .is_some_and(|cookie| cookie == SESSION)
        })
        .count();
    assert_eq!(with_cookie, 1, "the resumed call sent the session once");
}
