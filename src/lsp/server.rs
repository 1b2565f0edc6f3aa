//! The main loop: lifecycle (`initialize` … `shutdown`, `exit`), open documents,
//! request dispatch and error replies.
//!
//! Lifecycle, as the protocol has it:
//! - before `initialize`, requests get `ServerNotInitialized` and notifications
//!   are dropped (`exit` still exits);
//! - a second `initialize` is an `InvalidRequest`;
//! - after `shutdown`, requests get `InvalidRequest`; `exit` ends the loop.
//!
//! Documents use full-text sync (ranged changes are applied too, should a client
//! send them). Each open document has its own state; its diagnostics are published
//! for it alone (an empty list when it is fixed, and on close).
//!
//! Analysis is lazy and coalesced (issue 23: 1000 edits of a 1 MB document were
//! 1000 analyses of 0.7 s each): a change only updates the text; a document is
//! analysed when no message is waiting (then its diagnostics are published, for
//! the latest version only) or when a request needs it. Every message already
//! sent is read ahead, so a request followed by its `$/cancelRequest` is answered
//! `RequestCancelled`, and one on a document that a later queued change or close
//! modifies is answered `ContentModified` (the client asks again) without
//! analysing the version in between.

use super::analysis::{self, Analysis};
use super::transport::{MALFORMED, RAW};
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response, ResponseError};
use lsp_types as lt;
use lsp_types::notification::Notification as _;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, VecDeque};

struct Document {
    uri: lt::Uri,
    /// The analysis of the last version analysed.
    analysis: Analysis,
    /// The latest text and version when they are newer than `analysis`.
    pending: Option<(String, i32)>,
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Uninitialized,
    Running,
    ShutDown,
}

struct Server {
    out: crossbeam_channel::Sender<Message>,
    state: State,
    docs: HashMap<String, Document>,
}

type Reply = Result<serde_json::Value, ResponseError>;

fn error(code: ErrorCode, message: impl Into<String>) -> ResponseError {
    ResponseError { code: code as i32, message: message.into(), data: None }
}

/// `RequestFailed` (-32803) is not in lsp-server's `ErrorCode` list in every version.
const REQUEST_FAILED: i32 = -32803;

/// The capabilities announced in the `initialize` reply.
pub fn capabilities() -> lt::ServerCapabilities {
    lt::ServerCapabilities {
        position_encoding: Some(lt::PositionEncodingKind::UTF16),
        text_document_sync: Some(lt::TextDocumentSyncCapability::Options(lt::TextDocumentSyncOptions {
            open_close: Some(true),
            change: Some(lt::TextDocumentSyncKind::FULL),
            ..Default::default()
        })),
        hover_provider: Some(lt::HoverProviderCapability::Simple(true)),
        completion_provider: Some(lt::CompletionOptions {
            trigger_characters: Some(vec!["[".to_string(), ",".to_string(), ":".to_string()]),
            ..Default::default()
        }),
        definition_provider: Some(lt::OneOf::Left(true)),
        references_provider: Some(lt::OneOf::Left(true)),
        document_highlight_provider: Some(lt::OneOf::Left(true)),
        document_symbol_provider: Some(lt::OneOf::Left(true)),
        document_formatting_provider: Some(lt::OneOf::Left(true)),
        semantic_tokens_provider: Some(lt::SemanticTokensServerCapabilities::SemanticTokensOptions(
            lt::SemanticTokensOptions {
                legend: analysis::semantic_legend(),
                full: Some(lt::SemanticTokensFullOptions::Bool(true)),
                range: Some(false),
                ..Default::default()
            },
        )),
        ..Default::default()
    }
}

