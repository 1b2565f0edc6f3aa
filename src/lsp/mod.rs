//! `tcc lsp`: a language server over stdio (lsp-server for the protocol plumbing,
//! lsp-types for the messages — the rust-analyzer arrangement).
//!
//! - [`pos`]: byte offsets ↔ LSP positions (UTF-16 columns).
//! - [`index`]: the symbol index (declarations and every name occurrence).
//! - [`analysis`]: one document's analysis and every feature as a pure function.
//! - [`server`]: the main loop — lifecycle, documents, dispatch, errors.
//! - [`transport`]: stdio framing that survives malformed messages.
//!
//! Invariant: no input text and no message (order, method, params) makes the
//! server panic or exit; bad requests get LSP errors, and a panic in a handler
//! (a bug) becomes an `InternalError` response.

pub mod analysis;
pub mod index;
pub mod pos;
pub mod server;
pub mod transport;

#[cfg(test)]
mod tests;

pub use server::run;

/// Serves the language server protocol on stdin/stdout until `exit`. Returns the
/// process exit status the protocol asks for: 0 after `shutdown` then `exit`, 1
/// when `exit` (or the end of input) comes without `shutdown`.
pub fn serve_stdio() -> i32 {
    let (connection, writer) = transport::stdio();
    let code = server::run(connection);
    // The connection (and its sender) is dropped: the writer flushes and ends.
    let _ = writer.join();
    code
}
