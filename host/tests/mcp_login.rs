//! A browser login over MCP: a piece called as a tool of `/mcp` runs a job whose BrowseWeb call
//! hits a login wall. The client is sent (a URL elicitation) to the job's card in the inbox of
//! `maestro serve`, which shows the site's login link and takes the session there: the session
//! never passes through the MCP client. To a 2025-11-25 client (the official Python SDK) the
//! link comes in the middle of the call, and the call ends with the job's result once the
//! session is given on the page in a real Chromium, the client told the link's login is done
//! (`notifications/elicitation/complete`); to a client of the tasks extension the task
//! asks for the link as `input_required`, is `working` once it is opened, and completes after
//! the login. A plugin's tool called over `/mcp` (not in a job) that hits the wall sends the
//! person to a login page of its own, which takes the session for that call alone: in the
//! middle of the call to a 2025-11-25 client, and as `input_required` to a 2026-07-28 client,
//! whose retry goes on with the session.

mod common;
mod serve_support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::McpSdk;
use fantoccini::Locator;
use serde_json::{Value, json};
use serve_support::browser::{Chromedriver, browser};
use serve_support::{SESSION, STATE_WAIT, TOKEN, TestServer, reading_server};

/// The job a link to its card names.
fn job_of_link(link: &str, server: &TestServer) -> String {
    link.strip_prefix(&server.url("/#job-"))
        .unwrap_or_else(|| panic!("not a link to a card of this server: {link}"))
        .to_owned()
}