/// Runs the server on a connection until `exit` (or the connection closes).
/// Returns the exit status: 0 when `shutdown` came before, else 1.
pub fn run(connection: Connection) -> i32 {
    let mut server = Server { out: connection.sender.clone(), state: State::Uninitialized, docs: HashMap::new() };
    let mut queue: VecDeque<Message> = VecDeque::new();
    loop {
        if queue.is_empty() {
            // Nothing waiting: analyse what changed (and publish), then wait.
            server.flush();
            match connection.receiver.recv() {
                Ok(m) => queue.push_back(m),
                Err(_) => break,
            }
        }
        // Read ahead everything already sent.
        while let Ok(m) = connection.receiver.try_recv() {
            queue.push_back(m);
        }
        let Some(msg) = queue.pop_front() else { continue };
        match msg {
            Message::Request(req) => server.request(req, &queue),
            Message::Notification(n) if n.method == "exit" => break,
            Message::Notification(n) => server.notification(n),
            Message::Response(_) => {} // we send no requests
        }
    }
    if server.state == State::ShutDown {
        0
    } else {
        1
    }
}

impl Server {
    fn send(&self, msg: impl Into<Message>) {
        let _ = self.out.send(msg.into());
    }

    fn log(&self, typ: lt::MessageType, message: String) {
        let params = lt::LogMessageParams { typ, message };
        self.send(Notification::new(lt::notification::LogMessage::METHOD.to_string(), params));
    }

