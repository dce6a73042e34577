//! The browser logins that tool calls made over MCP wait for: a call that parks on a login
//! sends the person at the client (a URL elicitation) to a page of `maestro serve` named by a
//! fresh id, which shows the site's login link and takes the session there, so a session never
//! passes through the client or the model.
//!
//! Invariant: a login is known only by an id of 128 random bits, which only its call and the
//! client it sent the link to hold; its session goes to that call and to nothing else, once; a
//! login is forgotten when its session is given, when its call stops waiting, or at its
//! deadline, [`LOGIN_WAIT`] after it was opened, which bounds the call's whole wait (the link
//! answered included). At most [`MAX_PENDING`] wait at once, [`MAX_PER_CALLER`] of one caller.
//! Logins live in the process that serves the call: a page of another node does not know them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::rounds::Caller;
use crate::plugin::LoginRequest;

/// How long a call waits for the session of its login.
pub const LOGIN_WAIT: Duration = Duration::from_secs(600);

/// Logins that may wait at once: a bound on what callers can make this process hold.
pub const MAX_PENDING: usize = 1024;

/// Logins one caller (one token) may have waiting at once, so that one cannot take them all.
pub const MAX_PER_CALLER: usize = 16;

/// What the login page shows of a login.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoginView {
    /// The site's login page.
    pub url: String,
    /// Why the tool needs the login.
    pub reason: String,
    /// The tool that waits.
    pub tool: String,
}

/// Why a session was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginRefusal {
    #[error("no login waits under this id: it was done, its call stopped waiting, or it expired")]
    Unknown,
    #[error("the session must not be blank")]
    Blank,
}

/// Why no login could be opened for a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no login could wait on this server now: {0}")]
pub struct NoRoom(&'static str);

struct Pending {
    view: LoginView,
    caller: Caller,
    session: oneshot::Sender<String>,
    until: Instant,
}

impl Pending {
    /// Whether its call still waits for it at `now`.
    fn live(&self, now: Instant) -> bool {
        self.until > now && !self.session.is_closed()
    }
}

/// The logins calls of this process wait for.
pub struct Logins {
    pending: Mutex<HashMap<String, Pending>>,
    /// [`LOGIN_WAIT`]; tests shorten it.
    wait: Duration,
}

impl Default for Logins {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            wait: LOGIN_WAIT,
        }
    }
}

/// A call's wait for the session of its login; the login is forgotten when it is dropped.
pub struct LoginWait<'a> {
    logins: &'a Logins,
    pub id: String,
    session: oneshot::Receiver<String>,
    until: Instant,
}

impl Logins {
    /// A login a call of `tool` by `caller` waits for.
    pub fn open(
        &self,
        tool: &str,
        login: &LoginRequest,
        caller: &Caller,
    ) -> Result<LoginWait<'_>, NoRoom> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|_| NoRoom("the system gave no random bytes for its id"))?;
        let id: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let (sender, session) = oneshot::channel();
        let mut pending = self.lock();
        let now = Instant::now();
        pending.retain(|_, login| login.live(now));
        if pending.len() >= MAX_PENDING {
            return Err(NoRoom("as many as the server allows wait"));
        }
        if pending
            .values()
            .filter(|login| login.caller == *caller)
            .count()
            >= MAX_PER_CALLER
        {
            return Err(NoRoom("as many as one caller may have wait"));
        }
        let until = now + self.wait;
        let view = LoginView {
            url: login.url.clone(),
            reason: login.reason.clone(),
            tool: tool.to_owned(),
        };
        pending.insert(
            id.clone(),
            Pending {
                view,
                caller: caller.clone(),
                session: sender,
                until,
            },
        );
        Ok(LoginWait {
            logins: self,
            id,
            session,
            until,
        })
    }

    /// What the page of login `id` shows.
    pub fn view(&self, id: &str) -> Result<LoginView, LoginRefusal> {
        let pending = self.lock();
        match pending.get(id) {
            Some(login) if login.live(Instant::now()) => Ok(login.view.clone()),
            _ => Err(LoginRefusal::Unknown),
        }
    }

    /// Gives login `id` its session: the call waiting for it goes on with it.
    pub fn give(&self, id: &str, session: &str) -> Result<(), LoginRefusal> {
        if session.trim().is_empty() {
            return Err(LoginRefusal::Blank);
        }
        let login = self.lock().remove(id).ok_or(LoginRefusal::Unknown)?;
        if !login.live(Instant::now()) {
            return Err(LoginRefusal::Unknown);
        }
        login
            .session
            .send(session.to_owned())
            .map_err(|_| LoginRefusal::Unknown)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LoginWait<'_> {
    /// `step` (sending the person the link, say), unless the login's deadline comes first.
    pub async fn before_deadline<T>(
        &self,
        step: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::time::timeout_at(self.until, step).await.ok()
    }

    /// The session, once the page took it; `None` at the login's deadline.
    pub async fn session(&mut self) -> Option<String> {
        tokio::time::timeout_at(self.until, &mut self.session)
            .await
            .ok()?
            .ok()
    }
}

