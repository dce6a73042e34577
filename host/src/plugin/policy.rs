//! The operator's sandbox policy: a TOML file with a `[defaults]` table and
//! one `[plugins.<name>]` table per plugin.
//!
//! Invariant: deny by default. A plugin with no table, or a table without a
//! key, gets the built-in value of `PluginPolicy::default()`, which grants no
//! files, no network, no environment and no subtasks. The whole file is
//! validated when it is read; every error names the file, line, column and
//! key, so a policy that loads is a policy that applies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::http::{HostPattern, HttpPolicy};

/// Largest memory a policy may grant; the pooling allocator reserves this much
/// address space per memory slot.
pub const MAX_MEMORY_MIB: u64 = 4096;

/// The sandbox of one plugin, compiled from the policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginPolicy {
    /// Linear memory, summed over the component's memories.
    pub memory_bytes: u64,
    /// Time spent running guest code, measured in epoch ticks.
    pub cpu: Duration,
    /// Deterministic instruction budget; `None` for no fuel limit.
    pub fuel: Option<u64>,
    /// Wall-clock time of one call, including time blocked in the host.
    pub timeout: Duration,
    /// Bytes of text an outcome may carry.
    pub max_output_bytes: usize,
    /// Bytes of `host.log` messages (and captured stderr) kept per call.
    pub max_log_bytes: usize,
    /// Environment variables the guest sees; nothing is inherited.
    pub env: Vec<(String, String)>,
    /// Host directories preopened in the guest.
    pub dirs: Vec<DirGrant>,
    /// Outgoing `wasi:http` requests.
    pub http: HttpPolicy,
    /// May call `host.spawn-subtask`.
    pub spawn_subtasks: bool,
    /// A human approves each call of this plugin's tools before it runs
    /// (enforced by the engine, which parks the call as a tool request).
    pub require_approval: bool,
}

impl Default for PluginPolicy {
    fn default() -> Self {
        Self {
            memory_bytes: 128 << 20,
            cpu: Duration::from_secs(5),
            fuel: None,
            timeout: Duration::from_secs(30),
            max_output_bytes: 1 << 20,
            max_log_bytes: 64 << 10,
            env: Vec::new(),
            dirs: Vec::new(),
            http: HttpPolicy::default(),
            spawn_subtasks: false,
            require_approval: false,
        }
    }
}

/// A preopened directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
    /// `file:line:column` and key of its `host`, for errors found after parsing.
    pub origin: (String, String),
}

/// A parsed and validated policy file.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    defaults: PluginPolicy,
    plugins: BTreeMap<String, PluginPolicy>,
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|err| PolicyError {
            location: path.display().to_string(),
            message: format!("cannot read policy file: {err}"),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses policy text; `origin` names it in errors (usually the path).
    pub fn parse(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let raw: RawFile = toml::from_str(text).map_err(|err| {
            let message = err.message().trim().to_string();
            match err.span() {
                Some(span) => PolicyError {
                    location: locate(text, origin, span.start),
                    message: match key_at(text, span.start) {
                        Some(key) => format!("{key}: {message}"),
                        None => message,
                    },
                },
                None => PolicyError {
                    location: origin.to_string(),
                    message,
                },
            }
        })?;
        let ctx = Ctx { text, origin };
        let defaults = raw
            .defaults
            .compile(&RawPolicy::default(), &ctx, "defaults")?;
        let mut plugins = BTreeMap::new();
        for (name, table) in &raw.plugins {
            let policy = table.compile(&raw.defaults, &ctx, &format!("plugins.{name}"))?;
            plugins.insert(name.clone(), policy);
        }
        Ok(Self { defaults, plugins })
    }

    /// The policy of the plugin called `name` (its file stem).
    pub fn for_plugin(&self, name: &str) -> PluginPolicy {
        self.plugins.get(name).unwrap_or(&self.defaults).clone()
    }

    /// Refuses a directory grant that would let a plugin reach what the host trusts: a
    /// writable grant over any of `protected` (the plugin folder, the store, the compiled-code
    /// cache …: one path each, with what it is), or any grant over the store, which holds
    /// login sessions.
    pub fn refuse_grants_over(&self, protected: &[(&str, &Path)]) -> Result<(), PolicyError> {
        let store = protected.iter().find(|(what, _)| *what == STORE);
        for grant in std::iter::once(&self.defaults)
            .chain(self.plugins.values())
            .flat_map(|policy| &policy.dirs)
        {
            let granted = resolved(&grant.host);
            let reached = if grant.writable {
                protected
                    .iter()
                    .find(|(_, path)| overlaps(&granted, &resolved(path)))
            } else {
                store.filter(|(_, path)| overlaps(&granted, &resolved(path)))
            };
            if let Some((what, path)) = reached {
                let (location, key) = &grant.origin;
                return Err(PolicyError {
                    location: location.clone(),
                    message: format!(
                        "{key}: {} covers {what} ({}): a plugin must never {} it",
                        grant.host.display(),
                        path.display(),
                        if grant.writable { "write" } else { "read" }
                    ),
                });
            }
        }
        Ok(())
    }

    /// Whether any plugin is given a fuel budget (the engine then meters fuel).
    pub fn uses_fuel(&self) -> bool {
        self.defaults.fuel.is_some() || self.plugins.values().any(|p| p.fuel.is_some())
    }
}

