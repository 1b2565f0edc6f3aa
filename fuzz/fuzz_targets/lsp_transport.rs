//! Arbitrary bytes as the language server's input stream, through the stdio
//! transport's reader (`tcc::lsp::transport::read_loop`), followed by one
//! well-formed request. The reader never panics and stops at the end of the input
//! (it never loops forever; `-timeout` catches a hang). What `book/src/reliability.md`
//! promises about resynchronization is asserted where the garbage cannot itself
//! declare a frame: when the fuzz bytes hold no `Content-Length` (any case), every
//! message before the request is a report of a malformed frame, and the request is
//! read — whatever lines, blank lines, partial lines, bytes that are not UTF-8 or
//! other headers precede it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lsp_server::Message;
use tcc::lsp::transport::{read_loop, MALFORMED};

const KNOWN: &str = r#"{"jsonrpc":"2.0","id":424242,"method":"fuzz/known","params":{}}"#;

fn has_content_length(data: &[u8]) -> bool {
    const NAME: &[u8] = b"content-length";
    data.windows(NAME.len()).any(|w| w.eq_ignore_ascii_case(NAME))
}

fuzz_target!(|data: &[u8]| {
    let mut input = data.to_vec();
    input.extend_from_slice(format!("Content-Length: {}\r\n\r\n{KNOWN}", KNOWN.len()).as_bytes());
    let (tx, rx) = crossbeam_channel::unbounded();
    read_loop(&mut std::io::Cursor::new(input), &tx);
    drop(tx);
    let msgs: Vec<Message> = rx.into_iter().collect();
    // Every frame read consumed at least one byte.
    assert!(msgs.len() <= data.len() + 1, "{} messages from {} bytes", msgs.len(), data.len());
    if has_content_length(data) {
        return;
    }
    let (last, before) = msgs.split_last().unwrap_or_else(|| panic!("nothing read: {msgs:?}"));
    assert!(
        matches!(last, Message::Request(r) if r.method == "fuzz/known"),
        "the request after the garbage was not read; read {msgs:?}"
    );
    for m in before {
        assert!(matches!(m, Message::Notification(n) if n.method == MALFORMED), "garbage read as {m:?}");
    }
});
