//! Model specs, the environment, config files and the models they build.

use std::collections::HashMap;

use super::*;

/// An environment made of the given variables only.
fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn file_error(text: &str) -> String {
    ModelConfig::from_config_str(text, "maestro.toml", env(&[]))
        .unwrap_err()
        .to_string()
}

#[test]
fn specs_name_a_provider_and_a_model() {
    let openai = ModelConfig::from_spec("openai:gpt-4o-mini").unwrap();
    assert_eq!(
        (openai.provider, openai.model.as_str(), openai.base_url),
        (Provider::OpenAi, "gpt-4o-mini", None)
    );
    let anthropic = ModelConfig::from_spec("anthropic:claude-sonnet-4-5").unwrap();
    assert_eq!(anthropic.provider, Provider::Anthropic);
    // Only the first colon separates: Ollama tags have one of their own.
    let ollama = ModelConfig::from_spec("ollama:llama3.2:3b").unwrap();
    assert_eq!(ollama.provider, Provider::OpenAi);
    assert_eq!(ollama.model, "llama3.2:3b");
    assert_eq!(
        ollama.base_url.as_deref(),
        Some("http://127.0.0.1:11434/v1")
    );
    let scripted = ModelConfig::from_spec("scripted:demo/script.yaml").unwrap();
    assert_eq!(scripted.provider, Provider::Scripted);
    assert_eq!(scripted.script, Some(PathBuf::from("demo/script.yaml")));
    assert_eq!(openai.retry, RetryPolicy::default());
    assert!(!openai.stream && openai.api_key.is_none());
}

#[test]
fn bad_specs_say_what_is_wrong() {
    let error = |spec: &str| ModelConfig::from_spec(spec).unwrap_err().to_string();
    let text = error("gpt-4o");
    assert!(text.contains("expected <provider>:<model>"), "{text}");
    let text = error("mistral:large");
    assert!(
        text.contains("unknown provider `mistral`")
            && text.contains("openai, anthropic, ollama, scripted"),
        "{text}"
    );
    assert!(error("openai:").contains("no model name after `openai:`"));
    assert!(error("scripted: ").contains("no script path"));
}

#[test]
fn the_environment_fills_only_what_is_unset() {
    let vars = env(&[
        ("OPENAI_API_KEY", "sk-env"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1"),
        ("ANTHROPIC_API_KEY", "sk-ant-env"),
    ]);
    let openai = ModelConfig::from_spec("openai:m").unwrap().with_env(&vars);
    assert_eq!(openai.api_key.as_deref(), Some("sk-env"));
    assert_eq!(openai.base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));

    let mut configured = ModelConfig::from_spec("anthropic:m").unwrap();
    configured.api_key = Some("sk-ant-flag".into());
    let anthropic = configured.with_env(&vars);
    assert_eq!(anthropic.api_key.as_deref(), Some("sk-ant-flag"));
    assert_eq!(anthropic.base_url, None);

    let empty = env(&[("OPENAI_API_KEY", ""), ("OPENAI_BASE_URL", " ")]);
    let openai = ModelConfig::from_spec("openai:m").unwrap().with_env(empty);
    assert_eq!((openai.api_key, openai.base_url), (None, None));
}

#[test]
fn a_key_from_the_environment_is_not_sent_to_another_server() {
    let vars = env(&[("OPENAI_API_KEY", "sk-env")]);
    let ollama = ModelConfig::from_spec("ollama:llama3")
        .unwrap()
        .with_env(&vars);
    assert_eq!(ollama.api_key, None);
    assert_eq!(
        ollama.base_url.as_deref(),
        Some("http://127.0.0.1:11434/v1")
    );

    let mut own_api = ModelConfig::from_spec("openai:m").unwrap();
    own_api.base_url = Some("https://api.openai.com/v1/".into());
    assert_eq!(own_api.with_env(&vars).api_key.as_deref(), Some("sk-env"));
}

#[test]
fn debug_output_never_shows_the_key() {
    let mut config = ModelConfig::from_spec("openai:m").unwrap();
    config.api_key = Some("sk-very-secret".into());
    let shown = format!("{config:?} {config:#?}");
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(
        shown.contains("<redacted>") && shown.contains("max_tokens"),
        "{shown}"
    );
}

#[test]
fn the_providers_own_apis_need_a_key_and_say_where_to_put_it() {
    let error = |spec: &str| {
        ModelConfig::from_spec(spec)
            .unwrap()
            .build()
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        error("openai:gpt-4o"),
        "openai needs an API key: set OPENAI_API_KEY"
    );
    assert_eq!(
        error("anthropic:claude"),
        "anthropic needs an API key: set ANTHROPIC_API_KEY"
    );
    let mut proxied = ModelConfig::from_spec("anthropic:claude").unwrap();
    proxied.base_url = Some("http://127.0.0.1:9/".into());
    let text = proxied.build().unwrap_err().to_string();
    assert!(text.contains("api_key_env"), "{text}");
}

