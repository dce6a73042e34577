//! A database of its own for a test of the PostgreSQL store, in the throwaway cluster that
//! `MAESTRO_TEST_POSTGRES` names (`.ci/postgres start` sets it; `.ci/test` always does).

#![allow(dead_code)]

/// A new, empty database, dropped when the test ends.
pub struct TestDatabase {
    pub url: String,
    admin: String,
    name: String,
    /// A tablespace of its own, dropped after it.
    tablespace: Option<String>,
}

/// `None`, said on stderr, when no cluster is given: a developer without PostgreSQL still runs
/// the SQLite half.
pub fn database() -> Option<TestDatabase> {
    make_database(None)
}

/// [`database`], its tables kept in the folder `location` (a tablespace), which the server's
/// user owns: a test can fill the disk under its rows.
pub fn database_in(location: &std::path::Path) -> Option<TestDatabase> {
    make_database(Some(location))
}

/// The cluster's admin URL, if there is one.
pub fn admin_url() -> Option<String> {
    let admin = std::env::var("MAESTRO_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty());
    if admin.is_none() {
        eprintln!("skipped: MAESTRO_TEST_POSTGRES is not set (.ci/postgres start sets it)");
    }
    admin
}

fn make_database(location: Option<&std::path::Path>) -> Option<TestDatabase> {
    let admin = admin_url()?;
    let id = uuid::Uuid::now_v7().simple().to_string();
    let name = format!("maestro_test_{id}");
    let tablespace = location.map(|_| format!("maestro_space_{id}"));
    on_a_thread_of_its_own(|| {
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("MAESTRO_TEST_POSTGRES={admin} does not answer: {e}"));
        let mut create = format!("CREATE DATABASE \"{name}\"");
        if let (Some(space), Some(location)) = (&tablespace, location) {
            client
                .batch_execute(&format!(
                    "CREATE TABLESPACE \"{space}\" LOCATION '{}'",
                    location.display()
                ))
                .unwrap();
            create.push_str(&format!(" TABLESPACE \"{space}\""));
        }
        client.batch_execute(&create).unwrap();
    });
    let server = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(server, _)| server);
    Some(TestDatabase {
        url: format!("{server}/{name}"),
        admin,
        name,
        tablespace,
    })
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        on_a_thread_of_its_own(|| {
            if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
                let _ =
                    client.batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name));
                if let Some(space) = &self.tablespace {
                    let _ = client.batch_execute(&format!("DROP TABLESPACE \"{space}\""));
                }
            }
        });
    }
}

/// Runs `work` on a thread of its own: the synchronous client starts a runtime, which it
/// cannot do on a thread of an async test.
fn on_a_thread_of_its_own(work: impl FnOnce() + Send) {
    std::thread::scope(|scope| {
        if let Err(panic) = scope.spawn(work).join() {
            std::panic::resume_unwind(panic);
        }
    });
}
