//! A browser login a plugin's tool call waits for, as a link (URL elicitation) to the page of
//! `maestro serve` that takes its session (`logins`): up to 2025-11-25 the link is sent in the
//! middle of the call, which waits for the session; from 2026-07-28 the call returns the link
//! as `input_required`, and its retries come back for the session, each held open for it up to
//! [`RETRY_HOLD`](super::logins::RETRY_HOLD) and then told to call again (an `input_required`
//! with only a new state), until the login's deadline.
//!
//! Invariant: the session goes from the page to the call alone, never through the client or
//! the model, and to one retry of it, once: a retry takes it only under a state sealed for its
//! caller, tool and arguments, only as the newest retry of the login (one sent again replaces
//! one whose request was cut while it held), and only after spending its state, so a replayed
//! state takes nothing. A retry told to come back does not spend its state: it may be sent
//! again. A decline or dismissal spends it and forgets the login.

use rmcp::model::{
    CallToolResponse, CallToolResult, CustomNotification, ElicitRequest, ElicitRequestParams,
    ElicitResult, ElicitationAction, InputRequest, InputRequiredResult, ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use std::collections::BTreeMap;

use super::calls::{QUESTION, answer_in, failed, opens_links, refused};
use super::logins::{Given, Logins};
use super::rounds::{Asked, Binding, Caller, Round};
use super::server::ToolServer;
use crate::plugin::LoginRequest;

/// The result of a call that waits for `login` and cannot go on: `why`.
fn ends(login: &LoginRequest, why: &str) -> CallToolResult {
    failed(format!(
        "The call waits for a browser login at {} ({}), and {why}: it ended here without going \
         on.",
        login.url, login.reason
    ))
}

fn not_given() -> String {
    format!(
        "no session was given on its page within {} minutes",
        super::logins::LOGIN_WAIT.as_secs() / 60
    )
}

/// The link that sends the person to the page of login `id`, on the server at `server`.
fn link(server: &str, tool: &str, login: &LoginRequest, id: &str) -> ElicitRequestParams {
    ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: format!(
            "{tool} needs you to log in at {} ({}). The page opens on maestro serve: it shows \
             the site's login link and takes the session there, so the session never passes \
             through this client.",
            login.url, login.reason
        ),
        url: format!("{server}/logins/{id}"),
        elicitation_id: id.to_owned(),
    }
}

/// Sends the person at the client to the page of this server where the login `login` of a
/// call of `tool` is done, and waits for the session given there; `Err` is the call's result
/// when it cannot go on.
pub(super) async fn login_live(
    logins: &Logins,
    server: &str,
    tool: &str,
    login: &LoginRequest,
    cx: &RequestContext<RoleServer>,
) -> Result<String, CallToolResult> {
    if !opens_links(cx) {
        return Err(ends(
            login,
            "this MCP client cannot be sent to a page (it declared no URL elicitation)",
        ));
    }
    let mut wait = match logins.open(tool, login, &super::server::caller(cx)) {
        Ok(wait) => wait,
        Err(refusal) => return Err(ends(login, &refusal.to_string())),
    };
    let asked = cx
        .peer
        .create_elicitation(link(server, tool, login, &wait.id));
    match wait.before_deadline(asked).await {
        Some(Ok(reply)) if reply.action == ElicitationAction::Accept => {}
        Some(Ok(reply)) if reply.action == ElicitationAction::Decline => {
            return Err(ends(login, "the person declined to log in"));
        }
        Some(Ok(_)) => return Err(ends(login, "the person dismissed the link")),
        Some(Err(error)) => {
            return Err(ends(
                login,
                &format!("the client could not be asked ({error})"),
            ));
        }
        None => return Err(ends(login, &not_given())),
    }
    let Some(session) = wait.session().await else {
        return Err(ends(login, &not_given()));
    };
    elicitation_done(cx, &wait.id).await;
    Ok(session)
}