/// What [`Policy::refuse_grants_over`] calls the job store: no grant may cover it.
pub const STORE: &str = "the job store";

/// `path` with symbolic links resolved as far as it exists (the rest kept as written).
fn resolved(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => resolved(parent).join(name),
        _ => path.to_path_buf(),
    }
}

/// Whether one of two paths lies inside the other.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A policy file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct PolicyError {
    /// `file:line:column`.
    pub location: String,
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    defaults: RawPolicy,
    #[serde(default)]
    plugins: BTreeMap<String, RawPolicy>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    memory_mib: Option<Spanned<u64>>,
    cpu_ms: Option<Spanned<u64>>,
    fuel: Option<Spanned<u64>>,
    timeout_ms: Option<Spanned<u64>>,
    max_output_bytes: Option<Spanned<u64>>,
    max_log_bytes: Option<Spanned<u64>>,
    env: Option<BTreeMap<Spanned<String>, String>>,
    dirs: Option<Vec<RawDir>>,
    http_allow: Option<Vec<Spanned<String>>>,
    http_allow_private: Option<bool>,
    spawn_subtasks: Option<bool>,
    require_approval: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    host: Spanned<String>,
    guest: Spanned<String>,
    #[serde(default)]
    writable: bool,
}

struct Ctx<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Ctx<'_> {
    fn error<T>(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        message: impl std::fmt::Display,
    ) -> Result<T, PolicyError> {
        Err(PolicyError {
            location: locate(self.text, self.origin, span.start),
            message: format!("{key}: {message}"),
        })
    }

    /// A number in `range`, converted by `scale`.
    fn ranged(
        &self,
        value: &Spanned<u64>,
        key: &str,
        range: std::ops::RangeInclusive<u64>,
        unit: &str,
    ) -> Result<u64, PolicyError> {
        let number = *value.get_ref();
        if range.contains(&number) {
            Ok(number)
        } else {
            self.error(
                value.span(),
                key,
                format!(
                    "{number} is out of range: must be {}..={} {unit}",
                    range.start(),
                    range.end()
                ),
            )
        }
    }
}

