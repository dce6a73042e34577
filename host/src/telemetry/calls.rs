//! The tool-call metrics of one plugin version, with their handles registered once.
//!
//! Invariant: a call records through handles registered at the first call of its tool with its
//! outcome, so the hot path neither builds nor hashes a label set; a tool name the plugin does
//! not offer is recorded as [`UNKNOWN_TOOL`], so a model that makes names up cannot grow the
//! series. Handles registered before [`super::Exporter::install`] never record: the commands
//! that export install it before they load a plugin.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{Counter, Histogram, SharedString, counter, histogram};

use super::{LIMITS_HIT, TOOL_CALL_SECONDS, TOOL_CALLS};

/// The `tool` label of a call to a name the plugin does not offer.
pub const UNKNOWN_TOOL: &str = "(unknown)";

/// What every call of one plugin version records.
pub struct CallMetrics {
    plugin: SharedString,
    content_hash: SharedString,
    tools: HashMap<String, ToolMetrics>,
    unknown: ToolMetrics,
}

struct ToolMetrics {
    tool: SharedString,
    duration: OnceLock<Histogram>,
    /// By outcome; a tool sees a handful, so a scan beats a map.
    outcomes: Mutex<Vec<(&'static str, Counter)>>,
}

impl ToolMetrics {
    fn new(tool: SharedString) -> Self {
        Self {
            tool,
            duration: OnceLock::new(),
            outcomes: Mutex::new(Vec::new()),
        }
    }
}

impl CallMetrics {
    pub fn new<'a>(
        plugin: &str,
        content_hash: &str,
        tools: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        Self {
            plugin: SharedString::from_shared(Arc::from(plugin)),
            content_hash: SharedString::from_shared(Arc::from(content_hash)),
            tools: tools
                .into_iter()
                .map(|tool| {
                    let label = SharedString::from_shared(Arc::from(tool));
                    (tool.to_owned(), ToolMetrics::new(label))
                })
                .collect(),
            unknown: ToolMetrics::new(SharedString::const_str(UNKNOWN_TOOL)),
        }
    }

    /// The metrics of calls to `tool`: its own if the plugin offers it, else the shared ones
    /// of [`UNKNOWN_TOOL`].
    pub fn tool(&self, tool: &str) -> ToolCalls<'_> {
        ToolCalls {
            plugin: self,
            tool: self.tools.get(tool).unwrap_or(&self.unknown),
        }
    }
}

/// The metrics of calls to one tool of one plugin version.
pub struct ToolCalls<'a> {
    plugin: &'a CallMetrics,
    tool: &'a ToolMetrics,
}

impl ToolCalls<'_> {
    /// A call ended with `outcome` (a fixed word, see [`TOOL_CALLS`]) after `took`; `limit`
    /// names the sandbox limit that stopped it, if one did.
    pub fn record(&self, outcome: &'static str, limit: Option<&'static str>, took: Duration) {
        let (plugin, tool) = (&self.plugin.plugin, &self.tool.tool);
        self.tool
            .duration
            .get_or_init(|| {
                histogram!(TOOL_CALL_SECONDS, "plugin" => plugin.clone(), "tool" => tool.clone())
            })
            .record(took);
        let mut outcomes = self
            .tool
            .outcomes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match outcomes.iter().find(|(known, _)| *known == outcome) {
            Some((_, calls)) => calls.increment(1),
            None => {
                let calls = counter!(TOOL_CALLS, "plugin" => plugin.clone(),
                    "tool" => tool.clone(),
                    "content_hash" => self.plugin.content_hash.clone(), "outcome" => outcome);
                calls.increment(1);
                outcomes.push((outcome, calls));
            }
        }
        drop(outcomes);
        if let Some(limit) = limit {
            counter!(LIMITS_HIT, "limit" => limit).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_the_plugin_does_not_offer_shares_one_series() {
        let calls = CallMetrics::new("p", "hash", ["echo"]);
        assert_eq!(calls.tools.len(), 1);
        for made_up in ["a", "b", "c"] {
            calls
                .tool(made_up)
                .record("error:unknown-tool", None, Duration::ZERO);
        }
        assert_eq!(calls.unknown.outcomes.lock().unwrap().len(), 1);
        assert!(calls.tools["echo"].outcomes.lock().unwrap().is_empty());
    }
}
