//! Where a store is, as an operator writes it: a path or `sqlite://PATH` for a SQLite file, a
//! `postgres://…` (or `postgresql://…`) URL for a PostgreSQL database.
//!
//! Invariant: an address is shown without a password wherever it is printed; a URL that holds
//! one is never repeated in a command line, which other users of the machine can read.

use std::path::PathBuf;
use std::sync::Arc;

use super::{JobStore, PostgresStore, Schema, SqliteStore, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreAddress {
    Sqlite(PathBuf),
    /// The URL as given, password included.
    Postgres(String),
}

impl StoreAddress {
    /// The address `text` names; a relative path is left as it is, for the caller to resolve.
    pub fn parse(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Self::Postgres(text.to_owned())
        } else {
            Self::Sqlite(PathBuf::from(
                text.strip_prefix("sqlite://").unwrap_or(text),
            ))
        }
    }

    /// Opens the store (creating a SQLite file, or the tables of an empty database) and brings
    /// its schema up to date; which schema versions it had and has.
    pub fn open(&self) -> Result<(Arc<dyn JobStore>, Schema), StoreError> {
        match self {
            Self::Sqlite(path) => {
                let store = SqliteStore::open(path)?;
                let schema = store.schema();
                Ok((Arc::new(store), schema))
            }
            Self::Postgres(url) => {
                let store = PostgresStore::open(url)?;
                let schema = store.schema();
                Ok((Arc::new(store), schema))
            }
        }
    }

    /// The address for another command to repeat: `None` for a URL with a password, which
    /// that command takes from where this one did (`MAESTRO_STORE` or the config file).
    pub fn replayable(&self) -> Option<String> {
        match self {
            Self::Sqlite(path) => Some(path.display().to_string()),
            Self::Postgres(url) => {
                let has_password = url
                    .parse::<postgres::Config>()
                    .is_ok_and(|config| config.get_password().is_some());
                (!has_password).then(|| url.clone())
            }
        }
    }
}

impl std::fmt::Display for StoreAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => match url.parse::<postgres::Config>() {
                Ok(config) => f.write_str(&super::postgres::label_of(&config)),
                Err(_) => f.write_str("postgres://… (not a valid URL)"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_everything_else_is_a_sqlite_path() {
        assert_eq!(
            StoreAddress::parse("postgresql://u@h/db"),
            StoreAddress::Postgres("postgresql://u@h/db".into())
        );
        assert_eq!(
            StoreAddress::parse("sqlite://jobs.db"),
            StoreAddress::Sqlite("jobs.db".into())
        );
        assert_eq!(
            StoreAddress::parse("data/jobs.db"),
            StoreAddress::Sqlite("data/jobs.db".into())
        );
    }

    #[test]
    fn a_password_is_never_shown_or_repeated() {
        let address = StoreAddress::parse("postgres://maestro:hunter2@db.internal:6432/jobs");
        assert_eq!(
            address.to_string(),
            "postgres://maestro@db.internal:6432/jobs"
        );
        assert_eq!(address.replayable(), None);
        let open = StoreAddress::parse("postgres://maestro@db.internal/jobs");
        assert_eq!(
            open.replayable().as_deref(),
            Some("postgres://maestro@db.internal/jobs")
        );
    }
}
