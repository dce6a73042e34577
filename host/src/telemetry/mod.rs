//! Metrics: every number the host exports, each named once here, and their Prometheus exporter;
//! and the OpenTelemetry traces of jobs (`traces`).
//!
//! Invariant: every layer records through the functions of this module, which go through the
//! `metrics` facade; until [`Exporter::install`] puts a recorder in place (`maestro serve`,
//! `maestro work --metrics`), a recording reaches a no-op recorder, so libraries, tests and
//! one-shot commands pay next to nothing. Every label value comes from a bounded set: names
//! of loaded plugins and their tools, content hashes, and fixed words for outcomes, reasons and
//! statuses; never a job id or free text.

mod calls;
mod traces;

pub use calls::{CallMetrics, ToolCalls, UNKNOWN_TOOL};
pub use traces::{JobTrace, SpanRef, Traces, continue_trace, tracing_on};

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// A tool call by plugin, tool, content hash and outcome.
pub const TOOL_CALLS: &str = "maestro_tool_calls_total";
/// How long a tool call took in the sandbox, instance and host calls included.
pub const TOOL_CALL_SECONDS: &str = "maestro_tool_call_duration_seconds";
/// A sandbox limit that stopped a call, by kind.
pub const LIMITS_HIT: &str = "maestro_limits_hit_total";
/// A plugin version loaded, reloaded or refused.
pub const PLUGIN_LOADS: &str = "maestro_plugin_loads_total";
/// Plugins serving calls now.
pub const PLUGINS_SERVING: &str = "maestro_plugins_serving";
/// A component compiled to native code, or taken from the compiled cache.
pub const COMPONENTS_PREPARED: &str = "maestro_components_prepared_total";
/// How long compiling a component took.
pub const COMPILE_SECONDS: &str = "maestro_compile_duration_seconds";
/// Jobs in the store by status, counted when scraped.
pub const JOBS: &str = "maestro_jobs";
/// A job a runner of this process ended, by status.
pub const JOBS_ENDED: &str = "maestro_jobs_ended_total";
/// A job parked, by reason.
pub const PARKS: &str = "maestro_parks_total";
/// A parked job resumed, by the reason it waited for.
pub const RESUMES: &str = "maestro_resumes_total";
/// From a park until a runner took its answer up.
pub const PARKED_SECONDS: &str = "maestro_parked_duration_seconds";
/// Waits that ran out and resumed their jobs with `expired`.
pub const WAIT_EXPIRIES: &str = "maestro_wait_expiries_total";
/// A job ended by one of the engine's guards, by guard.
pub const GUARD_ABORTS: &str = "maestro_guard_aborts_total";
/// Runners of this process, busy with a job or idle.
pub const RUNNERS: &str = "maestro_runners";
/// How long a runner's claim of the next job took.
pub const CLAIM_SECONDS: &str = "maestro_claim_duration_seconds";
/// A run's lease went to another runner.
pub const LEASES_LOST: &str = "maestro_lease_renewals_lost_total";
/// How long a store transaction took, from its start to its commit.
pub const COMMIT_SECONDS: &str = "maestro_store_commit_duration_seconds";
/// How many changes one store transaction committed.
pub const COMMIT_CHANGES: &str = "maestro_store_commit_changes";
/// A model request (one HTTP attempt), by provider and HTTP status or `transport`.
pub const MODEL_REQUESTS: &str = "maestro_model_requests_total";
/// Tokens a provider reported, by provider and direction (`in`, `out`).
pub const MODEL_TOKENS: &str = "maestro_model_tokens_total";
/// A model request tried again after a rate limit, a server error or a broken connection.
pub const MODEL_RETRIES: &str = "maestro_model_retries_total";

/// Bucket bounds in seconds, and for [`COMMIT_CHANGES`] in changes.
const FAST: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
const CALL: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const COMPILE: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const PARKED: &[f64] = &[
    0.1, 1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 14_400.0, 86_400.0, 604_800.0,
];
const BATCH: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// How often histogram samples are folded into their buckets between scrapes, so memory stays
/// bounded when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's one metrics recorder, rendered in Prometheus's text format.
#[derive(Clone)]
pub struct Exporter {
    handle: PrometheusHandle,
}

static INSTALLED: OnceLock<Result<Exporter, String>> = OnceLock::new();

impl Exporter {
    /// Installs the recorder for the whole process, the first time; later calls return the
    /// same exporter.
    pub fn install() -> Result<Exporter, String> {
        INSTALLED.get_or_init(Self::build).clone()
    }

    fn build() -> Result<Exporter, String> {
        let buckets = [
            (TOOL_CALL_SECONDS, CALL),
            (COMPILE_SECONDS, COMPILE),
            (PARKED_SECONDS, PARKED),
            (CLAIM_SECONDS, FAST),
            (COMMIT_SECONDS, FAST),
            (COMMIT_CHANGES, BATCH),
        ];
        let mut builder = PrometheusBuilder::new();
        for (name, bounds) in buckets {
            builder = builder
                .set_buckets_for_metric(Matcher::Full(name.to_owned()), bounds)
                .map_err(|error| format!("metric {name}: {error}"))?;
        }
        let handle = builder
            .install_recorder()
            .map_err(|error| format!("cannot install the metrics recorder: {error}"))?;
        describe();
        let upkeep = handle.clone();
        std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            })
            .map_err(|error| format!("cannot start the metrics upkeep thread: {error}"))?;
        Ok(Exporter { handle })
    }

    /// Every metric recorded so far, in Prometheus's text exposition format.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

