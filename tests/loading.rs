//! Loading: what is not a plugin is refused with an error that says what is
//! wrong, and compiled components come back from the cache.

use std::path::Path;

use maestro::plugin::{
    CallRequest, CompiledFrom, LoadError, Outcome, PluginPolicy, Runtime, RuntimeConfig,
};
use maestro_e2e::{artifacts, runtime};

async fn load_error(path: &str) -> LoadError {
    runtime()
        .load_file(Path::new(path), PluginPolicy::default())
        .await
        .expect_err("must not load")
}

#[tokio::test]
async fn a_core_module_is_not_a_component() {
    let err = load_error(artifacts::NOT_A_COMPONENT).await;
    assert!(matches!(err, LoadError::CoreModule), "{err}");
    assert!(
        err.to_string()
            .contains("core WebAssembly module, not a component")
    );
}

/// The detail, imports and exports of the wrong-world error `path` must give.
async fn wrong_world(path: &str) -> (String, String, String) {
    match load_error(path).await {
        LoadError::World {
            detail,
            imports,
            exports,
        } => (detail, imports, exports),
        other => panic!("expected a wrong-world error, got {other}"),
    }
}

#[tokio::test]
async fn a_component_of_another_world_names_what_it_exports() {
    let (detail, _, exports) = wrong_world(artifacts::WRONG_WORLD).await;
    assert!(detail.contains("maestro:tool/tool@0.1.0"), "{detail}");
    assert!(exports.contains("acme:widget/run@1.0.0"), "{exports}");
}

#[tokio::test]
async fn wrong_function_types_are_refused_naming_the_function() {
    let (detail, _, exports) = wrong_world(artifacts::WRONG_TYPES).await;
    assert!(
        detail.contains("`maestro:tool/tool@0.1.0#describe` must be `func() -> list<tool-spec>`"),
        "{detail}"
    );
    assert!(exports.contains("maestro:tool/tool@0.1.0"), "{exports}");
}

#[tokio::test]
async fn an_unknown_import_is_named() {
    let (detail, imports, _) = wrong_world(artifacts::UNKNOWN_IMPORT).await;
    assert!(detail.contains("acme:secrets/vault@1.0.0"), "{detail}");
    assert!(imports.contains("acme:secrets/vault@1.0.0"), "{imports}");
}

#[tokio::test]
async fn garbage_and_missing_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "these are not the bytes you are looking for").unwrap();
    let err = load_error(text.to_str().unwrap()).await;
    assert!(matches!(err, LoadError::NotWasm(_)), "{err}");
    assert!(err.to_string().contains("these are not th"), "{err}");

    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        load_error(empty.to_str().unwrap()).await,
        LoadError::NotWasm(_)
    ));

    let truncated = dir.path().join("truncated.wasm");
    let bytes = std::fs::read(artifacts::ECHO).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert!(matches!(
        load_error(truncated.to_str().unwrap()).await,
        LoadError::Compile(_)
    ));

    let missing = dir.path().join("missing.wasm");
    let err = load_error(missing.to_str().unwrap()).await;
    assert!(
        matches!(err, LoadError::Read { .. }) && err.to_string().contains("missing.wasm"),
        "{err}"
    );
}

#[tokio::test]
async fn a_component_too_costly_to_compile_is_refused_before_the_compiler_sees_it() {
    // One loop over 5,000 locals and 120,000 operators, all kept live: about 80 s of Cranelift
    // on this machine, were it compiled.
    let mut body = String::new();
    for step in 0..30_000u32 {
        let (a, b, c) = (
            step * 7 % 5_000,
            (step * 13 + 1) % 5_000,
            (step * 31 + 3) % 5_000,
        );
        body.push_str(&format!(
            "local.get {a} local.get {b} i32.add local.set {c}\n"
        ));
    }
    let locals = "i32 ".repeat(5_000);
    let text = format!(
        "(component (core module (func (export \"f\") (local {locals}) \
         (loop {body} local.get 0 br_if 0))))"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("costly.wasm");
    std::fs::write(&path, wat::parse_str(text).unwrap()).unwrap();
    let err = load_error(path.to_str().unwrap()).await;
    assert_eq!(err.code(), "too-complex", "{err}");
    assert!(
        err.to_string()
            .contains("function 0 of core module 1 (5000 locals, 120005 operators)"),
        "{err}"
    );
}

#[tokio::test]
async fn compiled_components_come_back_from_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let path = Path::new(artifacts::ECHO);
    let cold = runtime
        .load_file(path, PluginPolicy::default())
        .await
        .unwrap();
    assert_eq!(cold.load_report().compiled_from, CompiledFrom::Compiler);
    let warm = runtime
        .load_file(path, PluginPolicy::default())
        .await
        .unwrap();
    assert_eq!(warm.load_report().compiled_from, CompiledFrom::Cache);
    assert_eq!(cold.content_hash(), warm.content_hash());

    // A damaged entry is discarded and rebuilt, never trusted; the loaded
    // plugins do not notice. Entries are mapped, so a damaged one arrives the
    // way every entry is written: a new file renamed over the name (changing a
    // mapped file in place is outside the cache's contract).
    let hash = cold.content_hash().to_string();
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(
        entries[0]
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&hash)
    );
    let damaged = cache.path().join("damaged.tmp");
    std::fs::write(&damaged, b"garbage").unwrap();
    std::fs::rename(&damaged, &entries[0]).unwrap();
    let rebuilt = runtime
        .load_file(path, PluginPolicy::default())
        .await
        .unwrap();
    assert_eq!(rebuilt.load_report().compiled_from, CompiledFrom::Compiler);
    let again = runtime
        .load_file(path, PluginPolicy::default())
        .await
        .unwrap();
    assert_eq!(again.load_report().compiled_from, CompiledFrom::Cache);
    for plugin in [&cold, &warm, &rebuilt, &again] {
        let echoed = plugin
            .invoke(CallRequest::new(
                "echo",
                serde_json::json!({"text": "same"}),
            ))
            .await
            .unwrap();
        assert_eq!(echoed, Outcome::Output("same".into()));
    }
}
