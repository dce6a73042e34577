//! `maestro store`: the store itself rather than its jobs.
//!
//! Invariant: opening a store brings its schema up to date (every command does that); `migrate`
//! only makes it the one thing done and reports what changed, so an operator can upgrade a store
//! before starting the nodes that share it.

use clap::Subcommand;

use super::Failure;
use super::jobs::store_only;
use super::setup::StoreOption;
use crate::store::StoreAddress;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Bring the store's schema up to this maestro's version (every command also does this when
    /// it opens the store) and say which versions it went through.
    Migrate {
        #[command(flatten)]
        store: StoreOption,
    },
}

pub fn execute(command: &StoreCommand) -> Result<(), Failure> {
    match command {
        StoreCommand::Migrate { store } => {
            let setup = store_only(store)?;
            // Opening a path that holds nothing would make a new store: a mistyped path is said.
            if let StoreAddress::Sqlite(path) = &setup.store
                && !path.is_file()
            {
                return Err(Failure::usage(format!(
                    "no store at {}: there is nothing to migrate",
                    path.display()
                )));
            }
            let (_, schema) = setup.store.open().map_err(Failure::usage)?;
            if schema.found == schema.now {
                println!(
                    "store {}: schema version {}, up to date",
                    setup.store, schema.now
                );
            } else {
                println!(
                    "store {}: schema version {} (migrated from {})",
                    setup.store, schema.now, schema.found
                );
            }
            Ok(())
        }
    }
}
