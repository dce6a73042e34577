//! Traces: one OpenTelemetry trace per job, from its start through every park to its end,
//! exported over OTLP/HTTP when the standard `OTEL_EXPORTER_OTLP_*` variables name a collector.
//!
//! Invariant: a job's trace ids are kept with the job ([`JobTrace`]), so every run of it, in
//! any process and after any restart, joins the same trace under the same root span. Spans
//! that cover time no process was running for (a park, the whole job) are written when that
//! time is over and the save that ends it stood; so is the root, with the id its children
//! already name. Without an endpoint nothing is installed: spans are never enabled, and
//! [`JobTrace::begin`] keeps no ids with the job. A caller's own trace context (W3C Trace
//! Context, as an MCP client sends it in a request's `_meta`) is continued, never trusted for
//! more than being the parent of the span that serves the request ([`continue_trace`]); a job
//! that request starts keeps that span's ids only to link its root span to it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider, Tracer};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The name of the tracer, and the service name unless `OTEL_SERVICE_NAME` gives one.
const SERVICE: &str = "maestro";

static ON: AtomicBool = AtomicBool::new(false);
static TRACER: std::sync::OnceLock<Tracer> = std::sync::OnceLock::new();

/// Whether this process exports traces.
pub fn tracing_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The `tracing` layer that turns the engine's spans into OpenTelemetry spans.
pub type SpanLayer<S> = tracing_opentelemetry::OpenTelemetryLayer<S, Tracer>;

/// The exporter of this process's traces; [`Traces::shutdown`] sends what is left.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// The exporter the environment asks for, and the layer that feeds it spans; `None` when
    /// no `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, or
    /// `OTEL_SDK_DISABLED=true` / `OTEL_TRACES_EXPORTER=none`. `runtime` runs the requests.
    pub fn from_env<S>(
        runtime: tokio::runtime::Handle,
    ) -> Result<Option<(Self, SpanLayer<S>)>, String>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
        let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim() == "true")
            || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "none");
        if disabled
            || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        {
            return Ok(None);
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|error| format!("cannot build the OTLP client: {error}"))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OtlpClient { client, runtime });
        if !set("OTEL_EXPORTER_OTLP_PROTOCOL") && !set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            exporter = exporter.with_protocol(Protocol::HttpBinary);
        }
        let exporter = exporter
            .build()
            .map_err(|error| format!("OTEL_EXPORTER_OTLP_*: {error}"))?;
        let mut resource = Resource::builder();
        if !set("OTEL_SERVICE_NAME") {
            resource = resource.with_service_name(SERVICE);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .with_id_generator(ChosenIds::default())
            .build();
        let tracer = provider.tracer(SERVICE);
        let _ = TRACER.set(tracer.clone());
        ON.store(true, Ordering::Relaxed);
        let layer = tracing_opentelemetry::layer().with_tracer(tracer);
        Ok(Some((Self { provider }, layer)))
    }

    /// Sends the spans not sent yet and stops the exporter. Call it outside the runtime's
    /// threads, while the runtime still runs: the requests run on it.
    pub fn shutdown(self) {
        let _ = self.provider.force_flush();
        if let Err(error) = self.provider.shutdown() {
            eprintln!("warning: cannot send the last traces: {error}");
        }
    }
}

/// W3C Trace Context, as a caller sent it (`traceparent` and `tracestate`, which an MCP client
/// puts in a request's `_meta` where HTTP has headers).
struct CallerContext<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl opentelemetry::propagation::Extractor for CallerContext<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Makes `span` a child of the caller's span, in the caller's trace, when `traceparent` is a
/// valid W3C `traceparent` (an invalid one is ignored: the span starts a trace of its own, as
/// without one). Nothing when this process exports no traces.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    use opentelemetry::propagation::TextMapPropagator as _;
    if !tracing_on() || traceparent.is_none() {
        return;
    }
    let caller = CallerContext {
        traceparent,
        tracestate,
    };
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&caller);
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// A job's trace: its id, the id of the job's root span, and when the job began (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTrace {
    pub trace_id: String,
    pub span_id: String,
    pub started_ms: i64,
    /// The span of the request that started the job (an MCP client's call, in the client's
    /// trace), which the job's root span links to: the job's trace is its own, as long as it
    /// lasts, and the caller's trace leads to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<SpanRef>,
}

/// A span of another trace, by its ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanRef {
    pub trace_id: String,
    pub span_id: String,
}

impl JobTrace {
    /// New ids for a job that begins at `now_ms`, if this process exports traces.
    pub fn begin(now_ms: i64) -> Option<Self> {
        if !tracing_on() {
            return None;
        }
        let ids = RandomIdGenerator::default();
        Some(Self {
            trace_id: ids.new_trace_id().to_string(),
            span_id: ids.new_span_id().to_string(),
            started_ms: now_ms,
            started_by: None,
        })
    }

