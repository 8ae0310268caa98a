// Test support: the real `leo` broker on a temporary LEO_HOME and port 0, agents played by the
// real `leo-mcp` (MCP over stdio, as a harness) or by `leo call`, and a bare provider that keeps
// a tool alive without answering. Binaries: LEO_BIN / LEO_MCP_BIN, else target/debug/.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const WAIT = 20_000;

function binary(env, name) {
  const path = process.env[env] || join(ROOT, "target", "debug", name);
  if (!existsSync(path)) throw new Error(`${name} is not built at ${path}: run \`cargo build -p leo-broker -p leo-mcp\` or set ${env}`);
  return path;
}
export const LEO = binary("LEO_BIN", "leo");
export const LEO_MCP = binary("LEO_MCP_BIN", "leo-mcp");

export async function waitUntil(pred, what = "condition", timeout = WAIT) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    const v = await pred();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

export class Broker {
  static async start(config) {
    const b = new Broker();
    b.home = mkdtempSync(join(tmpdir(), "leo-ts-"));
    if (config) writeFileSync(join(b.home, "config.yaml"), config);
    await b.spawn();
    return b;
  }
  /** A broker with HTTPS from `leo tls init`, as a user sets it up; its CA is `caFile`. */
  static async startTls() {
    const b = new Broker();
    b.home = mkdtempSync(join(tmpdir(), "leo-ts-"));
    const init = spawnSync(LEO, ["tls", "init"], { env: { ...process.env, LEO_HOME: b.home }, encoding: "utf8" });
    if (init.status !== 0) throw new Error(`leo tls init failed: ${init.stderr}`);
    writeFileSync(join(b.home, "config.yaml"), "web:\n  tls:\n    cert: tls/server.pem\n    key: tls/server.key\n");
    await b.spawn();
    return b;
  }
  get caFile() { return join(this.home, "tls", "ca.pem"); }
  async spawn() {
    const log = openSync(join(this.home, "broker.stderr"), "a");
    this.proc = spawn(LEO, ["broker", "--port", "0"], {
      env: { ...process.env, LEO_HOME: this.home, RUST_LOG: process.env.RUST_LOG ?? "info" },
      stdio: ["ignore", "pipe", log],
    });
    const lines = createInterface({ input: this.proc.stdout });
    this.addr = await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`leo broker did not start:\n${this.log()}`)), WAIT);
      lines.on("line", (l) => {
        if (l.startsWith("leo broker listening on http")) {
          clearTimeout(t);
          resolve(l.split("://")[1].trim());
        }
      });
    });
  }
  log() {
    try { return readFileSync(join(this.home, "broker.stderr"), "utf8"); } catch { return ""; }
  }
  get socket() { return join(this.home, "run", "leo.sock"); }
  get operatorToken() { return readFileSync(join(this.home, "state", "operator.token"), "utf8").trim(); }
  async kill() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((r) => this.proc.once("exit", r));
      this.proc.kill("SIGKILL");
      await exited;
    }
  }
  async restart() { await this.kill(); await this.spawn(); }
  async close() { await this.kill(); rmSync(this.home, { recursive: true, force: true }); }
  request(method, path, body) {
    return new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = http.request({ socketPath: this.socket, method, path, headers: {
        host: "localhost", authorization: `Bearer ${this.operatorToken}`,
        ...(data ? { "content-type": "application/json" } : {}),
      } }, (res) => {
        let text = "";
        res.on("data", (c) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode, body: JSON.parse(text || "null") }));
      });
      req.on("error", reject);
      req.end(data);
    });
  }
  async tools() {
    const { status, body } = await this.request("GET", "/api/v1/client-tools");
    if (status !== 200) throw new Error(JSON.stringify(body));
    return body.data.tools.map((t) => t.name).sort();
  }
  async pending() {
    const { status, body } = await this.request("GET", "/api/v1/client-tools/requests?pending=1");
    if (status !== 200) throw new Error(JSON.stringify(body));
    return body.data;
  }
}