#[test]
fn models_are_built_for_every_provider() {
    let ollama = ModelConfig::from_spec("ollama:llama3")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(ollama.describe(), "openai:llama3@http://127.0.0.1:11434/v1");
    let mut openai = ModelConfig::from_spec("openai:gpt-4o").unwrap();
    openai.api_key = Some("sk".into());
    assert_eq!(openai.build().unwrap().describe(), "openai:gpt-4o");
    let mut anthropic = ModelConfig::from_spec("anthropic:claude").unwrap();
    anthropic.api_key = Some("sk".into());
    assert_eq!(anthropic.build().unwrap().describe(), "anthropic:claude");

    let directory = tempfile::tempdir().unwrap();
    let script = directory.path().join("script.yaml");
    std::fs::write(&script, "turns:\n  - text: hi\n").unwrap();
    let spec = format!("scripted:{}", script.display());
    let scripted = ModelConfig::from_spec(&spec).unwrap().build().unwrap();
    assert_eq!(scripted.describe(), spec);
    let missing = ModelConfig::from_spec("scripted:/nonexistent/script.yaml").unwrap();
    assert!(matches!(missing.build(), Err(ModelConfigError::Script(_))));
}

#[test]
fn settings_out_of_range_are_refused_when_building() {
    let mut config = ModelConfig::from_spec("ollama:m").unwrap();
    config.max_tokens = 0;
    assert_eq!(
        config.build().unwrap_err().to_string(),
        "model max_tokens: must be at least 1"
    );
    let mut config = ModelConfig::from_spec("ollama:m").unwrap();
    config.base_url = Some("ftp://example.test".into());
    let text = config.build().unwrap_err().to_string();
    assert!(text.contains("http:// or https://"), "{text}");
}

#[test]
fn a_config_file_sets_every_key_of_its_model_table() {
    let text = r#"
[server]
listen = "127.0.0.1:8080"

[model]
provider = "anthropic"
name = "claude-sonnet-4-5"
base_url = "http://127.0.0.1:9000"
api_key_env = "MY_KEY"
stream = true
max_tokens = 2000
temperature = 0
timeout_ms = 1500
max_attempts = 2
"#;
    let config =
        ModelConfig::from_config_str(text, "maestro.toml", env(&[("MY_KEY", "sk-file")])).unwrap();
    assert_eq!(config.provider, Provider::Anthropic);
    assert_eq!(config.model, "claude-sonnet-4-5");
    assert_eq!(config.base_url.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(config.api_key.as_deref(), Some("sk-file"));
    assert!(config.stream);
    assert_eq!(config.max_tokens, 2000);
    assert_eq!(config.temperature, Some(0.0));
    assert_eq!(config.timeout, Duration::from_millis(1500));
    assert_eq!(config.retry.max_attempts, 2);

    let ollama = ModelConfig::from_config_str(
        "[model]\nprovider = \"ollama\"\nname = \"qwen3\"\n",
        "m.toml",
        env(&[]),
    )
    .unwrap();
    assert_eq!(
        ollama.base_url.as_deref(),
        Some("http://127.0.0.1:11434/v1")
    );
    let scripted = ModelConfig::from_config_str(
        "[model]\nprovider = \"scripted\"\nname = \"s.yaml\"\n",
        "/etc/maestro/maestro.toml",
        env(&[]),
    )
    .unwrap();
    assert_eq!(scripted.script, Some(PathBuf::from("/etc/maestro/s.yaml")));
}

#[test]
fn config_file_errors_give_file_line_column_and_key() {
    let head = "[model]\nprovider = \"openai\"\nname = \"m\"\n";
    let text = file_error(&format!("{head}api_key = \"sk-oops\"\n"));
    assert!(
        text.starts_with("maestro.toml:4:1: model.api_key: unknown field `api_key`"),
        "{text}"
    );
    assert!(!text.contains("sk-oops"), "{text}");
    let text = file_error(&format!("{head}stream = \"yes\"\n"));
    assert!(
        text.starts_with("maestro.toml:4:10: model.stream: invalid type"),
        "{text}"
    );
    let text = file_error(&format!("{head}max_tokens = -1\n"));
    assert!(
        text.starts_with("maestro.toml:4:14: model.max_tokens: "),
        "{text}"
    );
    let text = file_error(&format!("{head}max_attempts = 0\n"));
    assert_eq!(
        text,
        "maestro.toml:4:16: model.max_attempts: must be at least 1 (the first attempt counts)"
    );
    let text = file_error(&format!("{head}api_key_env = \"UNSET_VAR\"\n"));
    assert_eq!(
        text,
        "maestro.toml:4:15: model.api_key_env: environment variable `UNSET_VAR` is not set"
    );
    let text = file_error("[model]\nprovider = \"mistral\"\nname = \"m\"\n");
    assert!(
        text.starts_with("maestro.toml:2:12: model.provider: unknown provider `mistral`"),
        "{text}"
    );
    let text = file_error("[model]\nname = \"m\"\n");
    assert!(text.contains("model: missing field `provider`"), "{text}");
    let text = file_error("[model]\nprovider = \"openai\"\nname = \n");
    assert!(text.starts_with("maestro.toml:3:"), "{text}");
    assert_eq!(file_error("[server]\n"), "maestro.toml: no [model] table");
    assert_eq!(
        file_error("model = 3\n"),
        "maestro.toml:1:9: model: must be a table"
    );
}

#[test]
fn a_missing_config_file_is_named() {
    let error = ModelConfig::from_config_file("/nonexistent/maestro.toml").unwrap_err();
    assert!(
        matches!(&error, ModelConfigError::Read { path, .. } if path == "/nonexistent/maestro.toml"),
        "{error}"
    );
}
