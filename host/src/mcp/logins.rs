//! The browser logins that tool calls made over MCP wait for: a call that parks on a login
//! sends the person at the client (a URL elicitation) to a page of `maestro serve` named by a
//! fresh id, which shows the site's login link and takes the session there, so a session never
//! passes through the client or the model.
//!
//! Invariant: a login is known only by an id of 128 random bits, given to the one call that
//! waits for it; its session goes to that call and to nothing else, once; a login is forgotten
//! when its session is given, when its call stops waiting, or after [`LOGIN_WAIT`]. At most
//! [`MAX_PENDING`] wait at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::plugin::LoginRequest;

/// How long a call waits for the session of its login.
pub const LOGIN_WAIT: Duration = Duration::from_secs(600);

/// Logins that may wait at once: a bound on what callers can make this process hold.
pub const MAX_PENDING: usize = 1024;

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

struct Pending {
    view: LoginView,
    session: oneshot::Sender<String>,
    until: Instant,
}

/// The logins calls of this process wait for.
#[derive(Default)]
pub struct Logins {
    pending: Mutex<HashMap<String, Pending>>,
}

/// A call's wait for the session of its login; the login is forgotten when it is dropped.
pub struct LoginWait<'a> {
    logins: &'a Logins,
    pub id: String,
    session: oneshot::Receiver<String>,
}

impl Logins {
    /// A login `tool` waits for, `None` when [`MAX_PENDING`] wait already.
    pub fn open(&self, tool: &str, login: &LoginRequest) -> Option<LoginWait<'_>> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        let id: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let (sender, session) = oneshot::channel();
        let mut pending = self.lock();
        let now = Instant::now();
        pending.retain(|_, login| login.until > now && !login.session.is_closed());
        if pending.len() >= MAX_PENDING {
            return None;
        }
        let view = LoginView {
            url: login.url.clone(),
            reason: login.reason.clone(),
            tool: tool.to_owned(),
        };
        pending.insert(
            id.clone(),
            Pending {
                view,
                session: sender,
                until: now + LOGIN_WAIT,
            },
        );
        Some(LoginWait {
            logins: self,
            id,
            session,
        })
    }

    /// What the page of login `id` shows.
    pub fn view(&self, id: &str) -> Result<LoginView, LoginRefusal> {
        let pending = self.lock();
        match pending.get(id) {
            Some(login) if login.until > Instant::now() && !login.session.is_closed() => {
                Ok(login.view.clone())
            }
            _ => Err(LoginRefusal::Unknown),
        }
    }

    /// Gives login `id` its session: the call waiting for it goes on with it.
    pub fn give(&self, id: &str, session: &str) -> Result<(), LoginRefusal> {
        if session.trim().is_empty() {
            return Err(LoginRefusal::Blank);
        }
        let login = self.lock().remove(id).ok_or(LoginRefusal::Unknown)?;
        if login.until <= Instant::now() {
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
    /// The session, once the page took it; `None` after [`LOGIN_WAIT`].
    pub async fn session(&mut self) -> Option<String> {
        tokio::time::timeout(LOGIN_WAIT, &mut self.session)
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

    #[tokio::test]
    async fn a_session_given_on_the_page_reaches_the_waiting_call_once() {
        let logins = Logins::default();
        let mut wait = logins.open("BrowseWeb", &login()).unwrap();
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
        let wait = logins.open("BrowseWeb", &login()).unwrap();
        let id = wait.id.clone();
        let other = logins.open("BrowseWeb", &login()).unwrap();
        assert_ne!(other.id, id, "each login its own id");
        drop(wait);
        assert_eq!(logins.view(&id), Err(LoginRefusal::Unknown));
        assert_eq!(logins.give(&id, "sid=1"), Err(LoginRefusal::Unknown));
        assert!(logins.view(&other.id).is_ok());
    }

    #[test]
    fn no_more_than_max_pending_wait_at_once() {
        let logins = Logins::default();
        let held: Vec<LoginWait<'_>> = (0..MAX_PENDING)
            .map(|_| logins.open("BrowseWeb", &login()).unwrap())
            .collect();
        assert!(logins.open("BrowseWeb", &login()).is_none());
        drop(held);
        assert!(logins.open("BrowseWeb", &login()).is_some());
    }
}
