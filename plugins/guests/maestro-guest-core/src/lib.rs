//! What maestro's guest SDKs share whatever contract version they bind: the
//! helpers written against a version's generated types ([`helpers!`]), and a
//! small blocking HTTP client over `wasi:http` (feature `http`).
//!
//! Invariant: nothing here generates bindings, so a component built with one
//! SDK carries that SDK's contract version and no other.

#[cfg(feature = "http")]
pub mod http;

pub use serde;
pub use serde_json;

/// The helpers every version's bindings get: argument parsing, specs,
/// outputs and tool errors, written against that version's types (both SDKs,
/// `maestro-guest` and `maestro-guest-v0-1`, use it). Expects `Call`, `ToolSpec`,
/// `Outcome`, `Resume`, `ToolError`, `LogLevel`, `host` and `resume_kind` in
/// scope.
#[doc(hidden)]
#[macro_export]
macro_rules! helpers {
    () => {
        /// Deserializes the call's `arguments` JSON into `T`.
        ///
        /// The host has already validated the arguments against the tool's
        /// schema, so a failure here means the schema and `T` disagree;
        /// retrying cannot help, hence a non-retryable error that names
        /// serde's complaint.
        pub fn parse_args<T: $crate::serde::de::DeserializeOwned>(
            call: &Call,
        ) -> Result<T, ToolError> {
            $crate::serde_json::from_str(&call.arguments).map_err(|err| {
                ToolError::permanent(format!("invalid arguments for {}: {err}", call.tool))
            })
        }

        /// Builds a [`ToolSpec`] whose `parameters` is `schema` serialized as JSON.
        pub fn spec(name: &str, description: &str, schema: $crate::serde_json::Value) -> ToolSpec {
            ToolSpec {
                name: name.to_owned(),
                description: description.to_owned(),
                parameters: schema.to_string(),
            }
        }

        /// An [`Outcome::Output`] carrying `value` as compact JSON.
        pub fn output_json(value: &$crate::serde_json::Value) -> Outcome {
            Outcome::Output(value.to_string())
        }

        impl Resume {
            /// Same as [`resume_kind`].
            pub fn kind(&self) -> &'static str {
                resume_kind(self)
            }
        }

        impl ToolError {
            /// A tool error with an explicit retry hint.
            pub fn new(message: impl Into<String>, retryable: bool) -> Self {
                ToolError {
                    message: message.into(),
                    retryable,
                }
            }

            /// An error that the same call will hit again (bad input, refused
            /// capability, a wait that expired...).
            pub fn permanent(message: impl Into<String>) -> Self {
                Self::new(message, false)
            }

            /// An error that may go away if the call is tried again later
            /// (rate limits, a server's 5xx...).
            pub fn transient(message: impl Into<String>) -> Self {
                Self::new(message, true)
            }

            /// The call named a tool this plugin does not offer. The host
            /// checks names against `describe`, so this only fires on a host
            /// bug or a `describe` that lost a tool.
            pub fn unknown_tool(call: &Call) -> Self {
                Self::permanent(format!("this plugin has no tool named {:?}", call.tool))
            }

            /// The call was resumed with a kind of resume its park cannot
            /// produce: `"<tool> cannot be resumed with <kind>"`.
            pub fn cannot_resume(tool: &str, resume: &Resume) -> Self {
                Self::permanent(format!(
                    "{tool} cannot be resumed with {}",
                    resume_kind(resume)
                ))
            }
        }

        /// Writes `message` to the host's log; a thin wrapper so plugins need
        /// not reach into the [`host`] module for the common case.
        pub fn log(level: LogLevel, message: &str) {
            host::log(level, message);
        }
    };
}
