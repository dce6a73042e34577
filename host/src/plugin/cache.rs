//! Compiled components cached on disk by content hash.
//!
//! Invariant: an entry's file name is the SHA-256 of the component bytes plus
//! a hash of the engine's compilation settings, so a cached artifact is only
//! ever loaded into an engine that could have produced it; entries are
//! written to a temporary file and renamed, so a reader never sees half of
//! one. Entries are mapped, not read: a 35 MB Python component loads in
//! milliseconds. That is safe because no entry is ever changed in place — a
//! new one replaces the name by rename and a deleted one lives on while it is
//! mapped — so a mapped entry cannot shrink under the host. The directory must
//! be writable only by the operator: wasmtime trusts what it deserializes, and
//! an operator who truncates an entry in place would crash the host (SIGBUS).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// SHA-256 of a plugin's bytes, lower-case hex: its content address.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[derive(Debug, Clone)]
pub struct CompiledCache {
    dir: PathBuf,
    engine_key: String,
}

/// Where a component came from, for load statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompiledFrom {
    Cache,
    Compiler,
}

impl CompiledCache {
    pub fn new(dir: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Ok(Self { dir, engine_key })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn entry(&self, content_hash: &str) -> PathBuf {
        self.dir
            .join(format!("{content_hash}-{}.cwasm", self.engine_key))
    }

    /// The compiled component, from the cache or freshly compiled (and then
    /// stored; a failure to store is logged, not fatal).
    pub fn get_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        content_hash: &str,
    ) -> wasmtime::Result<(Component, CompiledFrom)> {
        let path = self.entry(content_hash);
        if path.is_file() {
            // SAFETY: the entry was written by `Component::serialize` for an
            // engine with the same compatibility hash (it is in the name), in
            // a directory only the operator writes, and it is never modified
            // in place (see the module invariant), so the mapping stays valid.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CompiledFrom::Cache)),
                Err(err) => {
                    tracing::warn!(path = %path.display(), "discarding unusable cache entry: {err}")
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Err(err) = self.store(&path, &component) {
            tracing::warn!(path = %path.display(), "cannot write compiled cache entry: {err:#}");
        }
        Ok((component, CompiledFrom::Compiler))
    }

    fn store(&self, path: &Path, component: &Component) -> anyhow::Result<()> {
        let serialized = component.serialize()?;
        let (temp_path, mut file) = tempfile_in(&self.dir)?;
        let written = std::io::Write::write_all(&mut file, &serialized)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temp_path, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temp_path);
        }
        Ok(written?)
    }
}

fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// Feeds `Hash` output into SHA-256: unlike `DefaultHasher`, stable across
/// builds and processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        unreachable!("only finalized as SHA-256")
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
