//! A database of its own for a test of the PostgreSQL store, in the throwaway cluster that
//! `MAESTRO_TEST_POSTGRES` names (`.ci/postgres start` sets it; `.ci/test` always does).

#![allow(dead_code)]

/// A new, empty database, dropped when the test ends.
pub struct TestDatabase {
    pub url: String,
    admin: String,
    name: String,
}

/// `None`, said on stderr, when no cluster is given: a developer without PostgreSQL still runs
/// the SQLite half.
pub fn database() -> Option<TestDatabase> {
    let Some(admin) = std::env::var("MAESTRO_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        eprintln!("skipped: MAESTRO_TEST_POSTGRES is not set (.ci/postgres start sets it)");
        return None;
    };
    let name = format!("maestro_test_{}", uuid::Uuid::now_v7().simple());
    on_a_thread_of_its_own(|| {
        let mut client = postgres::Client::connect(&admin, postgres::NoTls)
            .unwrap_or_else(|e| panic!("MAESTRO_TEST_POSTGRES={admin} does not answer: {e}"));
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .unwrap();
    });
    let server = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(server, _)| server);
    Some(TestDatabase {
        url: format!("{server}/{name}"),
        admin,
        name,
    })
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        on_a_thread_of_its_own(|| {
            if let Ok(mut client) = postgres::Client::connect(&self.admin, postgres::NoTls) {
                let _ =
                    client.batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name));
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
