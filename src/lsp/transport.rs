//! Stdio transport. lsp-server's own `Connection::stdio` stops reading at the first
//! malformed message; an editor (or a user typing into a terminal) should not be
//! able to kill the server that way. This reader skips what it cannot frame,
//! reports payloads that are not JSON-RPC to the main loop, and refuses absurd
//! `Content-Length`s without allocating them.

use crossbeam_channel::{bounded, unbounded, Sender};
use lsp_server::{Connection, Message, Notification};
use std::io::{self, BufRead, Read, Write};
use std::thread;

/// Method of the internal notification carrying a payload that did not parse.
pub const MALFORMED: &str = "$tcc/malformed";

/// Method of the internal notification whose params the writer sends as they are,
/// as one message: responses whose id lsp-server cannot represent (an integer
/// outside 32 bits, or `null` for an invalid id).
pub(crate) const RAW: &str = "$tcc/raw";

/// The largest message accepted (bigger ones are skipped and reported).
const MAX_MESSAGE: usize = 64 << 20;

pub(crate) fn stdio() -> (Connection, thread::JoinHandle<()>) {
    let (writer_tx, writer_rx) = bounded::<Message>(0);
    let writer = thread::spawn(move || {
        let stdout = io::stdout();
        let mut out = stdout.lock();
        for msg in writer_rx {
            let written = match &msg {
                Message::Notification(n) if n.method == RAW => write_raw(&mut out, &n.params),
                _ => msg.write(&mut out),
            };
            if written.is_err() {
                break;
            }
        }
        let _ = out.flush();
    });
    let (reader_tx, reader_rx) = unbounded::<Message>();
    thread::spawn(move || {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        read_loop(&mut input, &reader_tx);
    });
    (Connection { sender: writer_tx, receiver: reader_rx }, writer)
}

/// Reads framed messages until the end of input (or an `exit`) and sends them on.
pub fn read_loop(input: &mut impl BufRead, tx: &Sender<Message>) {
    loop {
        let msg = match read_frame(input) {
            Ok(Frame::Eof) => return,
            Ok(Frame::Text(text)) => parse(&text),
            Ok(Frame::Bad(why)) => malformed(why, ""),
            Err(_) => return,
        };
        let exit = matches!(&msg, Message::Notification(n) if n.method == "exit");
        if tx.send(msg).is_err() || exit {
            return;
        }
    }
}

/// Writes `v` as one framed message.
pub(crate) fn write_raw(out: &mut impl Write, v: &serde_json::Value) -> io::Result<()> {
    let text = v.to_string();
    write!(out, "Content-Length: {}\r\n\r\n{text}", text.len())?;
    out.flush()
}

/// Whether a JSON-RPC id is one lsp-server represents: a 32-bit integer or a string.
fn plain_id(id: &serde_json::Value) -> bool {
    id.is_string() || id.as_i64().is_some_and(|x| i32::try_from(x).is_ok())
}

fn parse(text: &str) -> Message {
    // A `method` that is not a string would otherwise pass for a (bodiless) response.
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.get("method").is_some_and(|m| !m.is_string()) => {
            return malformed("`method` is not a string".to_string(), text)
        }
        // A request whose id lsp-server cannot hold (2^32, 1.5, null) would pass for a
        // notification and never be answered.
        Ok(v) if v.get("method").is_some() && v.get("id").is_some_and(|id| !plain_id(id)) => {
            return malformed("the id is not a string or a 32-bit integer".to_string(), text)
        }
        Ok(v) if !v.is_object() => return malformed("not a JSON object".to_string(), text),
        _ => {}
    }
    match serde_json::from_str::<Message>(text) {
        Ok(m) => m,
        Err(e) => malformed(format!("not a JSON-RPC message ({e})"), text),
    }
}

fn malformed(why: String, text: &str) -> Message {
    // Keep the id, if one can be read, so that the request can be answered
    // (`has_id` tells `"id": null` from no id).
    let v = serde_json::from_str::<serde_json::Value>(text).ok();
    let id = v.as_ref().and_then(|v| v.get("id").cloned());
    let has_id = id.is_some();
    Message::Notification(Notification::new(
        MALFORMED.to_string(),
        serde_json::json!({ "why": why, "id": id, "has_id": has_id }),
    ))
}

