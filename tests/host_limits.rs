//! The policy's limits cover the host's own work for a call, not only the guest's linear
//! memory: host resources, `wasi:http` for a plugin granted no HTTP, random blocks, host calls
//! under a fuel budget, and everything a call hands back (errors and parks included).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use maestro::plugin::{
    CallError, Limit, MAX_SPAWNS_PER_CALL, Outcome, PluginPolicy, Policy, Runtime, RuntimeConfig,
    SpawnContext, SubtaskSpawner,
};
use maestro_e2e::{artifacts, assert_tool_error, cache_dir, call, load_with_toml, output_json};
use serde_json::json;

/// An allowlist entry that admits nothing the tests reach: enough to link `wasi:http`.
const SOME_HTTP: &str = "http_allow = [\"192.0.2.1:9\"]\n";

fn policy(lines: &str) -> String {
    format!("[plugins.hostile]\n{lines}")
}

#[tokio::test(flavor = "multi_thread")]
async fn header_blocks_kept_by_a_guest_stop_at_the_host_resource_cap() {
    // 16 MiB of guest memory: the cap is the minimum of 256 resources, about 16 MiB of host
    // memory for 60 KB header blocks. Without the cap the host grows by gigabytes until the
    // wall clock ends the call.
    let hostile = load_with_toml(
        artifacts::HOSTILE,
        &policy(&format!("memory_mib = 16\ntimeout_ms = 20000\n{SOME_HTTP}")),
    )
    .await;
    let started = Instant::now();
    let result = call(&hostile, "header_flood", json!({"keep": true})).await;
    assert_eq!(
        result,
        Err(CallError::Limit(Limit::HostResources { cap: 256 })),
        "after {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("more than 256 host resources"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wasi_http_is_not_linked_for_a_plugin_granted_no_http() {
    // The component imports wasi:http and still loads; the first call into it is refused,
    // before the host builds anything for it.
    let hostile = load_with_toml(artifacts::HOSTILE, &policy("timeout_ms = 20000\n")).await;
    assert!(
        hostile
            .imports()
            .iter()
            .any(|name| name.starts_with("wasi:http/")),
        "{:?}",
        hostile.imports()
    );
    let started = Instant::now();
    match call(&hostile, "header_flood", json!({"keep": true})).await {
        Err(CallError::Denied(message)) => {
            assert!(message.contains("fields.from-list"), "{message}");
            assert!(message.contains("http_allow is empty"), "{message}");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    // Everything else the plugin does still works.
    assert_eq!(
        call(&hostile, "huge_output", json!({"bytes": 3})).await,
        Ok(Outcome::Output("xxx".into()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_random_block_is_capped_before_the_host_allocates_it() {
    let hostile = load_with_toml(artifacts::HOSTILE, &policy("")).await;
    assert_eq!(
        call(&hostile, "random_bytes", json!({"bytes": 1 << 20})).await,
        Ok(Outcome::Output((1 << 20).to_string()))
    );
    match call(&hostile, "random_bytes", json!({"bytes": 16 << 20})).await {
        Err(CallError::Trap { message, .. }) => {
            assert!(message.contains("exceeds limit 1048576"), "{message}");
        }
        other => panic!("expected the host to refuse 16 MiB, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn host_work_counts_toward_the_cpu_limit() {
    // The guest does almost nothing itself: the time goes into building and reading header
    // blocks in the host.
    let hostile = load_with_toml(
        artifacts::HOSTILE,
        &policy(&format!("cpu_ms = 300\ntimeout_ms = 60000\n{SOME_HTTP}")),
    )
    .await;
    let started = Instant::now();
    let result = call(&hostile, "header_flood", json!({"keep": false})).await;
    assert_eq!(
        result,
        Err(CallError::Limit(Limit::Cpu {
            cap: Duration::from_millis(300)
        }))
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fuel_budget_charges_every_host_call() {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        fuel: true,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let policy = PluginPolicy {
        fuel: Some(5_000_000),
        ..PluginPolicy::default()
    };
    let hostile = runtime
        .load_file(artifacts::HOSTILE.as_ref(), policy)
        .await
        .unwrap();
    // A few host calls fit the budget ...
    assert_eq!(
        call(&hostile, "host_calls", json!({"count": 100})).await,
        Ok(Outcome::Output("made 100 host calls".into()))
    );
    // ... 100,000 cost 100 million units, though the guest's own loop needs far fewer.
    assert_eq!(
        call(&hostile, "host_calls", json!({"count": 100_000})).await,
        Err(CallError::Limit(Limit::Fuel { budget: 5_000_000 }))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_error_counts_against_the_output_cap() {
    let hostile = load_with_toml(artifacts::HOSTILE, &policy("max_output_bytes = 1000\n")).await;
    assert_eq!(
        call(&hostile, "huge_error", json!({"bytes": 2_000_000})).await,
        Err(CallError::Limit(Limit::Output {
            cap_bytes: 1000,
            actual_bytes: 2_000_000
        }))
    );
    assert_eq!(
        call(&hostile, "huge_error", json!({"bytes": 10})).await,
        Err(CallError::Tool {
            message: "x".repeat(10),
            retryable: false
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn list_elements_count_against_the_output_cap() {
    // 500 empty ids carry no text, but each is a string the host keeps.
    let hostile = load_with_toml(artifacts::HOSTILE, &policy("max_output_bytes = 1000\n")).await;
    let ids = vec![""; 500];
    match call(&hostile, "park_subtasks", json!({"job_ids": ids})).await {
        Err(CallError::Limit(Limit::Output { actual_bytes, .. })) => {
            assert_eq!(actual_bytes, 500 * maestro::plugin::LIST_ELEMENT_BYTES);
        }
        other => panic!("expected the output cap, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn parks_the_host_cannot_act_on_are_refused_at_the_boundary() {
    let hostile = load_with_toml(artifacts::HOSTILE, &policy("")).await;
    let refused = |result: Result<Outcome, CallError>, needle: &str| match result {
        Err(CallError::BadOutcome(message)) => {
            assert!(message.contains(needle), "{message} should say {needle:?}");
        }
        other => panic!("expected a bad outcome ({needle}), got {other:?}"),
    };
    let job_ids: Vec<String> = Vec::new();
    refused(
        call(&hostile, "park_subtasks", json!({ "job_ids": job_ids })).await,
        "the list of job ids is empty",
    );
    let many: Vec<String> = (0..300).map(|n| format!("job-{n}")).collect();
    refused(
        call(&hostile, "park_subtasks", json!({ "job_ids": many })).await,
        "300 job ids, more than the 256",
    );
    for url in [
        "javascript:alert(1)",
        "file:///etc/passwd",
        "https://a.example/\nx",
    ] {
        refused(
            call(&hostile, "park_login", json!({ "url": url })).await,
            "must be an http or https address",
        );
    }
    refused(
        call(
            &hostile,
            "park_tool_request",
            json!({"arguments": "not json"}),
        )
        .await,
        "must be a JSON object",
    );
    refused(
        call(&hostile, "park_tool_request", json!({"arguments": "[1]"})).await,
        "must be a JSON object",
    );
    // Well-formed parks pass.
    assert!(matches!(
        call(
            &hostile,
            "park_login",
            json!({"url": "https://a.example/login"})
        )
        .await,
        Ok(Outcome::Park(_))
    ));
    assert!(matches!(
        call(
            &hostile,
            "park_tool_request",
            json!({"arguments": "{\"text\":\"hi\"}"})
        )
        .await,
        Ok(Outcome::Park(_))
    ));
}

/// Starts nothing: answers every spawn with a made-up id.
struct NamingSpawner;

impl SubtaskSpawner for NamingSpawner {
    fn spawn(
        &self,
        parent: SpawnContext,
        _piece: String,
        _input: String,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send>> {
        Box::pin(async move { Ok(format!("job-{}", parent.index)) })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_call_starts_a_bounded_number_of_subtasks_with_bounded_inputs() {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    runtime.set_subtask_spawner(Arc::new(NamingSpawner));
    let policy = Policy::parse(
        "[plugins.hostile]\nspawn_subtasks = true\nmax_output_bytes = 1000\n",
        "policy.toml",
    )
    .unwrap();
    let hostile = runtime
        .load_file(artifacts::HOSTILE.as_ref(), policy.for_plugin("hostile"))
        .await
        .unwrap();
    let report = output_json(
        &call(
            &hostile,
            "spawn_many",
            serde_json::json!({"piece": "p", "count": 100}),
        )
        .await
        .unwrap(),
    );
    assert_eq!(report["started"], MAX_SPAWNS_PER_CALL);
    let refusal = report["refusal"].as_str().unwrap();
    assert!(refusal.contains("has started 64 subtasks"), "{refusal}");

    let big = "x".repeat(2000);
    assert_tool_error(
        call(
            &hostile,
            "spawn_subtask",
            serde_json::json!({"piece": "p", "input": big}),
        )
        .await,
        "the input has 2000 bytes, more than the 1000",
    );
    assert!(
        call(
            &hostile,
            "spawn_subtask",
            serde_json::json!({"piece": "p", "input": "small"})
        )
        .await
        .is_ok()
    );
}
