//! Builds every plugin into `<target dir>/plugins/<name>.wasm` and writes
//! `$OUT_DIR/artifacts.rs` with their paths.
//!
//! The Rust guests in `plugins/guests` form a workspace of their own, built by
//! a nested `cargo build --release --target wasm32-wasip2` into
//! `<target dir>/wasm-plugins`: a separate target dir so the nested cargo
//! never waits on the lock the outer one holds. The WAT fixtures in
//! `plugins/fixtures` are assembled with the `wat` crate.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-wasip2";

/// Artifact name (its file is `<name>.wasm`, its constant `NAME`) and the
/// guest crate that builds it. A cdylib's file name is its crate name with
/// `-` turned into `_`, which is how the names below were chosen.
const GUESTS: &[(&str, &str)] = &[
    ("complete", "complete"),
    ("browse_web", "browse-web"),
    ("request_tool", "request-tool"),
    ("wait_subtask", "wait-subtask"),
    ("spawn_subtask", "spawn-subtask"),
    ("hand_in", "hand-in"),
    ("run_worker", "run-worker"),
    ("echo", "echo"),
    ("hostile", "hostile"),
];

/// The tools every maestro job gets: its control flow.
const FIRST_PARTY: &[&str] = &[
    "complete",
    "browse_web",
    "request_tool",
    "wait_subtask",
    "spawn_subtask",
    "hand_in",
    "run_worker",
];

/// Environment that the outer cargo sets for this build script (or that
/// configures the outer build) and that would leak into the nested build:
/// host rustflags and cfgs, clippy's wrapper, the target dir, the jobserver.
const SCRUBBED_VARS: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_BUILD_DIR",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC_LINKER",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_CRATE_NAME",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "NUM_JOBS",
    "OPT_LEVEL",
    "DEBUG",
    "PROFILE",
];

