//! Loading a folder of plugins for a command, with its progress shown: a component can take
//! seconds to compile the first time.
//!
//! Invariant: every `*.wasm` of the folder is loaded once, in name order, and each result is
//! handed back, failures included; progress goes to stderr only, as a bar when stderr is a
//! terminal, else one line per component that had to be compiled (a load from the compiled
//! cache takes milliseconds and says nothing).

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::Failure;
use super::plugin::plugin_name;
use crate::plugin::{CompiledFrom, LoadError, Plugin, Policy, Runtime};

/// One component of the folder: its path, its plugin name, and how its load went.
pub struct Loaded {
    pub path: PathBuf,
    pub name: String,
    pub plugin: Result<Plugin, LoadError>,
}

/// Loads every `*.wasm` in `dir` under `policy`.
pub async fn load_folder(
    runtime: &Runtime,
    dir: &Path,
    policy: &Policy,
) -> Result<Vec<Loaded>, Failure> {
    let entries = std::fs::read_dir(dir).map_err(|err| {
        Failure::usage(format!(
            "cannot read plugin folder {}: {err}",
            dir.display()
        ))
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .collect();
    paths.sort();
    let progress = Progress::start(paths.len());
    let mut loaded = Vec::with_capacity(paths.len());
    for path in paths {
        let name = plugin_name(&path);
        progress.loading(&name);
        let plugin = runtime.load_file(&path, policy.for_plugin(&name)).await;
        if let Ok(plugin) = &plugin {
            let report = plugin.load_report();
            if report.compiled_from == CompiledFrom::Compiler {
                progress.compiled(&name, report.compile_or_load);
            }
        }
        progress.done();
        loaded.push(Loaded { path, name, plugin });
    }
    progress.finish();
    Ok(loaded)
}

/// A bar on a terminal, plain lines otherwise.
struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    fn start(total: usize) -> Self {
        let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let bar = (terminal && total > 0).then(|| {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template(
                "{spinner} loading plugins {bar:24} {pos}/{len} {wide_msg}",
            )
            .expect("the template is valid");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self { bar }
    }

    fn loading(&self, name: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(name.to_owned());
        }
    }

    fn compiled(&self, name: &str, took: Duration) {
        let line = format!("compiled {name} in {}", shown(took));
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

fn shown(took: Duration) -> String {
    if took >= Duration::from_secs(1) {
        format!("{:.1} s", took.as_secs_f64())
    } else {
        format!("{} ms", took.as_millis())
    }
}
