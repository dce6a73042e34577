//! The PostgreSQL store's schema, versioned in the table `maestro_schema`.
//!
//! Invariant: migrations run in one transaction under an advisory lock, so of many nodes
//! starting at once on an old database exactly one applies each migration and the others see
//! it applied; a database whose version is newer than this maestro knows is refused.

use super::pool::Connection;
use super::rows::{column, describe};
use crate::store::{Schema, StoreError};

/// Schema versions, applied in order; the index + 1 is the version after each. The first is
/// the layout of SQLite's schema 3 (see `record.rs`).
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE jobs (
    id                 TEXT PRIMARY KEY,
    piece              TEXT NOT NULL,
    status             TEXT NOT NULL,
    movement           TEXT NOT NULL,
    wait_reason        TEXT,
    parent             TEXT,
    parked_plugin      TEXT,
    pending_resume     TEXT,
    wait_expires_at_ms BIGINT,
    state              TEXT NOT NULL,
    lease_owner        TEXT,
    lease_until_ms     BIGINT,
    cancel_requested   BOOLEAN NOT NULL DEFAULT false,
    cancel_reason      TEXT,
    created_at_ms      BIGINT NOT NULL,
    updated_at_ms      BIGINT NOT NULL
);
CREATE INDEX jobs_by_status ON jobs (status, updated_at_ms);
CREATE INDEX jobs_by_expiry ON jobs (wait_expires_at_ms) WHERE wait_expires_at_ms IS NOT NULL;
CREATE INDEX jobs_by_parent ON jobs (parent);
CREATE INDEX jobs_by_created ON jobs (created_at_ms DESC, id DESC);
CREATE TABLE saves (
    job_id        TEXT NOT NULL,
    batch         BIGINT NOT NULL,
    first_seq     BIGINT NOT NULL,
    last_seq      BIGINT NOT NULL,
    at_ms         BIGINT NOT NULL,
    events        TEXT NOT NULL,
    messages_from BIGINT,
    messages      TEXT,
    PRIMARY KEY (job_id, batch)
);
"#,
    // The versions of plugins that calls parked on, by content hash, so that any node can
    // resume a call that another node parked.
    r#"
CREATE TABLE components (
    content_hash TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    bytes        BYTEA NOT NULL,
    added_at_ms  BIGINT NOT NULL
);
"#,
    // The version of each plugin that every node serves: the last one installed or removed on
    // any node. A version named here is always one that any node can fetch.
    r#"
CREATE TABLE plugins (
    name          TEXT PRIMARY KEY,
    content_hash  TEXT REFERENCES components (content_hash),
    changed_at_ms BIGINT NOT NULL
);
"#,
    // A job's state (about a kilobyte of JSON) in a table of its own, written only by a save:
    // a claim, a lease renewal or an answer writes a new version of the small `jobs` row
    // alone, and every new row version goes to the write-ahead log whole. Half of each page is
    // left free, so a save's new version fits beside the old one and moves no index entry.
    r#"
CREATE TABLE job_states (
    id    TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    state TEXT NOT NULL
) WITH (fillfactor = 50);
INSERT INTO job_states (id, state) SELECT id, state FROM jobs;
ALTER TABLE jobs DROP COLUMN state;
"#,
    // Secrets of this install, shared by every node (the key that seals MCP request states:
    // a client's retry may reach any node), and the one-time tokens already spent (an
    // answered MCP question), kept until they could no longer be presented.
    r#"
CREATE TABLE secrets (
    name          TEXT PRIMARY KEY,
    value         BYTEA NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE TABLE spent (
    token    TEXT PRIMARY KEY,
    until_ms BIGINT NOT NULL
);
CREATE INDEX spent_by_until ON spent (until_ms);
"#,
];

/// Any number the nodes agree on: the advisory lock that migrations take.
const MIGRATION_LOCK: i64 = 0x6d61_6573_7472_6f00;

/// Brings the database's schema up to date; which version it had, and has now.
pub(super) fn migrate(connection: &mut Connection) -> Result<Schema, StoreError> {
    let label = connection.label.clone();
    let fail = |message: String| StoreError::Database {
        path: label.to_string(),
        message,
    };
    let (client, _) = connection.client()?;
    let mut tx = client.transaction().map_err(|e| fail(describe(&e)))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(|e| fail(describe(&e)))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS maestro_schema (version INTEGER NOT NULL); \
         INSERT INTO maestro_schema SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM maestro_schema);",
    )
    .map_err(|e| fail(describe(&e)))?;
    let row = tx
        .query_one("SELECT version FROM maestro_schema", &[])
        .map_err(|e| fail(describe(&e)))?;
    let found = column::<i32>(&row, 0, &label)? as usize;
    if found > MIGRATIONS.len() {
        return Err(fail(format!(
            "schema version {found} is newer than this maestro knows ({}); use a newer maestro",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(found) {
        tx.batch_execute(migration)
            .and_then(|()| {
                tx.execute(
                    "UPDATE maestro_schema SET version = $1",
                    &[&(index as i32 + 1)],
                )
                .map(drop)
            })
            .map_err(|e| fail(format!("migration {}: {}", index + 1, describe(&e))))?;
    }
    tx.commit().map_err(|e| fail(describe(&e)))?;
    Ok(Schema {
        found,
        now: MIGRATIONS.len(),
    })
}
