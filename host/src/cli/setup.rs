//! What `maestro run` and `maestro jobs` run against: the config file, the flags that override
//! it, and the engine and store built from them.
//!
//! Invariant: a value comes from the flag (or its environment variable) when given, otherwise
//! from the config file, otherwise from the documented default; relative paths in the config
//! file are relative to the file. [`Setup::replay_flags`] repeats exactly the resolved choices, so
//! the command printed at a park answers the job with the same plugins, pieces, model and store.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Failure;
use super::config_file::{ConfigFile, read_config};
pub use super::config_file::{ServerSection, TokenEntry};
use super::folder::load_folder;
use crate::engine::{Engine, EngineLimits, ToolCatalog};
use crate::llm::ModelConfig;
use crate::piece::{LintError, Piece, load_dir, load_piece};
use crate::plugin::{Policy, Runtime};
use crate::serve::{Change, PluginHost};
use crate::store::{JobStore, StoreAddress};
use crate::worker::StoreSpawner;
use clap::Args;
use tokio::sync::Notify;

#[derive(Debug, Clone, Args)]
pub struct EngineOptions {
    /// The model: `openai:<model>`, `anthropic:<model>`, `ollama:<model>` or
    /// `scripted:<script.yaml>`. Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY.
    #[arg(long, value_name = "SPEC", env = "MAESTRO_MODEL")]
    pub model: Option<String>,
    /// The plugin folder (`*.wasm` components).
    #[arg(long, value_name = "DIR", env = "MAESTRO_PLUGIN_DIR")]
    pub plugins: Option<PathBuf>,
    /// The pieces folder [default: `pieces` when it exists].
    #[arg(long, value_name = "DIR", env = "MAESTRO_PIECES")]
    pub pieces: Option<PathBuf>,
    /// Operator policy (TOML); without it every plugin runs deny-by-default.
    #[arg(long, value_name = "FILE", env = "MAESTRO_POLICY")]
    pub policy: Option<PathBuf>,
    /// A job that parks here is resumed with `expired` after this long, unless answered first
    /// (a worker applies it). Without it, waits last until answered.
    #[arg(long, value_name = "MS")]
    pub wait_expiry_ms: Option<u64>,
    /// Tool calls a job may make between two human actions before the next one waits for a
    /// go-ahead [default: 12]. Fixed for each job when it starts.
    #[arg(long, value_name = "N", env = "MAESTRO_MAX_BURST",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_burst: Option<u32>,
    #[command(flatten)]
    pub store: StoreOption,
}

#[derive(Debug, Clone, Args)]
pub struct StoreOption {
    /// Config file (TOML): `plugins`, `pieces`, `policy`, `store` and a `[model]` table.
    #[arg(long, value_name = "FILE", env = "MAESTRO_CONFIG")]
    pub config: Option<PathBuf>,
    /// The job store: a SQLite file, or a PostgreSQL database shared by many nodes
    /// (`postgres://user@host:port/database`; put a password in MAESTRO_STORE or the config
    /// file, not on the command line) [default: ~/.local/share/maestro/jobs.db].
    #[arg(long = "store", value_name = "FILE|URL", env = "MAESTRO_STORE")]
    pub address: Option<String>,
}

/// The tools an engine runs on.
pub enum EngineCatalog {
    /// These plugins, for the engine's life: every tool a piece names must be there.
    Fixed(ToolCatalog),
    /// A catalog that hot loading replaces: a tool may come later.
    Live(Arc<crate::engine::CatalogSlot>),
}

/// The resolved choices.
pub struct Setup {
    pub config: Option<PathBuf>,
    pub model: Option<String>,
    pub plugins: Option<PathBuf>,
    pub pieces: Option<PathBuf>,
    pub policy: Option<PathBuf>,
    pub store: StoreAddress,
    has_model_table: bool,
    /// Woken when this process creates a job (a subtask), so its runners start at once.
    pub wake: Arc<Notify>,
    pub wait_expiry: Option<std::time::Duration>,
    pub max_burst: Option<u32>,
    /// The `[server]` table; its `archive` is made absolute like the other paths.
    pub server: ServerSection,
}