/// Where `Content-Length:` (any case) starts in `line`: the last occurrence.
fn find_content_length(line: &str) -> Option<usize> {
    const NAME: &[u8] = b"content-length:";
    let b = line.as_bytes();
    (0..b.len().saturating_sub(NAME.len() - 1)).rev().find(|&i| b[i..i + NAME.len()].eq_ignore_ascii_case(NAME))
}

/// The most of one header line that is kept: its last `MAX_LINE` bytes.
const MAX_LINE: usize = 8192;

/// Reads one line (through its `\n`, or to the end of the input) and keeps its last
/// [`MAX_LINE`] bytes in `line`; returns the number of bytes read (0 at the end).
/// Header lines are short: a longer "line" is garbage, whose tail may still hold the
/// `Content-Length:` header of the next frame. (Reading it in pieces of 8192 bytes
/// as separate lines cut such a header in two when a piece ended inside it, and the
/// frame was lost; `fuzz/fuzz_targets/lsp_transport.rs` fails on that.)
fn read_line_tail(input: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<usize> {
    line.clear();
    let mut total = 0;
    loop {
        let (used, done) = {
            let buf = match input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(total);
            }
            let (used, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let tail = &buf[used.saturating_sub(MAX_LINE)..used];
            if tail.len() < used {
                line.clear(); // everything kept so far is beyond the last MAX_LINE bytes
            }
            line.extend_from_slice(tail);
            (used, done)
        };
        input.consume(used);
        total += used;
        if line.len() > MAX_LINE {
            line.drain(..line.len() - MAX_LINE);
        }
        if done {
            return Ok(total);
        }
    }
}

enum Frame {
    Eof,
    Text(String),
    Bad(String),
}

fn read_frame(input: &mut impl BufRead) -> io::Result<Frame> {
    let mut size: Option<usize> = None;
    let mut bad_header = None;
    let mut line = Vec::new();
    loop {
        let n = read_line_tail(input, &mut line)?;
        if n == 0 {
            return Ok(Frame::Eof);
        }
        let text = String::from_utf8_lossy(&line);
        let mut text = text.trim_end_matches(['\r', '\n']);
        // Resynchronize: after a frame whose Content-Length was wrong, the next
        // header follows the rest of a body on the same line (or a body's tail
        // precedes it). A `Content-Length:` anywhere in the line starts a header.
        if let Some(at) = find_content_length(text) {
            if at > 0 {
                size = None;
                bad_header = None;
                text = &text[at..];
            }
        }
        if text.is_empty() {
            if size.is_some() || bad_header.is_some() {
                break;
            }
            continue; // stray blank line between messages
        }
        match text.split_once(':') {
            Some((name, value)) if name.trim().eq_ignore_ascii_case("content-length") => {
                match value.trim().parse::<usize>() {
                    Ok(n) => size = Some(n),
                    Err(_) => bad_header = Some(format!("bad Content-Length `{}`", value.trim())),
                }
            }
            Some(_) => {} // Content-Type and any other header
            None => bad_header = Some(format!("malformed header line `{}`", text.chars().take(80).collect::<String>())),
        }
    }
    let Some(size) = size else {
        return Ok(Frame::Bad(bad_header.unwrap_or_else(|| "no Content-Length header".to_string())));
    };
    if size > MAX_MESSAGE {
        io::copy(&mut input.by_ref().take(size as u64), &mut io::sink())?;
        return Ok(Frame::Bad(format!("message of {size} bytes is larger than the limit ({MAX_MESSAGE})")));
    }
    let mut buf = vec![0u8; size];
    input.read_exact(&mut buf)?;
    match String::from_utf8(buf) {
        Ok(s) => Ok(Frame::Text(s)),
        Err(_) => Ok(Frame::Bad("message is not UTF-8".to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &str) -> Vec<Message> {
        let (tx, rx) = unbounded();
        read_loop(&mut io::Cursor::new(input.as_bytes().to_vec()), &tx);
        drop(tx);
        rx.into_iter().collect()
    }

    fn framed(body: &str) -> String {
        format!("Content-Length: {}\r\n\r\n{body}", body.len())
    }

    #[test]
    fn reads_messages_and_survives_garbage() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{}}"#;
        let input = format!(
            "{}garbage line\r\n\r\n{}{}Content-Length: 99999999999\r\n\r\n{}",
            framed(good),
            framed("{not json"),
            framed(r#"{"jsonrpc":"2.0","id":7,"method":3}"#),
            "",
        );
        let msgs = frames(&input);
        assert!(matches!(&msgs[0], Message::Request(r) if r.method == "x"));
        assert!(matches!(&msgs[1], Message::Notification(n) if n.method == MALFORMED));
        assert!(matches!(&msgs[2], Message::Notification(n) if n.method == MALFORMED));
        // the id of an invalid request is kept so it can be answered
        assert!(matches!(&msgs[3], Message::Notification(n) if n.params["id"] == 7));
        // the oversized message is skipped and reported (input ends inside it)
        assert!(matches!(&msgs[4], Message::Notification(n) if n.params["why"].as_str().unwrap().contains("larger")));
        assert_eq!(msgs.len(), 5, "{msgs:?}");
    }

    #[test]
    fn resynchronizes_after_a_wrong_content_length() {
        let a = r#"{"jsonrpc":"2.0","id":1,"method":"a","params":{}}"#;
        let b = r#"{"jsonrpc":"2.0","id":2,"method":"b","params":{}}"#;
        let c = r#"{"jsonrpc":"2.0","id":3,"method":"c","params":{}}"#;
        let input = format!(
            "Content-Length: {}\r\n\r\n{a}{}Content-Length: {}\r\n\r\n{b}{}{}",
            a.len() - 3,
            framed(b),
            b.len() + 3,
            framed(r#"{"jsonrpc":"2.0","method":"lost"}"#),
            framed(c),
        );
        let methods: Vec<String> = frames(&input)
            .into_iter()
            .map(|m| match m {
                Message::Request(r) => r.method,
                Message::Notification(n) => n.method,
                Message::Response(_) => "response".into(),
            })
            .collect();
        // short frame: malformed, then b; long frame: malformed, `lost` eaten, then c.
        assert_eq!(methods, [MALFORMED, "b", MALFORMED, "c"]);
    }

    #[test]
    fn ids_lsp_server_cannot_hold_are_malformed_with_their_id() {
        for (id, has) in [("4294967296", true), ("1.5", true), ("null", true), ("{}", true)] {
            let m = parse(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#));
            let Message::Notification(n) = m else { panic!("{m:?}") };
            assert_eq!(n.method, MALFORMED);
            assert_eq!(n.params["has_id"], has);
            assert_eq!(n.params["id"], serde_json::from_str::<serde_json::Value>(id).unwrap());
        }
        let m = parse(r#"{"jsonrpc":"2.0","method":"x"}"#);
        assert!(matches!(m, Message::Notification(n) if n.method == "x"));
    }

    #[test]
    fn a_header_after_a_long_garbage_line_is_read_wherever_the_line_ends() {
        let b = r#"{"jsonrpc":"2.0","id":2,"method":"b","params":{}}"#;
        // Garbage lines of every length around the old 8192-byte pieces: the
        // header of `b` used to be cut in two when a piece ended inside it.
        for garbage in 8160..8220 {
            let input = format!("{}{}", "x".repeat(garbage), framed(b));
            let msgs = frames(&input);
            assert!(matches!(msgs.last(), Some(Message::Request(r)) if r.method == "b"), "{garbage}: {msgs:?}");
        }
        let msgs = frames(&format!("{}\n{}", "y".repeat(100_000), framed(b)));
        assert!(matches!(msgs.last(), Some(Message::Request(r)) if r.method == "b"), "{msgs:?}");
    }

    #[test]
    fn stops_after_exit() {
        let input = format!(
            "{}{}",
            framed(r#"{"jsonrpc":"2.0","method":"exit"}"#),
            framed(r#"{"jsonrpc":"2.0","method":"y"}"#)
        );
        assert_eq!(frames(&input).len(), 1);
    }
}
