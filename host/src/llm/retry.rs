//! PLACEHOLDER — replaced by the provider work in progress.
#[derive(Debug, Clone, Default)]
pub struct RetryPolicy;
