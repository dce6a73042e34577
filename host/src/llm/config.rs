//! PLACEHOLDER — replaced by the provider work in progress.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Model, RetryPolicy, ScriptedModel};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Scripted,
}

#[derive(Clone)]
pub struct ModelConfig {
    pub provider: Provider,
    pub model: String,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub stream: bool,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub script: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ModelConfigError(pub String);

impl ModelConfig {
    pub fn from_spec(spec: &str) -> Result<Self, ModelConfigError> {
        let (provider, rest) = spec
            .split_once(':')
            .ok_or_else(|| ModelConfigError(format!("bad model spec {spec}")))?;
        let provider = match provider {
            "scripted" => Provider::Scripted,
            "openai" => Provider::OpenAi,
            "anthropic" => Provider::Anthropic,
            other => return Err(ModelConfigError(format!("unknown provider {other}"))),
        };
        Ok(Self {
            provider,
            model: rest.to_owned(),
            base_url: None,
            api_key: None,
            stream: false,
            max_tokens: 4096,
            temperature: None,
            timeout: Duration::from_secs(120),
            retry: RetryPolicy::default(),
            script: (provider == Provider::Scripted).then(|| PathBuf::from(rest)),
        })
    }

    pub fn with_env(self, _env: impl Fn(&str) -> Option<String>) -> Self {
        self
    }

    pub fn build(&self) -> Result<Arc<dyn Model>, ModelConfigError> {
        match self.provider {
            Provider::Scripted => Ok(Arc::new(
                ScriptedModel::from_file(self.script.as_ref().unwrap())
                    .map_err(|e| ModelConfigError(e.to_string()))?,
            )),
            _ => Err(ModelConfigError("not yet".into())),
        }
    }
}
