//! The `maestro` command line.
//!
//! Invariant: `plugin` and `piece` print machine-readable JSON on stdout;
//! `run` and `jobs` print readable steps (JSON with `--json`); hints go to
//! stderr. Every command exits 0 (success, including a job that parked),
//! 1 (the call or the job ended in an error, abort or cancel) or 2 (bad
//! input: usage, config, policy, a piece or plugin that does not load).

mod config_file;
mod folder;
mod jobs;
mod mcp;
mod piece;
mod plugin;
mod run;
mod serve;
mod setup;
mod store;
mod work;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::plugin::{Runtime, RuntimeConfig};

#[derive(Debug, Parser)]
#[command(
    name = "maestro",
    version,
    about = "A host for agent engines whose tools are sandboxed WebAssembly components"
)]
pub struct Cli {
    /// Directory of the compiled-component cache [default: ~/.cache/maestro/compiled].
    #[arg(long, global = true, env = "MAESTRO_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every component afresh and cache nothing.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Instantiate each call's instance on the call's own path; by default each plugin's next
    /// instance is made between calls and waits for its call, fresh all the same.
    #[arg(long, global = true)]
    no_spare_instances: bool,
    /// More log output on stderr (-v info, -vv debug, -vvv trace); or set MAESTRO_LOG.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// How log lines are written on stderr: `text`, or `json` (one object per line, with the
    /// job, call, plugin and trace each line happened in).
    #[arg(long, global = true, env = "MAESTRO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load, inspect and call tool plugins (WebAssembly components).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Check pieces (YAML workflows of movements).
    #[command(subcommand)]
    Piece(piece::PieceCommand),
    /// Run one job of a piece in this process until it ends or parks.
    Run(run::RunCommand),
    /// List, show, answer, approve, deny and cancel the jobs of a store.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// Run the jobs of a store with concurrent runners (subtasks included).
    Work(work::WorkCommand),
    /// Serve the HTTP API, the approval inbox and live events, run the jobs, and hot-load the
    /// plugin folder.
    Serve(serve::ServeCommand),
    /// Manage the store itself: bring its schema up to date.
    #[command(subcommand)]
    Store(store::StoreCommand),
    /// Serve the tools of the plugin folder to an MCP client on stdin and stdout (with --jobs,
    /// the pieces too, as jobs of the store).
    Mcp(mcp::McpCommand),
}

/// Error of a command: the message is printed as `error: …`.
#[derive(Debug)]
pub struct Failure {
    pub code: ExitCode,
    pub message: Option<String>,
}

impl Failure {
    pub fn usage(message: impl std::fmt::Display) -> Self {
        Self {
            code: ExitCode::from(2),
            message: Some(message.to_string()),
        }
    }

    /// The command ran and could not finish, for this reason (exit code 1).
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self {
            code: ExitCode::from(1),
            message: Some(message.to_string()),
        }
    }

    /// The output already told what happened.
    pub fn reported(code: u8) -> Self {
        Self {
            code: ExitCode::from(code),
            message: None,
        }
    }
}

/// Runs the CLI with these arguments (the first is the program name).
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(tokio) => tokio,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(2);
        }
    };
    let traces = match init_tracing(cli.verbose, cli.log_format, tokio.handle().clone()) {
        Ok(traces) => traces,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let code = match tokio.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(message) = failure.message {
                eprintln!("error: {message}");
            }
            failure.code
        }
    };
    // While the runtime still runs: the last spans are sent on it.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    code
}

/// `text` with control characters (but newline and tab) and bidirectional overrides written as
/// `\u{…}` escapes: what a tool or a model wrote cannot move the cursor, recolour, retitle or
/// visually reorder the operator's terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            escaped.extend(c.escape_unicode());
        } else {
            escaped.push(c);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// Whether the policy the command will use gives any plugin a fuel budget: only then does the
/// runtime meter fuel, which costs every call a little. An unreadable policy says no here and
/// is reported where the command reads it.
fn policy_uses_fuel(command: &Command) -> bool {
    let engine = match command {
        Command::Run(command) => &command.engine,
        Command::Work(command) => &command.engine,
        Command::Serve(command) => &command.engine,
        Command::Mcp(command) => &command.engine,
        Command::Jobs(command) => match command.engine() {
            Some(engine) => engine,
            None => return false,
        },
        Command::Plugin(command) => {
            return command.policy().is_ok_and(|policy| policy.uses_fuel());
        }
        Command::Piece(_) | Command::Store(_) => return false,
    };
    setup::Setup::resolve(engine)
        .ok()
        .and_then(|setup| setup.policy.clone())
        .and_then(|file| crate::plugin::Policy::from_file(&file).ok())
        .is_some_and(|policy| policy.uses_fuel())
}

async fn execute(cli: Cli) -> Result<(), Failure> {
    let fuel = policy_uses_fuel(&cli.command);
    let runtime = || -> Result<Runtime, Failure> {
        let config = RuntimeConfig {
            fuel,
            spare_instances: !cli.no_spare_instances,
            cache_dir: if cli.no_cache {
                None
            } else {
                cli.cache_dir
                    .clone()
                    .or_else(crate::plugin::default_cache_dir)
            },
            ..RuntimeConfig::default()
        };
        Runtime::new(config)
            .map_err(|err| Failure::usage(format!("cannot start the plugin runtime: {err:#}")))
    };
    match &cli.command {
        Command::Plugin(command) => plugin::execute(command, runtime).await,
        Command::Piece(command) => piece::execute(command, runtime).await,
        Command::Run(command) => run::execute(command, runtime()?).await,
        Command::Jobs(command) => jobs::execute(command, runtime).await,
        Command::Work(command) => work::execute(command, runtime()?).await,
        Command::Serve(command) => serve::execute(command, runtime()?).await,
        Command::Store(command) => store::execute(command),
        Command::Mcp(command) => mcp::execute(command, runtime()?).await,
    }
}

/// Logs to stderr as `-v` or `MAESTRO_LOG` ask, in `format`; and the engine's spans to an OTLP
/// collector when the environment names one (see `telemetry::Traces`), whatever the log level.
fn init_tracing(
    verbose: u8,
    format: LogFormat,
    runtime: tokio::runtime::Handle,
) -> Result<Option<crate::telemetry::Traces>, String> {
    use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, Targets, filter_fn};
    use tracing_subscriber::prelude::*;
    let filter = match std::env::var("MAESTRO_LOG") {
        Ok(spec) => EnvFilter::new(spec),
        Err(_) => EnvFilter::new(match verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .with_filter(filter)
            .boxed(),
        // Each line names the job, call and plugin it happened in: the engine's spans are on
        // for this layer whatever the level of its lines.
        LogFormat::Json => {
            let ours = filter_fn(|meta| meta.is_span() && meta.target().starts_with("maestro"));
            tracing_subscriber::fmt::layer()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .with_filter(filter.or(ours))
                .boxed()
        }
    };
    let (traces, spans) = match crate::telemetry::Traces::from_env(runtime)? {
        Some((traces, layer)) => {
            let ours = Targets::new().with_target("maestro", LevelFilter::INFO);
            (Some(traces), Some(layer.with_filter(ours)))
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init();
    Ok(traces)
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn terminal_control_sequences_from_tools_are_printed_as_escapes() {
        assert_eq!(printable("plain\ttext\nline"), "plain\ttext\nline");
        assert_eq!(
            printable("\u{1b}]0;owned\u{7}\u{1b}[2Jok\r"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2Jok\\u{d}"
        );
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
    }
}
