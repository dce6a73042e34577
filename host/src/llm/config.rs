//! Which model to talk to and how: from a command-line spec (`openai:gpt-4o-mini`), from the
//! `[model]` table of a TOML file, and from the environment.
//!
//! Invariant: an API key never leaves the process except in the header of a request to the
//! server it belongs to. It is never written in a file (the file names an environment variable
//! instead), never shown (`Debug` redacts it, no error quotes it), and a key found in the
//! environment is only paired with the server the environment or the provider names — never
//! sent to a base URL chosen elsewhere, such as Ollama's.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{AnthropicModel, Model, OpenAiModel, RetryPolicy, ScriptError, ScriptedModel};
use super::{anthropic, openai};

const KNOWN_PROVIDERS: &str = "openai, anthropic, ollama, scripted";
const OLLAMA_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// The wire format a model speaks (Ollama speaks OpenAI's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Scripted,
}

impl Provider {
    fn key_variables(self) -> Option<(&'static str, &'static str)> {
        match self {
            Provider::OpenAi => Some(("OPENAI_API_KEY", "OPENAI_BASE_URL")),
            Provider::Anthropic => Some(("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")),
            Provider::Scripted => None,
        }
    }

    fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some(openai::DEFAULT_BASE_URL),
            Provider::Anthropic => Some(anthropic::DEFAULT_BASE_URL),
            Provider::Scripted => None,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Scripted => "scripted",
        })
    }
}

/// Everything needed to build a [`Model`]. `Debug` shows whether a key is set, never the key.
#[derive(Clone)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The provider's model name; for `Scripted`, the script path as given.
    pub model: String,
    /// `None`: the provider's own API (`https://api.openai.com/v1`, `https://api.anthropic.com`).
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// Ask for a streamed answer (OpenAI-compatible servers only).
    pub stream: bool,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// Bounds connecting and each wait for data; a whole non-streamed answer too.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// The script of a `Scripted` model.
    pub script: Option<PathBuf>,
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("stream", &self.stream)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("script", &self.script)
            .finish()
    }
}

