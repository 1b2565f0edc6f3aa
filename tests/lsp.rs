//! `tcc lsp` as an editor runs it: a child process spoken to in JSON-RPC over its
//! stdin/stdout, Content-Length framing included.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Value>,
    next_id: i64,
    /// Notifications read while waiting for something else.
    pending: Vec<Value>,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tcc"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start tcc lsp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut len = None;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Content-Length: ") {
                        len = v.parse::<usize>().ok();
                    }
                }
                let mut buf = vec![0; len.expect("Content-Length")];
                r.read_exact(&mut buf).unwrap();
                let v: Value = serde_json::from_slice(&buf).expect("server sent invalid JSON");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Client { child, stdin, incoming: rx, next_id: 1, pending: Vec::new() }
    }

    fn raw(&mut self, bytes: &[u8]) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(bytes).unwrap();
        s.flush().unwrap();
    }

    fn send(&mut self, v: Value) {
        let body = serde_json::to_string(&v).unwrap();
        self.raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns the whole response (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait(|v| v["id"] == id && v.get("method").is_none())
    }

    fn wait(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.pending.iter().position(&pred) {
            return self.pending.remove(i);
        }
        loop {
            let v = self.incoming.recv_timeout(TIMEOUT).expect("the server did not answer in time");
            if pred(&v) {
                return v;
            }
            self.pending.push(v);
        }
    }

    fn diagnostics_for(&mut self, uri: &str) -> Value {
        let uri = uri.to_string();
        self.wait(move |v| v["method"] == "textDocument/publishDiagnostics" && v["params"]["uri"] == uri)["params"]
            .clone()
    }

    fn initialize(&mut self) -> Value {
        let r = self.request("initialize", json!({"processId": null, "rootUri": null, "capabilities": {}}));
        self.notify("initialized", json!({}));
        r
    }

    fn open(&mut self, uri: &str, text: &str) -> Value {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "tc", "version": 1, "text": text}}),
        );
        self.diagnostics_for(uri)
    }

    fn at(&mut self, method: &str, uri: &str, line: u32, character: u32) -> Value {
        self.request(method, json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}))
    }

    /// shutdown + exit; the exit status.
    fn finish(mut self) -> i32 {
        let r = self.request("shutdown", Value::Null);
        assert!(r.get("error").is_none(), "{r}");
        self.notify("exit", Value::Null);
        self.wait_status()
    }

    fn wait_status(&mut self) -> i32 {
        drop(self.stdin.take());
        let start = std::time::Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            if start.elapsed() > TIMEOUT {
                let _ = self.child.kill();
                panic!("tcc lsp did not exit");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example(name: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)).unwrap()
}

/// (line, UTF-16 column) of the `n`-th occurrence of `needle`.
fn pos_of(text: &str, needle: &str, n: usize) -> (u32, u32) {
    let off = text.match_indices(needle).nth(n).unwrap_or_else(|| panic!("no {n}th `{needle}`")).0;
    let before = &text[..off];
    let line = before.matches('\n').count() as u32;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].encode_utf16().count() as u32)
}

const BROKEN: &str = "// Énergie du 𝔸-terme — commentaire non-ASCII\n\
range N = 4;\n\
index i, j, k : N;\n\
input tensor A[i,k] : f64;\n\
input tensor B[k,j] : f64;\n\
output tensor C[i,j] : f64;\n\
C[i,j] = A[i,k] * Bx[k,j];\n";

#[test]
fn initialize_announces_capabilities() {
    let mut c = Client::start();
    let r = c.initialize();
    let caps = &r["result"]["capabilities"];
    for k in [
        "hoverProvider",
        "definitionProvider",
        "referencesProvider",
        "documentSymbolProvider",
        "documentFormattingProvider",
    ] {
        assert_eq!(caps[k], true, "{k}: {caps}");
    }
    assert!(caps["completionProvider"].is_object());
    assert!(caps["semanticTokensProvider"]["legend"]["tokenTypes"].as_array().unwrap().len() > 5);
    assert_eq!(caps["textDocumentSync"]["change"], 1);
    assert_eq!(r["result"]["serverInfo"]["name"], "tcc");
    assert_eq!(c.finish(), 0);
}

