//! The browser logins that tool calls made over MCP wait for: a call that parks on a login
//! sends the person at the client (a URL elicitation) to a page of `maestro serve` named by a
//! fresh id, which shows the site's login link and takes the session there, so a session never
//! passes through the client or the model. A call of 2025-11-25 waits in place for it
//! ([`Logins::open`]); one of 2026-07-28 returns, and its retries come back for it
//! ([`Logins::open_for_retries`], [`Logins::take`]).
//!
//! Invariant: a login is known only by an id of 128 random bits, which only its call and the
//! client it sent the link to hold; its session goes to that call (to its caller) and to nothing
//! else, once; a login is forgotten when its session is taken, when a call that waits in place
//! stops waiting, or at its deadline, [`LOGIN_WAIT`] after it was opened, which bounds the
//! call's whole wait (the link answered included). At most [`MAX_PENDING`] are kept at once,
//! [`MAX_PER_CALLER`] of one caller. Logins live in the process that serves the call: a page or
//! a retry that reaches another node does not know them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::rounds::Caller;
use crate::plugin::LoginRequest;

/// How long a call waits for the session of its login.
pub const LOGIN_WAIT: Duration = Duration::from_secs(600);

/// How long one retry of a 2026-07-28 call holds its request open for the session before it
/// tells the client to call again: under the minute after which proxies commonly cut a quiet
/// request.
pub const RETRY_HOLD: Duration = Duration::from_secs(50);

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

/// What a retry that waited for a login's session found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// The session is there, for this retry to [`take`](Logins::take) with its ticket.
    Ready(RetryTicket),
    /// The session was not given within [`RETRY_HOLD`]; the login still waits.
    NotYet,
}

/// The newest retry of a login, which alone may take its session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryTicket(u64);

/// Why a retry gets no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RetryEnd {
    #[error(
        "no login waits under this id here: no session was given on its page in time, it was \
         declined, or it was opened on another node"
    )]
    Gone,
    #[error("a newer retry of this call came for the login and took it over")]
    Superseded,
}

struct Pending {
    view: LoginView,
    caller: Caller,
    to: Waiter,
    until: Instant,
}

/// Where a login's session goes.
enum Waiter {
    /// A call that waits in place; gone when it stops waiting.
    Call(oneshot::Sender<String>),
    /// The retries of a call that returned: the session, once given, until the newest retry
    /// takes it (a retry whose request was cut may still hold: the one sent again replaces it).
    Retries {
        session: watch::Sender<Option<String>>,
        newest: u64,
    },
}

impl Pending {
    /// Whether it is kept at `now`: before its deadline, and its call still waits if it waits
    /// in place.
    fn kept(&self, now: Instant) -> bool {
        self.until > now
            && match &self.to {
                Waiter::Call(sender) => !sender.is_closed(),
                Waiter::Retries { .. } => true,
            }
    }

    /// Whether it waits for its session at `now` (its page takes one).
    fn waits(&self, now: Instant) -> bool {
        self.kept(now)
            && match &self.to {
                Waiter::Call(_) => true,
                Waiter::Retries { session, .. } => session.borrow().is_none(),
            }
    }
}

/// The logins calls of this process wait for.
pub struct Logins {
    pending: Mutex<HashMap<String, Pending>>,
    /// [`LOGIN_WAIT`]; tests shorten it.
    wait: Duration,
    /// [`RETRY_HOLD`]; tests shorten it.
    hold: Duration,
}

impl Default for Logins {
    fn default() -> Self {
        Self {
            pending: Mutex::default(),
            wait: LOGIN_WAIT,
            hold: RETRY_HOLD,
        }
    }
}

