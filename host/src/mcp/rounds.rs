//! The calls of protocol revision 2026-07-28, where a server may not send the client a request
//! in the middle of a call: a park is returned as `input_required`, carrying the question and a
//! sealed `requestState`; the client calls again with the answer and that state, and the call
//! goes on from it on whichever process (or node) the retry reaches.
//!
//! Invariant: a state opens only under this install's key, before its expiry, for the caller
//! it was given to (a digest of its token) and for the same tool and arguments (a digest);
//! every way it can fail to open reads the same to the client. An answer resumes a state at
//! most once: its nonce is spent in the store, which every node shares (or, on stdio, in this
//! process, the only one that holds the key). A state carries nothing secret: it is signed,
//! not encrypted, and shows only what the client was given already (the question, or the id of
//! the login page it was sent to).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{RequestStateCodec, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::plugin::{LoginRequest, Park};
use crate::store::JobStore;

/// How long a question may wait for its answer before the call must be made again.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(60 * 60);

/// The name of this install's sealing key among the store's secrets.
const KEY_NAME: &str = "mcp.request-state";

/// Where a call stands while the client asks the person: the plugin version it runs on, what
/// was asked, and how many times it has parked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// Spent when the answer is taken, so a state resumes at most once.
    nonce: String,
    /// Unix ms after which the state no longer opens (also sealed into it by the codec).
    until_ms: i64,
    pub plugin: String,
    pub version: String,
    pub asked: Asked,
    /// How many times the call has parked so far.
    pub parks: usize,
}

/// What the person was asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Asked {
    /// The operator's approval gate, before the tool runs at all.
    Gate,
    /// The tool's own park.
    Park(Park),
    /// A browser login, as a link to the page of login `id` (see `logins`); `opened` once the
    /// person accepted the link and the retries wait for the session.
    Login {
        login: LoginRequest,
        id: String,
        opened: bool,
    },
}

impl Round {
    pub fn new(plugin: &str, version: &str, asked: Asked, parks: usize) -> Self {
        Self {
            nonce: uuid::Uuid::now_v7().to_string(),
            until_ms: now_ms() + ANSWER_WITHIN.as_millis() as i64,
            plugin: plugin.to_owned(),
            version: version.to_owned(),
            asked,
            parks,
        }
    }
}

/// Who may continue a call, and with what: the caller, the tool and its arguments, as the
/// state's associated data.
pub struct Binding(Vec<u8>);

impl Binding {
    pub fn new(caller: &Caller, tool: &str, arguments: &Value) -> Self {
        let arguments = Sha256::digest(arguments.to_string().as_bytes());
        let mut bound = Vec::with_capacity(64 + tool.len() + 1);
        bound.extend_from_slice(&caller.0);
        bound.extend_from_slice(tool.as_bytes());
        bound.push(0);
        bound.extend_from_slice(&arguments);
        Self(bound)
    }
}

/// Who calls: a digest of the bearer token an HTTP request carried (never the token itself),
/// or the one client of a stdio connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller([u8; 32]);

impl Caller {
    pub fn with_token(token: &str) -> Self {
        Self(Sha256::digest(format!("token\0{token}")).into())
    }

    /// A caller without a token: the client of a stdio connection, or of a server with no
    /// tokens (which listens only on loopback).
    pub fn anonymous() -> Self {
        Self(Sha256::digest(b"anonymous").into())
    }

    pub fn digest(&self) -> &[u8] {
        &self.0
    }
}

/// Why a state was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Forged, altered, expired, another caller's, or for other arguments: the client learns no
    /// more than that.
    Invalid,
    /// Its answer was already taken.
    Spent,
    /// The store could not say whether it was (nothing was resumed).
    Store(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Invalid => f.write_str(
                "requestState is not valid for this call: it was altered, has expired, or was \
                 given for another caller, tool or arguments; call the tool again",
            ),
            Refusal::Spent => f.write_str(
                "this question was already answered and the call went on; call the tool again \
                 to run it anew",
            ),
            Refusal::Store(error) => write!(f, "the answer could not be recorded: {error}"),
        }
    }
}

/// Seals and opens the states of one install, and spends their answers.
pub struct Sealer {
    codec: RequestStateCodec,
    spent: Spent,
}

enum Spent {
    Store(Arc<dyn JobStore>),
    /// Nonce → until when it must be remembered.
    Memory(Mutex<HashMap<String, i64>>),
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let spent = match self.spent {
            Spent::Store(_) => "store",
            Spent::Memory(_) => "memory",
        };
        f.debug_struct("Sealer").field("spent", &spent).finish()
    }
}

impl Sealer {
    /// The sealer of every process sharing `store`: its key is the store's, made once.
    pub fn with_store(store: Arc<dyn JobStore>) -> Result<Self, String> {
        let key = store
            .secret(KEY_NAME)
            .map_err(|error| format!("cannot read the MCP sealing key from the store: {error}"))?;
        Ok(Self {
            codec: codec(key)?,
            spent: Spent::Store(store),
        })
    }