#[test]
fn diagnostics_have_utf16_ranges_and_clear_when_fixed() {
    let mut c = Client::start();
    c.initialize();
    let uri = "file:///work/broken.tc";
    let d = c.open(uri, BROKEN);
    let diags: Vec<&Value> = d["diagnostics"].as_array().unwrap().iter().filter(|x| x["severity"] == 1).collect();
    assert_eq!(diags.len(), 1, "{d}");
    assert_eq!(diags[0]["code"], "E0106", "{d}");
    assert_eq!(diags[0]["severity"], 1);
    assert_eq!(diags[0]["source"], "tcc");
    let (line, col) = pos_of(BROKEN, "Bx", 0);
    assert_eq!(diags[0]["range"]["start"], json!({"line": line, "character": col}));
    assert_eq!(diags[0]["range"]["end"], json!({"line": line, "character": col + 2}));
    // the same diagnostics as `tcc check --error-format=json` (code and message)
    let (_, check) = tcc::compile(BROKEN, "broken");
    assert_eq!(check.len(), d["diagnostics"].as_array().unwrap().len());
    let e = check.iter().find(|x| x.is_error()).unwrap();
    assert!(diags[0]["message"].as_str().unwrap().starts_with(&e.message));

    // Columns count UTF-16 units: `𝔸` is 4 bytes, 1 char, 2 units.
    let uri2 = "file:///work/utf16.tc";
    let src = "index 𝔸 i : ;\n";
    let d = c.open(uri2, src);
    let semi = d["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["code"] == "E0002")
        .cloned()
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(semi["range"]["start"], json!({"line": 0, "character": 13}), "{d}");

    // Fixing the first file clears its diagnostics, and only its own are published.
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": BROKEN.replace("Bx", "B")}]}),
    );
    let d = c.diagnostics_for(uri);
    assert_eq!(d["diagnostics"], json!([]), "{d}");
    assert_eq!(d["version"], 2);
    assert_eq!(c.finish(), 0);
}

#[test]
fn hover_shows_tensor_facts_and_the_optimizers_report() {
    let mut c = Client::start();
    c.initialize();
    let src = example("four_index.tc");
    let uri = "file:///work/four_index.tc";
    let d = c.open(uri, &src);
    assert_eq!(d["diagnostics"], json!([]));

    let (l, ch) = pos_of(&src, "A[p,q,r,s] : f64", 0);
    let h = c.at("textDocument/hover", uri, l, ch)["result"]["contents"]["value"].as_str().unwrap().to_string();
    assert!(h.contains("input tensor A[p,q,r,s] : f64 symmetric(p q)(r s)"), "{h}");
    assert!(h.contains("shape: [6, 6, 6, 6] over (N, N, N, N)"), "{h}");
    assert!(h.contains("1296 elements"), "{h}");
    assert!(h.contains("element type: f64"), "{h}");

    // an index, and a range
    let (l, ch) = pos_of(&src, "[p,", 0);
    let ch = ch + 1;
    let h = c.at("textDocument/hover", uri, l, ch)["result"]["contents"]["value"].as_str().unwrap().to_string();
    assert!(h.contains("index p : N;") && h.contains("6 values"), "{h}");

    // the statement: order, flops, peak memory
    let (l, ch) = pos_of(&src, " = C[a,p]", 0);
    let h = c.at("textDocument/hover", uri, l, ch + 1)["result"]["contents"]["value"].as_str().unwrap().to_string();
    assert!(h.contains("contraction order"), "{h}");
    assert!(h.contains("flops:"), "{h}");
    assert!(h.contains("peak memory"), "{h}");

    // nothing under the cursor: null
    let r = c.at("textDocument/hover", uri, 2, 0);
    assert!(r.get("error").is_none());
    assert_eq!(c.finish(), 0);
}

