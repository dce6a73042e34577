//! The live plugin folder: which version of each plugin serves new calls, and every version a
//! parked call may still need.
//!
//! Invariant: the engine's catalog changes only by whole replacement (`CatalogSlot::replace`),
//! and only to a catalog whose every plugin loaded, described itself and clashes with no other
//! tool name; a version that fails any of that is reported and the previous one keeps serving.
//! Every version that ever served stays reachable by its content hash in this process, and its
//! bytes are kept in a content-addressed archive, so a parked call resumes on its own version
//! even after a reload, a removal or a restart. One change is applied at a time. Where the
//! store is shared by many nodes, versions also travel between them (`cluster.rs`). What it
//! reports is in `status.rs`.

mod cluster;
mod status;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::engine::{CatalogSlot, ToolCatalog};
use crate::plugin::{Plugin, Policy, Runtime, content_hash};
use crate::store::JobStore;
use crate::telemetry;
use status::Source;
pub use status::{
    Change, FailureSource, LoadFailure, PluginRequestError, PluginStatus, ServingState,
};

#[derive(Default)]
struct Entry {
    serving: Option<Arc<Plugin>>,
    loaded_at_ms: Option<i64>,
    last_error: Option<LoadFailure>,
    removed: bool,
}

type Listener = Box<dyn Fn(&PluginStatus) + Send + Sync>;

pub struct PluginHost {
    runtime: Runtime,
    dir: PathBuf,
    archive: PathBuf,
    policy: Policy,
    slot: Arc<CatalogSlot>,
    entries: Mutex<BTreeMap<String, Entry>>,
    one_change_at_a_time: tokio::sync::Mutex<()>,
    listener: Mutex<Option<Listener>>,
    /// The store whose nodes share the versions that calls park on (see
    /// [`PluginHost::sharing_versions_with`]).
    shared: Option<Arc<dyn JobStore>>,
    /// Set once this node joins the nodes sharing the store; until then its own installs (its
    /// folder at start) are not published.
    joined: AtomicBool,
    /// This node's installs the store has not taken yet, by plugin: published again at the
    /// next catch-up, and not replaced by the record meanwhile.
    unpublished: Mutex<BTreeMap<String, Option<String>>>,
}

impl PluginHost {
    /// A host for the `*.wasm` files of `dir`, each run under its policy; versions are archived
    /// in `archive` (created when needed). Nothing is loaded until [`PluginHost::sync_all`].
    pub fn new(runtime: Runtime, dir: PathBuf, archive: PathBuf, policy: Policy) -> Self {
        Self {
            runtime,
            dir,
            archive,
            policy,
            slot: Arc::new(CatalogSlot::default()),
            entries: Mutex::new(BTreeMap::new()),
            one_change_at_a_time: tokio::sync::Mutex::new(()),
            listener: Mutex::new(None),
            shared: None,
            joined: AtomicBool::new(false),
            unpublished: Mutex::new(BTreeMap::new()),
        }
    }

    /// Also keeps every version that serves in `store`, and takes a version missing from the
    /// archive from there: where the store is shared by many nodes, a call parked on one node
    /// resumes on another that never loaded its version. The bytes are checked against the
    /// pinned content hash before they run.
    pub fn sharing_versions_with(mut self, store: Arc<dyn JobStore>) -> Self {
        self.shared = Some(store);
        self
    }

    /// The runtime its plugins run in.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The catalog the engine must run on.
    pub fn slot(&self) -> &Arc<CatalogSlot> {
        &self.slot
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Called with the new status after every change (a load, a failure, a removal).
    pub fn on_change(&self, listener: impl Fn(&PluginStatus) + Send + Sync + 'static) {
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(listener));
    }

