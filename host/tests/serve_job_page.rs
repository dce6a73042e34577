//! A job's page in a real headless Chromium, driven through chromedriver: reached from the
//! job's card in the inbox, it draws the piece with the current movement marked, the timeline
//! of a job that parked seven times (each park with how long it waited and who answered, tool
//! calls with their durations), the artifact under review and the worker; it follows the job
//! live to its end, and its worker link opens the worker's own page.

mod common;
mod serve_support;

use std::time::Instant;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};
use serve_support::browser::{Chromedriver, browser};
use serve_support::{STATE_WAIT, TOKEN, TestServer, commission_server};

/// Answers the wait the job shows for `reason` at `action` with `body` (plus the wait's id).
async fn answer(server: &TestServer, id: &str, reason: &str, action: &str, mut body: Value) {
    let job = server
        .wait_for(id, reason, |job| {
            job["waiting_reason"]["kind"] == reason && job["status"] == "waiting_human"
        })
        .await;
    body["wait"] = job["wait"]["id"].clone();
    let (status, answer) = server.post(&format!("/v1/jobs/{id}/{action}"), body).await;
    assert_eq!(status, 200, "{action}: {answer}");
}

/// Runs `script` in the page until it returns something other than null, or fails after
/// [`STATE_WAIT`] with what it last returned.
async fn until(page: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + STATE_WAIT;
    loop {
        let value = page.execute(script, Vec::new()).await.unwrap();
        if !value.is_null() {
            return value;
        }
        assert!(Instant::now() < deadline, "the page never showed {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// What the page shows of its timeline's parks and tool calls, and of its graph, as JSON.
const READ_PAGE: &str = r##"
const text = (n, css) => { const found = n.querySelector(css); return found ? found.textContent : null; };
return {
  status: document.getElementById("status").dataset.status,
  current: [...document.querySelectorAll("#graph svg g.node.movement.current")].map((n) => n.dataset.movement),
  movements: [...document.querySelectorAll("#graph svg g.node.movement")].map((n) => n.dataset.movement),
  entered: [...document.querySelectorAll("li.entry.movement")].map((n) => n.dataset.movement),
  parks: [...document.querySelectorAll("li.entry.park")].map((n) => ({
    wait: n.dataset.wait, reason: n.dataset.reason ?? null, open: n.classList.contains("open"),
    waited: text(n, ".waited"), by: n.dataset.answeredBy ?? null, answer: text(n, ".answer") })),
  tools: [...document.querySelectorAll("li.entry.tool")].map((n) => ({
    tool: n.dataset.tool, took: text(n, ".took"), answered: n.dataset.answered ?? null })),
  models: document.querySelectorAll("li.entry.model").length,
  artifacts: [...document.querySelectorAll("#artifacts tbody tr")].map((n) => ({
    id: n.dataset.artifact, status: text(n, ".artifact-status") })),
  children: [...document.querySelectorAll("#children li[data-child]")].map((n) => ({
    id: n.dataset.child, href: n.querySelector("a").getAttribute("href"), status: text(n, ".badge") })),
  finished: document.querySelectorAll("li.entry.finished").length,
};
"##;

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.as_str().unwrap())
        .collect()
}

/// A duration as the page writes one ("12 ms", "1.5 s", "2 min 3 s").
fn is_a_duration(text: &str) -> bool {
    let units = [" ms", " s", " min", " h"];
    units.iter().any(|unit| text.contains(unit))
        && text.chars().next().is_some_and(|c| c.is_ascii_digit())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_job_page_shows_the_graph_and_timeline_of_a_job_through_seven_parks() {
    let server = commission_server();
    let (status, job) = server
        .post("/v1/jobs", json!({ "input": "A report for the council." }))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    answer(
        &server,
        &id,
        "skill_selection",
        "choose",
        json!({ "piece": "commission" }),
    )
    .await;
    answer(
        &server,
        &id,
        "intake",
        "intake",
        json!({ "slots": { "topic": "Lisbon trams" } }),
    )
    .await;
    answer(&server, &id, "approve_step", "approve", json!({})).await;
    answer(
        &server,
        &id,
        "worker_questions",
        "answer",
        json!({ "text": "The city council" }),
    )
    .await;
    let waiting = server
        .wait_for(&id, "the draft under review", |job| {
            job["waiting_reason"]["kind"] == "review_artifact"
        })
        .await;
    let worker = waiting["children"][0]
        .as_str()
        .unwrap_or_else(|| panic!("the worker is a child: {waiting}"))
        .to_owned();
    let draft = waiting["waiting_reason"]["artifact_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let driver = Chromedriver::start();
    let page = browser(&driver).await;
    // Tall enough that the screenshot shows the whole page.
    page.set_window_size(1280, 2400).await.unwrap();
    page.goto(&server.url(&format!("/#token={TOKEN}")))
        .await
        .unwrap();
    // The inbox links the job's card to its page; the token goes along in the session.
    let link = page
        .wait()
        .at_most(STATE_WAIT)
        .for_element(Locator::Css(&format!(
            "article[data-job='{id}'] h2 a[href='/jobs/{id}']"
        )))
        .await
        .expect("the card links to the job's page");
    link.click().await.unwrap();
    let shown = until(
        &page,
        "the job with seven parks",
        &format!(
            "const parks = document.querySelectorAll('li.entry.park');\
             const svg = document.querySelector('#graph svg g.node.current');\
             const arts = document.querySelectorAll('#artifacts tbody tr');\
             const kids = document.querySelectorAll('#children li[data-child] .badge');\
             if (parks.length < 7 || !svg || !arts.length || !kids.length) return null;\
             {READ_PAGE}"
        ),
    )
    .await;
    let address = page.current_url().await.unwrap();
    assert_eq!(address.path(), format!("/jobs/{id}"));
    assert_eq!(shown["status"], "waiting_human", "{shown:#}");

    // The graph: the piece's movements, the one the job stands in marked.
    assert_eq!(strings(&shown["movements"]), ["commission", "cite"]);
    assert_eq!(strings(&shown["current"]), ["commission"]);
    assert_eq!(strings(&shown["entered"]), ["commission"]);

    // Seven parks: six answered, each with how long it waited and who answered (a human, or
    // the worker the job waits for); the seventh open.
    let parks = shown["parks"].as_array().unwrap();
    let reasons: Vec<Option<&str>> = parks.iter().map(|park| park["reason"].as_str()).collect();
    assert_eq!(
        reasons,
        [
            Some("skill_selection"),
            Some("intake"),
            Some("tool_request"),
            None,
            Some("worker_questions"),
            None,
            Some("review_artifact"),
        ],
        "{shown:#}"
    );
    for park in &parks[..6] {
        assert_eq!(park["open"], false, "{park}");
        let waited = park["waited"].as_str().unwrap();
        assert!(
            waited.starts_with("waited ") && is_a_duration(&waited["waited ".len()..]),
            "{park}"
        );
        let by = match park["reason"].is_null() {
            true => "its worker",
            false => "a human",
        };
        assert_eq!(park["by"], by, "{park}");
    }
    let answered = |park: usize, text: &str| {
        let answer = parks[park]["answer"].as_str().unwrap();
        assert!(answer.contains(text), "{answer} should say {text}");
    };
    answered(0, "chose the piece commission");
    answered(1, "topic = Lisbon trams");
    answered(2, "approved");
    answered(3, "asked “Who will read the report on the Lisbon trams?”");
    answered(4, "“The city council”");
    answered(5, &format!("handed in {draft}"));
    assert_eq!(parks[6]["open"], true);
    assert_eq!(parks[6]["waited"], "waiting…");
    assert_eq!(parks[6]["wait"], waiting["wait"]["id"].to_string());

    // The worker's tool call waits on its worker, so it has no duration yet.
    assert_eq!(
        shown["tools"],
        json!([{ "tool": "RunWorker", "took": "parked", "answered": null }])
    );
    assert!(shown["models"].as_u64().unwrap() >= 1);

    // The draft, under review, and the worker with its page.
    assert_eq!(
        shown["artifacts"],
        json!([{ "id": draft, "status": "under_review" }])
    );
    assert_eq!(
        shown["children"],
        json!([{ "id": worker, "href": format!("/jobs/{worker}"), "status": "waiting_human" }])
    );

    // Accepted through the API, the page follows the job to its end without a reload.
    answer(&server, &id, "review_artifact", "accept", json!({})).await;
    let done = until(
        &page,
        "the job completed",
        &format!(
            "if (document.getElementById('status').dataset.status !== 'completed' \
                 || !document.querySelector('li.entry.finished') \
                 || document.getElementById('connection').className !== 'ended') return null;\
             {READ_PAGE}"
        ),
    )
    .await;
    assert_eq!(strings(&done["current"]), ["cite"], "{done:#}");
    assert_eq!(strings(&done["entered"]), ["commission", "cite"]);
    assert_eq!(
        done["artifacts"],
        json!([{ "id": draft, "status": "accepted" }])
    );
    let parks = done["parks"].as_array().unwrap();
    assert!(parks.iter().all(|park| park["open"] == false), "{done:#}");
    assert!(
        parks[6]["answer"].as_str().unwrap().contains("accept"),
        "{}",
        parks[6]
    );
    // `complete` ran without a park: its entry says how long the call took.
    let tools = done["tools"].as_array().unwrap();
    let complete = tools.last().unwrap();
    assert_eq!(complete["tool"], "complete", "{done:#}");
    assert_eq!(complete["answered"], "ok");
    assert!(
        is_a_duration(complete["took"].as_str().unwrap()),
        "{complete}"
    );
    assert_eq!(done["finished"], 1);

    // Looked at: the screenshot of the finished job's page, kept for whoever runs the test.
    let png = page.screenshot().await.unwrap();
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("job-page.png");
    std::fs::write(&shot, &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", shot.display());
    // The graph is drawn at a readable size, not collapsed to nothing.
    let size = page
        .execute(
            "const box = document.querySelector('#graph svg').getBoundingClientRect();\
             return [box.width, box.height];",
            Vec::new(),
        )
        .await
        .unwrap();
    assert!(
        size[0].as_f64().unwrap() > 150.0 && size[1].as_f64().unwrap() > 150.0,
        "the graph is {size}"
    );

    // The worker's link opens its own page, which links back to its parent.
    page.find(Locator::Css(&format!("#children a[href='/jobs/{worker}']")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let parent = until(
        &page,
        "the worker's page",
        &format!(
            "const parent = document.querySelector('dd.parent a');\
             const tools = [...document.querySelectorAll('li.entry.tool')].map((n) => n.dataset.tool);\
             if (document.getElementById('job-id').textContent !== '{worker}' || !parent \
                 || !tools.includes('HandIn')) return null;\
             return parent.getAttribute('href');"
        ),
    )
    .await;
    assert_eq!(parent, format!("/jobs/{id}"));
    page.close().await.unwrap();
}