#[test]
fn definition_and_references() {
    let mut c = Client::start();
    c.initialize();
    let src = example("ccsd_terms.tc");
    let uri = "file:///work/ccsd_terms.tc";
    c.open(uri, &src);
    // `T2` in the program `energy` → its declaration
    let (l, ch) = pos_of(&src, "T2[c,d,k,l]", 0);
    let r = c.at("textDocument/definition", uri, l, ch);
    let (dl, dc) = pos_of(&src, "T2[a,b,i,j] : f64", 0);
    assert_eq!(r["result"]["uri"], uri);
    assert_eq!(r["result"]["range"]["start"], json!({"line": dl, "character": dc}), "{r}");

    // the range `O` → its declaration, from `index i, j, k, l : O`
    let (l, ch) = pos_of(&src, ": O;", 0);
    let r = c.at("textDocument/definition", uri, l, ch + 2);
    let (dl, dc) = pos_of(&src, "O = 3", 0);
    assert_eq!(r["result"]["range"]["start"], json!({"line": dl, "character": dc}), "{r}");

    // every use of T2, with and without the declaration
    let (tl, tc) = pos_of(&src, "T2[a,b,i,j] : f64", 0);
    let with = c.request(
        "textDocument/references",
        json!({"textDocument": {"uri": uri}, "position": {"line": tl, "character": tc + 1}, "context": {"includeDeclaration": true}}),
    );
    let n_uses = src.matches("T2[").count();
    assert_eq!(with["result"].as_array().unwrap().len(), n_uses, "{with}");
    let without = c.request(
        "textDocument/references",
        json!({"textDocument": {"uri": uri}, "position": {"line": tl, "character": tc}, "context": {"includeDeclaration": false}}),
    );
    assert_eq!(without["result"].as_array().unwrap().len(), n_uses - 1);

    // a number has no definition
    let (l, ch) = pos_of(&src, "0.5", 0);
    assert_eq!(c.at("textDocument/definition", uri, l, ch)["result"], Value::Null);
    assert_eq!(c.finish(), 0);
}

#[test]
fn completion_of_names_and_keywords() {
    let mut c = Client::start();
    c.initialize();
    let src = "range N = 4;\nindex i, j : N;\ninput tensor Alpha[i,j];\noutput tensor Beta[i,j];\nBeta[i,j] = Al\n";
    let uri = "file:///work/c.tc";
    c.open(uri, src);
    let labels = |r: &Value| -> Vec<String> {
        r["result"].as_array().unwrap().iter().map(|i| i["label"].as_str().unwrap().to_string()).collect()
    };
    // a tensor name being typed
    let r = c.at("textDocument/completion", uri, 4, 14);
    assert_eq!(labels(&r), vec!["Alpha"], "{r}");
    // inside brackets: indices only
    let r = c.at("textDocument/completion", uri, 4, 5);
    let l = labels(&r);
    assert!(l.contains(&"i".to_string()) && l.contains(&"j".to_string()), "{l:?}");
    assert!(!l.contains(&"Alpha".to_string()) && !l.contains(&"range".to_string()), "{l:?}");
    // at the start of a line: keywords, tensors and functions
    let r = c.at("textDocument/completion", uri, 5, 0);
    let l = labels(&r);
    for k in ["range", "tensor", "Alpha", "relu", "N"] {
        assert!(l.contains(&k.to_string()), "{k} missing from {l:?}");
    }
    assert_eq!(c.finish(), 0);
}

