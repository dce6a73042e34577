//! The disk under the store fills up (a small tmpfs holding a SQLite file, or a PostgreSQL
//! database's tablespace): three `maestro work` nodes running 300 parking jobs lose nothing and
//! write nothing half, say so a few times rather than on every attempt, and finish every job
//! exactly once, by themselves, once space returns; a batch run (`--until-idle`) on a full disk
//! ends after a lease with the reason instead of waiting forever.
//!
//! Mounting a tmpfs needs root (as in CI); elsewhere the tests say they were skipped.

mod cluster_support;
mod common;
mod postgres_support;
mod worker_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cluster_support::{Cluster, JOBS, NODES};
use maestro::engine::JobStatus;
use worker_support::{Workspace, wait_until};

/// A tmpfs of its own, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// A tmpfs of `size` (as `mount -o size=` takes it); `None`, said, where this process may
    /// not mount one.
    fn mount(size: &str) -> Option<Self> {
        Self::mount_with(&format!("size={size}"))
    }

    /// [`SmallDisk::mount`], owned by the `postgres` user, for a tablespace.
    fn mount_for_postgres(size: &str) -> Option<Self> {
        let id = |flag: &str| {
            let output = Command::new("id").args([flag, "postgres"]).output().ok()?;
            let text = String::from_utf8(output.stdout).ok()?;
            output.status.success().then(|| text.trim().to_owned())
        };
        let (Some(uid), Some(gid)) = (id("-u"), id("-g")) else {
            eprintln!("skipped: no `postgres` user to own the tablespace");
            return None;
        };
        Self::mount_with(&format!("size={size},mode=0700,uid={uid},gid={gid}"))
    }

    fn mount_with(options: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Self { dir }),
            Ok(output) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs (needs root): {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                None
            }
            Err(error) => {
                eprintln!("skipped: cannot run mount: {error}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A filler of this disk, which takes no space yet.
    fn filler(&self) -> Filler {
        Filler {
            path: self.path().join("filler"),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        }
    }
}

/// Takes a disk's space: all but some headroom ([`Filler::leave_only`]), then all of it, kept
/// so ([`Filler::fill_up`]: space freed later, by a log that shrinks, say, is taken again at
/// once); frees it when dropped.
struct Filler {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Filler {
    /// Takes all the free space but `headroom` bytes.
    fn leave_only(&mut self, headroom: u64) {
        let mut file = self.open();
        take_all(&mut file);
        let taken = file.metadata().unwrap().len();
        file.set_len(taken.saturating_sub(headroom)).unwrap();
    }

    /// Takes all the free space, and keeps taking what is freed, until dropped.
    fn fill_up(&mut self) {
        let mut file = self.open();
        let full = Arc::new(AtomicBool::new(false));
        let (stop, now_full) = (self.stop.clone(), full.clone());
        self.thread = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                take_all(&mut file);
                now_full.store(true, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }));
        while !full.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn open(&self) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .unwrap()
    }
}

/// Writes to `file` until the disk is full.
fn take_all(file: &mut std::fs::File) {
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    // The last partial block, byte by byte.
    while file.write_all(&[0]).is_ok() {}
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn three_nodes_ride_out_a_full_disk_and_finish_every_job_once() {
    let Some(disk) = SmallDisk::mount("48m") else {
        return;
    };
    // Room for the store and its jobs, but not for a log grown large before the disk fills:
    // then every save soon needs space.
    let mut filler = disk.filler();
    filler.leave_only(16 << 20);
    let workspace = Workspace::on_sqlite_at(disk.path().join("jobs.db"));
    ride_out_a_full_disk(workspace, filler, "database or disk is full");
}

#[test]
fn three_nodes_on_postgres_ride_out_a_full_data_disk_and_finish_every_job_once() {
    let Some(disk) = SmallDisk::mount_for_postgres("64m") else {
        return;
    };
    let Some(database) = postgres_support::database_in(disk.path()) else {
        return;
    };
    let workspace = Workspace::on_postgres(database);
    ride_out_a_full_disk(workspace, disk.filler(), "No space left on device");
}

/// Three nodes on the store of `workspace`, whose rows live on the disk `filler` fills, run the
/// jobs; the disk is kept full for a while mid-run, and the nodes say `error` (the store's words
/// for it).
fn ride_out_a_full_disk(workspace: Workspace, mut filler: Filler, error: &str) {
    let cluster = Cluster::start_in(workspace, false);
    filler.fill_up();
    wait_until("a node says the store failed", || {
        (0..NODES).any(|node| cluster.log(node).contains("the store has failed for"))
    });
    // The disk stays full for a while, long enough for runners that tried again every 100 ms
    // to have said so dozens of times.
    std::thread::sleep(std::time::Duration::from_secs(3));
    eprintln!(
        "the disk was full with {:?} of {JOBS} jobs completed",
        cluster.completed()
    );
    drop(filler);
    let logs = cluster.finish_and_check();
    assert!(
        logs.iter().any(|log| log.contains(error)),
        "the error says the disk is full ({error}): {logs:#?}"
    );
    cluster_support::assert_the_outage_was_said_sparingly(&logs);
}

#[test]
fn a_batch_run_on_a_full_disk_stops_after_a_lease_with_the_reason_and_loses_no_job() {
    let Some(disk) = SmallDisk::mount("8m") else {
        return;
    };
    let workspace = Workspace::on_sqlite_at(disk.path().join("jobs.db"));
    let jobs: Vec<String> = (0..6)
        .map(|n| workspace.start("slow", &format!("crash job {n}")))
        .collect();
    let store = workspace.store();
    let worker = workspace
        .worker(&["--until-idle", "--lease-ms", "1000", "--runners", "2"])
        .spawn()
        .unwrap();
    wait_until("a job runs", || {
        jobs.iter().any(|id| {
            store
                .summary(id)
                .is_ok_and(|job| job.status == JobStatus::Running)
        })
    });
    let mut filler = disk.filler();
    filler.fill_up();
    let output = worker_support::finish(worker, std::time::Duration::from_secs(90));
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("error: the store has failed for")
            && said.contains("longer than a lease (1000 ms)")
            && said.contains("database or disk is full")
            && said.contains("the jobs stay in the store"),
        "{said}"
    );
    let unfinished = jobs
        .iter()
        .filter(|id| !store.summary(id).unwrap().status.is_final())
        .count();
    assert!(
        unfinished > 0,
        "the disk filled before the jobs were done: {said}"
    );

    // Space returns: the next batch run does every job, each step once.
    drop(filler);
    workspace.work_until_idle(&["--lease-ms", "1000"]);
    for id in &jobs {
        let (state, status) = store.load(id).unwrap();
        assert_eq!(status, JobStatus::Completed, "{id}: {state:?}");
        worker_support::assert_each_step_once_in_order(id, &store.events(id, 0).unwrap());
    }
}