impl Drop for LoginWait<'_> {
    fn drop(&mut self) {
        self.logins.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn login() -> LoginRequest {
        LoginRequest {
            url: "https://bank.test/login".into(),
            reason: "the statement is behind a login".into(),
        }
    }

    fn alice() -> Caller {
        Caller::with_token("alice-token-0123456789")
    }

    #[tokio::test]
    async fn a_session_given_on_the_page_reaches_the_waiting_call_once() {
        let logins = Logins::default();
        let mut wait = logins.open("BrowseWeb", &login(), &alice()).unwrap();
        assert_eq!(wait.id.len(), 32);
        let view = logins.view(&wait.id).unwrap();
        assert_eq!(view.url, "https://bank.test/login");
        assert_eq!(view.tool, "BrowseWeb");
        assert_eq!(logins.give(&wait.id, "  "), Err(LoginRefusal::Blank));
        logins.give(&wait.id, "sid=1").unwrap();
        assert_eq!(wait.session().await.as_deref(), Some("sid=1"));
        assert_eq!(logins.give(&wait.id, "sid=2"), Err(LoginRefusal::Unknown));
        assert_eq!(logins.view(&wait.id), Err(LoginRefusal::Unknown));
        assert_eq!(logins.give("0123", "sid=1"), Err(LoginRefusal::Unknown));
    }

    #[test]
    fn a_login_whose_call_stopped_waiting_is_forgotten() {
        let logins = Logins::default();
        let wait = logins.open("BrowseWeb", &login(), &alice()).unwrap();
        let id = wait.id.clone();
        let other = logins.open("BrowseWeb", &login(), &alice()).unwrap();
        assert_ne!(other.id, id, "each login its own id");
        drop(wait);
        assert_eq!(logins.view(&id), Err(LoginRefusal::Unknown));
        assert_eq!(logins.give(&id, "sid=1"), Err(LoginRefusal::Unknown));
        assert!(logins.view(&other.id).is_ok());
    }

    #[test]
    fn no_more_than_max_pending_wait_at_once_and_no_caller_takes_them_all() {
        let logins = Logins::default();
        let mine: Vec<LoginWait<'_>> = (0..MAX_PER_CALLER)
            .map(|_| logins.open("BrowseWeb", &login(), &alice()).unwrap())
            .collect();
        let full = logins.open("BrowseWeb", &login(), &alice()).err();
        assert_eq!(full, Some(NoRoom("as many as one caller may have wait")));
        let held: Vec<LoginWait<'_>> = (MAX_PER_CALLER..MAX_PENDING)
            .map(|n| {
                let caller = Caller::with_token(&format!("token-{n}"));
                logins.open("BrowseWeb", &login(), &caller).unwrap()
            })
            .collect();
        let full = logins
            .open("BrowseWeb", &login(), &Caller::anonymous())
            .err();
        assert_eq!(full, Some(NoRoom("as many as the server allows wait")));
        drop((mine, held));
        assert!(logins.open("BrowseWeb", &login(), &alice()).is_ok());
    }

    #[tokio::test]
    async fn the_deadline_set_when_the_login_opened_bounds_the_whole_wait() {
        let logins = Logins {
            wait: Duration::from_secs(2),
            ..Logins::default()
        };
        let mut wait = logins.open("BrowseWeb", &login(), &alice()).unwrap();
        // The link took most of the time to be answered: a quarter is left for the session,
        // where a wait counted from the answer would have the whole two seconds again.
        let answered = wait.before_deadline(tokio::time::sleep(Duration::from_millis(1_500)));
        assert!(answered.await.is_some());
        let started = Instant::now();
        assert_eq!(wait.session().await, None);
        assert!(
            started.elapsed() < Duration::from_millis(1_500),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            logins.view(&wait.id),
            Err(LoginRefusal::Unknown),
            "the page refuses it too"
        );
        let never = wait.before_deadline(std::future::pending::<()>());
        assert!(never.await.is_none(), "nothing waits past the deadline");
    }
}
