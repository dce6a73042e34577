//! The hostile plugins: every misbehaviour is contained with an error that
//! names the limit or the denial, and the host keeps serving.

use std::sync::Arc;

use maestro::plugin::{
    CallError, CallRequest, Limit, LoadError, Outcome, Plugin, PluginPolicy, Policy, Runtime,
    RuntimeConfig, SpawnContext, SubtaskSpawner,
};
use maestro_e2e::site::Site;
use maestro_e2e::{
    artifacts, assert_tool_error, cache_dir, call, load, load_with_toml, output_json,
};
use serde_json::json;

/// The host still serves: the hostile plugin's harmless tool and another plugin both answer.
async fn still_serving(hostile: &Plugin) {
    let env = call(hostile, "read_env", json!({}))
        .await
        .expect("hostile plugin still answers");
    assert!(matches!(env, Outcome::Output(_)));
    let echo = load(artifacts::ECHO, PluginPolicy::default()).await;
    assert_eq!(
        call(&echo, "echo", json!({"text": "alive"})).await.unwrap(),
        Outcome::Output("alive".into())
    );
}

fn limit(result: Result<Outcome, CallError>) -> Limit {
    match result {
        Err(CallError::Limit(limit)) => limit,
        other => panic!("expected a limit error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_runs_in_a_fresh_instance_that_sees_nothing_an_earlier_call_left() {
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    for secret in ["first secret", "second secret", "third secret"] {
        let kept = output_json(
            &call(&hostile, "remember", json!({"text": secret}))
                .await
                .unwrap(),
        );
        assert_eq!(kept, json!({"calls": 1, "before": null}), "{secret}");
    }
    // The control: one instance kept across calls does show what the last call left, so the
    // tool would reveal a reused instance.
    let mut warm = hostile.warm_instance().await.unwrap();
    let first = warm
        .invoke("remember", r#"{"text":"first secret"}"#)
        .await
        .unwrap();
    assert_eq!(output_json(&first), json!({"calls": 1, "before": null}));
    let second = warm
        .invoke("remember", r#"{"text":"second secret"}"#)
        .await
        .unwrap();
    assert_eq!(
        output_json(&second),
        json!({"calls": 2, "before": "first secret"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_instance_reads_none_of_the_bytes_an_earlier_call_left_in_its_reused_memory() {
    // Calls one after another take the same slot of the pooling allocator, whose memory is
    // reset in place (kept resident): the reset is what stands between two calls.
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    let mark = json!({"mark": "left behind by an earlier call"});
    for round in 0..3 {
        let scanned = output_json(&call(&hostile, "scan_memory", mark.clone()).await.unwrap());
        assert_eq!(scanned["found"], 0, "round {round}: {scanned}");
    }
    // The control: in one instance kept across calls, the second call finds what the first
    // wrote, in the pages it grew and in its heap.
    let mut warm = hostile.warm_instance().await.unwrap();
    let arguments = mark.to_string();
    let first = output_json(&warm.invoke("scan_memory", &arguments).await.unwrap());
    assert_eq!(first["found"], 0, "{first}");
    let second = output_json(&warm.invoke("scan_memory", &arguments).await.unwrap());
    assert!(
        second["found"].as_u64().unwrap() > 8192,
        "the first call's pages and heap block are seen: {second}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn infinite_loop_hits_the_cpu_limit() {
    let hostile = load_with_toml(artifacts::HOSTILE, "[plugins.hostile]\ncpu_ms = 200\n").await;
    let started = std::time::Instant::now();
    let error = call(&hostile, "spin", json!({})).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "cpu limit exceeded: the plugin ran guest code for more than 200 ms"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn blocking_past_the_timeout_hits_the_wall_clock_limit() {
    // Long enough that `still_serving`'s call, under the same cap, fits on a loaded machine.
    let hostile =
        load_with_toml(artifacts::HOSTILE, "[plugins.hostile]\ntimeout_ms = 2000\n").await;
    let started = std::time::Instant::now();
    let limit = limit(call(&hostile, "sleep", json!({"ms": 60_000})).await);
    assert_eq!(limit.name(), "wall-clock");
    assert!(limit.to_string().contains("2000 ms"), "{limit}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_bomb_hits_the_memory_limit() {
    let hostile = load_with_toml(artifacts::HOSTILE, "[plugins.hostile]\nmemory_mib = 32\n").await;
    let limit = limit(call(&hostile, "alloc_bomb", json!({})).await);
    assert_eq!(
        limit,
        Limit::Memory {
            cap_bytes: 32 << 20
        }
    );
    assert!(limit.to_string().starts_with("memory limit exceeded"));
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_recursion_hits_the_stack_limit() {
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    assert_eq!(
        limit(call(&hostile, "recurse", json!({})).await),
        Limit::Stack
    );
    still_serving(&hostile).await;
    // Rust keeps large frames on a shadow stack in linear memory; overflowing
    // it runs off the bottom of memory, which the sandbox reports as a trap.
    match call(&hostile, "recurse", json!({"in_memory": true})).await {
        Err(CallError::Trap { message, .. }) => {
            assert!(message.contains("out of bounds memory access"), "{message}")
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn panic_is_a_trap_with_the_panic_message() {
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    match call(&hostile, "panic", json!({})).await {
        Err(CallError::Trap { message, console }) => {
            assert!(!message.is_empty());
            assert!(
                console.contains("hostile plugin panicked on purpose"),
                "{console}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_output_hits_the_output_limit() {
    let hostile = load_with_toml(
        artifacts::HOSTILE,
        "[plugins.hostile]\nmax_output_bytes = 1000000\n",
    )
    .await;
    let limit = limit(call(&hostile, "huge_output", json!({"bytes": 2_000_000})).await);
    assert_eq!(
        limit,
        Limit::Output {
            cap_bytes: 1_000_000,
            actual_bytes: 2_000_000
        }
    );
    let small = call(&hostile, "huge_output", json!({"bytes": 1000}))
        .await
        .unwrap();
    assert_eq!(small, Outcome::Output("x".repeat(1000)));
    still_serving(&hostile).await;
}

/// What WASI answers for a path outside every preopened directory, as wasi-libc prints it.
const NO_SUCH_FILE: &str = "No such file or directory (os error 44)";
/// What WASI answers for a path a grant does not allow (an escape, a write to a read-only one).
const NOT_PERMITTED: &str = "Operation not permitted (os error 63)";

/// The call failed in the guest's own file operation (`what`), with WASI's `errno`: the sandbox
/// refused it, not a bad argument or a crash.
#[track_caller]
fn refused_in_the_guests_file_call(result: Result<Outcome, CallError>, what: &str, errno: &str) {
    assert_eq!(
        result,
        Err(CallError::Tool {
            message: format!("{what}: {errno}"),
            retryable: false,
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn files_are_invisible_without_a_grant() {
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    for path in [
        "/etc/passwd",
        "etc/passwd",
        "../../etc/passwd",
        "/proc/self/environ",
    ] {
        let result = call(&hostile, "read_file", json!({"path": path})).await;
        refused_in_the_guests_file_call(result, &format!("open {path}"), NO_SUCH_FILE);
    }
    let write = call(
        &hostile,
        "write_file",
        json!({"path": "/tmp/owned", "content": "x"}),
    )
    .await;
    refused_in_the_guests_file_call(write, "write /tmp/owned", NO_SUCH_FILE);
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn granted_directories_are_read_only_unless_writable() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.txt"), "hello from the host").unwrap();
    let host = dir.path().display().to_string();
    let read_only = load_with_toml(
        artifacts::HOSTILE,
        &format!("[[plugins.hostile.dirs]]\nhost = {host:?}\nguest = \"/data\"\n"),
    )
    .await;
    let read = call(&read_only, "read_file", json!({"path": "/data/note.txt"}))
        .await
        .unwrap();
    assert_eq!(read, Outcome::Output("hello from the host".into()));
    let escape = call(
        &read_only,
        "read_file",
        json!({"path": "/data/../../etc/passwd"}),
    )
    .await;
    refused_in_the_guests_file_call(escape, "open /data/../../etc/passwd", NOT_PERMITTED);
    let write = call(
        &read_only,
        "write_file",
        json!({"path": "/data/new.txt", "content": "x"}),
    )
    .await;
    refused_in_the_guests_file_call(write, "write /data/new.txt", NOT_PERMITTED);
    assert!(!dir.path().join("new.txt").exists());

    let writable = load_with_toml(
        artifacts::HOSTILE,
        &format!("[[plugins.hostile.dirs]]\nhost = {host:?}\nguest = \"/data\"\nwritable = true\n"),
    )
    .await;
    call(
        &writable,
        "write_file",
        json!({"path": "/data/new.txt", "content": "written"}),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new.txt")).unwrap(),
        "written"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn environment_shows_only_granted_variables() {
    assert!(
        std::env::var_os("PATH").is_some(),
        "the host has an environment to leak"
    );
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    assert_eq!(
        output_json(&call(&hostile, "read_env", json!({})).await.unwrap()),
        json!({})
    );

    let granted = load_with_toml(
        artifacts::HOSTILE,
        "[plugins.hostile]\nenv = { GREETING = \"hi\" }\n",
    )
    .await;
    assert_eq!(
        output_json(&call(&granted, "read_env", json!({})).await.unwrap()),
        json!({"GREETING": "hi"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn http_to_a_host_off_the_allowlist_is_denied() {
    let site = Site::start().await;
    // Granted no HTTP: wasi:http is not even linked.
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    match call(&hostile, "http_get", json!({"url": site.url("/public")})).await {
        Err(CallError::Denied(message)) => assert!(message.contains("wasi:http"), "{message}"),
        other => panic!("expected a denial, got {other:?}"),
    }
    // Granted another host: the gate refuses the request.
    let elsewhere = load_with_toml(
        artifacts::HOSTILE,
        "[plugins.hostile]\nhttp_allow = [\"192.0.2.1:9\"]\n",
    )
    .await;
    assert_tool_error(
        call(&elsewhere, "http_get", json!({"url": site.url("/public")})).await,
        "HttpRequestDenied",
    );
    assert_eq!(site.hits(), 0);

    let allowed = load_with_toml(
        artifacts::HOSTILE,
        &format!(
            "[plugins.hostile]\nhttp_allow = [\"{}\"]\n",
            site.authority()
        ),
    )
    .await;
    let page = output_json(
        &call(&allowed, "http_get", json!({"url": site.url("/public")}))
            .await
            .unwrap(),
    );
    assert_eq!(page["status"], 200);
    assert_eq!(site.hits(), 1);
    still_serving(&hostile).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fuel_gives_a_deterministic_limit() {
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
        .load_file(artifacts::HOSTILE.as_ref(), policy.clone())
        .await
        .unwrap();
    let error = call(&hostile, "spin", json!({})).await.unwrap_err();
    assert_eq!(error, CallError::Limit(Limit::Fuel { budget: 5_000_000 }));
    let echo = runtime
        .load_file(artifacts::ECHO.as_ref(), policy)
        .await
        .unwrap();
    assert_eq!(
        call(&echo, "echo", json!({"text": "metered"}))
            .await
            .unwrap(),
        Outcome::Output("metered".into())
    );

    // A runtime without fuel metering refuses a policy that needs it.
    let err = maestro_e2e::runtime()
        .load_file(
            artifacts::ECHO.as_ref(),
            PluginPolicy {
                fuel: Some(1),
                ..PluginPolicy::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, LoadError::Policy(_)) && err.to_string().contains("fuel"),
        "{err}"
    );
}

struct RecordingSpawner;

impl SubtaskSpawner for RecordingSpawner {
    fn spawn(
        &self,
        parent: SpawnContext,
        piece: String,
        input: String,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + Send>> {
        Box::pin(async move {
            Ok(format!(
                "{}:{piece}:{input}:{}",
                parent.plugin, parent.job_id
            ))
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn spawn_subtask_needs_a_grant_and_a_job_host() {
    let args = json!({"piece": "research", "input": "topic"});
    let hostile = load(artifacts::HOSTILE, PluginPolicy::default()).await;
    assert_tool_error(
        call(&hostile, "spawn_subtask", args.clone()).await,
        "does not grant spawn_subtasks",
    );

    let granted = PluginPolicy {
        spawn_subtasks: true,
        ..PluginPolicy::default()
    };
    let no_jobs = load(artifacts::HOSTILE, granted.clone()).await;
    assert_tool_error(
        call(&no_jobs, "spawn_subtask", args.clone()).await,
        "runs no jobs",
    );

    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    runtime.set_subtask_spawner(Arc::new(RecordingSpawner));
    let plugin = runtime
        .load_file(artifacts::HOSTILE.as_ref(), granted)
        .await
        .unwrap();
    let mut request = CallRequest::new("spawn_subtask", args);
    request.job_id = "job-7".into();
    let spawned = plugin.invoke(request).await.unwrap();
    assert_eq!(
        spawned,
        Outcome::Output("hostile:research:topic:job-7".into())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_calls_in_parallel_do_not_disturb_honest_ones() {
    let hostile = Arc::new(
        load_with_toml(
            artifacts::HOSTILE,
            "[plugins.hostile]\ncpu_ms = 100\nmemory_mib = 16\n",
        )
        .await,
    );
    let echo = Arc::new(load(artifacts::ECHO, PluginPolicy::default()).await);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let hostile = hostile.clone();
        let tool = ["spin", "alloc_bomb", "panic"][i % 3];
        tasks.push(tokio::spawn(async move {
            call(&hostile, tool, json!({})).await.is_err()
        }));
    }
    for i in 0..50 {
        let echo = echo.clone();
        tasks.push(tokio::spawn(async move {
            call(&echo, "echo", json!({"text": format!("n{i}")})).await
                == Ok(Outcome::Output(format!("n{i}")))
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_past_the_instance_pool_are_refused_as_overloaded_not_crashed() {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache_dir()),
        max_instances: 2,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = Policy::parse(
        &format!(
            "[[plugins.hostile.dirs]]\nhost = {:?}\nguest = \"/data\"\nwritable = true\n",
            dir.path().display().to_string()
        ),
        "test-policy.toml",
    )
    .unwrap();
    let hostile = Arc::new(
        runtime
            .load_file(artifacts::HOSTILE.as_ref(), policy.for_plugin("hostile"))
            .await
            .unwrap(),
    );
    // Two calls hold the pool's two instances until the test lets them go.
    let holders: Vec<_> = (0..2)
        .map(|n| {
            let hostile = hostile.clone();
            tokio::spawn(async move {
                let started = format!("/data/started-{n}");
                call(
                    &hostile,
                    "hold",
                    json!({"started": started, "release": "/data/go"}),
                )
                .await
            })
        })
        .collect();
    let started = std::time::Instant::now();
    while !(0..2).all(|n| dir.path().join(format!("started-{n}")).exists()) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the two calls never ran at once"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let third = call(&hostile, "read_env", json!({})).await;
    assert!(
        matches!(&third, Err(error @ CallError::Overloaded(_)) if error.retryable()),
        "{third:?}"
    );

    std::fs::write(dir.path().join("go"), "").unwrap();
    for holder in holders {
        assert_eq!(
            holder.await.unwrap().unwrap(),
            Outcome::Output("released".into())
        );
    }
    assert!(matches!(
        call(&hostile, "read_env", json!({})).await,
        Ok(Outcome::Output(_))
    ));
}