impl RawPolicy {
    /// Compiles this table over `fallback` (the `[defaults]` table) over the
    /// built-in defaults. `table` is the key path for error messages.
    fn compile(
        &self,
        fallback: &RawPolicy,
        ctx: &Ctx,
        table: &str,
    ) -> Result<PluginPolicy, PolicyError> {
        let builtin = PluginPolicy::default();
        let key = |name: &str| format!("{table}.{name}");
        let pick = |own: &Option<Spanned<u64>>, other: &Option<Spanned<u64>>| {
            own.clone().or_else(|| other.clone())
        };

        let memory_bytes = match pick(&self.memory_mib, &fallback.memory_mib) {
            Some(v) => ctx.ranged(&v, &key("memory_mib"), 1..=MAX_MEMORY_MIB, "MiB")? << 20,
            None => builtin.memory_bytes,
        };
        let cpu = match pick(&self.cpu_ms, &fallback.cpu_ms) {
            Some(v) => {
                Duration::from_millis(ctx.ranged(&v, &key("cpu_ms"), 1..=3_600_000, "ms")?)
            }
            None => builtin.cpu,
        };
        let fuel = match pick(&self.fuel, &fallback.fuel) {
            Some(v) => Some(ctx.ranged(&v, &key("fuel"), 1..=u64::MAX / 2, "units")?),
            None => builtin.fuel,
        };
        let timeout = match pick(&self.timeout_ms, &fallback.timeout_ms) {
            Some(v) => {
                Duration::from_millis(ctx.ranged(&v, &key("timeout_ms"), 1..=86_400_000, "ms")?)
            }
            None => builtin.timeout,
        };
        let max_output_bytes = match pick(&self.max_output_bytes, &fallback.max_output_bytes) {
            Some(v) => ctx.ranged(&v, &key("max_output_bytes"), 1..=256 << 20, "bytes")? as usize,
            None => builtin.max_output_bytes,
        };
        let max_log_bytes = match pick(&self.max_log_bytes, &fallback.max_log_bytes) {
            Some(v) => ctx.ranged(&v, &key("max_log_bytes"), 0..=16 << 20, "bytes")? as usize,
            None => builtin.max_log_bytes,
        };

        let mut env = Vec::new();
        for (name, value) in self
            .env
            .as_ref()
            .or(fallback.env.as_ref())
            .into_iter()
            .flatten()
        {
            let text = name.get_ref();
            if text.is_empty() || text.contains('=') || text.contains('\0') || value.contains('\0')
            {
                return ctx.error(
                    name.span(),
                    &key("env"),
                    format!("invalid variable name {text:?}"),
                );
            }
            env.push((text.clone(), value.clone()));
        }

        let mut dirs = Vec::new();
        for (index, dir) in self
            .dirs
            .as_ref()
            .or(fallback.dirs.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let host = Path::new(dir.host.get_ref());
            let host_key = format!("{table}.dirs[{index}].host");
            if !host.is_absolute() {
                return ctx.error(dir.host.span(), &host_key, "must be an absolute path");
            }
            match std::fs::metadata(host) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return ctx.error(
                        dir.host.span(),
                        &host_key,
                        format!("{} is not a directory", host.display()),
                    );
                }
                Err(err) => {
                    return ctx.error(
                        dir.host.span(),
                        &host_key,
                        format!("{}: {err}", host.display()),
                    );
                }
            }
            let guest = dir.guest.get_ref();
            if !guest.starts_with('/') || guest.split('/').any(|part| part == "..") {
                return ctx.error(
                    dir.guest.span(),
                    &format!("{table}.dirs[{index}].guest"),
                    "must be an absolute guest path without `..`",
                );
            }
            dirs.push(DirGrant {
                host: host.to_path_buf(),
                guest: guest.clone(),
                writable: dir.writable,
                origin: (
                    locate(ctx.text, ctx.origin, dir.host.span().start),
                    host_key,
                ),
            });
        }

        let mut allow = Vec::new();
        for entry in self
            .http_allow
            .as_ref()
            .or(fallback.http_allow.as_ref())
            .into_iter()
            .flatten()
        {
            match entry.get_ref().parse::<HostPattern>() {
                Ok(pattern) => allow.push(pattern),
                Err(reason) => return ctx.error(entry.span(), &key("http_allow"), reason),
            }
        }
        let http = HttpPolicy {
            allow,
            allow_private: self
                .http_allow_private
                .or(fallback.http_allow_private)
                .unwrap_or(builtin.http.allow_private),
        };

        Ok(PluginPolicy {
            memory_bytes,
            cpu,
            fuel,
            timeout,
            max_output_bytes,
            max_log_bytes,
            env,
            dirs,
            http,
            spawn_subtasks: self
                .spawn_subtasks
                .or(fallback.spawn_subtasks)
                .unwrap_or(builtin.spawn_subtasks),
            require_approval: self
                .require_approval
                .or(fallback.require_approval)
                .unwrap_or(builtin.require_approval),
        })
    }
}

/// The dotted key whose value sits at `offset` (`plugins.echo.cpu_ms`), when
/// the offset is on the value side of a `key = value` line: toml's own
/// messages for wrong values do not name the key.
pub(crate) fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..];
    let line = &line[..line.find('\n').unwrap_or(line.len())];
    let equals = line.find('=')?;
    if line_start + equals >= offset {
        return None;
    }
    let key = line[..equals].trim();
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|header| header.trim_matches(|c| c == '[' || c == ']').trim());
    Some(match table {
        Some(table) => format!("{table}.{key}"),
        None => key.to_string(),
    })
}