/// Why no model could be configured or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelConfigError {
    #[error("model `{spec}`: {reason}")]
    Spec { spec: String, reason: String },
    #[error("{provider} needs an API key: set {variable}{hint}")]
    MissingKey {
        provider: Provider,
        variable: &'static str,
        /// Why a set variable may not have been used, when that can be the case.
        hint: String,
    },
    #[error("{provider}: the API key cannot be sent in an HTTP header")]
    UnusableKey { provider: &'static str },
    #[error("{provider}: base URL `{url}`: {reason}")]
    BaseUrl {
        provider: &'static str,
        url: String,
        reason: String,
    },
    #[error("model {setting}: {reason}")]
    Setting {
        setting: &'static str,
        reason: String,
    },
    #[error("{provider}: cannot set up the HTTP client: {message}")]
    Client {
        provider: &'static str,
        message: String,
    },
    #[error("{path}: cannot read: {message}")]
    Read { path: String, message: String },
    #[error("{path}: no [model] table")]
    NoModelTable { path: String },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A `[model]` entry that is unknown, mistyped or out of range; `key` is `model.<key>`, or
    /// `model` for the table as a whole.
    #[error("{path}:{line}:{column}: {key}: {message}")]
    File {
        path: String,
        line: usize,
        column: usize,
        key: String,
        message: String,
    },
    #[error(transparent)]
    Script(#[from] ScriptError),
}

impl ModelConfigError {
    pub(super) fn client(provider: &'static str, error: &reqwest::Error) -> Self {
        ModelConfigError::Client {
            provider,
            message: error.to_string(),
        }
    }
}

impl ModelConfig {
    fn new(provider: Provider, model: &str, base_url: Option<&str>) -> Self {
        Self {
            provider,
            model: model.to_owned(),
            base_url: base_url.map(str::to_owned),
            api_key: None,
            stream: false,
            max_tokens: 4096,
            temperature: None,
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            script: (provider == Provider::Scripted).then(|| PathBuf::from(model)),
        }
    }

    /// `openai:<model>`, `anthropic:<model>`, `ollama:<model>` (OpenAI's wire format at
    /// `http://127.0.0.1:11434/v1`, no key) or `scripted:<path-to-script.yaml>`. Only the
    /// first colon separates: `ollama:llama3.2:3b` is model `llama3.2:3b`.
    pub fn from_spec(spec: &str) -> Result<Self, ModelConfigError> {
        let refuse = |reason: String| ModelConfigError::Spec {
            spec: spec.to_owned(),
            reason,
        };
        let Some((provider, model)) = spec.split_once(':') else {
            return Err(refuse(format!(
                "expected <provider>:<model>, e.g. openai:gpt-4o-mini (providers: \
                 {KNOWN_PROVIDERS})"
            )));
        };
        let (provider, model) = (provider.trim(), model.trim());
        let (kind, base_url) = known_provider(provider).ok_or_else(|| {
            refuse(format!(
                "unknown provider `{provider}` (known: {KNOWN_PROVIDERS})"
            ))
        })?;
        if model.is_empty() {
            let what = match kind {
                Provider::Scripted => "script path",
                _ => "model name",
            };
            return Err(refuse(format!("no {what} after `{provider}:`")));
        }
        Ok(Self::new(kind, model, base_url))
    }

    /// Fills what is still unset from `OPENAI_API_KEY` / `OPENAI_BASE_URL` or
    /// `ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL`, read through `env` (empty values count as
    /// unset). The key is taken only when the base URL is the provider's own or the one the
    /// environment names: a key is never sent to a server it was not meant for.
    pub fn with_env(mut self, env: impl Fn(&str) -> Option<String>) -> Self {
        let Some((key_variable, url_variable)) = self.provider.key_variables() else {
            return self;
        };
        let lookup = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let env_url = lookup(url_variable);
        let key_belongs_here = match &self.base_url {
            None => true,
            Some(url) => {
                same_url(url, self.provider.default_base_url().unwrap_or_default())
                    || env_url
                        .as_deref()
                        .is_some_and(|env_url| same_url(url, env_url))
            }
        };
        if self.base_url.is_none() {
            self.base_url = env_url;
        }
        if self.api_key.is_none() && key_belongs_here {
            self.api_key = lookup(key_variable);
        }
        self
    }

    /// The model this configuration describes. OpenAI's own API and Anthropic's need a key;
    /// a server at another base URL (Ollama, vLLM, llama.cpp) may do without.
    pub fn build(&self) -> Result<Arc<dyn Model>, ModelConfigError> {
        self.check_settings()?;
        match self.provider {
            Provider::Scripted => {
                let script = self
                    .script
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(&self.model));
                Ok(Arc::new(ScriptedModel::from_file(script)?))
            }
            Provider::OpenAi => {
                let own_api = self
                    .base_url
                    .as_deref()
                    .is_none_or(|url| same_url(url, openai::DEFAULT_BASE_URL));
                if own_api {
                    self.require_key()?;
                }
                Ok(Arc::new(OpenAiModel::from_config(self)?))
            }
            Provider::Anthropic => {
                self.require_key()?;
                Ok(Arc::new(AnthropicModel::from_config(self)?))
            }
        }
    }

    /// Reads the `[model]` table of a TOML file (other tables are left to their readers); a
    /// key named by `api_key_env` is read from the process environment.
    pub fn from_config_file(path: impl AsRef<Path>) -> Result<Self, ModelConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| ModelConfigError::Read {
            path: path.display().to_string(),
            message: error.to_string(),
        })?;
        Self::from_config_str(&text, path, |name| std::env::var(name).ok())
    }

    /// [`ModelConfig::from_config_file`] for a text already read; `origin` names the file in
    /// errors and anchors a relative script path, `env` looks up `api_key_env`.
    pub fn from_config_str(
        text: &str,
        origin: impl AsRef<Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ModelConfigError> {
        let file = ConfigText {
            text,
            origin: origin.as_ref(),
        };
        let document = toml::de::DeTable::parse(text).map_err(|error| file.syntax_error(&error))?;
        let Some(model_entry) = document.get_ref().get("model") else {
            return Err(ModelConfigError::NoModelTable { path: file.path() });
        };
        let Some(model_table) = model_entry.get_ref().as_table() else {
            return Err(file.error(model_entry.span(), "model", "must be a table"));
        };
        let table = toml::from_str::<ConfigFile>(text)
            .map_err(|error| {
                let span = error.span().unwrap_or_else(|| model_entry.span());
                // serde's error knows where, not which key: the parsed table maps one to the
                // other.
                let key = model_table
                    .iter()
                    .find(|(key, value)| {
                        contains(&key.span(), span.start) || contains(&value.span(), span.start)
                    })
                    .map(|(key, _)| format!("model.{}", key.get_ref()))
                    .unwrap_or_else(|| "model".to_owned());
                file.error(span, &key, error.message())
            })?
            .model;
        table.into_config(&file, env)
    }

    fn require_key(&self) -> Result<(), ModelConfigError> {
        if self.api_key.as_deref().is_some_and(|key| !key.is_empty()) {
            return Ok(());
        }
        let (variable, url_variable) = self.provider.key_variables().unwrap_or_default();
        let default_url = self.provider.default_base_url().unwrap_or_default();
        let hint = match &self.base_url {
            Some(url) if !same_url(url, default_url) => format!(
                " (a key from the environment is only sent to {default_url} or to \
                 {url_variable}; for {url}, name the key's variable with `api_key_env` in the \
                 [model] table)"
            ),
            _ => String::new(),
        };
        Err(ModelConfigError::MissingKey {
            provider: self.provider,
            variable,
            hint,
        })
    }

    fn check_settings(&self) -> Result<(), ModelConfigError> {
        let refuse = |setting, reason: &str| {
            Err(ModelConfigError::Setting {
                setting,
                reason: reason.to_owned(),
            })
        };
        if self.model.trim().is_empty() {
            return refuse("name", "is empty");
        }
        if self.max_tokens == 0 {
            return refuse("max_tokens", "must be at least 1");
        }
        if self.temperature.is_some_and(|t| !t.is_finite() || t < 0.0) {
            return refuse("temperature", "must be a number from 0 up");
        }
        if self.timeout.is_zero() {
            return refuse("timeout", "must be longer than zero");
        }
        Ok(())
    }
}