    /// Brings every plugin in line with the folder: new and changed files load, removed ones
    /// stop serving.
    pub async fn sync_all(&self) -> Vec<(String, Change)> {
        let mut names: Vec<String> = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter_map(|entry| plugin_file_name(&entry.path()))
                .collect(),
            Err(error) => {
                tracing::error!(
                    "cannot read the plugin folder {}: {error}",
                    self.dir.display()
                );
                Vec::new()
            }
        };
        names.extend(self.lock_entries().keys().cloned());
        names.sort();
        names.dedup();
        let mut changes = Vec::new();
        for name in names {
            let change = self.sync(&name).await;
            changes.push((name, change));
        }
        changes
    }

    /// Brings plugin `name` in line with `<dir>/<name>.wasm`.
    pub async fn sync(&self, name: &str) -> Change {
        let _one = self.one_change_at_a_time.lock().await;
        let path = self.path_of(name);
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || crate::plugin::read_component(&path)).await
        };
        match read {
            Ok(Ok(bytes)) => self.install(name, bytes, Source::Folder).await,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                self.retire(name, Source::Folder).await
            }
            Ok(Err(error)) => self.fail(
                name,
                format!("cannot read {}: {error}", path.display()),
                None,
                FailureSource::Folder,
            ),
            Err(error) => self.fail(
                name,
                format!("cannot read {}: {error}", path.display()),
                None,
                FailureSource::Folder,
            ),
        }
    }

    /// Loads `bytes` as plugin `name` and, only if it serves, writes it to the plugin folder
    /// (atomically), so a refused upload leaves the folder as it was.
    pub async fn upload(
        &self,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(Change, PluginStatus), PluginRequestError> {
        check_name(name)?;
        let _one = self.one_change_at_a_time.lock().await;
        let change = self.install(name, bytes, Source::Upload).await;
        Ok((
            change,
            self.status(name).expect("an installed plugin has a status"),
        ))
    }

    /// Deletes `<dir>/<name>.wasm` and stops the plugin taking new calls.
    pub async fn remove(&self, name: &str) -> Result<PluginStatus, PluginRequestError> {
        check_name(name)?;
        let _one = self.one_change_at_a_time.lock().await;
        match std::fs::remove_file(self.path_of(name)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if self.lock_entries().get(name).is_none_or(|e| e.removed) {
                    return Err(PluginRequestError::NotFound(name.to_owned()));
                }
            }
            Err(error) => return Err(PluginRequestError::Io(error.to_string())),
        }
        self.retire(name, Source::Upload).await;
        Ok(self.status(name).expect("a removed plugin has a status"))
    }

    /// Makes the version `content_hash` of plugin `name` resumable (a parked call's pin), from
    /// the archive, unless the catalog already has it.
    pub async fn restore_version(&self, name: &str, content_hash: &str) -> Result<(), String> {
        let _one = self.one_change_at_a_time.lock().await;
        if self.slot.current().pinned(content_hash).is_some() {
            return Ok(());
        }
        let (bytes, from) = self.version_bytes(content_hash).await?;
        let plugin = self
            .runtime
            .load_owned(name, bytes, None, self.policy.for_plugin(name))
            .await
            .map_err(|error| format!("{from}: {error}"))?;
        if plugin.content_hash() != content_hash {
            return Err(format!("{from} does not hold version {content_hash}"));
        }
        let mut catalog = (*self.slot.current()).clone();
        catalog.add_pinned_version(Arc::new(plugin));
        self.slot.replace(Arc::new(catalog));
        Ok(())
    }

    /// The bytes of version `content_hash`, and where they came from: the archive, or else the
    /// shared store (then also written to the archive, for the next time). Bytes that do not
    /// hash to `content_hash` are refused before anything compiles them.
    async fn version_bytes(&self, content_hash: &str) -> Result<(Vec<u8>, String), String> {
        let path = self.archive.join(format!("{content_hash}.wasm"));
        let missing = match crate::plugin::read_component(&path) {
            Ok(bytes) => {
                let from = path.display().to_string();
                return verified(bytes, content_hash, &from)
                    .await
                    .map(|b| (b, from));
            }
            Err(error) => format!("cannot read {}: {error}", path.display()),
        };
        let Some(store) = self.shared.clone() else {
            return Err(missing);
        };
        let hash = content_hash.to_owned();
        let fetched = tokio::task::spawn_blocking(move || store.component(&hash))
            .await
            .map_err(|error| error.to_string())?;
        match fetched {
            Ok(Some(bytes)) => {
                let bytes = verified(bytes, content_hash, "the store's copy").await?;
                let (archive, copy) = (self.archive.clone(), bytes.clone());
                let kept = tokio::task::spawn_blocking(move || {
                    std::fs::create_dir_all(&archive)
                        .map_err(|error| error.to_string())
                        .and_then(|()| write_atomically(&path, &copy))
                })
                .await;
                if let Ok(Err(error)) | Err(error) = kept.map_err(|e| e.to_string()) {
                    tracing::warn!(
                        "version {} is not archived here: {error}",
                        short(content_hash)
                    );
                }
                Ok((bytes, format!("version {content_hash} from the store")))
            }
            Ok(None) => Err(format!("{missing}, and the store does not hold it either")),
            Err(error) => Err(format!("{missing}, and the store cannot say: {error}")),
        }
    }

    pub fn statuses(&self) -> Vec<PluginStatus> {
        let entries = self.lock_entries();
        entries
            .iter()
            .map(|(name, entry)| self.status_of(name, entry))
            .collect()
    }

    pub fn status(&self, name: &str) -> Option<PluginStatus> {
        let entries = self.lock_entries();
        entries.get(name).map(|entry| self.status_of(name, entry))
    }

    /// Loads `bytes` as the new version of `name`, from `origin`; writes the file once the
    /// version is accepted unless it came from the folder. The caller holds the change lock.
    async fn install(&self, name: &str, bytes: Vec<u8>, origin: Source) -> Change {
        let source = origin.failure();
        let write_to = origin.writes_file().then(|| self.path_of(name));
        let write_to = write_to.as_deref();
        // SHA-256 of a large component takes milliseconds: off the async threads.
        let (bytes, hash) = match tokio::task::spawn_blocking(move || {
            let hash = content_hash(&bytes);
            (bytes, hash)
        })
        .await
        {
            Ok(hashed) => hashed,
            Err(error) => {
                return self.fail(
                    name,
                    format!("cannot hash the component: {error}"),
                    None,
                    source,
                );
            }
        };
        let serving_same = self.lock_entries().get(name).is_some_and(|entry| {
            entry
                .serving
                .as_ref()
                .is_some_and(|plugin| plugin.content_hash() == hash)
        });
        if serving_same {
            if let Some(path) = write_to
                && let Err(error) = write_atomically(path, &bytes)
            {
                return self.fail(name, error, Some(hash), source);
            }
            // The file holds the serving version again (after a half-written copy, say): an
            // earlier failure of the folder no longer describes it. A refused upload (or
            // another node's version refused here) never reached the folder, so only a new
            // upload clears it; the folder's own sync (of the version uploaded before it, say)
            // leaves it shown.
            let cleared = {
                let mut entries = self.lock_entries();
                let entry = entries.entry(name.to_owned()).or_default();
                entry
                    .last_error
                    .take_if(|failure| {
                        source == FailureSource::Upload || failure.source == FailureSource::Folder
                    })
                    .map(|_| self.status_of(name, entry))
            };
            if let Some(status) = cleared {
                self.announce(&status);
            }
            return Change::Unchanged;
        }
        // The bytes stay here for the archive and the folder; the runtime gets its own copy.
        let plugin = match self
            .runtime
            .load_owned(
                name,
                bytes.clone(),
                Some(hash.clone()),
                self.policy.for_plugin(name),
            )
            .await
        {
            Ok(mut plugin) => {
                plugin.source = Some(self.path_of(name));
                Arc::new(plugin)
            }
            Err(error) => return self.fail(name, error.to_string(), Some(hash), source),
        };
        let current = self.slot.current();
        let others = {
            let entries = self.lock_entries();
            entries
                .iter()
                .filter(|(other, _)| other.as_str() != name)
                .filter_map(|(_, entry)| entry.serving.clone())
                .collect::<Vec<_>>()
        };
        let mut catalog = match ToolCatalog::new(others.into_iter().chain([plugin.clone()])) {
            Ok(catalog) => catalog,
            Err(error) => return self.fail(name, error.to_string(), Some(hash), source),
        };
        catalog.keep_versions_of(&current);
        if let Some(path) = write_to
            && let Err(error) = write_atomically(path, &bytes)
        {
            return self.fail(name, error, Some(hash), source);
        }
        self.slot.replace(Arc::new(catalog));
        let status = {
            let mut entries = self.lock_entries();
            let entry = entries.entry(name.to_owned()).or_default();
            let reloaded = entry.serving.replace(plugin).is_some();
            entry.loaded_at_ms = Some(now_ms());
            entry.last_error = None;
            entry.removed = false;
            telemetry::plugin_load(if reloaded { "reloaded" } else { "loaded" });
            let status = self.status_of(name, entry);
            telemetry::plugins_serving(serving_count(&entries));
            status
        };
        tracing::info!(
            plugin = name,
            version = %short(&hash),
            tools = ?status.tools,
            from = ?origin,
            "plugin version serving"
        );
        self.announce(&status);
        // After the swap, so the new version serves without waiting for the copy. Until it is
        // written, the plugin folder still holds the same bytes.
        let own = origin != Source::Cluster;
        match self.archive_version(name, &hash, bytes, own).await {
            Ok(()) if own => self.publish(name, Some(&hash)).await,
            Ok(()) => {}
            Err(error) => tracing::warn!(
                plugin = name,
                "version {} serves but is not archived; a call it parks cannot resume after a \
                 restart that no longer finds it in the folder, nor on another node: {error}",
                short(&hash)
            ),
        }
        Change::Loaded
    }

    /// Stops `name` taking new calls (removed by `origin`); its versions stay resumable.
    async fn retire(&self, name: &str, origin: Source) -> Change {
        let retired = {
            let mut entries = self.lock_entries();
            match entries.get_mut(name) {
                Some(entry) if !entry.removed => {
                    entry.removed = true;
                    entry.serving.take()
                }
                _ => return Change::Unchanged,
            }
        };
        if retired.is_some() {
            let current = self.slot.current();
            let serving = {
                let entries = self.lock_entries();
                entries
                    .values()
                    .filter_map(|entry| entry.serving.clone())
                    .collect::<Vec<_>>()
            };
            telemetry::plugins_serving(serving.len());
            // Removing a plugin cannot make two others clash.
            let mut catalog = ToolCatalog::new(serving).unwrap_or_default();
            catalog.keep_versions_of(&current);
            self.slot.replace(Arc::new(catalog));
        }
        tracing::info!(plugin = name, from = ?origin, "plugin removed: it takes no new calls");
        if let Some(status) = self.status(name) {
            self.announce(&status);
        }
        if origin != Source::Cluster {
            self.publish(name, None).await;
        }
        Change::Removed
    }

    fn fail(
        &self,
        name: &str,
        message: String,
        hash: Option<String>,
        source: FailureSource,
    ) -> Change {
        let status = {
            let mut entries = self.lock_entries();
            let entry = entries.entry(name.to_owned()).or_default();
            entry.last_error = Some(LoadFailure {
                message: message.clone(),
                at_ms: now_ms(),
                content_hash: hash,
                source,
            });
            entry.removed = false;
            self.status_of(name, entry)
        };
        telemetry::plugin_load("failed");
        match status.status {
            ServingState::Serving => tracing::warn!(
                plugin = name,
                "new version refused, the previous one keeps serving: {message}"
            ),
            _ => tracing::warn!(plugin = name, "plugin not loaded: {message}"),
        }
        self.announce(&status);
        Change::Failed(message)
    }

    /// Keeps version `hash` of `name` in the archive and, with `share` and where there is one,
    /// the shared store (a version that came from there is there already).
    async fn archive_version(
        &self,
        name: &str,
        hash: &str,
        bytes: Vec<u8>,
        share: bool,
    ) -> Result<(), String> {
        let archive = self.archive.clone();
        let path = archive.join(format!("{hash}.wasm"));
        let shared = self.shared.clone().filter(|_| share);
        let (name, hash) = (name.to_owned(), hash.to_owned());
        tokio::task::spawn_blocking(move || {
            if let Some(store) = shared {
                store
                    .keep_component(&hash, &name, &bytes)
                    .map_err(|error| format!("not kept in the store: {error}"))?;
            }
            if path.is_file() {
                return Ok(());
            }
            std::fs::create_dir_all(&archive)
                .map_err(|error| format!("cannot create {}: {error}", archive.display()))?;
            write_atomically(&path, &bytes)
        })
        .await
        .map_err(|error| error.to_string())?
    }

    fn status_of(&self, name: &str, entry: &Entry) -> PluginStatus {
        let serving = entry.serving.as_ref();
        PluginStatus {
            name: name.to_owned(),
            file: format!("{name}.wasm"),
            status: match (serving, entry.removed) {
                (Some(_), _) => ServingState::Serving,
                (None, true) => ServingState::Removed,
                (None, false) => ServingState::Failed,
            },
            content_hash: serving.map(|plugin| plugin.content_hash().to_owned()),
            tools: serving
                .map(|plugin| plugin.specs().iter().map(|s| s.name.clone()).collect())
                .unwrap_or_default(),
            loaded_at_ms: serving.and(entry.loaded_at_ms),
            last_error: entry.last_error.clone(),
        }
    }

    fn announce(&self, status: &PluginStatus) {
        if let Some(listener) = &*self.listener.lock().unwrap_or_else(|e| e.into_inner()) {
            listener(status);
        }
    }

    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.wasm"))
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The plugin name of a `*.wasm` file (its stem), or `None` for any other file.
pub fn plugin_file_name(path: &Path) -> Option<String> {
    if path.extension().is_none_or(|ext| ext != "wasm") {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    (!stem.starts_with('.')).then(|| stem.to_owned())
}

fn check_name(name: &str) -> Result<(), PluginRequestError> {
    let fits = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        Ok(())
    } else {
        Err(PluginRequestError::BadName(name.to_owned()))
    }
}