#[test]
fn formatting_is_tcc_fmt() {
    let mut c = Client::start();
    c.initialize();
    let src = "range N=4;index i:N;\ninput tensor A[i];output tensor B[i];\nB[i]=A[i]*2;\n";
    let uri = "file:///work/f.tc";
    c.open(uri, src);
    let r = c.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": true}}),
    );
    let formatted = tcc::fmt::format_source(src).expect("the formatter accepts this file");
    let edits = r["result"].as_array().unwrap_or_else(|| panic!("{r}"));
    assert_eq!(edits.len(), 1, "{r}");
    assert_eq!(edits[0]["newText"], formatted);
    assert_eq!(edits[0]["range"]["start"], json!({"line": 0, "character": 0}));
    assert_eq!(edits[0]["range"]["end"], json!({"line": 3, "character": 0}));
    // a formatted file needs no edit (the examples are formatted: `tcc fmt --check`)
    let ex = example("ccsd_terms.tc");
    let uri2 = "file:///work/ccsd_terms.tc";
    c.open(uri2, &ex);
    let r = c.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": uri2}, "options": {"tabSize": 4, "insertSpaces": true}}),
    );
    assert_eq!(r["result"], json!([]), "{r}");
    // a file with a syntax error cannot be formatted: an error, not a crash
    let bad = "file:///work/bad.tc";
    c.open(bad, "range N = ;");
    let r = c.request("textDocument/formatting", json!({"textDocument": {"uri": bad}}));
    assert_eq!(r["error"]["code"], -32803, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("line 1"), "{r}");
    assert_eq!(c.finish(), 0);
}

#[test]
fn document_symbols_and_semantic_tokens() {
    let mut c = Client::start();
    c.initialize();
    let src = example("model_mlp.tc");
    let uri = "file:///work/model_mlp.tc";
    c.open(uri, &src);
    let r = c.request("textDocument/documentSymbol", json!({"textDocument": {"uri": uri}}));
    let syms = r["result"].as_array().unwrap();
    assert_eq!(syms.len(), 1, "{r}");
    assert_eq!(syms[0]["name"], "mlp");
    let children: Vec<&str> =
        syms[0]["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in ["tokens", "hidden", "t", "X", "W1", "Y", "ffn"] {
        assert!(children.contains(&n), "{n} missing from {children:?}");
    }
    let r = c.request("textDocument/semanticTokens/full", json!({"textDocument": {"uri": uri}}));
    let data = r["result"]["data"].as_array().unwrap();
    assert_eq!(data.len() % 5, 0);
    // decode and check the first token (the comment) and the first keyword `model`
    let mut toks = Vec::new();
    let (mut line, mut col) = (0u64, 0u64);
    for ch in data.chunks(5) {
        let dl = ch[0].as_u64().unwrap();
        let ds = ch[1].as_u64().unwrap();
        line += dl;
        col = if dl == 0 { col + ds } else { ds };
        toks.push((line, col, ch[2].as_u64().unwrap(), ch[3].as_u64().unwrap()));
    }
    assert_eq!(toks[0], (0, 0, src.lines().next().unwrap().encode_utf16().count() as u64, 1)); // comment
    assert_eq!(toks[1], (1, 0, 5, 0)); // `model` keyword
    assert_eq!(c.finish(), 0);
}

