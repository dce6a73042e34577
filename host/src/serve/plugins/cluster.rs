//! Plugins across nodes: a version installed on one node (its folder, or an upload) becomes the
//! serving version on every node that shares the store, and a removal removes it everywhere.
//!
//! Invariant: the store's record of each plugin (`JobStore::published_plugins`) is the
//! cluster's choice, and the last publication wins; a notification only says which record to
//! read again. A node publishes only its own installs, and only after it has caught up with the
//! record at start ([`PluginHost::join_cluster`]); a version it adopts from the record it never
//! publishes again, so two nodes cannot echo each other. Bytes from the store run only once
//! they hash to the version the record names.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use tokio::sync::broadcast::{self, error::RecvError};

use super::{Change, FailureSource, PluginHost, Source, short};
use crate::store::{JobChange, PublishedPlugin};

impl PluginHost {
    /// Catches up with the versions the other nodes sharing the store serve, then follows them
    /// until the returned task is stopped; `None` where the store is not shared (SQLite). Call
    /// after [`PluginHost::sync_all`]. Returns one warning per plugin that could not be brought
    /// in line.
    ///
    /// At start a plugin whose file in this node's folder is newer than the store's record (or
    /// that the record does not name) is published as this node's install; otherwise the
    /// record's version replaces the file.
    pub async fn join_cluster(
        self: &Arc<Self>,
    ) -> Option<(tokio::task::JoinHandle<()>, Vec<String>)> {
        let store = self.shared.clone()?;
        // Subscribed before the record is read, so a publication in between is heard.
        let changes = store.changes()?;
        let _one = self.one_change_at_a_time.lock().await;
        // From here on this node's installs are published; the folder's were loaded before.
        self.joined.store(true, Ordering::Release);
        let mut warnings = Vec::new();
        let records = match self.read_records().await {
            Ok(records) => records,
            Err(error) => {
                warnings.push(error);
                Vec::new()
            }
        };
        let local = self.statuses();
        for status in &local {
            let record = records.iter().find(|record| record.name == status.name);
            let newer_here = |record: &PublishedPlugin| {
                self.file_changed_at_ms(&status.name)
                    .is_some_and(|at| at > record.at_ms)
            };
            match (&status.content_hash, record) {
                (Some(hash), Some(record)) if record.content_hash.as_ref() == Some(hash) => {}
                (Some(hash), None) => self.publish(&status.name, Some(hash)).await,
                (Some(hash), Some(record)) if newer_here(record) => {
                    self.publish(&status.name, Some(hash)).await;
                }
                (_, Some(record)) => {
                    if let Change::Failed(message) = self.adopt(record).await {
                        warnings.push(format!("plugin {}: {message}", status.name));
                    }
                }
                (None, None) => {}
            }
        }
        for record in &records {
            if local.iter().all(|status| status.name != record.name)
                && let Change::Failed(message) = self.adopt(record).await
            {
                warnings.push(format!("plugin {}: {message}", record.name));
            }
        }
        let follower = tokio::spawn(self.clone().follow(changes));
        Some((follower, warnings))
    }