/// The provider of a spec or file, and the base URL it implies.
fn known_provider(name: &str) -> Option<(Provider, Option<&'static str>)> {
    match name {
        "openai" => Some((Provider::OpenAi, None)),
        "anthropic" => Some((Provider::Anthropic, None)),
        "ollama" => Some((Provider::OpenAi, Some(OLLAMA_BASE_URL))),
        "scripted" => Some((Provider::Scripted, None)),
        _ => None,
    }
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

fn contains(span: &Range<usize>, offset: usize) -> bool {
    span.contains(&offset) || (span.is_empty() && span.start == offset)
}

/// A config file's text and name, to turn byte offsets into `path:line:column` errors.
struct ConfigText<'a> {
    text: &'a str,
    origin: &'a Path,
}

impl ConfigText<'_> {
    /// An error about the entry `key` (`model.<key>`) at `span`.
    fn error(&self, span: Range<usize>, key: &str, message: &str) -> ModelConfigError {
        let (line, column) = self.line_column(span.start);
        ModelConfigError::File {
            path: self.path(),
            line,
            column,
            key: key.to_owned(),
            message: message.trim().to_owned(),
        }
    }

    fn syntax_error(&self, error: &toml::de::Error) -> ModelConfigError {
        let (line, column) = self.line_column(error.span().map_or(0, |span| span.start));
        ModelConfigError::Syntax {
            path: self.path(),
            line,
            column,
            message: error.message().trim().to_owned(),
        }
    }

    fn line_column(&self, offset: usize) -> (usize, usize) {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        (line, column)
    }

    fn path(&self) -> String {
        self.origin.display().to_string()
    }
}