#[test]
fn bad_and_mismatched_requests_get_errors_never_a_crash() {
    let mut c = Client::start();
    // before initialize
    let r = c.request("textDocument/hover", json!({}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    c.notify("textDocument/didOpen", json!({"bogus": true})); // ignored
    c.initialize();
    // unknown method
    assert_eq!(c.request("tcc/nonsense", json!({}))["error"]["code"], -32601);
    // bad params
    assert_eq!(c.request("textDocument/hover", json!({"textDocument": "x"}))["error"]["code"], -32602);
    assert_eq!(c.request("textDocument/definition", json!(42))["error"]["code"], -32602);
    // a document that was never opened
    assert_eq!(c.at("textDocument/hover", "file:///nowhere.tc", 0, 0)["error"]["code"], -32602);
    // positions far outside the document
    let uri = "file:///work/x.tc";
    c.open(uri, BROKEN);
    let r = c.at("textDocument/hover", uri, 9999, 9999);
    assert!(r.get("error").is_none(), "{r}");
    let r = c.at("textDocument/completion", uri, 0, 3000);
    assert!(r.get("error").is_none(), "{r}");
    // bad notifications are ignored
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": "file:///never.tc", "version": 1}, "contentChanges": [{"text": "x"}]}),
    );
    c.notify("textDocument/didChange", json!("garbage"));
    c.notify("$/cancelRequest", json!({"id": 1}));
    // garbage on the wire: not JSON, a request with a non-string method, a stray header line
    c.raw(b"Content-Length: 9\r\n\r\n{not json");
    c.send(json!({"jsonrpc": "2.0", "id": 77, "method": 5}));
    let r = c.wait(|v| v["id"] == 77);
    assert_eq!(r["error"]["code"], -32600, "{r}");
    c.raw(b"what is this\r\n\r\n");
    // a second initialize
    assert_eq!(c.request("initialize", json!({"capabilities": {}}))["error"]["code"], -32600);
    // still alive and correct
    let (l, ch) = pos_of(BROKEN, "A[i,k] : f64", 0);
    let r = c.at("textDocument/hover", uri, l, ch);
    assert!(r["result"]["contents"]["value"].as_str().unwrap().contains("input tensor A[i,k]"), "{r}");
    // after shutdown, requests are invalid
    assert!(c.request("shutdown", Value::Null).get("error").is_none());
    assert_eq!(c.at("textDocument/hover", uri, 0, 0)["error"]["code"], -32600);
    c.notify("exit", Value::Null);
    assert_eq!(c.wait_status(), 0);
}

#[test]
fn exit_without_shutdown_and_end_of_input() {
    let mut c = Client::start();
    c.initialize();
    c.notify("exit", Value::Null);
    assert_eq!(c.wait_status(), 1);
    // the client goes away without a word
    let mut c = Client::start();
    c.initialize();
    assert_eq!(c.wait_status(), 1);
}

/// A real client: Neovim's built-in LSP client, headless (tests/nvim/lsp_client.lua).
/// Neovim converts the server's UTF-16 columns to byte columns, so this checks the
/// position encoding end to end. Skipped (visibly) when `nvim` is not installed,
/// unless `CI` is set; `.ci/run` installs it.
#[test]
fn neovim_headless_client_gets_diagnostics_and_hover() {
    if Command::new("nvim").arg("--version").stdout(Stdio::null()).status().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI is set but `nvim` is not installed (apt-get install neovim)");
        eprintln!("SKIPPED neovim_headless_client_gets_diagnostics_and_hover: `nvim` is not installed (apt-get install neovim)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nv.tc");
    let out = dir.path().join("out.txt");
    std::fs::write(&file, "// é 𝔸 commentaire\nrange N = 4;\nindex i : N;\nindex 𝔸 j : ;\n").unwrap();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvim/lsp_client.lua");
    let mut child = Command::new("nvim")
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "-c"])
        .arg(format!("luafile {}", script.display()))
        .env("TCC_BIN", env!("CARGO_BIN_EXE_tcc"))
        .env("TCC_FILE", &file)
        .env("TCC_OUT", &out)
        .env("TCC_HOVER", "2:6")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("headless nvim did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let report =
        std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("nvim wrote no report ({e}); status {status}"));
    assert!(status.success(), "nvim failed: {status}\n{report}");
    let lines: Vec<&str> = report.lines().collect();
    // `𝔸`: bytes 6..10 of line 3; the `;` after it: byte 15 (UTF-16 column 13).
    assert!(lines.iter().any(|l| l.starts_with("diag 3 6 3 10 E0001 unexpected character")), "{report}");
    assert!(lines.iter().any(|l| l.starts_with("diag 3 15 3 16 E0002")), "{report}");
    assert!(
        lines.iter().any(|l| l.starts_with("hover ") && l.contains("index i : N;") && l.contains("4 values")),
        "{report}"
    );
    assert_eq!(lines.last(), Some(&"done"), "{report}");
}