/// Prefixes of the same kind: the outer package's metadata, features and
/// target cfgs (a stale `CARGO_CFG_UNIX` would mislead the build scripts of
/// wasm crates), and profile overrides meant for the outer build.
const SCRUBBED_PREFIXES: &[&str] = &[
    "CARGO_CFG_",
    "CARGO_FEATURE_",
    "CARGO_PKG_",
    "CARGO_PROFILE_",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let guests_dir = manifest_dir.join("guests");
    let fixtures_dir = manifest_dir.join("fixtures");
    let wit_dir = manifest_dir
        .parent()
        .expect("plugins/ lives inside the workspace")
        .join("wit");

    watch_inputs(&guests_dir, &fixtures_dir, &wit_dir);

    let target_dir = workspace_target_dir();
    // First-party tools alone in `plugins/`, so the folder can be handed to `maestro run` as
    // is; test-only plugins and malformed fixtures in `plugins/test/`.
    let plugins_dir = target_dir.join("plugins");
    let test_dir = plugins_dir.join("test");
    fs::create_dir_all(&test_dir)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", test_dir.display()));
    let dir_for = |name: &str| {
        if FIRST_PARTY.contains(&name) {
            plugins_dir.clone()
        } else {
            // An older build put every artifact in `plugins/`.
            let _ = fs::remove_file(plugins_dir.join(format!("{name}.wasm")));
            test_dir.clone()
        }
    };

    ensure_wasm_target();
    let guest_target_dir = target_dir.join("wasm-plugins");
    build_guests(&guests_dir, &guest_target_dir);

    let mut artifacts = Vec::new();
    let built = guest_target_dir.join(WASM_TARGET).join("release");
    for (name, _crate) in GUESTS {
        let from = built.join(format!("{name}.wasm"));
        let bytes = fs::read(&from).unwrap_or_else(|err| {
            panic!(
                "the guest build succeeded but {} is missing: {err}",
                from.display()
            )
        });
        artifacts.push((name.to_string(), install(&dir_for(name), name, &bytes)));
    }
    for (name, wat_path) in fixtures(&fixtures_dir) {
        let bytes = wat::parse_file(&wat_path)
            .unwrap_or_else(|err| panic!("cannot assemble {}: {err}", wat_path.display()));
        let path = install(&dir_for(&name), &name, &bytes);
        artifacts.push((name, path));
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let code = artifacts_rs(&plugins_dir, &test_dir, &artifacts);
    fs::write(out_dir.join("artifacts.rs"), code).expect("write artifacts.rs");
}

/// Re-runs this script when a guest's sources or manifests, a fixture, or the
/// WIT contract change; nothing else feeds the plugins.
fn watch_inputs(guests_dir: &Path, fixtures_dir: &Path, wit_dir: &Path) {
    for file in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", guests_dir.join(file).display());
    }
    // Each crate's directory rather than `guests/` as a whole: a developer's
    // `guests/target`, if any, must not trigger rebuilds.
    let entries = fs::read_dir(guests_dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", guests_dir.display()));
    for entry in entries {
        let path = entry.expect("read plugins/guests").path();
        if path.join("Cargo.toml").is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-changed={}", fixtures_dir.display());
    println!("cargo:rerun-if-changed={}", wit_dir.display());
}

/// The target directory of the workspace being built: `CARGO_TARGET_DIR`
/// when it is absolute, otherwise worked out from `OUT_DIR`, which is
/// `<target>[/<triple>]/<profile>/build/<package>-<hash>/out`.
fn workspace_target_dir() -> PathBuf {
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)
        && dir.is_absolute()
    {
        return dir;
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .unwrap_or_else(|| panic!("unexpected OUT_DIR layout: {}", out_dir.display()));
    let parent = profile_dir
        .parent()
        .unwrap_or_else(|| panic!("unexpected OUT_DIR layout: {}", out_dir.display()));
    let target = env::var_os("TARGET").unwrap_or_default();
    if parent.file_name() == Some(target.as_os_str()) {
        parent
            .parent()
            .expect("a triple dir has a parent")
            .to_path_buf()
    } else {
        parent.to_path_buf()
    }
}

/// Makes sure the toolchain building this crate can also build for
/// `wasm32-wasip2`, installing the target through rustup if needed.
fn ensure_wasm_target() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let installed = || -> bool {
        let Ok(output) = Command::new(&rustc).args(["--print", "sysroot"]).output() else {
            return false;
        };
        let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        output.status.success()
            && Path::new(&sysroot)
                .join("lib/rustlib")
                .join(WASM_TARGET)
                .is_dir()
    };
    if installed() {
        return;
    }

    // rustup picks the toolchain from RUSTUP_TOOLCHAIN, which its proxy set
    // for this build, so the target lands in the toolchain in use.
    let toolchain = env::var("RUSTUP_TOOLCHAIN").ok();
    let command = match &toolchain {
        Some(toolchain) => format!("rustup target add {WASM_TARGET} --toolchain {toolchain}"),
        None => format!("rustup target add {WASM_TARGET}"),
    };
    println!("cargo:warning=the {WASM_TARGET} target is missing; running `{command}`");
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", WASM_TARGET]);
    if let Some(toolchain) = &toolchain {
        rustup.args(["--toolchain", toolchain]);
    }
    let failure = match rustup.output() {
        Ok(output) if output.status.success() && installed() => return,
        Ok(output) => format!(
            "it exited with {}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(err) => format!("it could not be started: {err}"),
    };
    panic!(
        "maestro's plugins need the {WASM_TARGET} Rust target, which is not installed, and \
         installing it with `{command}` failed: {failure}\nRun `{command}` yourself, then build again."
    );
}

/// Runs the nested cargo on the guests workspace.
fn build_guests(guests_dir: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(guests_dir)
        .args(["build", "--release", "--locked", "--target", WASM_TARGET])
        .arg("--manifest-path")
        .arg(guests_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if SCRUBBED_VARS.contains(&key) || SCRUBBED_PREFIXES.iter().any(|p| key.starts_with(p)) {
            cmd.env_remove(key);
        }
    }
    let output = cmd
        .output()
        .unwrap_or_else(|err| panic!("cannot run {cmd:?}: {err}"));
    if !output.status.success() {
        panic!(
            "building the guest plugins failed ({}).\ncommand: {cmd:?}\n--- stdout\n{}\n--- stderr\n{}\n\
             If Cargo.lock is out of date after a change to a guest's Cargo.toml, run \
             `cargo update --workspace --manifest-path plugins/guests/Cargo.toml`.",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
    }
}

/// The `*.wat` files of the fixtures directory as (artifact name, path),
/// sorted so the generated code does not change from one build to the next.
fn fixtures(fixtures_dir: &Path) -> Vec<(String, PathBuf)> {
    let entries = fs::read_dir(fixtures_dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", fixtures_dir.display()));
    let mut found: Vec<(String, PathBuf)> = entries
        .map(|entry| entry.expect("read plugins/fixtures").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "wat"))
        .map(|path| {
            let name = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .unwrap_or_else(|| panic!("fixture name is not UTF-8: {}", path.display()))
                .to_owned();
            (name, path)
        })
        .collect();
    found.sort();
    found
}

/// Writes `<dir>/<name>.wasm` through a temporary file and a rename, so a test
/// reading the plugin while another build writes it never sees half a file.
fn install(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    assert!(
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "artifact name {name:?} must be lower snake case: it becomes a Rust constant"
    );
    let path = dir.join(format!("{name}.wasm"));
    let temporary = dir.join(format!(".{name}.wasm.{}.tmp", std::process::id()));
    fs::write(&temporary, bytes)
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", temporary.display()));
    fs::rename(&temporary, &path)
        .unwrap_or_else(|err| panic!("cannot write {}: {err}", path.display()));
    path
}

fn artifacts_rs(plugins_dir: &Path, test_dir: &Path, artifacts: &[(String, PathBuf)]) -> String {
    let literal = |path: &Path| -> String {
        let text = path
            .to_str()
            .unwrap_or_else(|| panic!("path is not UTF-8: {}", path.display()));
        format!("{text:?}")
    };
    let mut code = String::from("// Generated by plugins/build.rs.\n\n");
    code += "/// The first-party plugins, and nothing else: `<cargo target dir>/plugins`.\n";
    code += &format!("pub const DIR: &str = {};\n", literal(plugins_dir));
    code += "\n/// Test-only plugins and malformed fixtures: `<cargo target dir>/plugins/test`.\n";
    code += &format!("pub const TEST_DIR: &str = {};\n", literal(test_dir));
    for (name, path) in artifacts {
        let origin = match GUESTS.iter().find(|(guest, _)| *guest == name.as_str()) {
            Some((_, krate)) => format!("built from the guest crate `plugins/guests/{krate}`"),
            None => format!("assembled from `plugins/fixtures/{name}.wat`"),
        };
        code += &format!("\n/// `{name}.wasm`, {origin}.\n");
        code += &format!(
            "pub const {}: &str = {};\n",
            name.to_uppercase(),
            literal(path)
        );
    }
    let first_party: Vec<String> = FIRST_PARTY.iter().map(|name| name.to_uppercase()).collect();
    code += "\n/// The first-party control-flow tools, which every job gets.\n";
    code += &format!(
        "pub const FIRST_PARTY: &[&str] = &[{}];\n",
        first_party.join(", ")
    );
    code
}
