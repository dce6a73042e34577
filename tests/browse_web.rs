//! BrowseWeb against a web site on 127.0.0.1: a readable page, the login
//! wall (park browser-login → resume with the session → the page), and the
//! allowlist that gates every request.

use maestro::plugin::{
    CallError, CallRequest, LoginRequest, Outcome, Park, Plugin, Policy, Resume,
};
use maestro_e2e::site::{GOOD_SESSION, Site};
use maestro_e2e::{artifacts, assert_tool_error, load, load_with_toml, output_json};
use serde_json::json;

/// BrowseWeb on `url`, as a fresh call.
async fn browse(plugin: &Plugin, url: &str) -> Result<Outcome, CallError> {
    plugin
        .invoke(CallRequest::new("BrowseWeb", json!({"url": url})))
        .await
}

fn allowing(site: &Site) -> String {
    format!(
        "[plugins.browse_web]\nhttp_allow = [\"{}\"]\ntimeout_ms = 10000\n",
        site.authority()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_a_public_page() {
    let site = Site::start().await;
    let plugin = load_with_toml(artifacts::BROWSE_WEB, &allowing(&site)).await;
    let outcome = browse(&plugin, &site.url("/public")).await.unwrap();
    let page = output_json(&outcome);
    assert_eq!(page["status"], 200);
    assert_eq!(page["title"], "Quarterly & Annual Report");
    let text = page["text"].as_str().unwrap();
    assert!(text.contains("Revenue grew 12% this quarter."), "{text}");
    assert!(
        text.contains("First item") && text.contains("Second item"),
        "{text}"
    );
    assert!(
        !text.contains("do not show") && !text.contains("color: red"),
        "{text}"
    );
    assert_eq!(page["truncated"], false);

    let short = output_json(
        &plugin
            .invoke(CallRequest::new(
                "BrowseWeb",
                json!({"url": site.url("/public"), "max_chars": 10}),
            ))
            .await
            .unwrap(),
    );
    assert_eq!(short["truncated"], true);
    assert!(short["text"].as_str().unwrap().chars().count() <= 10);

    let plain = output_json(&browse(&plugin, &site.url("/plain")).await.unwrap());
    assert_eq!(plain["text"], "just text\nline two");
}

#[tokio::test(flavor = "multi_thread")]
async fn login_wall_parks_then_resumes_with_the_session() {
    let site = Site::start().await;
    let plugin = load_with_toml(artifacts::BROWSE_WEB, &allowing(&site)).await;
    let request = CallRequest::new("BrowseWeb", json!({"url": site.url("/private")}));

    let parked = plugin.invoke(request.clone()).await.unwrap();
    let Outcome::Park(Park::BrowserLogin(LoginRequest { url, reason })) = parked else {
        panic!("expected a browser-login park, got {parked:?}");
    };
    let private = site.url("/private");
    let login = site.url("/login?next=/private");
    assert_eq!(url, login);
    assert_eq!(
        reason,
        format!("Log in so that BrowseWeb can read {private}: {login} shows a login form.")
    );

    let page = output_json(
        &plugin
            .invoke(
                request
                    .clone()
                    .resumed(Resume::LoggedIn(GOOD_SESSION.into())),
            )
            .await
            .unwrap(),
    );
    assert_eq!(page["title"], "Private Dashboard");
    assert!(
        page["text"]
            .as_str()
            .unwrap()
            .contains("Secret numbers: 42")
    );

    let rejected = plugin
        .invoke(
            request
                .clone()
                .resumed(Resume::LoggedIn("sid=stale".into())),
        )
        .await
        .unwrap();
    assert_eq!(
        rejected,
        Outcome::Park(Park::BrowserLogin(LoginRequest {
            url: login.clone(),
            reason: format!(
                "The session from the last login was not accepted: {login} shows a login form. \
                 Log in again so that BrowseWeb can read {private}."
            ),
        }))
    );

    let expired = plugin
        .invoke(request.resumed(Resume::Expired))
        .await
        .unwrap_err();
    assert_eq!(
        expired,
        CallError::Tool {
            message: format!("no one logged in to read {private} before the wait expired"),
            retryable: false,
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn status_401_and_403_are_login_walls_and_500_is_retryable() {
    let site = Site::start().await;
    let plugin = load_with_toml(artifacts::BROWSE_WEB, &allowing(&site)).await;
    for (path, status) in [("/api", 401), ("/forbidden", 403)] {
        let url = site.url(path);
        let outcome = browse(&plugin, &url).await.unwrap();
        assert_eq!(
            outcome,
            Outcome::Park(Park::BrowserLogin(LoginRequest {
                url: url.clone(),
                reason: format!(
                    "Log in so that BrowseWeb can read {url}: {url} answered HTTP {status} \
                     and needs a logged-in session."
                ),
            })),
            "{path}"
        );
    }
    let api = CallRequest::new("BrowseWeb", json!({"url": site.url("/api")}));
    let data = output_json(
        &plugin
            .invoke(api.resumed(Resume::LoggedIn(GOOD_SESSION.into())))
            .await
            .unwrap(),
    );
    assert_eq!(data["text"], "api data: ok");

    let broken = browse(&plugin, &site.url("/broken")).await.unwrap_err();
    assert_eq!(
        broken,
        CallError::Tool {
            message: format!("{} answered HTTP 500", site.url("/broken")),
            retryable: true,
        }
    );

    let before = site.hits();
    let looping = browse(&plugin, &site.url("/loop")).await.unwrap_err();
    assert_eq!(
        looping,
        CallError::Tool {
            message: format!(
                "{}: gave up after 5 redirects (last to /loop)",
                site.url("/loop")
            ),
            retryable: false,
        }
    );
    assert_eq!(
        site.hits() - before,
        6,
        "the first request and five redirects"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_outside_the_allowlist_never_leave_the_host() {
    let site = Site::start().await;
    // Deny by default: no policy table at all, so wasi:http is not even linked.
    let plugin = load(
        artifacts::BROWSE_WEB,
        Policy::default().for_plugin("browse_web"),
    )
    .await;
    match browse(&plugin, &site.url("/public")).await {
        Err(CallError::Denied(message)) => assert!(message.contains("wasi:http"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }

    // Allowed port, other port: still denied.
    let other_port = "[plugins.browse_web]\nhttp_allow = [\"127.0.0.1:1\"]\n";
    let plugin = load_with_toml(artifacts::BROWSE_WEB, other_port).await;
    assert_tool_error(
        browse(&plugin, &site.url("/public")).await,
        "HttpRequestDenied",
    );

    // A name on the allowlist that resolves to loopback needs http_allow_private.
    let by_name = format!(
        "[plugins.browse_web]\nhttp_allow = [\"localhost:{}\"]\n",
        site.addr.port()
    );
    let plugin = load_with_toml(artifacts::BROWSE_WEB, &by_name).await;
    let url = format!("http://localhost:{}/public", site.addr.port());
    assert_tool_error(browse(&plugin, &url).await, "DestinationIpProhibited");
    assert_eq!(site.hits(), 0, "no denied request may reach the site");

    let private_ok = format!("{by_name}http_allow_private = true\n");
    let plugin = load_with_toml(artifacts::BROWSE_WEB, &private_ok).await;
    let page = output_json(&browse(&plugin, &url).await.unwrap());
    assert_eq!(page["status"], 200);
    assert_eq!(site.hits(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hosts_own_server_is_out_of_reach_whatever_the_allowlist() {
    let site = Site::start().await;
    // A runtime of its own: the address it forbids is this test's alone.
    let runtime = maestro::plugin::Runtime::new(maestro::plugin::RuntimeConfig {
        cache_dir: Some(maestro_e2e::cache_dir()),
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::parse(&allowing(&site), "test-policy.toml").unwrap();
    let plugin = runtime
        .load_file(
            std::path::Path::new(artifacts::BROWSE_WEB),
            policy.for_plugin("browse_web"),
        )
        .await
        .unwrap();
    assert!(browse(&plugin, &site.url("/public")).await.is_ok());
    // Once the site is where this host serves its API, no plugin reaches it.
    runtime.forbid_destination(site.authority().parse().unwrap());
    let hits = site.hits();
    let refused = browse(&plugin, &site.url("/public")).await;
    let message = assert_tool_error(refused, "");
    assert!(message.to_lowercase().contains("prohibited"), "{message}");
    assert_eq!(site.hits(), hits, "the request never left the host");
}