/// `origin:line:column` (1-based) of a byte offset.
pub(crate) fn locate(text: &str, origin: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("{origin}:{line}:{column}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(text, "policy.toml")
    }

    #[test]
    fn empty_file_is_deny_by_default() {
        let policy = parse("").unwrap().for_plugin("anything");
        assert_eq!(policy, PluginPolicy::default());
        assert!(policy.env.is_empty() && policy.dirs.is_empty() && policy.http.allow.is_empty());
        assert!(!policy.spawn_subtasks);
    }

    #[test]
    fn plugin_table_overrides_defaults_key_by_key() {
        let policy = parse(
            "[defaults]\nmemory_mib = 32\ntimeout_ms = 500\n\n[plugins.browse_web]\nmemory_mib = 16\nhttp_allow = [\"127.0.0.1:8080\"]\n",
        )
        .unwrap();
        let browse = policy.for_plugin("browse_web");
        assert_eq!(browse.memory_bytes, 16 << 20);
        assert_eq!(browse.timeout, Duration::from_millis(500));
        assert_eq!(browse.http.allow.len(), 1);
        let other = policy.for_plugin("other");
        assert_eq!(other.memory_bytes, 32 << 20);
        assert!(other.http.allow.is_empty());
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = parse("[plugins.echo]\nmemory_mib = 8\nmemroy_mib = 9\n").unwrap_err();
        assert_eq!(err.location, "policy.toml:3:1");
        assert!(err.message.contains("memroy_mib"), "{err}");
    }

    #[test]
    fn out_of_range_value_names_key_and_range() {
        let err = parse("[plugins.echo]\nmemory_mib = 0\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy.toml:2:14: plugins.echo.memory_mib: 0 is out of range: must be 1..=4096 MiB"
        );
    }

    #[test]
    fn wrong_type_is_reported() {
        let err = parse("[defaults]\ntimeout_ms = \"soon\"\n").unwrap_err();
        assert_eq!(err.location, "policy.toml:2:14");
        assert!(
            err.message.starts_with("defaults.timeout_ms: invalid type"),
            "{err}"
        );
        let err = parse("[plugins.echo]\ncpu_ms = -5\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("policy.toml:2:10: plugins.echo.cpu_ms: invalid value"),
            "{err}"
        );
    }

    #[test]
    fn bad_http_pattern_and_missing_dir_are_reported() {
        let err = parse("[plugins.a]\nhttp_allow = [\"https://example.com/\"]\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("policy.toml:2:15: plugins.a.http_allow:"),
            "{err}"
        );
        let err = parse("[[plugins.a.dirs]]\nhost = \"/definitely/not/here\"\nguest = \"/data\"\n")
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("policy.toml:2:8: plugins.a.dirs[0].host:"),
            "{err}"
        );
        let err =
            parse("[[plugins.a.dirs]]\nhost = \"relative\"\nguest = \"/data\"\n").unwrap_err();
        assert!(err.message.contains("absolute"), "{err}");
    }

    #[test]
    fn env_and_dirs_are_granted_as_written() {
        let dir = std::env::temp_dir();
        let text = format!(
            "[plugins.a]\nenv = {{ LANG = \"C\" }}\ndirs = [{{ host = {:?}, guest = \"/tmp\" }}]\nspawn_subtasks = true\n",
            dir.display().to_string()
        );
        let policy = parse(&text).unwrap().for_plugin("a");
        assert_eq!(policy.env, vec![("LANG".to_string(), "C".to_string())]);
        assert_eq!(policy.dirs[0].guest, "/tmp");
        assert!(!policy.dirs[0].writable);
        assert!(policy.spawn_subtasks);
    }

    #[test]
    fn a_grant_over_what_the_host_trusts_is_refused_with_its_location() {
        let root = tempfile::tempdir().unwrap();
        let state = root.path().join("state");
        let plugins = root.path().join("plugins");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&plugins).unwrap();
        let store = state.join("jobs.db");
        let protected = [
            (STORE, store.as_path()),
            ("the plugin folder", plugins.as_path()),
        ];
        let grant = |host: &Path, writable: bool| {
            parse(&format!(
                "[plugins.a]\nenv = {{ A = \"1\" }}\n[[plugins.a.dirs]]\nhost = {:?}\nguest = \"/d\"\nwritable = {writable}\n",
                host.display().to_string()
            ))
            .unwrap()
        };
        // Writing the plugin folder, or any folder above it, would let a plugin plant code.
        for host in [&plugins, &root.path().to_path_buf()] {
            let error = grant(host, true)
                .refuse_grants_over(&protected)
                .unwrap_err();
            assert_eq!(error.location, "policy.toml:4:8", "{error}");
            assert!(
                error.message.starts_with("plugins.a.dirs[0].host:"),
                "{error}"
            );
            assert!(error.message.contains("must never write"), "{error}");
        }
        // Reading the plugin folder is harmless; reading the store is not.
        assert!(
            grant(&plugins, false)
                .refuse_grants_over(&protected)
                .is_ok()
        );
        let error = grant(&state, false)
            .refuse_grants_over(&protected)
            .unwrap_err();
        assert!(error.message.contains("the job store"), "{error}");
        // A folder beside them is fine, and a link to a protected one is seen through.
        let elsewhere = root.path().join("data");
        std::fs::create_dir(&elsewhere).unwrap();
        assert!(
            grant(&elsewhere, true)
                .refuse_grants_over(&protected)
                .is_ok()
        );
        let link = root.path().join("innocent");
        std::os::unix::fs::symlink(&plugins, &link).unwrap();
        assert!(grant(&link, true).refuse_grants_over(&protected).is_err());
    }
}
