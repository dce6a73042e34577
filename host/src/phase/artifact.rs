//! Artifacts and their lifecycle: drafted → under_review → accepted | rejected | revision_requested.
//! Only an accepted artifact becomes a [`Fact`], the one form in which it may go downstream.

use serde::{Deserialize, Serialize};

use super::error::Violation;

/// Where an artifact stands in review. Accepted, rejected and revision_requested are final: a
/// revision is a new artifact that names the one it revises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactStatus {
    Drafted,
    UnderReview,
    Accepted,
    Rejected,
    RevisionRequested,
}

snake_case_names!(ArtifactStatus {
    Drafted => "drafted",
    UnderReview => "under_review",
    Accepted => "accepted",
    Rejected => "rejected",
    RevisionRequested => "revision_requested",
});

impl ArtifactStatus {
    /// The lifecycle's edges; nothing skips review, nothing leaves a verdict.
    pub fn can_become(self, next: ArtifactStatus) -> bool {
        use ArtifactStatus::*;
        matches!(
            (self, next),
            (Drafted, UnderReview) | (UnderReview, Accepted | Rejected | RevisionRequested)
        )
    }
}

/// What a worker hands in when it completes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactDraft {
    pub id: String,
    pub title: String,
    /// What it is ("report", "plan"); the phase machine never reads it.
    #[serde(default)]
    pub kind: String,
    /// How `content` is shown (`text/markdown`, …); the phase machine never reads it.
    #[serde(default = "plain_text")]
    pub media_type: String,
    /// The artifact itself, or a reference to it; the phase machine never reads it.
    pub content: String,
    /// The artifact this one revises, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revises: Option<String>,
}

fn plain_text() -> String {
    "text/plain".to_owned()
}

/// An artifact as the session records it. Fields are private so that only the phase machine moves
/// an artifact through its lifecycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRecord {
    id: String,
    title: String,
    #[serde(default)]
    kind: String,
    #[serde(default = "plain_text")]
    media_type: String,
    content: String,
    produced_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revises: Option<String>,
    status: ArtifactStatus,
}

impl ArtifactRecord {
    pub(super) fn drafted(draft: ArtifactDraft, produced_by: &str) -> Self {
        Self {
            id: draft.id,
            title: draft.title,
            kind: draft.kind,
            media_type: draft.media_type,
            content: draft.content,
            produced_by: produced_by.to_owned(),
            revises: draft.revises,
            status: ArtifactStatus::Drafted,
        }
    }

    pub(super) fn advance(&mut self, next: ArtifactStatus) -> Result<(), Violation> {
        if !self.status.can_become(next) {
            return Err(Violation::IllegalArtifactStep {
                artifact_id: self.id.clone(),
                from: self.status,
                to: next,
            });
        }
        self.status = next;
        Ok(())
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn title(&self) -> &str {
        &self.title
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn media_type(&self) -> &str {
        &self.media_type
    }

    pub fn content(&self) -> &str {
        &self.content
    }

    /// The worker that produced it.
    pub fn produced_by(&self) -> &str {
        &self.produced_by
    }

    pub fn revises(&self) -> Option<&str> {
        self.revises.as_deref()
    }

    pub fn status(&self) -> ArtifactStatus {
        self.status
    }
}

/// An accepted artifact: the only form in which an artifact may be handed to a later movement or to
/// a subtask. Built only from an accepted [`ArtifactRecord`], and checked again when deserialized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ArtifactRecord", into = "ArtifactRecord")]
pub struct Fact(ArtifactRecord);

impl Fact {
    pub fn id(&self) -> &str {
        self.0.id()
    }

    pub fn title(&self) -> &str {
        self.0.title()
    }

    pub fn kind(&self) -> &str {
        self.0.kind()
    }

    pub fn media_type(&self) -> &str {
        self.0.media_type()
    }

    pub fn content(&self) -> &str {
        self.0.content()
    }

    pub fn produced_by(&self) -> &str {
        self.0.produced_by()
    }

    pub fn revises(&self) -> Option<&str> {
        self.0.revises()
    }

    pub fn record(&self) -> &ArtifactRecord {
        &self.0
    }
}

/// Refusal to treat an unaccepted artifact as a fact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("artifact `{artifact_id}` is {status}, and only an accepted artifact is a fact")]
pub struct NotAFact {
    pub artifact_id: String,
    pub status: ArtifactStatus,
}

impl TryFrom<ArtifactRecord> for Fact {
    type Error = NotAFact;

    fn try_from(record: ArtifactRecord) -> Result<Self, NotAFact> {
        match record.status {
            ArtifactStatus::Accepted => Ok(Self(record)),
            status => Err(NotAFact {
                artifact_id: record.id,
                status,
            }),
        }
    }
}

impl From<Fact> for ArtifactRecord {
    fn from(fact: Fact) -> Self {
        fact.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: ArtifactStatus) -> ArtifactRecord {
        let draft = ArtifactDraft {
            id: "a1".into(),
            title: "Chapter 1".into(),
            kind: "chapter".into(),
            media_type: "text/markdown".into(),
            content: "…".into(),
            revises: None,
        };
        ArtifactRecord {
            status,
            ..ArtifactRecord::drafted(draft, "w1")
        }
    }

    const ALL: [ArtifactStatus; 5] = [
        ArtifactStatus::Drafted,
        ArtifactStatus::UnderReview,
        ArtifactStatus::Accepted,
        ArtifactStatus::Rejected,
        ArtifactStatus::RevisionRequested,
    ];

    #[test]
    fn lifecycle_has_exactly_the_four_edges() {
        let edges: Vec<_> = ALL
            .iter()
            .flat_map(|&from| ALL.iter().map(move |&to| (from, to)))
            .filter(|&(from, to)| from.can_become(to))
            .map(|(from, to)| format!("{from}->{to}"))
            .collect();
        assert_eq!(
            edges,
            [
                "drafted->under_review",
                "under_review->accepted",
                "under_review->rejected",
                "under_review->revision_requested",
            ]
        );
    }

    #[test]
    fn advance_refuses_to_skip_review_and_names_the_step() {
        let mut artifact = record(ArtifactStatus::Drafted);
        let err = artifact.advance(ArtifactStatus::Accepted).unwrap_err();
        assert_eq!(
            err.to_string(),
            "artifact `a1` cannot go from drafted to accepted"
        );
        assert_eq!(artifact.status(), ArtifactStatus::Drafted);
    }

    #[test]
    fn only_an_accepted_record_becomes_a_fact() {
        for status in ALL {
            let result = Fact::try_from(record(status));
            match status {
                ArtifactStatus::Accepted => assert_eq!(result.unwrap().id(), "a1"),
                _ => assert_eq!(
                    result.unwrap_err(),
                    NotAFact {
                        artifact_id: "a1".into(),
                        status
                    }
                ),
            }
        }
    }
}
