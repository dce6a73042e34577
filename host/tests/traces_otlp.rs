//! A job's OpenTelemetry trace across processes: `maestro run` parks a chat job and exits,
//! `maestro jobs answer` resumes and ends it in another process, and a collector on loopback
//! receives, over OTLP/HTTP, one trace from the two: the job's root span, a run span from each
//! process under it, their movements, model requests and tool calls, and the park, as long as
//! the job waited. And an MCP client's trace context, sent in a call's `_meta` by the official
//! Python SDK, continued by `maestro mcp`; a piece's job started by such a call keeps a trace
//! of its own, whose root span links to the call.

mod cli_support;
mod common;
mod serve_support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use cli_support::{maestro, scripted_flags, text, with};

/// Every span the collector received.
type Received = Arc<Mutex<Vec<Span>>>;

/// An OTLP/HTTP collector of traces on a free loopback port, served by the runtime returned
/// with it for as long as that runtime is kept.
fn start_collector() -> (tokio::runtime::Runtime, SocketAddr, Received) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let received = Received::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(|State(received): State<Received>, body: Bytes| async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP request");
                let spans = request
                    .resource_spans
                    .into_iter()
                    .flat_map(|resource| resource.scope_spans)
                    .flat_map(|scope| scope.spans);
                received.lock().unwrap().extend(spans);
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }),
        )
        .with_state(received.clone());
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (runtime, addr, received)
}

