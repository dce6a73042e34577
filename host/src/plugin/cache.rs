//! Compiled components cached on disk by content hash.
//!
//! Invariant: an entry's file name is the SHA-256 of the component bytes plus
//! a hash of the engine's compilation settings, so a cached artifact is only
//! ever loaded into an engine that could have produced it; entries are
//! written to a temporary file and renamed, so a reader never sees half of
//! one. Entries are mapped, not read: a 35 MB Python component loads in
//! milliseconds. That is safe because no entry is ever changed in place — a
//! new one replaces the name by rename and a deleted one lives on while it is
//! mapped — so a mapped entry cannot shrink under the host. An entry is native
//! code that wasmtime trusts, so the directory is created `0700`, a directory
//! owned by another user or writable by others is refused, and an entry that
//! is not the current user's own, or that others may write, is compiled again
//! instead of loaded.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
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
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        if let Some(problem) = untrusted(&std::fs::metadata(&dir)?) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "the directory {problem}: compiled code loaded from it would run as native code in this process; fix its owner and mode, or choose another"
                ),
            ));
        }
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

    /// The compiled component, from the cache or from `compile` (and then
    /// stored; a failure to store is logged, not fatal).
    pub fn get_or_compile<E>(
        &self,
        engine: &Engine,
        content_hash: &str,
        compile: impl FnOnce() -> Result<Component, E>,
    ) -> Result<(Component, CompiledFrom), E> {
        let path = self.entry(content_hash);
        let trusted = match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => match untrusted(&meta) {
                None => true,
                Some(problem) => {
                    tracing::warn!(path = %path.display(), "compiling again instead of loading a cache entry that {problem}");
                    false
                }
            },
            _ => false,
        };
        if trusted {
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
        let component = compile()?;
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

/// Why a cache directory or entry with this metadata may hold code someone else wrote.
fn untrusted(meta: &std::fs::Metadata) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!(
            "is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "is writable by its group or by others (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    None
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
        .mode(0o600)
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The smallest component: the header alone.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_cache_others_may_write_is_refused_and_a_loose_entry_is_compiled_again() {
        let engine = Engine::default();
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        set_mode(&open, 0o777);
        let error = CompiledCache::new(open, &engine).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("writable by its group or by others"),
            "{error}"
        );

        let dir = root.path().join("cache");
        let cache = CompiledCache::new(dir.clone(), &engine).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let hash = content_hash(EMPTY_COMPONENT);
        let from = |cache: &CompiledCache| {
            cache
                .get_or_compile(&engine, &hash, || Component::new(&engine, EMPTY_COMPONENT))
                .unwrap()
                .1
        };
        assert_eq!(from(&cache), CompiledFrom::Compiler);
        assert_eq!(from(&cache), CompiledFrom::Cache);
        let entry = cache.entry(&hash);
        assert_eq!(std::fs::metadata(&entry).unwrap().mode() & 0o777, 0o600);
        // An entry someone else could have written is not loaded; the new one replaces it.
        set_mode(&entry, 0o666);
        assert_eq!(from(&cache), CompiledFrom::Compiler);
        assert_eq!(from(&cache), CompiledFrom::Cache);
    }
}