    /// A sealer of this process alone (stdio: the states it seals are only ever sent back to
    /// it), with a key of its own.
    pub fn in_memory() -> Result<Self, String> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key)
            .map_err(|error| format!("cannot make an MCP sealing key: {error}"))?;
        Ok(Self {
            codec: codec(key.to_vec())?,
            spent: Spent::Memory(Mutex::default()),
        })
    }

    pub fn seal(&self, round: &Round, binding: &Binding) -> String {
        let options = SealOptions::new()
            .associated_data(&binding.0)
            .ttl(Duration::from_millis(
                (round.until_ms - now_ms()).max(0) as u64
            ));
        self.codec
            .seal_json_with(round, &options)
            .expect("a round always serializes")
    }

    pub fn open(&self, state: &str, binding: &Binding) -> Result<Round, Refusal> {
        let round: Round = self
            .codec
            .open_json_with(state, &binding.0)
            .map_err(|error| {
                tracing::debug!("an MCP requestState was refused: {error}");
                Refusal::Invalid
            })?;
        // The codec's expiry is whole milliseconds from sealing; this is the round's own.
        if round.until_ms < now_ms() {
            return Err(Refusal::Invalid);
        }
        Ok(round)
    }

    /// Takes the answer to `round`: `Ok` the first time only.
    pub async fn spend(&self, round: &Round) -> Result<(), Refusal> {
        let first = match &self.spent {
            Spent::Store(store) => store
                .spend_once(&round.nonce, round.until_ms)
                .await
                .map_err(|error| Refusal::Store(error.to_string()))?,
            Spent::Memory(spent) => {
                let now = now_ms();
                let mut spent = spent.lock().unwrap_or_else(|e| e.into_inner());
                spent.retain(|_, until| *until >= now);
                spent.insert(round.nonce.clone(), round.until_ms).is_none()
            }
        };
        if first { Ok(()) } else { Err(Refusal::Spent) }
    }
}

fn codec(key: Vec<u8>) -> Result<RequestStateCodec, String> {
    RequestStateCodec::try_new(key).map_err(|error| format!("the MCP sealing key: {error}"))
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round() -> Round {
        Round::new(
            "p",
            "hash-1",
            Asked::Park(Park::Ask("Which city?".into())),
            1,
        )
    }

    fn bound(caller: &Caller, arguments: Value) -> Binding {
        Binding::new(caller, "lookup", &arguments)
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_state_opens_only_for_its_caller_tool_and_arguments() {
        let sealer = Sealer::in_memory().unwrap();
        let alice = Caller::with_token("alice-token-0123456789");
        let arguments = serde_json::json!({"city": "Oslo"});
        let sealed = round();
        let state = sealer.seal(&sealed, &bound(&alice, arguments.clone()));
        assert_eq!(
            sealer.open(&state, &bound(&alice, arguments.clone())),
            Ok(sealed)
        );
        let bob = Caller::with_token("bob-token-0123456789xx");
        assert_eq!(
            sealer.open(&state, &bound(&bob, arguments.clone())),
            Err(Refusal::Invalid)
        );
        assert_eq!(
            sealer.open(&state, &bound(&alice, serde_json::json!({"city": "Rome"}))),
            Err(Refusal::Invalid)
        );
        assert_eq!(
            sealer.open(&state, &Binding::new(&alice, "another-tool", &arguments)),
            Err(Refusal::Invalid)
        );
    }

    #[test]
    fn an_altered_state_or_another_installs_state_does_not_open() {
        let sealer = Sealer::in_memory().unwrap();
        let caller = Caller::anonymous();
        let binding = bound(&caller, Value::Null);
        let state = sealer.seal(&round(), &binding);
        let mut altered = state.clone().into_bytes();
        let middle = altered.len() / 2;
        altered[middle] = if altered[middle] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        assert_eq!(sealer.open(&altered, &binding), Err(Refusal::Invalid));
        let elsewhere = Sealer::in_memory().unwrap();
        assert_eq!(elsewhere.open(&state, &binding), Err(Refusal::Invalid));
    }

    #[test]
    fn an_expired_state_does_not_open() {
        let sealer = Sealer::in_memory().unwrap();
        let binding = bound(&Caller::anonymous(), Value::Null);
        let mut expired = round();
        expired.until_ms = now_ms() - 1;
        let state = sealer.seal(&expired, &binding);
        assert_eq!(sealer.open(&state, &binding), Err(Refusal::Invalid));
    }

    #[test]
    fn an_answer_is_taken_once() {
        let sealer = Sealer::in_memory().unwrap();
        let (first, second) = (round(), round());
        assert_eq!(block_on(sealer.spend(&first)), Ok(()));
        assert_eq!(block_on(sealer.spend(&first)), Err(Refusal::Spent));
        assert_eq!(block_on(sealer.spend(&second)), Ok(()));
    }
}