fn describe() {
    describe_counter!(
        TOOL_CALLS,
        Unit::Count,
        "Tool calls by plugin, tool, content hash and outcome (output, park:<kind>, terminal:<kind>, error:<code>, limit:<kind>)."
    );
    describe_histogram!(
        TOOL_CALL_SECONDS,
        Unit::Seconds,
        "How long a tool call took, fresh instance and host calls included."
    );
    describe_counter!(
        LIMITS_HIT,
        Unit::Count,
        "Sandbox limits that stopped a call, by limit."
    );
    describe_counter!(
        PLUGIN_LOADS,
        Unit::Count,
        "Plugin versions loaded, reloaded or refused, by result."
    );
    describe_gauge!(PLUGINS_SERVING, Unit::Count, "Plugins serving calls.");
    describe_counter!(
        COMPONENTS_PREPARED,
        Unit::Count,
        "Components made ready to run, by where the native code came from (compiler, cache)."
    );
    describe_histogram!(
        COMPILE_SECONDS,
        Unit::Seconds,
        "How long compiling a component took."
    );
    describe_gauge!(
        JOBS,
        Unit::Count,
        "Jobs in the store by status, counted at the scrape (on a shared store: the whole cluster)."
    );
    describe_counter!(
        JOBS_ENDED,
        Unit::Count,
        "Jobs this process's runners ended, by status."
    );
    describe_counter!(PARKS, Unit::Count, "Parks by reason.");
    describe_counter!(
        RESUMES,
        Unit::Count,
        "Resumes by the reason the job waited for."
    );
    describe_histogram!(
        PARKED_SECONDS,
        Unit::Seconds,
        "Time from a park until a runner took its answer up, by reason."
    );
    describe_counter!(
        WAIT_EXPIRIES,
        Unit::Count,
        "Waits that ran out and resumed their jobs with `expired`."
    );
    describe_counter!(
        GUARD_ABORTS,
        Unit::Count,
        "Jobs ended by an engine guard, by guard."
    );
    describe_gauge!(
        RUNNERS,
        Unit::Count,
        "This process's runners, by state (busy, idle)."
    );
    describe_histogram!(
        CLAIM_SECONDS,
        Unit::Seconds,
        "How long claiming the next job took."
    );
    describe_counter!(
        LEASES_LOST,
        Unit::Count,
        "Runs whose lease went to another runner."
    );
    describe_histogram!(
        COMMIT_SECONDS,
        Unit::Seconds,
        "Store transactions, from start to commit, by store."
    );
    describe_histogram!(
        COMMIT_CHANGES,
        Unit::Count,
        "Changes committed by one store transaction, by store."
    );
    describe_counter!(
        MODEL_REQUESTS,
        Unit::Count,
        "Model requests (HTTP attempts) by provider and status."
    );
    describe_counter!(
        MODEL_TOKENS,
        Unit::Count,
        "Tokens the providers reported, by provider and direction (in, out)."
    );
    describe_counter!(
        MODEL_RETRIES,
        Unit::Count,
        "Model requests tried again, by provider."
    );
}

/// A plugin version was `loaded`, `reloaded` (a new version of a serving plugin) or `failed`.
pub fn plugin_load(result: &'static str) {
    counter!(PLUGIN_LOADS, "result" => result).increment(1);
}

pub fn plugins_serving(count: usize) {
    gauge!(PLUGINS_SERVING).set(count as f64);
}

/// A component's native code came `from` the compiler (taking `took`) or the cache.
pub fn component_prepared(from: &'static str, took: Option<Duration>) {
    counter!(COMPONENTS_PREPARED, "from" => from).increment(1);
    if let Some(took) = took {
        histogram!(COMPILE_SECONDS).record(took);
    }
}

pub fn jobs(status: &'static str, count: u64) {
    gauge!(JOBS, "status" => status).set(count as f64);
}

pub fn job_ended(status: &'static str) {
    counter!(JOBS_ENDED, "status" => status).increment(1);
}

pub fn parked(reason: &'static str) {
    counter!(PARKS, "reason" => reason).increment(1);
}

/// A job that parked for `reason` was resumed, `waited` after its park (when known).
pub fn resumed(reason: &'static str, waited: Option<Duration>) {
    counter!(RESUMES, "reason" => reason).increment(1);
    if let Some(waited) = waited {
        histogram!(PARKED_SECONDS, "reason" => reason).record(waited);
    }
}

pub fn waits_expired(count: usize) {
    counter!(WAIT_EXPIRIES).increment(count as u64);
}

pub fn guard_abort(guard: &'static str) {
    counter!(GUARD_ABORTS, "guard" => guard).increment(1);
}

pub fn runners(busy: usize, idle: usize) {
    gauge!(RUNNERS, "state" => "busy").set(busy as f64);
    gauge!(RUNNERS, "state" => "idle").set(idle as f64);
}

pub fn claimed(took: Duration) {
    histogram!(CLAIM_SECONDS).record(took);
}

pub fn lease_lost() {
    counter!(LEASES_LOST).increment(1);
}

/// A transaction of `store` (`sqlite`, `postgres`) committed `changes` changes in `took`.
pub fn committed(store: &'static str, changes: usize, took: Duration) {
    histogram!(COMMIT_SECONDS, "store" => store).record(took);
    histogram!(COMMIT_CHANGES, "store" => store).record(changes as f64);
}

/// One HTTP attempt at `provider` ended with `status` (an HTTP status code, or `transport`).
pub fn model_request(provider: &'static str, status: String) {
    counter!(MODEL_REQUESTS, "provider" => provider, "status" => status).increment(1);
}

pub fn model_retry(provider: &'static str) {
    counter!(MODEL_RETRIES, "provider" => provider).increment(1);
}

pub fn model_tokens(provider: &'static str, input: u64, output: u64) {
    counter!(MODEL_TOKENS, "provider" => provider, "direction" => "in").increment(input);
    counter!(MODEL_TOKENS, "provider" => provider, "direction" => "out").increment(output);
}