/// Tells the client that the out-of-band step its URL elicitation `id` sent the person to is
/// done (revision 2025-11-25's `notifications/elicitation/complete`), so it can close what it
/// showed for the link. A client gone meanwhile misses nothing: the call's result follows.
pub(super) async fn elicitation_done(cx: &RequestContext<RoleServer>, id: &str) {
    let done = CustomNotification::new(
        "notifications/elicitation/complete",
        Some(serde_json::json!({ "elicitationId": id })),
    );
    if let Err(error) = (cx.peer)
        .send_notification(ServerNotification::CustomNotification(done))
        .await
    {
        tracing::debug!(%error, "the client did not take notifications/elicitation/complete");
    }
}

impl ToolServer {
    /// The `input_required` result that sends the person at a 2026-07-28 client to the page of
    /// a new login for a call of `tool` that parked on `login`, with the state its retries come
    /// back with; `None` where no page of this server can take it (no logins here, no address
    /// to link to, or a client that opens no links).
    pub(super) fn login_round(
        &self,
        cx: &RequestContext<RoleServer>,
        caller: &Caller,
        tool: &str,
        login: &LoginRequest,
        on: (&str, &str, usize),
        binding: &Binding,
    ) -> Option<CallToolResponse> {
        let logins = self.logins.as_deref()?;
        let server = self.address(cx)?;
        if !opens_links(cx) {
            return None;
        }
        let id = match logins.open_for_retries(tool, login, caller) {
            Ok(id) => id,
            Err(refusal) => return Some(ends(login, &refusal.to_string()).into()),
        };
        let ask = InputRequest::Elicitation(ElicitRequest::new(link(&server, tool, login, &id)));
        let (plugin, version, parks) = on;
        let asked = Asked::Login {
            login: login.clone(),
            id,
            opened: false,
        };
        let state = self
            .sealer
            .seal(&Round::new(plugin, version, asked, parks), binding);
        Some(
            InputRequiredResult::new(
                Some(BTreeMap::from([(QUESTION.to_owned(), ask)])),
                Some(state),
            )
            .into(),
        )
    }