    fn request(&mut self, req: Request, queue: &VecDeque<Message>) {
        let id = req.id.clone();
        let reply = match (self.state, req.method.as_str()) {
            (State::Running, _) if cancelled(&req, queue) => {
                Err(error(ErrorCode::RequestCanceled, format!("`{}` was cancelled", req.method)))
            }
            (State::Running, _) if modified(&req, queue) => Err(error(
                ErrorCode::ContentModified,
                format!("the document changed after `{}` was sent; ask again", req.method),
            )),
            (State::Uninitialized, "initialize") => self.initialize(&req),
            (State::Uninitialized, _) => {
                Err(error(ErrorCode::ServerNotInitialized, format!("`{}` before `initialize`", req.method)))
            }
            (State::ShutDown, _) => Err(error(ErrorCode::InvalidRequest, format!("`{}` after `shutdown`", req.method))),
            (State::Running, "initialize") => {
                Err(error(ErrorCode::InvalidRequest, "the server is already initialized"))
            }
            (State::Running, "shutdown") => {
                self.state = State::ShutDown;
                Ok(serde_json::Value::Null)
            }
            (State::Running, _) => {
                // A bug in a handler must not take the server down.
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.dispatch(&req))) {
                    Ok(r) => r,
                    Err(_) => Err(error(
                        ErrorCode::InternalError,
                        format!("internal error while handling `{}` (a bug in tcc)", req.method),
                    )),
                }
            }
        };
        let resp = match reply {
            Ok(v) => Response { id, result: Some(v), error: None },
            Err(e) => Response { id, result: None, error: Some(e) },
        };
        self.send(resp);
    }

    fn initialize(&mut self, req: &Request) -> Reply {
        if !(req.params.is_object() || req.params.is_null()) {
            return Err(error(ErrorCode::InvalidParams, "`initialize` takes an object of InitializeParams"));
        }
        self.state = State::Running;
        let result = lt::InitializeResult {
            capabilities: capabilities(),
            server_info: Some(lt::ServerInfo {
                name: "tcc".to_string(),
                version: Some(env!("CARGO_PKG_VERSION").to_string()),
            }),
        };
        Ok(serde_json::to_value(result).unwrap_or_default())
    }

    fn dispatch(&mut self, req: &Request) -> Reply {
        use lt::request::*;
        match req.method.as_str() {
            HoverRequest::METHOD => self.handle::<HoverRequest>(req, |s, p| {
                let tdp = p.text_document_position_params;
                Ok(s.doc(&tdp.text_document.uri)?.analysis.hover(tdp.position))
            }),
            GotoDefinition::METHOD => self.handle::<GotoDefinition>(req, |s, p| {
                let tdp = p.text_document_position_params;
                let d = s.doc(&tdp.text_document.uri)?;
                Ok(d.analysis.definition(tdp.position).map(|span| {
                    lt::GotoDefinitionResponse::Scalar(lt::Location {
                        uri: d.uri.clone(),
                        range: d.analysis.range(&span),
                    })
                }))
            }),
            References::METHOD => self.handle::<References>(req, |s, p| {
                let tdp = p.text_document_position;
                let d = s.doc(&tdp.text_document.uri)?;
                let spans = d.analysis.references(tdp.position, p.context.include_declaration);
                Ok(Some(
                    spans.iter().map(|sp| lt::Location { uri: d.uri.clone(), range: d.analysis.range(sp) }).collect(),
                ))
            }),
            DocumentHighlightRequest::METHOD => self.handle::<DocumentHighlightRequest>(req, |s, p| {
                let tdp = p.text_document_position_params;
                let d = s.doc(&tdp.text_document.uri)?;
                let spans = d.analysis.references(tdp.position, true);
                Ok(Some(
                    spans.iter().map(|sp| lt::DocumentHighlight { range: d.analysis.range(sp), kind: None }).collect(),
                ))
            }),
            Completion::METHOD => self.handle::<Completion>(req, |s, p| {
                let tdp = p.text_document_position;
                let items = s.doc(&tdp.text_document.uri)?.analysis.completion(tdp.position);
                Ok(Some(lt::CompletionResponse::Array(items)))
            }),
            DocumentSymbolRequest::METHOD => self.handle::<DocumentSymbolRequest>(req, |s, p| {
                Ok(Some(lt::DocumentSymbolResponse::Nested(s.doc(&p.text_document.uri)?.analysis.document_symbols())))
            }),
            SemanticTokensFullRequest::METHOD => self.handle::<SemanticTokensFullRequest>(req, |s, p| {
                let data = s.doc(&p.text_document.uri)?.analysis.semantic_tokens();
                Ok(Some(lt::SemanticTokensResult::Tokens(lt::SemanticTokens { result_id: None, data })))
            }),
            Formatting::METHOD => {
                // Only the document is needed; `options` (tab size, ...) does not
                // apply to tcc's canonical format, so a client may leave it out.
                #[derive(serde::Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct P {
                    text_document: lt::TextDocumentIdentifier,
                }
                let p: P = parse_params(req)?;
                let d = self.doc(&p.text_document.uri)?;
                match d.analysis.formatting() {
                    Ok(edits) => Ok(serde_json::to_value(edits).unwrap_or_default()),
                    Err(msg) => Err(ResponseError { code: REQUEST_FAILED, message: msg, data: None }),
                }
            }
            m if m.starts_with("$/") => Err(error(ErrorCode::MethodNotFound, format!("`{m}` is not supported"))),
            m => Err(error(ErrorCode::MethodNotFound, format!("unknown method `{m}`"))),
        }
    }

    /// Parses the params of `R`, runs `f`, serializes its result.
    fn handle<R: lt::request::Request>(
        &mut self,
        req: &Request,
        f: impl FnOnce(&mut Self, R::Params) -> Result<R::Result, ResponseError>,
    ) -> Reply
    where
        R::Params: DeserializeOwned,
    {
        let params: R::Params = parse_params(req)?;
        let result = f(self, params)?;
        serde_json::to_value(result).map_err(|e| error(ErrorCode::InternalError, e.to_string()))
    }

    /// An open document, analysed at its latest version.
    fn doc(&mut self, uri: &lt::Uri) -> Result<&Document, ResponseError> {
        self.analyse(uri.as_str());
        self.docs.get(uri.as_str()).ok_or_else(|| {
            error(
                ErrorCode::InvalidParams,
                format!("document `{}` is not open (send textDocument/didOpen first)", uri.as_str()),
            )
        })
    }

    fn notification(&mut self, n: Notification) {
        use lt::notification::*;
        if n.method == MALFORMED {
            let why = n.params["why"].as_str().unwrap_or("malformed message").to_string();
            // An invalid request whose id we could read still gets an answer.
            // Every request gets an answer: ids lsp-server holds (32-bit integers and
            // strings) in a Response; other integers as they are, and an id that is
            // not an integer or a string (1.5, null, an object) as `null`, as
            // JSON-RPC 2.0 answers an invalid request; both written raw.
            let raw_id = &n.params["id"];
            let id: Option<RequestId> = match raw_id {
                serde_json::Value::Number(x) => x.as_i64().and_then(|v| i32::try_from(v).ok()).map(RequestId::from),
                serde_json::Value::String(s) => Some(RequestId::from(s.clone())),
                _ => None,
            };
            let message = format!("invalid request: {why}");
            if let Some(id) = id {
                self.send(Response::new_err(id, ErrorCode::InvalidRequest as i32, message));
            } else if n.params["has_id"] == true {
                let echoed = if raw_id.is_i64() || raw_id.is_u64() { raw_id.clone() } else { serde_json::Value::Null };
                let response = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": echoed,
                    "error": { "code": ErrorCode::InvalidRequest as i32, "message": message },
                });
                self.send(lsp_server::Notification::new(RAW.to_string(), response));
            }
            self.log(lt::MessageType::ERROR, format!("tcc lsp: ignored a malformed message: {why}"));
            return;
        }
        if self.state != State::Running {
            return;
        }
        match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<lt::DidOpenTextDocumentParams>(n.params) else {
                    return self.log(lt::MessageType::WARNING, "tcc lsp: bad didOpen params".to_string());
                };
                let td = p.text_document;
                self.set_text(td.uri, td.version, td.text);
            }
            DidChangeTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<lt::DidChangeTextDocumentParams>(n.params) else {
                    return self.log(lt::MessageType::WARNING, "tcc lsp: bad didChange params".to_string());
                };
                let key = p.text_document.uri.as_str().to_string();
                let Some(doc) = self.docs.get_mut(&key) else {
                    return self
                        .log(lt::MessageType::WARNING, format!("tcc lsp: didChange for `{key}`, which is not open"));
                };
                // Edits apply to the latest text; it is analysed later (see the module docs).
                let (mut text, _) = doc.pending.take().unwrap_or_else(|| (doc.analysis.text.clone(), 0));
                for c in p.content_changes {
                    match c.range {
                        None => text = c.text,
                        Some(r) => {
                            let span = super::pos::LineIndex::new(&text).span(&text, r);
                            text.replace_range(span, &c.text);
                        }
                    }
                }
                doc.pending = Some((text, p.text_document.version));
            }
            DidCloseTextDocument::METHOD => {
                if let Ok(p) = serde_json::from_value::<lt::DidCloseTextDocumentParams>(n.params) {
                    if let Some(doc) = self.docs.remove(p.text_document.uri.as_str()) {
                        self.publish(&doc.uri, Vec::new(), None);
                    }
                }
            }
            _ => {} // initialized, didSave, $/cancelRequest, $/setTrace, configuration: nothing to do
        }
    }

    /// Opens (or reopens) a document at `text`; it is analysed later.
    fn set_text(&mut self, uri: lt::Uri, version: i32, text: String) {
        let key = uri.as_str().to_string();
        match self.docs.get_mut(&key) {
            Some(doc) => doc.pending = Some((text, version)),
            None => {
                let analysis = Analysis::new(String::new(), &analysis::stem_of_uri(&key));
                self.docs.insert(key, Document { uri, analysis, pending: Some((text, version)) });
            }
        }
    }

    /// Analyses every document with a newer text, and publishes its diagnostics.
    fn flush(&mut self) {
        let stale: Vec<String> =
            self.docs.iter().filter(|(_, d)| d.pending.is_some()).map(|(k, _)| k.clone()).collect();
        for key in stale {
            self.analyse(&key);
        }
    }

    /// Analyses document `key` if its text is newer than its analysis, and
    /// publishes its diagnostics.
    fn analyse(&mut self, key: &str) {
        let Some(doc) = self.docs.get_mut(key) else { return };
        let Some((text, version)) = doc.pending.take() else { return };
        let stem = analysis::stem_of_uri(key);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Analysis::new(text, &stem))) {
            Ok(a) => doc.analysis = a,
            Err(_) => {
                return self
                    .log(lt::MessageType::ERROR, format!("tcc lsp: internal error analysing `{key}` (a bug in tcc)"));
            }
        }
        let doc = &self.docs[key];
        let diags = doc.analysis.lsp_diagnostics(&doc.uri);
        self.publish(&doc.uri, diags, Some(version));
    }

    fn publish(&self, uri: &lt::Uri, diagnostics: Vec<lt::Diagnostic>, version: Option<i32>) {
        let params = lt::PublishDiagnosticsParams { uri: uri.clone(), diagnostics, version };
        self.send(Notification::new(lt::notification::PublishDiagnostics::METHOD.to_string(), params));
    }
}