impl Setup {
    /// Resolves the choices; every path comes out absolute, so the commands printed for another
    /// shell work from any directory.
    pub fn resolve(options: &EngineOptions) -> Result<Self, Failure> {
        let config = options.store.config.as_deref().map(absolute).transpose()?;
        let file = match &config {
            Some(path) => read_config(path)?,
            None => ConfigFile::default(),
        };
        let base = config
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(""));
        let from_file = |value: Option<PathBuf>| value.map(|path| base.join(path));
        let pick = |flag: &Option<PathBuf>, from: Option<PathBuf>| {
            flag.clone()
                .or_else(|| from_file(from))
                .as_deref()
                .map(absolute)
                .transpose()
        };
        // A path in the config file is relative to the file, one on the command line to the
        // working directory; a URL is neither.
        let store = match (&options.store.address, file.store) {
            (Some(flag), _) => StoreAddress::parse(flag),
            (None, Some(from_file)) => match StoreAddress::parse(&from_file) {
                StoreAddress::Sqlite(path) => StoreAddress::Sqlite(base.join(path)),
                url => url,
            },
            (None, None) => StoreAddress::Sqlite(default_store()),
        };
        let store = match store {
            StoreAddress::Sqlite(path) => StoreAddress::Sqlite(absolute(&path)?),
            url => url,
        };
        let pieces = match pick(&options.pieces, file.pieces)? {
            Some(dir) => Some(dir),
            None if Path::new("pieces").is_dir() => Some(absolute(Path::new("pieces"))?),
            None => None,
        };
        let mut server = file.server;
        server.archive = from_file(server.archive.take())
            .as_deref()
            .map(absolute)
            .transpose()?;
        let model = match options.model.as_deref().map(|spec| spec.split_once(':')) {
            // A script path is a path like any other: absolute, so it replays anywhere.
            Some(Some(("scripted", script))) => Some(format!(
                "scripted:{}",
                absolute(Path::new(script))?.display()
            )),
            _ => options.model.clone(),
        };
        Ok(Self {
            config: config.clone(),
            model,
            plugins: pick(&options.plugins, file.plugins)?,
            pieces,
            policy: pick(&options.policy, file.policy)?,
            store,
            has_model_table: file.model.is_some(),
            wake: Arc::new(Notify::new()),
            wait_expiry: options
                .wait_expiry_ms
                .or(server.wait_expiry_ms)
                .map(std::time::Duration::from_millis),
            max_burst: match (options.max_burst, file.max_burst) {
                (Some(flag), _) => Some(flag),
                (None, Some(0)) => {
                    return Err(Failure::usage(format!(
                        "{}: max_burst must be at least 1",
                        config.as_deref().unwrap_or(Path::new("")).display()
                    )));
                }
                (None, from_file) => from_file,
            },
            server,
        })
    }

    pub fn open_store(&self) -> Result<Arc<dyn JobStore>, Failure> {
        self.store
            .open()
            .map(|(store, _)| store)
            .map_err(Failure::usage)
    }

    /// An engine for `piece` (a file, or a name in the pieces folder) over every plugin of the
    /// plugin folder, whose subtasks become jobs of `store`.
    pub async fn engine(
        &self,
        runtime: &Runtime,
        piece: &str,
        store: &Arc<dyn JobStore>,
    ) -> Result<Engine, Failure> {
        let piece = self.find_piece(piece)?;
        self.fixed_engine(runtime, vec![piece], store).await
    }

    /// An engine for every piece of the pieces folder (what a worker runs); any piece that
    /// does not load or lint is an error.
    pub async fn engine_all(
        &self,
        runtime: &Runtime,
        store: &Arc<dyn JobStore>,
    ) -> Result<Engine, Failure> {
        let pieces = self.all_pieces()?;
        self.fixed_engine(runtime, pieces, store).await
    }

    /// Every piece of the pieces folder; any piece that does not load is an error.
    pub fn all_pieces(&self) -> Result<Vec<Piece>, Failure> {
        let Some(dir) = &self.pieces else {
            return Err(Failure::usage(
                "no pieces folder: give --pieces or `pieces` in --config",
            ));
        };
        let (pieces, errors) = load_dir(dir);
        if !errors.is_empty() {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(Failure::usage(errors.join("\n")));
        }
        if pieces.is_empty() {
            return Err(Failure::usage(format!("no pieces in {}", dir.display())));
        }
        Ok(pieces)
    }

    /// A new pending job of `piece` in `store` (for a worker to run); without a piece, one that
    /// waits for a human to choose a piece of the pieces folder.
    pub fn start_job(
        &self,
        store: &dyn JobStore,
        piece: Option<&str>,
        input: String,
        prefill: std::collections::BTreeMap<String, String>,
    ) -> Result<String, Failure> {
        let mut job = match piece {
            Some(piece) => {
                let piece = self.find_piece(piece)?;
                let mut job = crate::engine::JobState::new(
                    crate::store::new_job_id(),
                    &piece.name.value,
                    &piece.initial_movement.value,
                    input,
                );
                job.piece_origin = piece.origin.display().to_string();
                job
            }
            None => {
                // Whoever runs it offers the pieces it has: they must load.
                self.all_pieces()?;
                crate::engine::JobState::without_piece(crate::store::new_job_id(), input)
            }
        };
        job.prefill = prefill;
        store.create(&job).map_err(Failure::usage)?;
        Ok(job.id)
    }

    /// An engine for a job that already exists: the piece file it started from when that file
    /// is still there, otherwise the piece of that name in the pieces folder. A job without a
    /// piece gets the piece just `chosen` for it, or every piece of the folder.
    pub async fn engine_for_job(
        &self,
        runtime: &Runtime,
        job: &crate::engine::JobState,
        chosen: Option<&str>,
        store: &Arc<dyn JobStore>,
    ) -> Result<Engine, Failure> {
        if job.piece.is_empty() {
            return match chosen {
                Some(piece) => self.engine(runtime, piece, store).await,
                None => self.engine_all(runtime, store).await,
            };
        }
        let origin = Path::new(&job.piece_origin);
        let piece = if !job.piece_origin.is_empty() && origin.is_file() {
            let piece = load_piece(origin).map_err(Failure::usage)?;
            if piece.name.value != job.piece {
                return Err(Failure::usage(format!(
                    "{} now holds piece `{}`, but job {} runs piece `{}`",
                    origin.display(),
                    piece.name.value,
                    job.id,
                    job.piece
                )));
            }
            piece
        } else {
            self.find_piece(&job.piece)?
        };
        self.fixed_engine(runtime, vec![piece], store).await
    }

    /// The engine over `pieces` and every plugin of the plugin folder as it is now.
    async fn fixed_engine(
        &self,
        runtime: &Runtime,
        pieces: Vec<Piece>,
        store: &Arc<dyn JobStore>,
    ) -> Result<Engine, Failure> {
        let catalog = EngineCatalog::Fixed(self.catalog(runtime).await?);
        Ok(self.engine_for(runtime, pieces, store, catalog)?.0)
    }

    /// The engine over `pieces` and `catalog`, and the lint warnings a live catalog turns
    /// unknown tools into. Subtasks become pending jobs of `store`, of any piece the pieces
    /// folder holds; the spawner wakes the runners of this process.
    pub fn engine_for(
        &self,
        runtime: &Runtime,
        pieces: Vec<Piece>,
        store: &Arc<dyn JobStore>,
        catalog: EngineCatalog,
    ) -> Result<(Engine, Vec<LintError>), Failure> {
        let mut known: Vec<Piece> = match &self.pieces {
            Some(dir) => load_dir(dir).0,
            None => Vec::new(),
        };
        known.retain(|other| pieces.iter().all(|p| p.name.value != other.name.value));
        known.extend(pieces.iter().cloned());
        let spawner = Arc::new(StoreSpawner::new(store.clone(), &known, self.wake.clone()));
        runtime.set_subtask_spawner(spawner.clone());
        let model = self.model_config()?.build().map_err(Failure::usage)?;
        let (engine, warnings) = match catalog {
            EngineCatalog::Fixed(catalog) => (
                Engine::new(model, Arc::new(catalog), pieces, self.limits())
                    .map_err(Failure::usage)?,
                Vec::new(),
            ),
            EngineCatalog::Live(slot) => {
                Engine::on_live_catalog(model, slot, pieces, self.limits())
                    .map_err(Failure::usage)?
            }
        };
        Ok((engine.with_child_jobs(spawner), warnings))
    }

    /// The policy file's rules, or deny-by-default for every plugin without one.
    ///
    /// A directory grant over what the host trusts is refused: the plugin folder, the store,
    /// the plugin archive, the policy and config files, and the compiled-code cache of
    /// `runtime`.
    pub fn policy(&self, runtime: &Runtime) -> Result<Policy, Failure> {
        let Some(file) = &self.policy else {
            return Ok(Policy::default());
        };
        let policy = Policy::from_file(file).map_err(Failure::usage)?;
        let archive = self.archive();
        let mut protected: Vec<(&str, &Path)> =
            vec![("the plugin archive", &archive), ("the policy file", file)];
        if let StoreAddress::Sqlite(path) = &self.store {
            protected.push((crate::plugin::STORE, path));
        }
        if let Some(dir) = &self.plugins {
            protected.push(("the plugin folder", dir));
        }
        if let Some(config) = &self.config {
            protected.push(("the config file", config));
        }
        if let Some(cache) = runtime.cache_dir() {
            protected.push(("the compiled-code cache", cache));
        }
        policy
            .refuse_grants_over(&protected)
            .map_err(Failure::usage)?;
        Ok(policy)
    }

    /// The engine over every piece on the catalog `plugins` serves, hot loading included; a
    /// tool a piece names that no plugin offers yet is printed as a warning.
    pub fn live_engine(
        &self,
        runtime: &Runtime,
        store: &Arc<dyn JobStore>,
        plugins: &PluginHost,
    ) -> Result<Engine, Failure> {
        let (engine, warnings) = self.engine_for(
            runtime,
            self.all_pieces()?,
            store,
            EngineCatalog::Live(plugins.slot().clone()),
        )?;
        for warning in warnings {
            eprintln!("warning: {warning} (until a plugin offers it, calls to it fail)");
        }
        Ok(engine)
    }

    /// The live plugin host over the folder `dir`: every plugin loaded (a failure is printed as
    /// a warning), versions archived and kept in `store`, and, where the store is shared by
    /// many nodes, caught up with and following the versions the other nodes install (the task
    /// that follows them is returned).
    pub async fn plugin_host(
        &self,
        runtime: &Runtime,
        store: &Arc<dyn JobStore>,
        dir: PathBuf,
    ) -> Result<(Arc<PluginHost>, Option<tokio::task::JoinHandle<()>>), Failure> {
        let plugins = Arc::new(
            PluginHost::new(runtime.clone(), dir, self.archive(), self.policy(runtime)?)
                .sharing_versions_with(store.clone()),
        );
        for (name, change) in plugins.sync_all().await {
            if let Change::Failed(message) = change {
                eprintln!("warning: plugin {name}: not loaded: {message}");
            }
        }
        let follower = match plugins.join_cluster().await {
            Some((follower, warnings)) => {
                for warning in warnings {
                    eprintln!("warning: {warning}");
                }
                Some(follower)
            }
            None => None,
        };
        Ok((plugins, follower))
    }

    /// Where every plugin version that ever served is kept: `server.archive`, else
    /// `plugin-versions` beside the store file (beside the default one for a database).
    pub fn archive(&self) -> PathBuf {
        self.server.archive.clone().unwrap_or_else(|| {
            let beside = match &self.store {
                StoreAddress::Sqlite(path) => path.clone(),
                StoreAddress::Postgres(_) => default_store(),
            };
            beside
                .parent()
                .unwrap_or(Path::new("."))
                .join("plugin-versions")
        })
    }

    /// Where a field of the `[server]` table is set, for an error about its value: the config
    /// file and the field.
    pub fn server_field(&self, field: &str) -> String {
        match &self.config {
            Some(file) => format!("{}: server.{field}", file.display()),
            None => format!("server.{field}"),
        }
    }

    /// The address of the server's pages for MCP links: `flag` (`--public-url` or
    /// `MAESTRO_PUBLIC_URL`), else `server.public_url`; checked, an error naming where it came
    /// from.
    pub fn public_url(&self, flag: Option<&str>) -> Result<Option<String>, Failure> {
        let (text, source) = match (flag, &self.server.public_url) {
            (Some(text), _) => (text, "--public-url (or MAESTRO_PUBLIC_URL)".to_owned()),
            (None, Some(text)) => (text.as_str(), self.server_field("public_url")),
            (None, None) => return Ok(None),
        };
        crate::mcp::public_url(text)
            .map(Some)
            .map_err(|message| Failure::usage(format!("{source}: {message}")))
    }

    fn limits(&self) -> EngineLimits {
        let defaults = EngineLimits::default();
        EngineLimits {
            max_burst: self.max_burst.unwrap_or(defaults.max_burst),
            ..defaults
        }
    }

    fn model_config(&self) -> Result<ModelConfig, Failure> {
        let config = match (&self.model, &self.config) {
            (Some(spec), _) => ModelConfig::from_spec(spec).map_err(Failure::usage)?,
            (None, Some(file)) if self.has_model_table => {
                return ModelConfig::from_config_file(file).map_err(Failure::usage);
            }
            _ => {
                return Err(Failure::usage(
                    "no model: give --model (e.g. `scripted:script.yaml`, `openai:gpt-4o-mini`, \
                     `ollama:llama3.2`), MAESTRO_MODEL, or a [model] table in --config",
                ));
            }
        };
        Ok(config.with_env(|name| std::env::var(name).ok()))
    }

    fn find_piece(&self, piece: &str) -> Result<Piece, Failure> {
        find_piece(self.pieces.as_deref(), piece)
    }

    async fn catalog(&self, runtime: &Runtime) -> Result<ToolCatalog, Failure> {
        let Some(dir) = &self.plugins else {
            return Err(Failure::usage(
                "no plugin folder: give --plugins, MAESTRO_PLUGIN_DIR, or `plugins` in --config",
            ));
        };
        let policy = self.policy(runtime)?;
        let mut plugins = Vec::new();
        for loaded in load_folder(runtime, dir, &policy).await? {
            match loaded.plugin {
                Ok(plugin) => plugins.push(Arc::new(plugin)),
                // A broken plugin must not stop the others; a piece that needs its tools is
                // refused by lint, naming the tool.
                Err(err) => eprintln!("warning: {}: not loaded: {err}", loaded.path.display()),
            }
        }
        ToolCatalog::new(plugins).map_err(Failure::usage)
    }

    /// The flags that make another `maestro` command use the same store (and config file).
    pub fn store_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if let Some(config) = &self.config {
            flags.push(format!(
                "--config {}",
                shell_quote(&config.display().to_string())
            ));
        }
        if let Some(store) = self.store.replayable() {
            flags.push(format!("--store {}", shell_quote(&store)));
        }
        flags
    }

    /// The flags that make another `maestro` command use the same choices.
    pub fn replay_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        let mut push = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                flags.push(format!("{flag} {}", shell_quote(&value)));
            }
        };
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        push("--config", path(&self.config));
        push("--model", self.model.clone());
        push("--plugins", path(&self.plugins));
        push("--pieces", path(&self.pieces));
        push("--policy", path(&self.policy));
        push("--store", self.store.replayable());
        flags
    }
}

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path).map_err(|err| Failure::usage(format!("{}: {err}", path.display())))
}

