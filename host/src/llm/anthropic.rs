//! PLACEHOLDER
pub struct AnthropicModel;
