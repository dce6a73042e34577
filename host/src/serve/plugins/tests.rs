use super::*;

#[test]
fn plugin_files_are_visible_wasm_files() {
    assert_eq!(
        plugin_file_name(Path::new("/p/echo.wasm")),
        Some("echo".into())
    );
    assert_eq!(plugin_file_name(Path::new("/p/echo.wat")), None);
    assert_eq!(plugin_file_name(Path::new("/p/.echo.wasm.1.partial")), None);
    assert_eq!(plugin_file_name(Path::new("/p/.hidden.wasm")), None);
}

/// A plugin host over an empty plugin folder (`dir`) in a new folder, with its archive.
fn host_in_a_new_folder() -> (tempfile::TempDir, PathBuf, PluginHost) {
    let folder = tempfile::tempdir().unwrap();
    let dir = folder.path().join("plugins");
    std::fs::create_dir(&dir).unwrap();
    let runtime = Runtime::new(crate::plugin::RuntimeConfig::default()).unwrap();
    let host = PluginHost::new(
        runtime,
        dir.clone(),
        folder.path().join("versions"),
        Policy::default(),
    );
    (folder, dir, host)
}

#[tokio::test]
async fn a_failed_version_never_serves_and_a_removed_one_stays_resumable() {
    let (folder, dir, host) = host_in_a_new_folder();
    let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
    let path = dir.join("echo.wasm");
    std::fs::write(&path, &echo).unwrap();
    assert_eq!(host.sync("echo").await, Change::Loaded);
    let hash = content_hash(&echo);
    assert!(host.slot().current().plugin_for("echo").is_some());
    assert!(
        folder
            .path()
            .join(format!("versions/{hash}.wasm"))
            .is_file()
    );

    // A half-written file: refused, reported, and the loaded version keeps serving.
    std::fs::write(&path, &echo[..echo.len() / 2]).unwrap();
    assert!(matches!(host.sync("echo").await, Change::Failed(_)));
    let status = host.status("echo").unwrap();
    assert_eq!(status.status, ServingState::Serving);
    assert_eq!(status.content_hash.as_deref(), Some(hash.as_str()));
    assert!(status.last_error.is_some());
    // The whole file again: nothing to reload, and the failure is no longer shown.
    std::fs::write(&path, &echo).unwrap();
    assert_eq!(host.sync("echo").await, Change::Unchanged);
    assert!(host.status("echo").unwrap().last_error.is_none());

    std::fs::remove_file(&path).unwrap();
    assert_eq!(host.sync("echo").await, Change::Removed);
    let catalog = host.slot().current();
    assert!(catalog.plugin_for("echo").is_none(), "takes no new calls");
    assert!(
        catalog.pinned(&hash).is_some(),
        "a parked call still resumes on it"
    );
    assert_eq!(host.status("echo").unwrap().status, ServingState::Removed);
}

#[tokio::test]
async fn a_second_plugin_offering_a_tool_already_offered_is_refused_and_the_first_serves() {
    let (_folder, dir, host) = host_in_a_new_folder();
    let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
    std::fs::write(dir.join("echo.wasm"), &echo).unwrap();
    std::fs::write(dir.join("echo2.wasm"), &echo).unwrap();
    assert_eq!(host.sync("echo").await, Change::Loaded);
    assert_eq!(
        host.sync("echo2").await,
        Change::Failed("tool `echo` is offered by two plugins: `echo` and `echo2`".into())
    );
    let catalog = host.slot().current();
    assert_eq!(catalog.plugin_for("echo").unwrap().name(), "echo");
    let refused = host.status("echo2").unwrap();
    assert_eq!(refused.status, ServingState::Failed);
    assert!(refused.last_error.is_some());
    // Once the first is gone, the second may offer it.
    std::fs::remove_file(dir.join("echo.wasm")).unwrap();
    assert_eq!(host.sync("echo").await, Change::Removed);
    assert_eq!(host.sync("echo2").await, Change::Loaded);
    assert_eq!(
        host.slot().current().plugin_for("echo").unwrap().name(),
        "echo2"
    );
}

#[tokio::test]
async fn a_refused_upload_stays_reported_until_the_next_upload() {
    let (_folder, dir, host) = host_in_a_new_folder();
    let echo = std::fs::read(maestro_plugins::ECHO).unwrap();
    let (change, _) = host.upload("echo", echo.clone()).await.unwrap();
    assert_eq!(change, Change::Loaded);
    let broken = std::fs::read(maestro_plugins::WRONG_WORLD).unwrap();
    let (change, status) = host.upload("echo", broken).await.unwrap();
    assert!(matches!(change, Change::Failed(_)), "{change:?}");
    assert_eq!(status.status, ServingState::Serving);
    assert_eq!(std::fs::read(dir.join("echo.wasm")).unwrap(), echo);
    let failure = status.last_error.expect("the refusal is reported");
    assert_eq!(failure.source, FailureSource::Upload);

    // The folder's sync of the first upload's file (the watcher's, arriving late) finds
    // the serving version: the refused upload is still the news.
    assert_eq!(host.sync("echo").await, Change::Unchanged);
    assert_eq!(host.status("echo").unwrap().last_error, Some(failure));
    // Uploading the serving version again answers it.
    let (change, status) = host.upload("echo", echo).await.unwrap();
    assert_eq!(change, Change::Unchanged);
    assert_eq!(status.last_error, None);
}

#[test]
fn names_are_checked_before_touching_the_folder() {
    assert!(check_name("render_table-2").is_ok());
    for bad in ["", "../x", "a/b", "a.b", &"x".repeat(65)] {
        assert!(
            matches!(check_name(bad), Err(PluginRequestError::BadName(_))),
            "{bad}"
        );
    }
}