    /// Adopts each version another node publishes, as it is published.
    async fn follow(self: Arc<Self>, mut changes: broadcast::Receiver<JobChange>) {
        loop {
            match changes.recv().await {
                Ok(JobChange::Plugin { name }) => self.catch_up(Some(&name)).await,
                Ok(JobChange::Missed) | Err(RecvError::Lagged(_)) => self.catch_up(None).await,
                Ok(JobChange::Saved { .. }) => {}
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Reads the record of `only` (of every plugin with `None`) and adopts what differs. The
    /// record is read under the change lock, so an install of this node's that publishes
    /// meanwhile is not undone by the record read before it; an install this node could not
    /// publish (the store failed) is published now, and until it is, the record does not
    /// replace it.
    async fn catch_up(&self, only: Option<&str>) {
        let _one = self.one_change_at_a_time.lock().await;
        let unpublished: Vec<(String, Option<String>)> = self
            .lock_unpublished()
            .iter()
            .map(|(name, hash)| (name.clone(), hash.clone()))
            .collect();
        for (name, hash) in unpublished {
            self.publish(&name, hash.as_deref()).await;
        }
        let records = match self.read_records().await {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!("{error}");
                return;
            }
        };
        for record in records
            .iter()
            .filter(|record| only.is_none_or(|name| record.name == name))
        {
            if !self.lock_unpublished().contains_key(&record.name) {
                self.adopt(record).await;
            }
        }
    }

    async fn read_records(&self) -> Result<Vec<PublishedPlugin>, String> {
        let Some(store) = self.shared.clone() else {
            return Ok(Vec::new());
        };
        tokio::task::spawn_blocking(move || store.published_plugins())
            .await
            .map_err(|error| error.to_string())
            .and_then(|read| read.map_err(|error| error.to_string()))
            .map_err(|error| format!("cannot read the plugins other nodes serve: {error}"))
    }

    /// Makes `record` this node's version of its plugin, unless it is already. The caller
    /// holds the change lock.
    async fn adopt(&self, record: &PublishedPlugin) -> Change {
        let name = record.name.as_str();
        let serving = {
            let entries = self.lock_entries();
            entries
                .get(name)
                .and_then(|entry| entry.serving.as_ref().map(|p| p.content_hash().to_owned()))
        };
        let Some(hash) = &record.content_hash else {
            if serving.is_none() {
                return Change::Unchanged;
            }
            if let Err(error) = std::fs::remove_file(self.path_of(name))
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(
                    plugin = name,
                    "removed by another node, but its file stays: {error}"
                );
            }
            return self.retire(name, Source::Cluster).await;
        };
        if serving.as_ref() == Some(hash) {
            return Change::Unchanged;
        }
        match self.version_bytes(hash).await {
            Ok((bytes, _)) => {
                tracing::info!(
                    plugin = name,
                    version = %short(hash),
                    "another node installed a new version; loading it"
                );
                self.install(name, bytes, Source::Cluster).await
            }
            Err(error) => self.fail(
                name,
                format!("the version another node installed cannot serve here: {error}"),
                Some(hash.clone()),
                FailureSource::Cluster,
            ),
        }
    }

    /// Tells the other nodes that this node's own install made `content_hash` (`None`: no
    /// version) the version of `name`; nothing before this node has joined. An install the
    /// store does not take is kept, to be published at the next catch-up.
    pub(super) async fn publish(&self, name: &str, content_hash: Option<&str>) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        if !self.joined.load(Ordering::Acquire) {
            return;
        }
        let (owned_name, hash) = (name.to_owned(), content_hash.map(str::to_owned));
        let published = tokio::task::spawn_blocking(move || {
            store
                .publish_plugin(&owned_name, hash.as_deref())
                .map_err(|error| error.to_string())
        })
        .await
        .unwrap_or_else(|error| Err(error.to_string()));
        let mut unpublished = self.lock_unpublished();
        match published {
            Ok(()) => {
                unpublished.remove(name);
            }
            Err(error) => {
                if unpublished
                    .insert(name.to_owned(), content_hash.map(str::to_owned))
                    .is_none()
                {
                    tracing::warn!(
                        plugin = name,
                        "the change serves here, but the other nodes are not told of it yet: \
                         {error}"
                    );
                }
            }
        }
    }

    fn lock_unpublished(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, Option<String>>> {
        self.unpublished.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the folder's file of `name` last changed, Unix ms.
    fn file_changed_at_ms(&self, name: &str) -> Option<i64> {
        let modified = std::fs::metadata(self.path_of(name))
            .ok()?
            .modified()
            .ok()?;
        Some(modified.duration_since(UNIX_EPOCH).ok()?.as_millis() as i64)
    }
}