/// `maestro ARGS --store STORE`, exporting its traces to `collector`.
fn traced(collector: SocketAddr, store: &str, args: &[&str]) -> Output {
    let output = common::maestro_command()
        .args(args)
        .arg("--store")
        .arg(store)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    output
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        AnyValue::BoolValue(flag) => Some(flag.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn lasted(span: &Span) -> Duration {
    Duration::from_nanos(span.end_time_unix_nano - span.start_time_unix_nano)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn a_job_parked_in_one_process_and_ended_in_another_is_one_trace() {
    let (_runtime, collector, received) = start_collector();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("jobs.db").display().to_string();
    let flags = scripted_flags("chat.yaml");

    let began = SystemTime::now();
    let run = traced(
        collector,
        &store,
        &with(&["run", "chat", "--input", "What should I pack?"], &flags),
    );
    assert!(
        text(&run).contains("parked: waiting_human (input)"),
        "{}",
        text(&run)
    );
    let id = text(&run)
        .split_whitespace()
        .find(|word| word.starts_with("job-"))
        .expect("the run names its job")
        .to_owned();
    // The job waits at least this long: from the first process's exit to the second's start.
    let parked_by = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let answered_after = parked_by.elapsed();
    let answer = traced(
        collector,
        &store,
        &with(&["jobs", "answer", &id, "Lisbon"], &flags),
    );
    assert!(
        text(&answer).contains("completed: Packing list ready"),
        "{}",
        text(&answer)
    );
    let ended = SystemTime::now();

    // Each process sent its spans before it exited.
    let spans = received.lock().unwrap().clone();
    assert!(
        !named(&spans, "job").is_empty(),
        "no job span in {spans:#?}"
    );

    let traces: HashSet<&Vec<u8>> = spans.iter().map(|span| &span.trace_id).collect();
    assert_eq!(traces.len(), 1, "one trace for the whole job");
    // Kept with the job: a run anywhere, any time later, joins the same trace.
    let trace_id = hex(&spans[0].trace_id);
    let show = maestro(&store, &["jobs", "show", &id, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(
        shown["trace_id"],
        trace_id.as_str(),
        "the job keeps its trace"
    );

    let jobs = named(&spans, "job");
    assert_eq!(jobs.len(), 1);
    let job = jobs[0];
    assert!(job.parent_span_id.is_empty(), "the job's span is the root");
    assert_eq!(
        attribute(job, "maestro.job.id").as_deref(),
        Some(id.as_str())
    );
    assert_eq!(
        attribute(job, "maestro.status").as_deref(),
        Some("completed")
    );
    assert!(job.start_time_unix_nano >= unix_nanos(began));
    assert!(job.end_time_unix_nano <= unix_nanos(ended));

    let runs = named(&spans, "run");
    assert_eq!(runs.len(), 2, "a run in each process");
    for run in &runs {
        assert_eq!(
            run.parent_span_id, job.span_id,
            "a run is a child of the job"
        );
        // The job began (kept to the millisecond) as its first run did.
        assert!(run.start_time_unix_nano >= job.start_time_unix_nano);
        assert!(run.end_time_unix_nano <= job.end_time_unix_nano);
    }
    let resumed: Vec<Option<String>> = runs
        .iter()
        .map(|run| attribute(run, "maestro.resumed"))
        .collect();
    assert!(resumed.contains(&Some("false".into())) && resumed.contains(&Some("true".into())));

    let parks = named(&spans, "park");
    assert_eq!(parks.len(), 1);
    let park = parks[0];
    assert_eq!(park.parent_span_id, job.span_id);
    assert_eq!(
        attribute(park, "maestro.wait.reason").as_deref(),
        Some("input")
    );
    assert!(
        lasted(park) >= answered_after,
        "the park lasted {:?}, the job waited at least {answered_after:?}",
        lasted(park)
    );
    let (first, second) = match runs[0].start_time_unix_nano < runs[1].start_time_unix_nano {
        true => (runs[0], runs[1]),
        false => (runs[1], runs[0]),
    };
    // It begins as the first run ends (kept to the millisecond) and ends before the second.
    let ms = Duration::from_millis(1).as_nanos() as u64;
    assert!(park.start_time_unix_nano <= first.end_time_unix_nano);
    assert!(park.start_time_unix_nano + ms >= first.end_time_unix_nano);
    assert!(park.end_time_unix_nano <= second.start_time_unix_nano);

    let run_ids: HashSet<&Vec<u8>> = runs.iter().map(|run| &run.span_id).collect();
    let movements = named(&spans, "movement");
    assert!(movements.len() >= 2, "{movements:#?}");
    for movement in &movements {
        assert!(
            run_ids.contains(&movement.parent_span_id),
            "a movement is a run's"
        );
        assert_eq!(
            attribute(movement, "maestro.movement").as_deref(),
            Some("chat")
        );
    }
    let movement_ids: HashSet<&Vec<u8>> = movements.iter().map(|m| &m.span_id).collect();
    let requests = named(&spans, "model.request");
    assert!(requests.len() >= 2);
    assert!(
        requests
            .iter()
            .all(|r| movement_ids.contains(&r.parent_span_id))
    );

    let calls = named(&spans, "tool.call");
    assert!(
        calls
            .iter()
            .all(|c| movement_ids.contains(&c.parent_span_id))
    );
    let outcomes: Vec<String> = calls
        .iter()
        .filter_map(|call| attribute(call, "maestro.outcome"))
        .collect();
    assert!(outcomes.contains(&"park:ask".to_owned()), "{outcomes:?}");
    assert!(
        outcomes.contains(&"terminal:complete".to_owned()),
        "{outcomes:?}"
    );
    for call in &calls {
        assert_eq!(
            attribute(call, "maestro.plugin").as_deref(),
            Some("complete")
        );
        let hash = attribute(call, "maestro.content_hash").unwrap_or_default();
        assert_eq!(hash.len(), 64, "the version that ran: {hash:?}");
    }
}

/// The client's span in `_meta`: trace `4bf9…4736`, span `00f0…02b7`, sampled.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[test]
fn an_mcp_clients_trace_context_makes_its_tool_call_a_child_of_the_clients_span() {
    let (_runtime, collector, received) = start_collector();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(maestro_plugins::ECHO, plugins.path().join("echo.wasm")).unwrap();
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");

    // The official Python SDK starts `maestro mcp`, which exports to the collector.
    let output = common::McpSdk::Python
        .command(&["traced"])
        .arg(env!("CARGO_BIN_EXE_maestro"))
        .arg(plugins.path())
        .arg(&traceparent)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["child"]["text"], "traced", "{seen}");
    assert_eq!(seen["alone"]["text"], "untraced", "{seen}");

    // maestro sends its spans as it exits, once the client closed its stdin.
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = received.lock().unwrap().clone();
        if named(&spans, "tools/call echo").len() == 2 && named(&spans, "tool.call").len() == 2 {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "two MCP calls and two tool calls in {spans:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };

    let calls = named(&spans, "tools/call echo");
    let (child, alone): (Vec<&Span>, Vec<&Span>) = calls
        .into_iter()
        .partition(|span| hex(&span.trace_id) == CLIENT_TRACE);
    assert_eq!(child.len(), 1, "one call continues the client's trace");
    let child = child[0];
    assert_eq!(
        hex(&child.parent_span_id),
        CLIENT_SPAN,
        "under the client's span"
    );
    assert_eq!(
        child.trace_state, "vendor=value",
        "with the client's tracestate"
    );
    assert_eq!(child.kind, 2, "a server span");
    assert_eq!(
        attribute(child, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attribute(child, "gen_ai.tool.name").as_deref(),
        Some("echo")
    );
    assert_eq!(
        attribute(child, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    // The call without `_meta` starts a trace of its own.
    assert!(alone[0].parent_span_id.is_empty(), "{:?}", alone[0]);
    assert_ne!(hex(&alone[0].trace_id), CLIENT_TRACE);

    // The sandboxed call is a child of the MCP call that made it, in either trace.
    for call in [child, alone[0]] {
        let tool_calls: Vec<&Span> = named(&spans, "tool.call")
            .into_iter()
            .filter(|span| span.parent_span_id == call.span_id)
            .collect();
        assert_eq!(tool_calls.len(), 1, "the tool call under {call:?}");
        assert_eq!(tool_calls[0].trace_id, call.trace_id);
    }
}

#[test]
fn a_job_an_mcp_call_starts_has_its_own_trace_whose_root_links_to_the_call() {
    let (_runtime, collector, received) = start_collector();
    let folder = serve_support::approval_folder(false);
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let output = common::McpSdk::Python
        .command(&["traced-piece"])
        .arg(env!("CARGO_BIN_EXE_maestro"))
        .arg(folder.path("plugins"))
        .arg(&traceparent)
        .args(["--jobs", "--config"])
        .arg(folder.path("maestro.toml"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["ran"]["text"], serve_support::APPROVED, "{seen}");

    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = received.lock().unwrap().clone();
        if !named(&spans, "tools/call approval").is_empty() && !named(&spans, "job").is_empty() {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "the MCP call and the job in {spans:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let call = named(&spans, "tools/call approval")[0];
    assert_eq!(
        hex(&call.trace_id),
        CLIENT_TRACE,
        "the call is in the client's trace"
    );
    let job = named(&spans, "job")[0];
    assert_eq!(attribute(job, "maestro.piece").as_deref(), Some("approval"));
    assert_ne!(
        job.trace_id, call.trace_id,
        "the job's trace is its own: it outlives the call"
    );
    assert!(job.parent_span_id.is_empty(), "{job:?}");
    let links: Vec<(String, String)> = job
        .links
        .iter()
        .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
        .collect();
    assert_eq!(
        links,
        vec![(CLIENT_TRACE.to_owned(), hex(&call.span_id))],
        "the job's root links to the call that started it"
    );
    // The runs are in the job's trace, under its root.
    let runs = named(&spans, "run");
    assert!(!runs.is_empty());
    for run in runs {
        assert_eq!(run.trace_id, job.trace_id);
        assert_eq!(run.parent_span_id, job.span_id);
    }
}
