// Runs the official MCP conformance suite's server scenarios against the broker's `/mcp`.
//
// The suite's CLI takes a URL and nothing else, but `/mcp` wants an agent's bearer token: a
// loopback proxy here adds `Authorization: Bearer $LEO_AGENT_TOKEN` to each request and
// streams the answer back (SSE included). The client's `Host` and `Origin` keep their names, so
// the broker's DNS rebinding checks see what the suite sent; only the proxy's port in them
// becomes the broker's, which those checks also compare. Arguments after the script go to the CLI
// (`--scenario NAME`, `--verbose`, …); the exit code is the CLI's.
import { spawn } from "node:child_process";
import http from "node:http";
import { fileURLToPath } from "node:url";

const target = new URL(process.env.LEO_MCP_URL);
const token = process.env.LEO_AGENT_TOKEN;

/// `value` with the proxy's `:port` turned into the broker's.
function retarget(value) {
  const port = proxy.address().port;
  return value?.replace(new RegExp(`:${port}(?![0-9])`), `:${target.port}`);
}

const proxy = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  for (const name of ["host", "origin"]) {
    if (headers[name] !== undefined) headers[name] = retarget(headers[name]);
  }
  const upstream = http.request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      res.flushHeaders();
      answer.pipe(res);
    },
  );
  upstream.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502);
    res.end(String(e));
  });
  res.on("close", () => upstream.destroy());
  req.pipe(upstream);
});

proxy.listen(0, "127.0.0.1", () => {
  const { port } = proxy.address();
  const here = (p) => fileURLToPath(new URL(p, import.meta.url));
  const cli = spawn(
    process.execPath,
    [
      "--import",
      here("./globsync.mjs"),
      here("./node_modules/@modelcontextprotocol/conformance/dist/index.js"),
      "server",
      "--url",
      `http://localhost:${port}/mcp`,
      ...process.argv.slice(2),
    ],
    { stdio: "inherit" },
  );
  cli.on("exit", (code, signal) => {
    proxy.close();
    process.exit(code ?? (signal ? 1 : 0));
  });
});
