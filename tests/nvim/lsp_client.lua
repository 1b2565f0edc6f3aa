-- Drives `tcc lsp` with Neovim's built-in LSP client (headless), for tests/lsp.rs.
-- Works with Neovim 0.7 (Debian 12) and later: uses vim.lsp.start_client.
--
--   TCC_BIN=target/debug/tcc TCC_FILE=x.tc TCC_OUT=out.txt \
--     nvim --headless -u NONE -i NONE -n -c 'luafile tests/nvim/lsp_client.lua'
--
-- Opens TCC_FILE, waits for the server's diagnostics, asks for a hover at
-- TCC_HOVER="line:col" (0-based, UTF-16) if set, and writes to TCC_OUT:
--   diag <line> <byte col> <end line> <end byte col> <code> <message, one line>
--   hover <text, one line>
--   done
-- Neovim converts the server's UTF-16 columns to byte columns, so the test can
-- check the conversion end to end. Exits 0, or 1 with "error ..." in TCC_OUT.

local out_path = os.getenv("TCC_OUT")
local out = {}
local function finish(code)
  local f = io.open(out_path, "w")
  f:write(table.concat(out, "\n") .. "\n")
  f:close()
  vim.cmd((code == 0) and "qall!" or "cquit!")
end

local ok, err = pcall(function()
  local file = os.getenv("TCC_FILE")
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local buf = vim.api.nvim_get_current_buf()
  local client_id = vim.lsp.start_client({
    name = "tcc",
    cmd = { os.getenv("TCC_BIN"), "lsp" },
    root_dir = vim.fn.fnamemodify(file, ":p:h"),
  })
  assert(client_id, "could not start tcc lsp")
  vim.lsp.buf_attach_client(buf, client_id)

  local got = vim.wait(20000, function() return #vim.diagnostic.get(buf) > 0 end, 50)
  if not got then
    table.insert(out, "error no diagnostics within 20 s")
  end
  local diags = vim.diagnostic.get(buf)
  table.sort(diags, function(a, b) return a.lnum < b.lnum or (a.lnum == b.lnum and a.col < b.col) end)
  for _, d in ipairs(diags) do
    local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code) or "?"
    table.insert(out, string.format("diag %d %d %d %d %s %s", d.lnum, d.col, d.end_lnum, d.end_col, code,
      (d.message:gsub("\n", " "))))
  end

  local hover = os.getenv("TCC_HOVER")
  if hover then
    local line, col = hover:match("(%d+):(%d+)")
    local client = vim.lsp.get_client_by_id(client_id)
    local resp = client.request_sync("textDocument/hover", {
      textDocument = { uri = vim.uri_from_bufnr(buf) },
      position = { line = tonumber(line), character = tonumber(col) },
    }, 10000, buf)
    if resp and resp.result and resp.result.contents then
      table.insert(out, "hover " .. (resp.result.contents.value or ""):gsub("\n", " "))
    else
      table.insert(out, "error no hover: " .. vim.inspect(resp))
    end
  end

  vim.lsp.stop_client(client_id)
  vim.wait(5000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
  table.insert(out, "done")
end)
if not ok then
  table.insert(out, "error " .. tostring(err))
  finish(1)
else
  finish(0)
end
