//! PLACEHOLDER
pub struct OpenAiModel;
