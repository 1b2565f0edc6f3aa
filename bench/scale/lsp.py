#!/usr/bin/env python3
"""Times `tcc lsp` on a large document (issue 23): the first diagnostics after
didOpen, a semantic-tokens request, N ranged edits sent at once (until the
diagnostics of the last version arrive) and a semantic-tokens request after them.
Usage: python3 bench/scale/lsp.py TCC FILE.tc [EDITS]"""
import json, subprocess, sys, time

tcc, path = sys.argv[1], sys.argv[2]
edits = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
text = open(path).read()
p = subprocess.Popen([tcc, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def send(msg):
    body = json.dumps(msg).encode()
    p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def read():
    n = 0
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("server closed the connection")
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
        if line in (b"\r\n", b"\n"):
            return json.loads(p.stdout.read(n))


def wait(pred):
    while True:
        m = read()
        if pred(m):
            return m


uri = "file:///tmp/big.tc"
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
p.stdin.flush()
wait(lambda m: m.get("id") == 1)
send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
t0 = time.time()
send({"jsonrpc": "2.0", "method": "textDocument/didOpen",
      "params": {"textDocument": {"uri": uri, "languageId": "tc", "version": 1, "text": text}}})
p.stdin.flush()
d = wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
print(f"didOpen ({len(text) / 1e6:.2f} MB) to diagnostics: {time.time() - t0:.2f} s "
      f"({len(d['params']['diagnostics'])} diagnostics)")


def tokens(rid):
    t0 = time.time()
    send({"jsonrpc": "2.0", "id": rid, "method": "textDocument/semanticTokens/full",
          "params": {"textDocument": {"uri": uri}}})
    p.stdin.flush()
    r = wait(lambda m: m.get("id") == rid)
    n = len(r["result"]["data"]) // 5 if r.get("result") else r.get("error")
    print(f"semantic tokens: {time.time() - t0:.2f} s ({n} tokens)")


tokens(2)
# Edits: each appends one character to the last line (as typing at the end).
lines = text.split("\n")
last, col = len(lines) - 1, len(lines[-1])
t0 = time.time()
for k in range(edits):
    send({"jsonrpc": "2.0", "method": "textDocument/didChange",
          "params": {"textDocument": {"uri": uri, "version": 2 + k},
                     "contentChanges": [{"range": {"start": {"line": last, "character": col + k},
                                                   "end": {"line": last, "character": col + k}},
                                         "text": "/" if k < 2 else "x"}]}})
p.stdin.flush()
published = 0
while True:
    m = read()
    if m.get("method") == "textDocument/publishDiagnostics":
        published += 1
        if m["params"].get("version") == 1 + edits:
            break
print(f"{edits} edits to the last version's diagnostics: {time.time() - t0:.2f} s ({published} analyses published)")
tokens(3)
send({"jsonrpc": "2.0", "id": 4, "method": "shutdown", "params": None})
p.stdin.flush()
wait(lambda m: m.get("id") == 4)
send({"jsonrpc": "2.0", "method": "exit", "params": None})
p.stdin.close()
p.wait()