#[cfg(test)]
impl Logins {
    /// Logins whose retries hold for `hold` at most.
    pub(super) fn holding_for(hold: Duration) -> Self {
        Self {
            hold,
            ..Self::default()
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
    /// A login a call of `tool` by `caller` waits for in place.
    pub fn open(
        &self,
        tool: &str,
        login: &LoginRequest,
        caller: &Caller,
    ) -> Result<LoginWait<'_>, NoRoom> {
        let (sender, session) = oneshot::channel();
        let (id, until) = self.insert(tool, login, caller, Waiter::Call(sender))?;
        Ok(LoginWait {
            logins: self,
            id,
            session,
            until,
        })
    }

    /// A login whose session the retries of a call of `tool` by `caller` come back for
    /// ([`Self::wait_given`], [`Self::take`]); its id.
    pub fn open_for_retries(
        &self,
        tool: &str,
        login: &LoginRequest,
        caller: &Caller,
    ) -> Result<String, NoRoom> {
        let (session, _) = watch::channel(None);
        let waiter = Waiter::Retries { session, newest: 0 };
        let (id, _) = self.insert(tool, login, caller, waiter)?;
        Ok(id)
    }

    /// Keeps a new login under a fresh id; the id and the login's deadline.
    fn insert(
        &self,
        tool: &str,
        login: &LoginRequest,
        caller: &Caller,
        to: Waiter,
    ) -> Result<(String, Instant), NoRoom> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)
            .map_err(|_| NoRoom("the system gave no random bytes for its id"))?;
        let id: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut pending = self.lock();
        let now = Instant::now();
        pending.retain(|_, login| login.kept(now));
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
                to,
                until,
            },
        );
        Ok((id, until))
    }

    /// What the page of login `id` shows.
    pub fn view(&self, id: &str) -> Result<LoginView, LoginRefusal> {
        let pending = self.lock();
        match pending.get(id) {
            Some(login) if login.waits(Instant::now()) => Ok(login.view.clone()),
            _ => Err(LoginRefusal::Unknown),
        }
    }

    /// Gives login `id` its session: the call waiting for it goes on with it (or its next
    /// retry takes it).
    pub fn give(&self, id: &str, session: &str) -> Result<(), LoginRefusal> {
        if session.trim().is_empty() {
            return Err(LoginRefusal::Blank);
        }
        let mut pending = self.lock();
        match pending.get(id) {
            Some(login) if login.waits(Instant::now()) => {}
            _ => return Err(LoginRefusal::Unknown),
        }
        let login = pending.remove(id).ok_or(LoginRefusal::Unknown)?;
        match login.to {
            Waiter::Call(sender) => sender
                .send(session.to_owned())
                .map_err(|_| LoginRefusal::Unknown),
            Waiter::Retries {
                session: ref to, ..
            } => {
                to.send_replace(Some(session.to_owned()));
                pending.insert(id.to_owned(), login);
                Ok(())
            }
        }
    }

    /// Waits, as the newest retry of login `id` (opened for `caller`'s retries), for its
    /// session to be given: up to [`RETRY_HOLD`], and no later than the login's deadline.
    /// Takes nothing: the retry spends its state first, then [`takes`](Self::take) it.
    pub async fn wait_given(&self, id: &str, caller: &Caller) -> Result<Given, RetryEnd> {
        let now = Instant::now();
        let (mut given, until, ticket) = {
            let mut pending = self.lock();
            match pending.get_mut(id) {
                Some(login) if login.caller == *caller && login.kept(now) => match &mut login.to {
                    Waiter::Retries { session, newest } => {
                        *newest += 1;
                        (session.subscribe(), login.until, RetryTicket(*newest))
                    }
                    Waiter::Call(_) => return Err(RetryEnd::Gone),
                },
                _ => return Err(RetryEnd::Gone),
            }
        };
        let hold_until = until.min(now + self.hold);
        match tokio::time::timeout_at(hold_until, given.wait_for(Option::is_some)).await {
            Ok(Ok(_)) => {}
            // Taken, or forgotten.
            Ok(Err(_)) => return Err(RetryEnd::Gone),
            Err(_) if hold_until < until => return self.newest(id, ticket).map(|()| Given::NotYet),
            Err(_) => {
                self.lock().remove(id);
                return Err(RetryEnd::Gone);
            }
        }
        self.newest(id, ticket).map(|()| Given::Ready(ticket))
    }

    /// The session of login `id`, given and waited for by the retry holding `ticket`, if that
    /// is still the newest retry; the login is forgotten then.
    pub fn take(&self, id: &str, ticket: RetryTicket) -> Result<String, RetryEnd> {
        let mut pending = self.lock();
        self.newest_in(&pending, id, ticket)?;
        match pending.remove(id).map(|login| login.to) {
            Some(Waiter::Retries { session, .. }) => session.borrow().clone().ok_or(RetryEnd::Gone),
            _ => Err(RetryEnd::Gone),
        }
    }

    /// Forgets login `id` of `caller`, which the person declined or dismissed.
    pub fn forget(&self, id: &str, caller: &Caller) {
        let mut pending = self.lock();
        if pending.get(id).is_some_and(|login| login.caller == *caller) {
            pending.remove(id);
        }
    }

    fn newest(&self, id: &str, ticket: RetryTicket) -> Result<(), RetryEnd> {
        self.newest_in(&self.lock(), id, ticket)
    }

    /// Whether `ticket` is the newest retry of login `id`, which is still kept.
    fn newest_in(
        &self,
        pending: &HashMap<String, Pending>,
        id: &str,
        ticket: RetryTicket,
    ) -> Result<(), RetryEnd> {
        match pending.get(id) {
            Some(login) if login.kept(Instant::now()) => match &login.to {
                Waiter::Retries { newest, .. } if *newest == ticket.0 => Ok(()),
                Waiter::Retries { .. } => Err(RetryEnd::Superseded),
                Waiter::Call(_) => Err(RetryEnd::Gone),
            },
            _ => Err(RetryEnd::Gone),
        }
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

    /// Waits until login `id` has seen `retries` retries.
    async fn until_retries(logins: &Logins, id: &str, retries: u64) {
        loop {
            let seen = match logins.lock().get(id).map(|login| &login.to) {
                Some(Waiter::Retries { newest, .. }) => *newest,
                _ => panic!("login {id} is gone"),
            };
            if seen >= retries {
                return;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_session_given_on_the_page_goes_to_a_retry_of_its_caller_once() {
        let logins = Logins::default();
        let id = logins
            .open_for_retries("BrowseWeb", &login(), &alice())
            .unwrap();
        assert_eq!(logins.view(&id).unwrap().tool, "BrowseWeb");
        let bob = Caller::with_token("bob-token-0123456789");
        assert_eq!(logins.wait_given(&id, &bob).await, Err(RetryEnd::Gone));
        logins.give(&id, "sid=1").unwrap();
        // Given: the page no longer takes one, and the session waits for the retry.
        assert_eq!(logins.give(&id, "sid=2"), Err(LoginRefusal::Unknown));
        assert_eq!(logins.view(&id), Err(LoginRefusal::Unknown));
        // Another login opening meanwhile does not drop a session given but not yet taken.
        let _other = logins.open("BrowseWeb", &login(), &alice()).unwrap();
        let Ok(Given::Ready(ticket)) = logins.wait_given(&id, &alice()).await else {
            panic!("the session was given");
        };
        assert_eq!(logins.take(&id, ticket).as_deref(), Ok("sid=1"));
        assert_eq!(logins.take(&id, ticket), Err(RetryEnd::Gone));
        assert_eq!(logins.wait_given(&id, &alice()).await, Err(RetryEnd::Gone));
    }

    #[tokio::test]
    async fn a_retry_holds_for_the_session_and_past_the_hold_is_told_to_come_back() {
        let logins = std::sync::Arc::new(Logins {
            hold: Duration::from_millis(200),
            ..Logins::default()
        });
        let id = logins
            .open_for_retries("BrowseWeb", &login(), &alice())
            .unwrap();
        assert_eq!(logins.wait_given(&id, &alice()).await, Ok(Given::NotYet));
        assert!(logins.view(&id).is_ok(), "the login still waits");
        // Given while the next retry holds: that retry is woken for it.
        let retry = {
            let (logins, id) = (logins.clone(), id.clone());
            tokio::spawn(async move { logins.wait_given(&id, &alice()).await })
        };
        until_retries(&logins, &id, 2).await;
        logins.give(&id, "sid=1").unwrap();
        let Ok(Given::Ready(ticket)) = retry.await.unwrap() else {
            panic!("the holding retry was not given the session");
        };
        assert_eq!(logins.take(&id, ticket).as_deref(), Ok("sid=1"));
    }

    #[tokio::test]
    async fn a_retry_sent_again_takes_over_from_one_whose_request_was_cut() {
        let logins = std::sync::Arc::new(Logins::default());
        let id = logins
            .open_for_retries("BrowseWeb", &login(), &alice())
            .unwrap();
        let retry = || {
            let (logins, id) = (logins.clone(), id.clone());
            tokio::spawn(async move { logins.wait_given(&id, &alice()).await })
        };
        let cut = retry();
        until_retries(&logins, &id, 1).await;
        let again = retry();
        until_retries(&logins, &id, 2).await;
        logins.give(&id, "sid=1").unwrap();
        assert_eq!(cut.await.unwrap(), Err(RetryEnd::Superseded));
        let Ok(Given::Ready(ticket)) = again.await.unwrap() else {
            panic!("the newest retry was not given the session");
        };
        assert_eq!(logins.take(&id, RetryTicket(1)), Err(RetryEnd::Superseded));
        assert_eq!(logins.take(&id, ticket).as_deref(), Ok("sid=1"));
    }

    #[tokio::test]
    async fn a_login_declined_or_past_its_deadline_is_gone() {
        let logins = Logins {
            wait: Duration::from_millis(100),
            ..Logins::default()
        };
        let declined = logins
            .open_for_retries("BrowseWeb", &login(), &alice())
            .unwrap();
        logins.forget(&declined, &Caller::anonymous());
        assert!(logins.view(&declined).is_ok(), "only its caller forgets it");
        logins.forget(&declined, &alice());
        assert_eq!(logins.view(&declined), Err(LoginRefusal::Unknown));
        let id = logins
            .open_for_retries("BrowseWeb", &login(), &alice())
            .unwrap();
        assert_eq!(logins.wait_given(&id, &alice()).await, Err(RetryEnd::Gone));
        assert_eq!(logins.give(&id, "sid=1"), Err(LoginRefusal::Unknown));
        assert!(logins.lock().is_empty(), "forgotten");
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