#[async_trait::async_trait]
impl crate::worker::Versions for PluginHost {
    async fn restore(&self, name: &str, content_hash: &str) -> Result<(), String> {
        self.restore_version(name, content_hash)
            .await
            .map_err(|error| {
                format!("plugin `{name}` version {content_hash} cannot resume here: {error}")
            })
    }
}

/// `bytes`, if they are version `content_hash`; `from` names where they were read.
async fn verified(bytes: Vec<u8>, expected: &str, from: &str) -> Result<Vec<u8>, String> {
    // SHA-256 of a large component takes milliseconds: off the async threads.
    let (bytes, found) = tokio::task::spawn_blocking(move || {
        let found = content_hash(&bytes);
        (bytes, found)
    })
    .await
    .map_err(|error| error.to_string())?;
    if found == expected {
        Ok(bytes)
    } else {
        Err(format!(
            "{from} is not version {expected}: its bytes hash to {found}; refused"
        ))
    }
}

/// Writes through a hidden temporary file and a rename, so a reader (the folder watcher, a
/// restart) sees the old file or the new one, never a part.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = dir.join(format!(".{file}.{}.partial", std::process::id()));
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|error| {
            let _ = std::fs::remove_file(&temporary);
            format!("cannot write {}: {error}", path.display())
        })
}

fn serving_count(entries: &BTreeMap<String, Entry>) -> usize {
    entries
        .values()
        .filter(|entry| entry.serving.is_some())
        .count()
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

#[cfg(test)]
mod tests;