    /// New ids for a job that the request served by the current span starts at `now_ms`, if
    /// this process exports traces: the job's root span will link to that span.
    pub fn begin_from_current_span(now_ms: i64) -> Option<Self> {
        let mut trace = Self::begin(now_ms)?;
        let current = tracing::Span::current().context();
        let caller = current.span().span_context().clone();
        if caller.is_valid() {
            trace.started_by = Some(SpanRef {
                trace_id: caller.trace_id().to_string(),
                span_id: caller.span_id().to_string(),
            });
        }
        Some(trace)
    }

    fn ids(&self) -> Option<(TraceId, SpanId)> {
        let trace = TraceId::from_hex(&self.trace_id).ok()?;
        let span = SpanId::from_hex(&self.span_id).ok()?;
        Some((trace, span))
    }

    /// The job's root span as a remote parent.
    fn parent(&self) -> Option<Context> {
        let (trace, span) = self.ids()?;
        let root = SpanContext::new(trace, span, TraceFlags::SAMPLED, true, TraceState::NONE);
        Some(Context::new().with_remote_span_context(root))
    }

    /// Makes `span` (a run of the job) a child of the job's root span, naming the trace.
    pub fn join(&self, span: &tracing::Span) {
        if let Some(parent) = self.parent() {
            let _ = span.set_parent(parent);
        }
        span.record("maestro.trace_id", self.trace_id.as_str());
    }

    /// The span of a park: from `parked_ms` (Unix ms, as kept with the job) until its answer
    /// was taken up at `resumed`.
    pub fn park(
        &self,
        wait: u64,
        reason: &'static str,
        answer: &'static str,
        parked_ms: i64,
        resumed: SystemTime,
    ) {
        let attributes = vec![
            KeyValue::new("maestro.wait.id", wait as i64),
            KeyValue::new("maestro.wait.reason", reason),
            KeyValue::new("maestro.answer", answer),
        ];
        self.write("park", None, unix_ms(parked_ms), resumed, attributes, None);
    }

    /// The job's root span, once its end is saved; linked to the span that started the job.
    pub fn end(&self, job: &str, piece: &str, status: &'static str, ended: SystemTime) {
        let attributes = vec![
            KeyValue::new("maestro.job.id", job.to_owned()),
            KeyValue::new("maestro.piece", piece.to_owned()),
            KeyValue::new("maestro.status", status),
        ];
        let root = self.ids().map(|(_, span)| span);
        let links = self.started_by.as_ref().and_then(SpanRef::link);
        let start = unix_ms(self.started_ms);
        self.write("job", root, start, ended, attributes, links);
    }

    /// Writes a span over time already past: the root (`as_root` its id) or a child of it.
    fn write(
        &self,
        name: &'static str,
        as_root: Option<SpanId>,
        start: SystemTime,
        end: SystemTime,
        attributes: Vec<KeyValue>,
        link: Option<Link>,
    ) {
        let (Some(tracer), Some((trace, _))) = (TRACER.get(), self.ids()) else {
            return;
        };
        let parent = match as_root {
            Some(_) => Context::new(),
            None => match self.parent() {
                Some(parent) => parent,
                None => return,
            },
        };
        // The SDK takes ids only from its generator: the next ones it asks for are these.
        if let Some(id) = as_root {
            CHOSEN.with(|chosen| chosen.set(Some((trace, id))));
        }
        let mut span = tracer
            .span_builder(name)
            .with_start_time(start)
            .with_attributes(attributes)
            .with_links(link.into_iter().collect())
            .start_with_context(tracer, &parent);
        CHOSEN.with(|chosen| chosen.set(None));
        span.end_with_timestamp(end.max(start));
    }
}

impl SpanRef {
    /// A link to this span; `None` if its ids do not read as ids.
    fn link(&self) -> Option<Link> {
        let trace = TraceId::from_hex(&self.trace_id).ok()?;
        let span = SpanId::from_hex(&self.span_id).ok()?;
        let context = SpanContext::new(trace, span, TraceFlags::SAMPLED, true, TraceState::NONE);
        Some(Link::with_context(context))
    }
}

fn unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

thread_local! {
    /// The ids the next root span started on this thread takes.
    static CHOSEN: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, but for a root span written with ids chosen before (see `JobTrace::write`,
/// which clears them once the span started).
#[derive(Debug, Default)]
struct ChosenIds(RandomIdGenerator);

impl IdGenerator for ChosenIds {
    fn new_trace_id(&self) -> TraceId {
        match CHOSEN.with(Cell::get) {
            Some((trace, _)) => trace,
            None => self.0.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match CHOSEN.with(Cell::get) {
            Some((_, span)) => span,
            None => self.0.new_span_id(),
        }
    }
}

/// OTLP requests sent with the host's own HTTP client on its runtime: the exporter's batch
/// thread has no reactor of its own.
#[derive(Debug, Clone)]
struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for OtlpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let response = client.execute(request).await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let mut answer = http::Response::builder()
                .status(status)
                .body(response.bytes().await?)?;
            *answer.headers_mut() = headers;
            Ok::<_, opentelemetry_http::HttpError>(answer)
        });
        sent.await
            .map_err(|error| Box::new(error) as opentelemetry_http::HttpError)?
    }
}