/// Whether a `$/cancelRequest` for `req` is waiting in `queue`.
fn cancelled(req: &Request, queue: &VecDeque<Message>) -> bool {
    let id = serde_json::to_value(&req.id).unwrap_or_default();
    queue.iter().any(|m| matches!(m, Message::Notification(n) if n.method == "$/cancelRequest" && n.params["id"] == id))
}

/// Whether `req` is about a document that a change or close waiting in `queue`
/// modifies (its answer would be for a version the client no longer has).
fn modified(req: &Request, queue: &VecDeque<Message>) -> bool {
    let Some(uri) = req.params["textDocument"]["uri"].as_str() else { return false };
    queue.iter().any(|m| {
        matches!(m, Message::Notification(n)
            if (n.method == "textDocument/didChange" || n.method == "textDocument/didClose")
                && n.params["textDocument"]["uri"].as_str() == Some(uri))
    })
}

fn parse_params<P: DeserializeOwned>(req: &Request) -> Result<P, ResponseError> {
    serde_json::from_value(req.params.clone())
        .map_err(|e| error(ErrorCode::InvalidParams, format!("invalid params for `{}`: {e}", req.method)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An in-memory session: the server runs on a thread, the test is the client.
    struct Session {
        client: Connection,
        thread: Option<std::thread::JoinHandle<i32>>,
        next: i32,
    }

    impl Session {
        fn new() -> Session {
            let (server, client) = Connection::memory();
            let thread = std::thread::spawn(move || run(server));
            Session { client, thread: Some(thread), next: 1 }
        }

        fn request(&mut self, method: &str, params: serde_json::Value) -> Response {
            let id = self.next;
            self.next += 1;
            self.client.sender.send(Request::new(id.into(), method.to_string(), params).into()).unwrap();
            loop {
                match self.client.receiver.recv_timeout(std::time::Duration::from_secs(20)).expect("no reply") {
                    Message::Response(r) if r.id == id.into() => return r,
                    _ => {}
                }
            }
        }

        fn notify(&self, method: &str, params: serde_json::Value) {
            self.client.sender.send(Notification::new(method.to_string(), params).into()).unwrap();
        }

        fn diagnostics(&self) -> serde_json::Value {
            loop {
                match self.client.receiver.recv_timeout(std::time::Duration::from_secs(20)).expect("no diagnostics") {
                    Message::Notification(n) if n.method == "textDocument/publishDiagnostics" => return n.params,
                    _ => {}
                }
            }
        }

        /// A session whose server starts with `msgs` already waiting (as when a
        /// client sends faster than the server reads).
        fn queued(msgs: Vec<Message>) -> Session {
            let (server, client) = Connection::memory();
            for m in msgs {
                client.sender.send(m).unwrap();
            }
            let thread = std::thread::spawn(move || run(server));
            Session { client, thread: Some(thread), next: 1000 }
        }

        /// Every message until the response to `id` (included).
        fn until(&self, id: i32) -> Vec<Message> {
            let mut out = Vec::new();
            loop {
                let m = self.client.receiver.recv_timeout(std::time::Duration::from_secs(20)).expect("no reply");
                let end = matches!(&m, Message::Response(r) if r.id == id.into());
                out.push(m);
                if end {
                    return out;
                }
            }
        }

        fn exit(mut self) -> i32 {
            self.notify("exit", json!(null));
            self.thread.take().unwrap().join().unwrap()
        }
    }

    #[test]
    fn lifecycle_and_errors() {
        let mut s = Session::new();
        let r = s.request("textDocument/hover", json!({}));
        assert_eq!(r.error.unwrap().code, ErrorCode::ServerNotInitialized as i32);
        let r = s.request("initialize", json!({"capabilities": {}}));
        assert!(r.result.unwrap()["capabilities"]["hoverProvider"].as_bool().unwrap());
        let r = s.request("initialize", json!({"capabilities": {}}));
        assert_eq!(r.error.unwrap().code, ErrorCode::InvalidRequest as i32);
        let r = s.request("no/such/method", json!({}));
        assert_eq!(r.error.unwrap().code, ErrorCode::MethodNotFound as i32);
        let r = s.request("textDocument/hover", json!({"textDocument": 3}));
        assert_eq!(r.error.unwrap().code, ErrorCode::InvalidParams as i32);
        let r = s.request(
            "textDocument/hover",
            json!({"textDocument": {"uri": "file:///nope.tc"}, "position": {"line": 0, "character": 0}}),
        );
        assert_eq!(r.error.unwrap().code, ErrorCode::InvalidParams as i32);
        let r = s.request("shutdown", json!(null));
        assert!(r.error.is_none());
        let r = s.request("textDocument/hover", json!({}));
        assert_eq!(r.error.unwrap().code, ErrorCode::InvalidRequest as i32);
        assert_eq!(s.exit(), 0);
    }

    #[test]
    fn exit_without_shutdown_is_status_1() {
        let s = Session::new();
        assert_eq!(s.exit(), 1);
    }

    #[test]
    fn diagnostics_follow_edits_and_clear() {
        let mut s = Session::new();
        s.request("initialize", json!({"capabilities": {}}));
        let uri = "file:///tmp/t.tc";
        s.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "tc", "version": 1, "text": "range N = 0;"}}),
        );
        let d = s.diagnostics();
        assert_eq!(d["diagnostics"][0]["code"], "E0102");
        assert_eq!(d["version"], 1);
        // a ranged change: replace `0` with `4`
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"range": {"start": {"line": 0, "character": 10}, "end": {"line": 0, "character": 11}}, "text": "4"}]}),
        );
        let d = s.diagnostics();
        assert_eq!(d["diagnostics"].as_array().unwrap().len(), 0, "{d}");
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": "range N = ;"}]}),
        );
        assert_eq!(s.diagnostics()["diagnostics"][0]["code"], "E0002");
        s.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}));
        assert_eq!(s.diagnostics()["diagnostics"].as_array().unwrap().len(), 0);
        s.request("shutdown", json!(null));
        assert_eq!(s.exit(), 0);
    }

    fn req(id: i32, method: &str, params: serde_json::Value) -> Message {
        Request::new(id.into(), method.to_string(), params).into()
    }

    fn note(method: &str, params: serde_json::Value) -> Message {
        Notification::new(method.to_string(), params).into()
    }

    /// The publishDiagnostics params among `msgs`.
    fn published(msgs: &[Message]) -> Vec<serde_json::Value> {
        msgs.iter()
            .filter_map(|m| match m {
                Message::Notification(n) if n.method == "textDocument/publishDiagnostics" => Some(n.params.clone()),
                _ => None,
            })
            .collect()
    }

    /// Edits that arrive faster than the server reads are applied in order and
    /// analysed once, at the latest version (issue 23: 1000 edits of a 1 MB
    /// document were 1000 analyses).
    #[test]
    fn queued_edits_are_analysed_once_at_the_latest_version() {
        let uri = "file:///tmp/q.tc";
        let mut msgs = vec![
            req(1, "initialize", json!({"capabilities": {}})),
            note(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": uri, "languageId": "tc", "version": 1, "text": "range N = 4;"}}),
            ),
        ];
        for v in 2..=200 {
            // Alternately broken (E0102) and fixed, by ranged and full changes.
            let change = if v % 2 == 0 {
                json!({"range": {"start": {"line": 0, "character": 10}, "end": {"line": 0, "character": 11}}, "text": "0"})
            } else {
                json!({"text": "range N = 4;"})
            };
            msgs.push(note(
                "textDocument/didChange",
                json!({"textDocument": {"uri": uri, "version": v}, "contentChanges": [change]}),
            ));
        }
        // The last edit: `range N = 0;` becomes `range N = ;`.
        msgs.push(note(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": 201}, "contentChanges": [{"range": {"start": {"line": 0, "character": 10}, "end": {"line": 0, "character": 11}}, "text": ""}]}),
        ));
        msgs.push(req(2, "textDocument/documentSymbol", json!({"textDocument": {"uri": uri}})));
        let mut s = Session::queued(msgs);
        let got = s.until(2);
        let p = published(&got);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0]["version"], 201);
        assert_eq!(p[0]["diagnostics"][0]["code"], "E0002", "{p:?}");
        // Later edits, each waited for, are each published.
        s.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": 202}, "contentChanges": [{"text": "range N = 4;"}]}),
        );
        let d = s.diagnostics();
        assert_eq!((d["version"].clone(), d["diagnostics"].as_array().unwrap().len()), (json!(202), 0), "{d}");
        s.request("shutdown", json!(null));
        assert_eq!(s.exit(), 0);
    }

    /// A request followed by its `$/cancelRequest` is answered RequestCancelled,
    /// and one followed by a change of its document ContentModified, without
    /// analysing the versions in between; the others as usual.
    #[test]
    fn cancelled_and_outdated_requests_are_answered_without_analysis() {
        let uri = "file:///tmp/c.tc";
        let text = "range N = 4;\nindex i : N;\ninput tensor A[i];\noutput tensor S;\nS = A[i];\n";
        let at = json!({"textDocument": {"uri": uri}, "position": {"line": 2, "character": 13}});
        let s = Session::queued(vec![
            req(1, "initialize", json!({"capabilities": {}})),
            note(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": uri, "languageId": "tc", "version": 1, "text": text}}),
            ),
            req(2, "textDocument/semanticTokens/full", json!({"textDocument": {"uri": uri}})),
            note("$/cancelRequest", json!({"id": 2})),
            req(3, "textDocument/hover", at.clone()),
            note(
                "textDocument/didChange",
                json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": text.replace("S = A[i]", "S = B[i]")}]}),
            ),
            req(4, "textDocument/hover", at),
        ]);
        let got = s.until(4);
        let code = |id: i32| {
            got.iter().find_map(|m| match m {
                Message::Response(r) if r.id == id.into() => Some(r.error.as_ref().map(|e| e.code)),
                _ => None,
            })
        };
        assert_eq!(code(2), Some(Some(ErrorCode::RequestCanceled as i32)));
        assert_eq!(code(3), Some(Some(ErrorCode::ContentModified as i32)));
        assert_eq!(code(4), Some(None));
        // Version 1 was never analysed: only version 2's diagnostics (B is unknown).
        let p = published(&got);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0]["version"], 2);
        assert!(!p[0]["diagnostics"].as_array().unwrap().is_empty(), "{p:?}");
        assert_eq!(s.exit(), 1);
    }
}