/// Only the `[model]` table is read: the file is shared with the other parts of the host.
#[derive(Deserialize)]
struct ConfigFile {
    model: ModelTable,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelTable {
    provider: Spanned<String>,
    name: Spanned<String>,
    base_url: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    stream: Option<bool>,
    max_tokens: Option<Spanned<u32>>,
    temperature: Option<Spanned<f64>>,
    timeout_ms: Option<Spanned<u64>>,
    max_attempts: Option<Spanned<u32>>,
}

impl ModelTable {
    fn into_config(
        self,
        file: &ConfigText<'_>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ModelConfig, ModelConfigError> {
        let refuse = |span: Range<usize>, key: &str, message: String| {
            file.error(span, &format!("model.{key}"), &message)
        };
        let provider = self.provider.get_ref().trim();
        let (kind, implied_url) = known_provider(provider).ok_or_else(|| {
            refuse(
                self.provider.span(),
                "provider",
                format!("unknown provider `{provider}` (known: {KNOWN_PROVIDERS})"),
            )
        })?;
        let name = self.name.get_ref().trim();
        if name.is_empty() {
            return Err(refuse(self.name.span(), "name", "is empty".to_owned()));
        }
        let mut config = ModelConfig::new(kind, name, implied_url);
        if kind == Provider::Scripted {
            // A script path in a file means: next to that file.
            let directory = file.origin.parent().unwrap_or(Path::new(""));
            config.script = Some(directory.join(name));
        }
        if let Some(url) = self.base_url {
            let problem = match reqwest::Url::parse(url.get_ref()) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => None,
                Ok(_) => Some("must be an http:// or https:// URL".to_owned()),
                Err(error) => Some(error.to_string()),
            };
            if let Some(problem) = problem {
                return Err(refuse(url.span(), "base_url", problem));
            }
            config.base_url = Some(url.into_inner());
        }
        if let Some(variable) = self.api_key_env {
            let key = env(variable.get_ref()).filter(|key| !key.trim().is_empty());
            let Some(key) = key else {
                let message = format!("environment variable `{}` is not set", variable.get_ref());
                return Err(refuse(variable.span(), "api_key_env", message));
            };
            config.api_key = Some(key);
        }
        if let Some(stream) = self.stream {
            config.stream = stream;
        }
        if let Some(max_tokens) = self.max_tokens {
            if *max_tokens.get_ref() == 0 {
                return Err(refuse(
                    max_tokens.span(),
                    "max_tokens",
                    "must be at least 1".into(),
                ));
            }
            config.max_tokens = max_tokens.into_inner();
        }
        if let Some(temperature) = self.temperature {
            let value = *temperature.get_ref();
            if !value.is_finite() || value < 0.0 {
                let message = "must be a number from 0 up".to_owned();
                return Err(refuse(temperature.span(), "temperature", message));
            }
            config.temperature = Some(value as f32);
        }
        if let Some(timeout) = self.timeout_ms {
            if *timeout.get_ref() == 0 {
                return Err(refuse(
                    timeout.span(),
                    "timeout_ms",
                    "must be at least 1".into(),
                ));
            }
            config.timeout = Duration::from_millis(timeout.into_inner());
        }
        if let Some(attempts) = self.max_attempts {
            if *attempts.get_ref() == 0 {
                let message = "must be at least 1 (the first attempt counts)".to_owned();
                return Err(refuse(attempts.span(), "max_attempts", message));
            }
            config.retry.max_attempts = attempts.into_inner();
        }
        Ok(config)
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