/// Starts the Python client with `args` and reads the link it printed first (a URL
/// elicitation naming `private`, the page behind the login), leaving the rest of its output.
fn client_sent_to_a_link(
    args: &[&str],
    private: &str,
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStdout>>,
    String,
) {
    let mut client = McpSdk::Python
        .command(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let first = tokio::task::block_in_place(|| lines.next());
    let link: Value = serde_json::from_str(&first.unwrap().unwrap()).unwrap();
    assert_eq!(link["mode"], "url", "{link}");
    let message = link["message"].as_str().unwrap();
    assert!(message.contains(private), "{message}");
    let url = link["url"].as_str().unwrap().to_owned();
    (client, lines, url)
}

/// Gives the page open in `page` the API token, as a person does on a page of the server.
async fn give_token(page: &fantoccini::Client) {
    page.wait()
        .at_most(STATE_WAIT)
        .for_element(Locator::Css("#token-form input[name='token']"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    page.find(Locator::Css("#token-form button[type='submit']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// What the client printed last, once it ended well: what it saw (the session nowhere in
/// anything the client printed, the server's messages besides the result included).
fn client_saw(
    mut client: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    server: &TestServer,
) -> Value {
    let rest: Vec<String> = tokio::task::block_in_place(|| lines.map(Result::unwrap).collect());
    let exit = tokio::task::block_in_place(|| client.wait().unwrap());
    assert!(
        exit.success(),
        "the client failed: {rest:?}\n{}",
        server.log()
    );
    for said in &rest {
        assert!(
            !said.contains(SESSION),
            "the session passed the client: {said}"
        );
    }
    let seen: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert!(seen["messages"].is_array(), "what the server sent: {seen}");
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_login_in_the_middle_of_a_call_sends_the_client_to_the_jobs_card_which_takes_the_session()
{
    let (_site, server, private) = reading_server().await;
    let mcp = server.url("/mcp");
    let (client, lines, url) =
        client_sent_to_a_link(&["login-in-call", &mcp, TOKEN, "read"], &private);
    let job = job_of_link(&url, &server);
    let waiting = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(waiting["wait"]["reason"], "browser_login", "{waiting}");

    // The person opens the link, gives the page their API token, and logs in on the job's card.
    let driver = Chromedriver::start();
    let page = browser(&driver).await;
    page.goto(&url).await.unwrap();
    let wait = || page.wait().at_most(STATE_WAIT);
    give_token(&page).await;
    let card = wait()
        .for_element(Locator::Css(&format!("article.linked[data-job='{job}']")))
        .await
        .expect("the linked job's card, marked");
    let site_link = card.find(Locator::Css("a.login-url")).await.unwrap();
    assert_eq!(
        site_link.attr("href").await.unwrap().as_deref(),
        Some(private.as_str())
    );
    card.find(Locator::Css("input[name='session']"))
        .await
        .unwrap()
        .send_keys(SESSION)
        .await
        .unwrap();
    card.find(Locator::Css("button[data-action='login']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();

    // The call that sent the person there ends with the job's result.
    let seen = client_saw(client, lines, &server);
    assert_eq!(seen["protocol_version"], "2025-11-25");
    assert_eq!(seen["links"].as_array().unwrap().len(), 1, "{seen}");
    // Once the page took the session, the client hears that the link's login is done.
    let elicitation = &seen["links"][0]["elicitation_id"];
    assert!(elicitation.is_string(), "{seen}");
    assert_eq!(seen["completed"], json!([elicitation]), "{seen}");
    assert_eq!(
        seen["result"],
        json!({ "is_error": false, "text": "read it" }),
        "{seen}\n{}",
        server.log()
    );
    page.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_called_over_mcp_that_hits_a_login_wall_sends_the_person_to_a_page_that_takes_the_session()
 {
    let seen = plain_call_logged_in_on_its_page("login-plain").await;
    assert_eq!(seen["protocol_version"], "2025-11-25");
    // The client hears the login is done.
    let id = seen["links"][0]["elicitation_id"].clone();
    assert_eq!(seen["completed"], json!([id]), "{seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2026_client_gets_the_login_page_as_input_required_and_its_retry_goes_on_with_the_session()
 {
    let seen = plain_call_logged_in_on_its_page("login-rounds").await;
    assert_eq!(seen["protocol_version"], "2026-07-28");
    assert_eq!(seen["links"].as_array().unwrap().len(), 1, "{seen}");
}

/// The Python client's `scenario` calls BrowseWeb over `/mcp` on a page behind a login: it is
/// sent to the server's login page for that call, where a real Chromium gives the API token
/// and the session; the call goes on with it and reads the page, and the login cannot be given
/// twice. What the client saw.
async fn plain_call_logged_in_on_its_page(scenario: &str) -> Value {
    let (_site, server, private) = reading_server().await;
    let mcp = server.url("/mcp");
    let (client, lines, url) = client_sent_to_a_link(&[scenario, &mcp, TOKEN, &private], &private);
    let id = url
        .strip_prefix(&server.url("/logins/"))
        .unwrap_or_else(|| panic!("not a login page of this server: {url}"))
        .to_owned();
    let waiting = server.get(&format!("/v1/logins/{id}")).await;
    assert_eq!(waiting["tool"], "BrowseWeb", "{waiting}");

    // The person opens the link, gives the page their API token, logs in and pastes the session.
    let driver = Chromedriver::start();
    let page = browser(&driver).await;
    page.goto(&url).await.unwrap();
    let wait = || page.wait().at_most(STATE_WAIT);
    give_token(&page).await;
    let site_link = wait()
        .for_element(Locator::Css("#login:not([hidden]) a.login-url"))
        .await
        .expect("the site's login link");
    assert_eq!(
        site_link.attr("href").await.unwrap().as_deref(),
        Some(private.as_str())
    );
    page.find(Locator::Css("input[name='session']"))
        .await
        .unwrap()
        .send_keys(SESSION)
        .await
        .unwrap();
    page.find(Locator::Css("button[data-action='login']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait()
        .for_element(Locator::Css("#done:not([hidden])"))
        .await
        .expect("the page says the call took the session");

    // The call goes on with the session and reads the page.
    let seen = client_saw(client, lines, &server);
    assert_eq!(
        seen["result"]["is_error"],
        false,
        "{seen}\n{}",
        server.log()
    );
    let text = seen["result"]["text"].as_str().unwrap();
    assert!(text.contains("Balance: 1,234"), "{seen}");
    assert_eq!(seen["links"][0]["elicitation_id"], id.as_str(), "{seen}");
    // Done, the login is forgotten: its session cannot be given again.
    let (status, body) = server
        .post(&format!("/v1/logins/{id}"), json!({ "session": "again" }))
        .await;
    assert_eq!(status, 404, "{body}");
    page.close().await.unwrap();
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_asks_to_open_the_login_page_once_and_completes_when_the_session_is_given_there() {
    let (_site, server, private) = reading_server().await;
    let run = |args: &[&str]| server.mcp_client(McpSdk::Python, args);
    let mcp = server.url("/mcp");
    let seen = tokio::task::block_in_place(|| run(&["task-open", &mcp, TOKEN, "read"]));
    // The task asks the client to open the job's card: a URL elicitation, not a form.
    assert_eq!(seen["asked"]["status"], "input_required", "{seen}");
    let requests = seen["asked"]["inputRequests"].as_object().unwrap();
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["params"]["mode"], "url", "{request}");
    let message = request["params"]["message"].as_str().unwrap();
    assert!(message.contains(&private), "{message}");
    let url = request["params"]["url"].as_str().unwrap();
    let job = job_of_link(url, &server);
    // Opened, it asks no more: the task works while the login is done on the page.
    assert_eq!(seen["after"]["status"], "working", "{seen}");
    let status = seen["after"]["statusMessage"].as_str().unwrap();
    assert!(status.contains(url), "{status}");

    let waiting = server.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(key, &format!("wait-{}", waiting["wait"]["id"]));
    let (status, body) = server
        .post(
            &format!("/v1/jobs/{job}/login"),
            json!({ "session": SESSION, "wait": waiting["wait"]["id"] }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let task = seen["handle"]["taskId"].as_str().unwrap();
    let done = tokio::task::block_in_place(|| run(&["task-wait", &mcp, TOKEN, task]));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "read it");
}
