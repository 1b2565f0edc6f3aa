//! The one error type of commands (`tcc run`, `plan`, `plan-model`, `build`, ...):
//! a user-facing failure with a diagnostic code, rendered by `src/main.rs` (exit
//! code 1).

/// A user-facing failure of a command (bad input file, no plan fits, ...).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("error[{code}]: {message}")]
pub struct CommandError {
    /// Diagnostic code (`E07xx` running, `E08xx` planning, ...).
    pub code: &'static str,
    pub message: String,
    /// What the user can do about it.
    pub hint: Option<String>,
}

impl CommandError {
    pub fn new(code: &'static str, message: impl Into<String>, hint: Option<String>) -> CommandError {
        CommandError { code, message: message.into(), hint }
    }
}