/// `~/.local/share/maestro/jobs.db` (or under `$XDG_DATA_HOME`), `.maestro/jobs.db` without a
/// home.
fn default_store() -> PathBuf {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/share")));
    match data {
        Some(data) => data.join("maestro/jobs.db"),
        None => PathBuf::from(".maestro/jobs.db"),
    }
}

/// Quotes `text` for a POSIX shell when it needs it.
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// `piece`: a piece file (a path, or a name with an extension), else the piece of that name in
/// the `pieces` folder.
pub(super) fn find_piece(pieces: Option<&Path>, piece: &str) -> Result<Piece, Failure> {
    let as_path = Path::new(piece);
    if as_path.extension().is_some() || as_path.components().count() > 1 {
        return load_piece(as_path).map_err(Failure::usage);
    }
    let Some(dir) = pieces else {
        return Err(Failure::usage(format!(
            "piece `{piece}`: no pieces folder (give --pieces, or a piece file)"
        )));
    };
    let (pieces, errors) = load_dir(dir);
    if let Some(found) = pieces.into_iter().find(|p| p.name.value == piece) {
        return Ok(found);
    }
    let mut message = format!("no piece named `{piece}` in {}", dir.display());
    for error in errors {
        message.push_str(&format!("\n  {error}"));
    }
    Err(Failure::usage(message))
}
