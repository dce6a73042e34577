//! A job's conversation with its model, and how much of it a store already holds.
//!
//! Invariant: the first `unchanged` messages stand exactly as they stood when this value was
//! handed out by a store ([`Conversation::as_stored`]); every message from `unchanged` on may be
//! new or moved. Appending keeps the mark; inserting before the end lowers it to the insert's
//! index. A store that keeps messages append-only therefore writes only `messages[unchanged..]`
//! on a save (over whatever it holds from `unchanged` on), so a save costs what the run added,
//! not the length of the conversation. The mark is bookkeeping, not content: it is neither
//! serialized nor compared.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::llm::Message;

#[derive(Debug, Clone, Default)]
pub struct Conversation {
    messages: Vec<Message>,
    unchanged: usize,
}

impl Conversation {
    /// A conversation as a store keeps it: every message already written.
    pub fn as_stored(messages: Vec<Message>) -> Self {
        let unchanged = messages.len();
        Self {
            messages,
            unchanged,
        }
    }

    /// How many leading messages are as the store that handed this out holds them: a save
    /// writes the ones after.
    pub fn unchanged(&self) -> usize {
        self.unchanged.min(self.messages.len())
    }

    /// The messages a save writes: everything after [`Conversation::unchanged`].
    pub fn unsaved(&self) -> &[Message] {
        &self.messages[self.unchanged()..]
    }

    pub fn push(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// Puts `message` at `index`, moving the ones after it: those are then no longer as stored.
    pub fn insert(&mut self, index: usize, message: Message) {
        self.unchanged = self.unchanged.min(index);
        self.messages.insert(index, message);
    }
}

impl std::ops::Deref for Conversation {
    type Target = [Message];

    fn deref(&self) -> &[Message] {
        &self.messages
    }
}

impl From<Vec<Message>> for Conversation {
    /// Messages no store has written yet.
    fn from(messages: Vec<Message>) -> Self {
        Self {
            messages,
            unchanged: 0,
        }
    }
}

/// Equal when the messages are: where a store stands is not part of the conversation.
impl PartialEq for Conversation {
    fn eq(&self, other: &Self) -> bool {
        self.messages == other.messages
    }
}

/// Serialized as the list of messages, as before the mark existed.
impl Serialize for Conversation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.messages.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Message {
        Message::User { text: text.into() }
    }

    #[test]
    fn appending_to_a_stored_conversation_leaves_only_the_new_messages_unsaved() {
        let mut conversation = Conversation::as_stored(vec![user("a"), user("b")]);
        assert!(conversation.unsaved().is_empty());
        conversation.push(user("c"));
        assert_eq!(conversation.unsaved(), &[user("c")]);
        assert_eq!(conversation.unchanged(), 2);
    }

    #[test]
    fn an_insert_before_the_end_makes_every_message_from_it_unsaved() {
        let mut conversation = Conversation::as_stored(vec![user("a"), user("b"), user("c")]);
        conversation.push(user("d"));
        conversation.insert(1, user("x"));
        assert_eq!(conversation.unchanged(), 1);
        assert_eq!(
            conversation.unsaved(),
            &[user("x"), user("b"), user("c"), user("d")]
        );
        // An insert among the unsaved messages moves nothing the store holds.
        let mut conversation = Conversation::as_stored(vec![user("a")]);
        conversation.push(user("b"));
        conversation.insert(2, user("c"));
        assert_eq!(conversation.unchanged(), 1);
    }

    #[test]
    fn a_conversation_no_store_wrote_is_unsaved_whole_and_serializes_as_a_list() {
        let conversation = Conversation::from(vec![user("a")]);
        assert_eq!(conversation.unsaved().len(), 1);
        let json = serde_json::to_string(&conversation).unwrap();
        assert_eq!(json, r#"[{"role":"user","text":"a"}]"#);
        let back: Conversation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, conversation);
        assert_eq!(back.unchanged(), 0);
    }
}
