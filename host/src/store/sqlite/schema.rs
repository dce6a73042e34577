//! The SQLite store's file settings and schema, versioned by `user_version`.
//!
//! Invariant: each migration runs in an `IMMEDIATE` transaction that reads the version again
//! under the write lock, so of several processes opening an old file at once exactly one
//! applies each migration; a file whose version is newer than this maestro knows is refused.

use rusqlite::{Connection, TransactionBehavior};

/// Schema versions, applied in order; the index + 1 is the `user_version` after each.
pub(super) const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    id              TEXT PRIMARY KEY,
    piece           TEXT NOT NULL,
    status          TEXT NOT NULL,
    movement        TEXT NOT NULL,
    wait_reason     TEXT,
    parent          TEXT,
    parked_plugin   TEXT,
    pending_resume  TEXT,
    wait_expires_at_ms INTEGER,
    state           TEXT NOT NULL,
    lease_owner     TEXT,
    lease_until_ms  INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL
);
CREATE INDEX jobs_by_status ON jobs (status, updated_at_ms);
CREATE INDEX jobs_by_expiry ON jobs (wait_expires_at_ms) WHERE wait_expires_at_ms IS NOT NULL;
CREATE INDEX jobs_by_parent ON jobs (parent);
CREATE TABLE events (
    job_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    at_ms   INTEGER NOT NULL,
    event   TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
"#,
    // The events of one save share a row (a JSON array): one B-tree insert per save instead of one
    // per event, which was a large share of a park/resume cycle's commit. Event numbering is
    // unchanged: a row holds events first_seq..=last_seq.
    r#"
CREATE TABLE event_batches (
    job_id    TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    at_ms     INTEGER NOT NULL,
    events    TEXT NOT NULL,
    PRIMARY KEY (job_id, first_seq)
) WITHOUT ROWID;
INSERT INTO event_batches (job_id, first_seq, last_seq, at_ms, events)
    SELECT job_id, seq, seq, at_ms, '[' || event || ']' FROM events;
DROP TABLE events;
"#,
    // The conversation leaves the state and joins the events: a job's log is one row per save
    // (numbered by `batch`, rising; a row of the event log before keeps its first event's number)
    // holding the events the save added and the messages it wrote, so a save
    // writes what the run added into the one row it writes anyway, never the whole
    // conversation again. A job's conversation stays in its state until its next save moves
    // it (see `record.rs`), so this changes no job's row. A cancel asked of a running job now
    // keeps its reason, for the run that ends it.
    r#"
CREATE TABLE saves (
    job_id        TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    first_seq     INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    events        TEXT NOT NULL,
    messages_from INTEGER,
    messages      TEXT,
    PRIMARY KEY (job_id, batch)
) WITHOUT ROWID;
INSERT INTO saves (job_id, batch, first_seq, last_seq, at_ms, events)
    SELECT job_id, first_seq, first_seq, last_seq, at_ms, events FROM event_batches;
DROP TABLE event_batches;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;
"#,
    // Secrets of this install (the key that seals MCP request states), and the one-time tokens
    // already spent (an answered MCP question), kept until they could no longer be presented.
    r#"
CREATE TABLE secrets (
    name          TEXT PRIMARY KEY,
    value         BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL
);
CREATE TABLE spent (
    token    TEXT PRIMARY KEY,
    until_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX spent_by_until ON spent (until_ms);
"#,
    // A job's state (about a kilobyte of JSON) in a table of its own, written only by a save:
    // a claim, a lease renewal or an answer rewrites the small `jobs` row alone. A commit writes
    // every page it touches whole, and a row that holds the state spills onto an overflow page
    // of its own (1 KiB pages), which every change of the row wrote again, and the freed one
    // zeroed.
    r#"
CREATE TABLE job_states (
    id    TEXT PRIMARY KEY,
    state TEXT NOT NULL
);
INSERT INTO job_states (id, state) SELECT id, state FROM jobs;
ALTER TABLE jobs DROP COLUMN state;
"#,
    // The log in the order it is written: a save's row is appended after the last one, so the
    // saves of one commit share the table's last page instead of each rewriting a page of its
    // own among its job's earlier saves, and a job's saves are found through an index. From
    // this version on, a job's state and a save's events and messages may be zstd-compressed
    // BLOBs (`packed.rs`), which the rows of text beside them do not need: the version keeps an
    // earlier maestro, which would read a BLOB as broken JSON, from opening the file.
    r#"
CREATE TABLE saves_in_order (
    id            INTEGER PRIMARY KEY,
    job_id        TEXT NOT NULL,
    batch         INTEGER NOT NULL,
    first_seq     INTEGER NOT NULL,
    last_seq      INTEGER NOT NULL,
    at_ms         INTEGER NOT NULL,
    events        NOT NULL,
    messages_from INTEGER,
    messages
);
INSERT INTO saves_in_order (job_id, batch, first_seq, last_seq, at_ms, events, messages_from,
                            messages)
    SELECT job_id, batch, first_seq, last_seq, at_ms, events, messages_from, messages
    FROM saves ORDER BY at_ms, job_id, batch;
DROP TABLE saves;
ALTER TABLE saves_in_order RENAME TO saves;
CREATE UNIQUE INDEX saves_by_job ON saves (job_id, batch);
"#,
    // A job's log is a chain: each save's row names the job's save before it, and the job's row
    // its last one. An index by job put an entry among the job's earlier ones for each save, a
    // page a save wrote for nothing else. A save whose state fits beside the rest of its job's
    // row (`rows::inline_state_bytes`) keeps it there, as the save rewrites that row anyway; a
    // larger state stays in `job_states`, so a claim or an answer does not write it again. A
    // save's messages now follow its events in its `events` column (`rows::log_text`), which an
    // earlier maestro would read as broken JSON: the version keeps it from opening the file.
    // Setting `prev` rewrites every row of the log once.
    r#"
ALTER TABLE saves ADD COLUMN prev INTEGER;
UPDATE saves SET prev = (SELECT p.id FROM saves p WHERE p.job_id = saves.job_id
                         AND p.batch < saves.batch ORDER BY p.batch DESC LIMIT 1);
ALTER TABLE jobs ADD COLUMN log_head INTEGER;
UPDATE jobs SET log_head = (SELECT s.id FROM saves s WHERE s.job_id = jobs.id
                            ORDER BY s.batch DESC LIMIT 1);
DROP INDEX saves_by_job;
ALTER TABLE jobs ADD COLUMN state;
"#,
];

/// The writer's connection to the file at `path`, set up and its schema brought up to date;
/// the schema version the file had before.
pub(super) fn open_writer(
    path: &std::path::Path,
    fail: impl Fn(String) -> crate::store::StoreError,
) -> Result<(Connection, usize), crate::store::StoreError> {
    let mut connection = Connection::open(path).map_err(|e| fail(e.to_string()))?;
    connection.set_prepared_statement_cache_capacity(64);
    // What a change removes is overwritten, not left in free space: a login's session waits
    // in `pending_resume` until its run takes it, and must not stay in the file after.
    // The writer's page cache is kept small (2 MiB): when a B-tree page splits, SQLite
    // renumbers pages through the pending-byte page, and the commit that follows scans the
    // cache's whole hash table. With 16 MiB that scan was about 6 % of the writer's time;
    // the pages a small cache misses are read back from the operating system's cache.
    // A new file gets 512-byte pages: a commit writes every page it touches whole, to the log
    // and again at the checkpoint, and a park/resume cycle touches about the same number of
    // pages whatever their size, now that its packed texts (`packed.rs`) fit in them: it
    // writes less than a third of what 4 KiB pages cost (see the README's cycle bench). A
    // file made before keeps its size: a log-mode database cannot change it.
    connection
        .execute_batch(
            "PRAGMA page_size = 512; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
             PRAGMA busy_timeout = 10000; PRAGMA cache_size = -2048; \
             PRAGMA temp_store = MEMORY; PRAGMA journal_size_limit = 67108864; \
             PRAGMA secure_delete = ON;",
        )
        .map_err(|e| fail(e.to_string()))?;
    let version: usize = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| fail(e.to_string()))?;
    if version > MIGRATIONS.len() {
        return Err(fail(format!(
            "schema version {version} is newer than this maestro knows ({}); use a newer \
             maestro",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| fail(e.to_string()))?;
        // Another process opening the same file may have applied it since the version was
        // read: the write lock is held now, so this look is the one that counts.
        let now: usize = tx
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(|e| fail(e.to_string()))?;
        if now > index {
            continue;
        }
        tx.execute_batch(migration)
            .and_then(|()| tx.pragma_update(None, "user_version", index + 1))
            .and_then(|()| tx.commit())
            .map_err(|e| fail(format!("migration {}: {e}", index + 1)))?;
    }
    Ok((connection, version))
}

/// Schema versions this maestro knows.
pub(super) const VERSION: usize = MIGRATIONS.len();