/** `leo call TOOL ARGS`; resolves to {code, out, err}. */
export function leoCall(broker, tool, args = {}, ...extra) {
  const proc = spawn(LEO, ["call", tool, JSON.stringify(args), "--wait", "10", ...extra], {
    env: { ...process.env, LEO_HOME: broker.home }, stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "", err = "";
  proc.stdout.on("data", (c) => (out += c));
  proc.stderr.on("data", (c) => (err += c));
  const done = new Promise((resolve) => proc.on("close", (code) => resolve({ code, out: out.trim(), err: err.trim() })));
  done.proc = proc;
  return done;
}

/** A client name in leo-mcp's capability table (testdata/harnesscaps.json): native mode, where
 * the app's tools are listed and called as themselves. */
export const NATIVE = "claude-code";

/** A harness speaking MCP over stdio to a real leo-mcp (fallback mode: `leo_app_call`, or native
 * with `client: NATIVE`). With `elicit` (params => result) it declares MCP elicitation and
 * answers `elicitation/create`, and with `sample` likewise sampling and `sampling/createMessage`;
 * `notifications/progress` are kept by token, `notifications/message` in `logs`. */
export class McpAgent {
  constructor(broker, agent = "nodetest", elicit = undefined, sample = undefined) {
    const log = openSync(join(broker.home, `leo-mcp-${agent}.stderr`), "a");
    this.proc = spawn(LEO_MCP, ["--agent", agent], {
      env: { ...process.env, LEO_HOME: broker.home, RUST_LOG: "warn" }, stdio: ["pipe", "pipe", log],
    });
    this.next = 0;
    this.waiting = new Map();
    this.asked = [];
    this.progress = new Map();
    this.heard = [];
    this.logs = [];
    this.sampled = [];
    createInterface({ input: this.proc.stdout }).on("line", async (l) => {
      const m = JSON.parse(l);
      const w = this.waiting.get(m.id);
      if (w && ("result" in m || "error" in m)) { this.waiting.delete(m.id); w(m); }
      else if (m.method === "notifications/progress") {
        const t = m.params.progressToken;
        this.progress.set(t, [...(this.progress.get(t) ?? []), m.params]);
        this.heard.splice(0).forEach((h) => h());
      } else if (m.method === "elicitation/create" && "id" in m) {
        this.asked.push(m.params);
        this.send({ jsonrpc: "2.0", id: m.id, result: elicit ? await elicit(m.params) : { action: "cancel" } });
      } else if (m.method === "notifications/message") {
        this.logs.push(m.params);
        this.heard.splice(0).forEach((h) => h());
      } else if (m.method === "sampling/createMessage" && "id" in m && sample) {
        this.sampled.push(m.params);
        this.send({ jsonrpc: "2.0", id: m.id, result: await sample(m.params) });
      } else if ("id" in m && "method" in m) this.send({ jsonrpc: "2.0", id: m.id, result: {} });
    });
  }
  static async start(broker, { agent = "nodetest", client = "leo-app-node-tests", elicit, sample } = {}) {
    const a = new McpAgent(broker, agent, elicit, sample);
    const capabilities = { ...(elicit ? { elicitation: {} } : {}), ...(sample ? { sampling: {} } : {}) };
    await a.rpc("initialize", { protocolVersion: "2025-06-18", capabilities, clientInfo: { name: client, version: "1" } });
    a.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    return a;
  }
  send(m) { this.proc.stdin.write(JSON.stringify(m) + "\n"); }
  startRpc(method, params) {
    const id = ++this.next;
    const answer = new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`leo-mcp did not answer ${method}`)), WAIT);
      this.waiting.set(id, (m) => { clearTimeout(t); m.error ? reject(new Error(JSON.stringify(m.error))) : resolve(m.result); });
    });
    this.send({ jsonrpc: "2.0", id, method, params });
    return { id, answer };
  }
  rpc(method, params) { return this.startRpc(method, params).answer; }
  startCall(tool, args) { return this.startRpc("tools/call", { name: "leo_app_call", arguments: { tool, args } }); }
  call(tool, args = {}) { return this.startCall(tool, args).answer; }
  /** `tools/call` of the tool itself (native mode), with a progress token if given. */
  startNative(tool, args = {}, progressToken) {
    return this.startRpc("tools/call", { name: tool, arguments: args, ...(progressToken !== undefined ? { _meta: { progressToken } } : {}) });
  }
  native(tool, args = {}) { return this.startNative(tool, args).answer; }
  /** Waits for `count` progress notifications on `token`. */
  async reports(token, count) {
    const end = Date.now() + WAIT;
    while ((this.progress.get(token) ?? []).length < count) {
      if (Date.now() > end) throw new Error(`${count} progress reports on ${token}: ${JSON.stringify([...this.progress])}`);
      await new Promise((r) => { this.heard.push(r); setTimeout(r, 200); });
    }
    return this.progress.get(token);
  }
  /** Waits for `count` log messages. */
  async logged(count) {
    const end = Date.now() + WAIT;
    while (this.logs.length < count) {
      if (Date.now() > end) throw new Error(`${count} log messages: ${JSON.stringify(this.logs)}`);
      await new Promise((r) => { this.heard.push(r); setTimeout(r, 200); });
    }
    return this.logs;
  }
  cancel(id) { this.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id, reason: "gave up" } }); }
  close() { this.proc.kill("SIGKILL"); }
}