    /// On a retry of a login `round`: the session its page took, for the call to go on with;
    /// else the response that ends the call, or tells the client to call again.
    pub(super) async fn session_for_retry(
        &self,
        round: &Round,
        responses: Option<&BTreeMap<String, Value>>,
        caller: &Caller,
        binding: &Binding,
    ) -> Result<Result<String, CallToolResponse>, ErrorData> {
        let Asked::Login { login, id, opened } = &round.asked else {
            return Err(refused(super::rounds::Refusal::Invalid));
        };
        if !opened {
            let ElicitResult { action, .. } = answer_in(responses)?;
            let why = match action {
                ElicitationAction::Accept => None,
                ElicitationAction::Decline => Some("the person declined to log in"),
                _ => Some("the person dismissed the link"),
            };
            if let Some(why) = why {
                self.sealer.spend(round).await.map_err(refused)?;
                if let Some(logins) = self.logins.as_deref() {
                    logins.forget(id, caller);
                }
                return Ok(Err(ends(login, why).into()));
            }
        }
        let Some(logins) = self.logins.as_deref() else {
            return Ok(Err(ends(login, "this server keeps no logins").into()));
        };
        match logins.wait_given(id, caller).await {
            Ok(Given::Ready(ticket)) => {
                self.sealer.spend(round).await.map_err(refused)?;
                match logins.take(id, ticket) {
                    Ok(session) => Ok(Ok(session)),
                    Err(end) => Ok(Err(ends(login, &end.to_string()).into())),
                }
            }
            Ok(Given::NotYet) => {
                let waits = Asked::Login {
                    login: login.clone(),
                    id: id.clone(),
                    opened: true,
                };
                let next = Round::new(&round.plugin, &round.version, waits, round.parks);
                let state = self.sealer.seal(&next, binding);
                Ok(Err(InputRequiredResult::new(None, Some(state)).into()))
            }
            Err(end) => Ok(Err(ends(login, &end.to_string()).into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::engine::{CatalogSlot, ToolCatalog};
    use crate::mcp::rounds::Sealer;

    fn server(logins: &Arc<Logins>) -> ToolServer {
        let catalog = Arc::new(ToolCatalog::new(Vec::new()).unwrap());
        let sealer = Sealer::in_memory().unwrap();
        ToolServer::new(Arc::new(CatalogSlot::new(catalog)), sealer).with_logins(logins.clone())
    }

    fn login() -> LoginRequest {
        LoginRequest {
            url: "https://bank.test/login".into(),
            reason: "the statement is behind a login".into(),
        }
    }

    fn reply(action: &str) -> BTreeMap<String, Value> {
        BTreeMap::from([(QUESTION.to_owned(), json!({ "action": action }))])
    }

    /// A 2026-07-28 call of BrowseWeb by alice parked on a login: the server, the login's
    /// id, the round its link was sent with, the caller and the binding of its state.
    fn parked(logins: &Arc<Logins>) -> (ToolServer, String, Round, Caller, Binding) {
        let caller = Caller::with_token("alice-token-0123456789");
        let binding = Binding::new(
            &caller,
            "BrowseWeb",
            &json!({ "url": "https://bank.test/" }),
        );
        let id = logins
            .open_for_retries("BrowseWeb", &login(), &caller)
            .unwrap();
        let asked = Asked::Login {
            login: login(),
            id: id.clone(),
            opened: false,
        };
        let round = Round::new("browse-web", "hash", asked, 1);
        (server(logins), id, round, caller, binding)
    }

    /// The text of a call's result that ended it.
    fn text(response: &CallToolResponse) -> String {
        let CallToolResponse::Complete(result) = response else {
            panic!("not a result: {response:?}");
        };
        assert_eq!(result.is_error, Some(true), "{result:?}");
        serde_json::to_value(result).unwrap()["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[tokio::test]
    async fn a_retry_before_the_session_is_told_to_come_back_and_the_next_one_takes_it_once() {
        let logins = Arc::new(Logins::holding_for(Duration::from_millis(100)));
        let (server, id, first, caller, binding) = parked(&logins);
        // Accepted, but no session yet: a state alone, to call again with.
        let Ok(Err(come_back)) = server
            .session_for_retry(&first, Some(&reply("accept")), &caller, &binding)
            .await
        else {
            panic!("the retry did not come back for more");
        };
        let CallToolResponse::InputRequired(come_back) = come_back else {
            panic!("not input_required: {come_back:?}");
        };
        assert!(come_back.input_requests.is_none(), "{come_back:?}");
        let state = come_back.request_state.as_deref().unwrap();
        let next = server.sealer.open(state, &binding).unwrap();
        assert!(matches!(next.asked, Asked::Login { opened: true, .. }));

        logins.give(&id, "sid=1").unwrap();
        let taken = server
            .session_for_retry(&next, None, &caller, &binding)
            .await
            .unwrap();
        assert_eq!(taken.ok().as_deref(), Some("sid=1"));
        // Either state sent again takes nothing.
        for round in [&first, &next] {
            let Ok(Err(ended)) = server
                .session_for_retry(round, Some(&reply("accept")), &caller, &binding)
                .await
            else {
                panic!("a replay took a session");
            };
            assert!(text(&ended).contains("no login waits"), "{}", text(&ended));
        }
    }

    #[tokio::test]
    async fn a_declined_link_ends_the_call_and_forgets_the_login() {
        let logins = Arc::new(Logins::default());
        let (server, id, round, caller, binding) = parked(&logins);
        let Ok(Err(ended)) = server
            .session_for_retry(&round, Some(&reply("decline")), &caller, &binding)
            .await
        else {
            panic!("a declined login went on");
        };
        assert!(text(&ended).contains("declined"), "{}", text(&ended));
        assert!(logins.view(&id).is_err(), "the page no longer shows it");
        // Sent again, now accepted, it finds no login to take a session from.
        let Ok(Err(again)) = server
            .session_for_retry(&round, Some(&reply("accept")), &caller, &binding)
            .await
        else {
            panic!("a declined login went on when sent again");
        };
        assert!(text(&again).contains("no login waits"), "{}", text(&again));
    }
}
