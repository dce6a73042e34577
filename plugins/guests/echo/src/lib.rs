//! Test plugin with two tools: `echo`, the trivial tool the benchmarks call to
//! measure the host's own overhead (so it must stay minimal), and `log`, which
//! exercises the host's `log` import.

use maestro_guest_v0_1::serde_json::json;
use maestro_guest_v0_1::{Call, Guest, LogLevel, Outcome, ToolError, ToolSpec, parse_args, spec};
use serde::Deserialize;

struct Echo;

#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

#[derive(Deserialize)]
struct LogArgs {
    message: String,
    #[serde(default)]
    level: Option<Level>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl From<Level> for LogLevel {
    fn from(level: Level) -> Self {
        match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        }
    }
}

impl Guest for Echo {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec(
                "echo",
                "Returns `text` unchanged.",
                json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "The text to return."}
                    },
                    "required": ["text"],
                    "additionalProperties": false
                }),
            ),
            spec(
                "log",
                "Writes `message` to the host's log at `level` (default info) and returns \"logged\".",
                json!({
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "description": "The text to log."},
                        "level": {
                            "type": "string",
                            "enum": ["trace", "debug", "info", "warn", "error"],
                            "description": "Severity; info when omitted."
                        }
                    },
                    "required": ["message"],
                    "additionalProperties": false
                }),
            ),
        ]
    }

    fn invoke(call: Call) -> Result<Outcome, ToolError> {
        match call.tool.as_str() {
            "echo" => Ok(Outcome::Output(parse_args::<EchoArgs>(&call)?.text)),
            "log" => {
                let args: LogArgs = parse_args(&call)?;
                let level = args.level.unwrap_or(Level::Info);
                maestro_guest_v0_1::log(level.into(), &args.message);
                Ok(Outcome::Output("logged".to_owned()))
            }
            _ => Err(ToolError::unknown_tool(&call)),
        }
    }
}

maestro_guest_v0_1::export!(Echo);