/** A bare provider: opens the stream, registers a group, never answers. */
export class Other {
  static async connect(broker, group, tools) {
    const o = new Other();
    o.events = [];
    o.waiters = [];
    let buf = "";
    o.res = await new Promise((resolve, reject) => {
      const req = http.request({ socketPath: broker.socket, path: "/api/v1/events?client_tools=1",
        headers: { host: "localhost", authorization: `Bearer ${broker.operatorToken}` } }, resolve);
      req.on("error", reject);
      req.end();
    });
    o.res.setEncoding("utf8");
    o.res.on("data", (c) => {
      buf += c;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const raw = buf.slice(0, i); buf = buf.slice(i + 2);
        const ev = /^event: ?(.*)$/m.exec(raw)?.[1], data = /^data: ?(.*)$/m.exec(raw)?.[1];
        if (data) { o.events.push({ event: ev, data: JSON.parse(data) }); o.waiters.splice(0).forEach((w) => w()); }
      }
    });
    const hello = await o.next();
    o.clientId = hello.data.client_id;
    const r = await broker.request("POST", "/api/v1/client-tools", { client_id: o.clientId, group,
      tools: tools.map((t) => ({ name: t, description: `The ${t} tool`, input_schema: { type: "object" } })) });
    if (r.status !== 200) throw new Error(JSON.stringify(r.body));
    return o;
  }
  async next() {
    while (!this.events.length) await new Promise((r) => this.waiters.push(r));
    return this.events.shift();
  }
  async nextRequest() {
    for (;;) { const e = await this.next(); if (e.event === "client_tool.request") return e.data; }
  }
  close() { this.res.destroy(); }
}

export const textOf = (result) => result.content.filter((b) => b.type === "text").map((b) => b.text).join("");

/** A unix-socket relay in front of the broker's socket that the test can cut (every connection
 * closed, new ones refused) and mend, to take an app away without a restart. */
export class Pipe {
  static async open(broker) {
    const p = new Pipe();
    p.path = join(broker.home, "pipe.sock");
    p.cutOff = false;
    p.live = new Set();
    p.server = net.createServer((down) => {
      if (p.cutOff) return down.destroy();
      const up = net.connect({ path: broker.socket });
      for (const [a, b] of [[down, up], [up, down]]) {
        p.live.add(a);
        a.pipe(b);
        a.on("error", () => b.destroy());
        a.on("close", () => { p.live.delete(a); b.destroy(); });
      }
    });
    await new Promise((r) => p.server.listen(p.path, r));
    return p;
  }
  cut() { this.cutOff = true; for (const s of this.live) s.destroy(); this.live.clear(); }
  mend() { this.cutOff = false; }
  close() { this.cut(); this.server.close(); }
}

/** A throwaway database on the local PostgreSQL server (`LEO_TEST_POSTGRES`, else
 * `postgresql://postgres@127.0.0.1:5432/postgres`), made and dropped with `psql`, as
 * `leo_testkit::postgres` does for the Rust tests; `outage()` makes it unreachable for the broker
 * (new connections refused, open ones terminated) until `back()`. */
export class Postgres {
  constructor() {
    this.admin = process.env.LEO_TEST_POSTGRES || "postgresql://postgres@127.0.0.1:5432/postgres";
    this.name = `leo_ts_${process.pid}_${Date.now() % 1e9}`;
    this.sql(`CREATE DATABASE ${this.name}`);
    const [base, query] = this.admin.split("?");
    this.url = `${base.slice(0, base.lastIndexOf("/"))}/${this.name}${query ? `?${query}` : ""}`;
  }
  sql(statement) {
    const r = spawnSync("psql", [this.admin, "-v", "ON_ERROR_STOP=1", "-tAc", statement], { encoding: "utf8", timeout: WAIT });
    if (r.error) throw new Error(`psql is missing or failed (sudo apt-get install -y postgresql-client): ${r.error.message}`);
    if (r.status !== 0) throw new Error(`psql ${statement}: ${r.stderr.trim()}`);
    return r.stdout;
  }
  get config() { return `store:\n  url: "${this.url}"\n`; }
  outage() {
    this.sql(`ALTER DATABASE ${this.name} WITH ALLOW_CONNECTIONS false`);
    this.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${this.name}' AND pid <> pg_backend_pid()`);
  }
  back() { this.sql(`ALTER DATABASE ${this.name} WITH ALLOW_CONNECTIONS true`); }
  drop() { this.sql(`DROP DATABASE IF EXISTS ${this.name} WITH (FORCE)`); }
}
