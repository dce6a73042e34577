//! The config file (TOML): its top level and its `[server]` table, read with errors that
//! name the file, line and key.
//!
//! Invariant: an unknown key is refused, and an error about a token never quotes what was
//! written (it may be a secret).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Failure;

/// The top level of the config file. The `[model]` table is read by [`ModelConfig`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    pub(super) plugins: Option<PathBuf>,
    pub(super) pieces: Option<PathBuf>,
    pub(super) policy: Option<PathBuf>,
    pub(super) store: Option<String>,
    pub(super) max_burst: Option<u32>,
    #[serde(default)]
    pub(super) model: Option<toml::Table>,
    #[serde(default)]
    pub(super) server: ServerSection,
}

/// The `[server]` table, read by `maestro serve`.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// `IP:port` [default: 127.0.0.1:7070].
    pub listen: Option<String>,
    /// Bearer tokens the API accepts, each with its scope; none: the server must listen on
    /// loopback.
    #[serde(default, deserialize_with = "secret_list")]
    pub tokens: Vec<TokenEntry>,
    pub runners: Option<usize>,
    pub lease_ms: Option<u64>,
    pub wait_expiry_ms: Option<u64>,
    pub watch_debounce_ms: Option<u64>,
    pub max_upload_mib: Option<usize>,
    /// Delete job trees that ended longer ago than this (`30d`, `12h`) [default: keep all].
    pub retain_finished: Option<String>,
    /// Event streams open at once [default: 256].
    pub max_event_streams: Option<usize>,
    /// Where every plugin version that ever served is kept by content hash
    /// [default: `plugin-versions` beside the store file].
    pub archive: Option<PathBuf>,
    /// The address people reach the server's pages at, for the links MCP clients are given
    /// [default: the address each request named, over `http://`].
    pub public_url: Option<String>,
}

impl std::fmt::Debug for ServerSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSection")
            .field("listen", &self.listen)
            .field("tokens", &format_args!("{} token(s)", self.tokens.len()))
            .field("runners", &self.runners)
            .field("lease_ms", &self.lease_ms)
            .field("wait_expiry_ms", &self.wait_expiry_ms)
            .field("watch_debounce_ms", &self.watch_debounce_ms)
            .field("max_upload_mib", &self.max_upload_mib)
            .field("retain_finished", &self.retain_finished)
            .field("max_event_streams", &self.max_event_streams)
            .field("archive", &self.archive)
            .field("public_url", &self.public_url)
            .finish()
    }
}

/// One entry of `server.tokens`: a token with every scope, or `{ token, scope }`.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub enum TokenEntry {
    Full(String),
    Scoped { token: String, scope: String },
}

impl TokenEntry {
    pub fn secret(&self) -> &str {
        match self {
            TokenEntry::Full(secret) | TokenEntry::Scoped { token: secret, .. } => secret,
        }
    }
}

/// A list of secrets whose errors never quote what was written: a token typed as a string
/// instead of a list is still a token.
fn secret_list<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<TokenEntry>, D::Error> {
    struct Secrets;
    impl<'de> serde::de::Visitor<'de> for Secrets {
        type Value = Vec<TokenEntry>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of tokens, e.g. [\"…\"] or [{ token = \"…\", scope = \"read\" }]")
        }

        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Err(E::custom(
                "must be a list of strings, e.g. tokens = [\"…\"], not a single string \
                 (its value is not shown: it may be a secret)",
            ))
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut secrets = Vec::new();
            while let Some(secret) = seq.next_element::<TokenEntry>()? {
                secrets.push(secret);
            }
            Ok(secrets)
        }
    }
    deserializer.deserialize_any(Secrets)
}

pub(super) fn read_config(path: &Path) -> Result<ConfigFile, Failure> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        Failure::usage(format!(
            "{}: cannot read config file: {err}",
            path.display()
        ))
    })?;
    let origin = path.display().to_string();
    toml::from_str(&text).map_err(|err| {
        let message = err.message().trim().to_owned();
        match err.span() {
            Some(span) => {
                let location = crate::plugin::locate(&text, &origin, span.start);
                match crate::plugin::key_at(&text, span.start) {
                    Some(key) => Failure::usage(format!("{location}: {key}: {message}")),
                    None => Failure::usage(format!("{location}: {message}")),
                }
            }
            None => Failure::usage(format!("{origin}: {message}")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_written_as_a_string_is_refused_without_quoting_it() {
        let text = "[server]\ntokens = \"s3cret-token-0123456789\"\n";
        let path = std::env::temp_dir().join(format!("maestro-config-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let Err(failure) = read_config(&path) else {
            panic!("a single string is refused");
        };
        std::fs::remove_file(&path).unwrap();
        let message = failure.message.unwrap();
        assert!(message.contains("server.tokens"), "{message}");
        assert!(message.contains("must be a list of strings"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");

        let listed: ConfigFile =
            toml::from_str("[server]\ntokens = [\"a\", { token = \"b\", scope = \"read\" }]\n")
                .unwrap();
        let secrets: Vec<&str> = listed
            .server
            .tokens
            .iter()
            .map(TokenEntry::secret)
            .collect();
        assert_eq!(secrets, ["a", "b"]);
    }
}
