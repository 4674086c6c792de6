// The scenarios and vectors of clients/scenarios/http.json for the
// Idempotency-Key middleware of "@idemhq/idem/express": Express in front of
// each scenario's handler, on a real idemd on both stores (the harness of
// internal/testsupport/sdkharness), reached with Node's fetch. A scenario id
// in the file with no implementation here fails the suite, and so does an
// implementation of an id the file no longer has.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as net from "node:net";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import express from "express";
import { IdemClient, NotFoundError, State } from "../src/index.js";
import { grpcTransport } from "../src/node.js";
import {
  decodeEnvelope,
  encodeEnvelope,
  fingerprint,
  idempotency,
  type IdempotencyOptions,
  parseKey,
  PROBLEM_TYPE_PREFIX,
  PROBLEMS,
  recordKey,
} from "../src/express.js";
import { fingerprintNames, splitTarget } from "../src/httpidem.js";
import { REPO, startHarness, type Harness } from "./harness.js";

const SPEC_FILE = path.join(REPO, "clients", "scenarios", "http.json");

interface EnvelopeVector {
  status: number;
  headers: Array<[string, string]>;
  body?: string;
  body_base64?: string;
  omitted?: boolean;
  envelope?: string;
  envelope_base64?: string;
}

interface Spec {
  version: number;
  problems: Array<{ slug: string; status: number; title: string }>;
  problem_type_prefix: string;
  scenarios: Array<{ id: string; title: string; steps: string; expect: string; exclusive?: boolean }>;
  vectors: {
    keys: Array<{ value: string; key: string | null }>;
    record_keys: Array<{ caller: string; key: string; record_key: string }>;
    fingerprints: Array<{ method: string; target: string; headers: Record<string, string>; body: string; names: string[]; fingerprint: string }>;
    envelopes: EnvelopeVector[];
  };
}

const spec = JSON.parse(readFileSync(SPEC_FILE, "utf8")) as Spec;
assert.equal(spec.version, 1, `${SPEC_FILE} is version ${spec.version}; this suite reads version 1`);

const bodyOf = (v: EnvelopeVector) => (v.body !== undefined ? Buffer.from(v.body, "utf8") : Buffer.from(v.body_base64 ?? "", "base64"));
const envelopeOf = (v: EnvelopeVector) => (v.envelope !== undefined ? Buffer.from(v.envelope, "utf8") : Buffer.from(v.envelope_base64 ?? "", "base64"));

describe("the vectors of http.json", () => {
  it("keys", () => {
    for (const v of spec.vectors.keys) {
      if (v.key === null) {
        assert.throws(() => parseKey(v.value), `parseKey(${JSON.stringify(v.value)}) must refuse it`);
      } else {
        assert.equal(parseKey(v.value), v.key, `parseKey(${JSON.stringify(v.value)})`);
      }
    }
  });
  it("record keys", () => {
    for (const v of spec.vectors.record_keys) {
      assert.equal(recordKey(v.caller, v.key), v.record_key, `recordKey(${JSON.stringify(v.caller)}, ${JSON.stringify(v.key)})`);
    }
  });
  it("fingerprints", () => {
    for (const v of spec.vectors.fingerprints) {
      const headers = new Map(Object.entries(v.headers).map(([k, val]) => [k.toLowerCase(), val]));
      const got = fingerprint(v.method, splitTarget(v.target), (n) => headers.get(n), fingerprintNames(v.names), Buffer.from(v.body, "utf8"));
      assert.equal(Buffer.from(got).toString("hex"), v.fingerprint, `fingerprint of ${v.method} ${v.target}`);
    }
  });
  it("envelopes", () => {
    for (const [i, v] of spec.vectors.envelopes.entries()) {
      const want = envelopeOf(v);
      const s = { status: v.status, headers: v.headers, body: bodyOf(v), omitted: v.omitted ?? false };
      assert.deepEqual(Buffer.from(encodeEnvelope(s)), want, `envelope ${i}`);
      const got = decodeEnvelope(want);
      assert.deepEqual({ ...got, body: Buffer.from(got.body) }, { ...s, body: s.omitted ? Buffer.alloc(0) : s.body }, `decode envelope ${i}`);
    }
  });
  it("problems", () => {
    assert.equal(PROBLEM_TYPE_PREFIX, spec.problem_type_prefix);
    assert.deepEqual(Object.values(PROBLEMS), spec.problems);
  });
  it("refuses what is not an envelope", () => {
    for (const bad of [
      "not an envelope",
      '{"idem_http":1,"status":201,"headers":[]}',
      '{"status":201,"headers":[]}\n',
      '{"idem_http":2,"status":201,"headers":[]}\n',
      '{"idem_http":1,"status":101,"headers":[]}\n',
      '{"idem_http":1,"status":201,"headers":[["a"]]}\n',
      '{"idem_http":1,"status":201,"headers":[["a",1]]}\n',
      '{"idem_http":1,"status":201,"headers":[["a","\u0100"]]}\n',
      '{"idem_http":1,"status":201,"headers":[],"omitted":true}\nbody',
    ]) {
      assert.throws(() => decodeEnvelope(Buffer.from(bad, "utf8")), `decodeEnvelope(${JSON.stringify(bad)})`);
    }
  });
  it("refuses bad options, naming them", () => {
    const c = new IdemClient(grpcTransport({ baseUrl: "http://127.0.0.1:1" }));
    try {
      const caller = () => "";
      assert.throws(() => idempotency(c, {} as IdempotencyOptions), /options\.caller/);
      assert.throws(() => idempotency(c, { caller, namespace: "Payments" }), /options\.namespace "Payments"/);
      assert.throws(() => idempotency(c, { caller, waitMs: -1 }), /options\.waitMs is -1/);
      assert.throws(() => idempotency(c, { caller, maxBodyBytes: 32 << 20 }), /options\.maxBodyBytes is 33554432/);
      assert.throws(() => idempotency(c, { caller, leaseTtlMs: 10 }), /options\.leaseTtlMs is 10/);
      assert.throws(() => idempotency(c, { caller, retentionMs: 1000 }), /options\.retentionMs is 1000/);
      assert.throws(() => idempotency(c, { caller, methods: ["PO ST"] }), /options\.methods has "PO ST"/);
      assert.throws(() => idempotency(c, { caller, storedHeaders: ["Bad:Name"] }), /options\.storedHeaders has "Bad:Name"/);
    } finally {
      c.close();
    }
  });
});

/** Res is a response as the scenarios compare them. */
interface Res {
  status: number;
  headers: Headers;
  body: Buffer;
}

const replayed = (r: Res) => r.headers.get("idempotent-replayed") === "true";

interface Req {
  method?: string;
  path?: string;
  body?: string;
  key?: string;
  headers?: Array<[string, string]>;
  caller?: string | null;
}

/** Server is one scenario's Express app behind the middleware. */
class Server {
  runs = 0;
  constructor(
    readonly url: string,
    readonly server: http.Server,
  ) {}

  async send(r: Req): Promise<Res> {
    const headers = new Headers({ "Content-Type": "application/json" });
    if (r.caller !== null) {
      headers.set("X-Caller", r.caller ?? "alice");
    }
    if (r.key !== undefined) {
      headers.set("Idempotency-Key", JSON.stringify(r.key));
    }
    for (const [k, v] of r.headers ?? []) {
      headers.append(k, v);
    }
    const method = r.method ?? "POST";
    const res = await fetch(this.url + (r.path ?? "/payments"), { method, headers, body: method === "GET" ? undefined : (r.body ?? "{}") });
    return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** Log collects what the middleware logs. */
class Log {
  lines: Array<{ level: string; message: string; fields: Record<string, unknown> }> = [];
  readonly logger = {
    warn: (message: string, fields: Record<string, unknown>) => this.lines.push({ level: "warn", message, fields }),
    error: (message: string, fields: Record<string, unknown>) => this.lines.push({ level: "error", message, fields }),
  };
}

type Handler = (req: express.Request, res: express.Response, s: Server) => void | Promise<void>;

class Env {
  readonly servers: Server[] = [];
  readonly clients: IdemClient[] = [];
  readonly client: IdemClient;
  constructor(readonly h: Harness) {
    this.client = this.newClient(h.grpc_addr);
  }

  newClient(addr: string, retry?: { maxAttempts: number; baseDelayMs: number }): IdemClient {
    const c = new IdemClient(grpcTransport({ baseUrl: `http://${addr}`, token: this.h.tokens.worker }), retry ? { retry } : {});
    this.clients.push(c);
    return c;
  }

  /** serve starts Express with the middleware (options over the scenarios' defaults) in front of handler. */
  async serve(options: Partial<IdempotencyOptions<express.Request>>, handler: Handler, client?: IdemClient): Promise<Server> {
    const app = express();
    const log = new Log();
    app.use(
      idempotency<express.Request, express.Response>(client ?? this.client, {
        namespace: this.h.namespaces.plain,
        caller: (req) => {
          const c = req.get("X-Caller");
          if (!c) {
            throw new Error("no X-Caller header");
          }
          return c;
        },
        logger: log.logger,
        ...options,
      }),
    );
    app.use(express.json());
    let s: Server | undefined;
    app.use((req, res) => handler(req, res, s!));
    const server = http.createServer(app);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    s = new Server(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, server);
    this.servers.push(s);
    return s;
  }

  lookup(key: string) {
    return this.client.lookup({ namespace: this.h.namespaces.plain, key });
  }

  /** claimFor claims the record of (alice, k) as POST /payments {} would. */
  async claimFor(k: string) {
    const fp = fingerprint("POST", splitTarget("/payments"), () => undefined, [], Buffer.from("{}"));
    const res = await this.client.claim({ namespace: this.h.namespaces.plain, key: recordKey("alice", k), fingerprint: fp, claimant: "another-language" });
    return res.record;
  }

  async close(): Promise<void> {
    for (const s of this.servers.splice(0)) {
      await s.close();
    }
    for (const c of this.clients.splice(0)) {
      c.close();
    }
  }
}

/** answer is what the scenarios' handlers answer: status, a JSON body, Location and X-Unstored. */
function answer(res: express.Response, run: number, status: number, body: string): void {
  // Node's setHeader: Express's res.set would add "; charset=utf-8".
  res.setHeader("Content-Type", "application/json");
  res.setHeader("Location", `/payments/${run}`);
  res.setHeader("X-Unstored", String(run));
  res.status(status).end(body);
}

const newKey = (id: string, part = "k") => `${id}-${part}-${randomBytes(4).toString("hex")}`;

function wantFirst(what: string, r: Res, status: number, body: string): void {
  assert.equal(r.status, status, `${what}: status (${r.body.toString()})`);
  assert.equal(r.body.toString(), body, `${what}: body`);
  assert.ok(!replayed(r), `${what}: replayed`);
}

function wantReplay(what: string, r: Res, first: Res): void {
  assert.ok(replayed(r), `${what}: not a replay (${r.status} ${r.body.toString()})`);
  assert.equal(r.status, first.status, `${what}: status`);
  assert.deepEqual(r.body, first.body, `${what}: body`);
  for (const h of ["content-type", "location"]) {
    assert.equal(r.headers.get(h), first.headers.get(h), `${what}: ${h}`);
  }
  assert.equal(r.headers.get("x-unstored"), null, `${what}: X-Unstored was replayed`);
}

function wantProblem(what: string, r: Res, slug: string, status: number): { detail?: string } {
  assert.equal(r.status, status, `${what}: status (${r.body.toString()})`);
  assert.equal(r.headers.get("content-type"), "application/problem+json", `${what}: content-type`);
  const doc = JSON.parse(r.body.toString()) as { type: string; status: number; detail?: string };
  assert.equal(doc.type, PROBLEM_TYPE_PREFIX + slug, `${what}: type`);
  assert.equal(doc.status, status, `${what}: status in the document`);
  return doc;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** rawPost sends POST /payments with exactly these header lines on a socket of its own, and reads the response. */
function rawPost(url: string, lines: string[], body: string): Promise<Res> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), "127.0.0.1", () => {
      sock.end([`POST /payments HTTP/1.1`, "Host: 127.0.0.1", "Connection: close", "Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`, ...lines, "", body].join("\r\n"));
    });
    const chunks: Buffer[] = [];
    sock.on("data", (c: Buffer) => chunks.push(c));
    sock.on("error", reject);
    sock.on("end", () => {
      const raw = Buffer.concat(chunks).toString("latin1");
      const [head = "", rest = ""] = raw.split("\r\n\r\n", 2);
      const [statusLine = "", ...headerLines] = head.split("\r\n");
      const headers = new Headers();
      for (const l of headerLines) {
        const i = l.indexOf(":");
        headers.append(l.slice(0, i), l.slice(i + 1).trim());
      }
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body: Buffer.from(rest, "latin1") });
    });
  });
}

const scenarios: Record<string, (e: Env, id: string) => Promise<void>> = {
  async "first-runs-repeat-replays"(e, id) {
    const s = await e.serve({}, (req, res, s) => {
      const run = ++s.runs;
      answer(res, run, 201, JSON.stringify({ id: `pay_${run}`, amount: (req.body as { amount: number }).amount }));
    });
    const k = newKey(id);
    const first = await s.send({ key: k, body: '{"amount":1250}' });
    wantFirst("the first request", first, 201, '{"id":"pay_1","amount":1250}');
    assert.equal(first.headers.get("location"), "/payments/1");
    assert.equal(first.headers.get("x-unstored"), "1");
    wantReplay("the repeat", await s.send({ key: k, body: '{"amount":1250}' }), first);
    assert.equal(s.runs, 1);
    const rec = await e.lookup(recordKey("alice", k));
    const want = encodeEnvelope({ status: 201, headers: [["content-type", "application/json"], ["location", "/payments/1"]], body: first.body, omitted: false });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(rec.attempt, 1);
    assert.deepEqual(Buffer.from(rec.result), Buffer.from(want));
  },

  async "concurrent-duplicates-conflict"(e, id) {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const startedP = new Promise<void>((r) => (started = r));
    const s = await e.serve({}, async (_req, res, s) => {
      s.runs++;
      started();
      await Promise.race([released, sleep(10_000)]);
      res.status(201).json({ ok: true });
    });
    const k = newKey(id);
    const firstP = s.send({ key: k });
    await startedP;
    const dup = await s.send({ key: k });
    wantProblem("the duplicate", dup, "key-in-flight", 409);
    assert.ok(Number(dup.headers.get("retry-after")) >= 1, `Retry-After ${dup.headers.get("retry-after")}`);
    release();
    const first = await firstP;
    wantFirst("the first request", first, 201, '{"ok":true}');
    wantReplay("a repeat", await s.send({ key: k }), first);
    assert.equal(s.runs, 1);
  },

  async "concurrent-duplicates-wait"(e, id) {
    const s = await e.serve({ waitMs: 10_000 }, async (_req, res, s) => {
      const run = ++s.runs;
      await sleep(200);
      answer(res, run, 201, '{"ok":true}');
    });
    const k = newKey(id);
    const out = await Promise.all([s.send({ key: k }), s.send({ key: k }), s.send({ key: k })]);
    for (const r of out) {
      assert.equal(r.status, 201);
      assert.equal(r.body.toString(), '{"ok":true}');
      assert.equal(r.headers.get("location"), "/payments/1");
    }
    assert.equal(out.filter((r) => !replayed(r)).length, 1, "responses not replayed");
    assert.equal(s.runs, 1);
  },

  async "other-request-rejected"(e, id) {
    const s = await e.serve({ fingerprintHeaders: ["X-Account"] }, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    const k = newKey(id);
    const base: Req = { key: k, body: '{"amount":1}', headers: [["X-Account", "a1"]] };
    const first = await s.send(base);
    wantFirst("the first request", first, 201, "{}");
    const others: Record<string, Req> = {
      "another body": { ...base, body: '{"amount":2}' },
      "another path": { ...base, path: "/refunds" },
      "another method": { ...base, method: "PATCH" },
      "another X-Account": { ...base, headers: [["X-Account", "a2"]] },
      "a query": { ...base, path: "/payments?x=1" },
    };
    for (const [what, r] of Object.entries(others)) {
      wantProblem(what, await s.send(r), "key-reused", 422);
    }
    wantReplay("the same request", await s.send(base), first);
    assert.equal(s.runs, 1);
  },

  async "missing-key"(e) {
    let runs = 0;
    const h: Handler = (_req, res) => answer(res, ++runs, 201, "{}");
    const required = await e.serve({ requireKey: true }, h);
    wantProblem("no key, required", await required.send({}), "key-missing", 400);
    assert.equal(runs, 0);
    const optional = await e.serve({}, h);
    wantFirst("no key, optional (1)", await optional.send({}), 201, "{}");
    wantFirst("no key, optional (2)", await optional.send({}), 201, "{}");
    assert.equal(runs, 2);
  },

  async "malformed-key"(e) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    for (const v of spec.vectors.keys.filter((v) => v.key === null)) {
      const doc = wantProblem(`Idempotency-Key: ${v.value}`, await s.send({ headers: [["Idempotency-Key", v.value]] }), "key-malformed", 400);
      assert.match(doc.detail ?? "", /Idempotency-Key/);
    }
    // Two field lines, written on the socket as they are sent.
    const twice = await rawPost(s.url, ["X-Caller: alice", 'Idempotency-Key: "a"', 'Idempotency-Key: "b"'], "{}");
    wantProblem("two Idempotency-Key lines", twice, "key-malformed", 400);
    assert.equal(s.runs, 0);
  },

  async "server-error-releases"(e, id) {
    const s = await e.serve({}, (_req, res, s) => {
      const run = ++s.runs;
      if (run === 1) {
        answer(res, run, 503, '{"error":"busy"}');
      } else {
        answer(res, run, 201, '{"ok":true}');
      }
    });
    const k = newKey(id);
    wantFirst("the first request", await s.send({ key: k }), 503, '{"error":"busy"}');
    const second = await s.send({ key: k });
    wantFirst("the retry", second, 201, '{"ok":true}');
    wantReplay("a repeat", await s.send({ key: k }), second);
    const rec = await e.lookup(recordKey("alice", k));
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(rec.attempt, 2);
  },

  async "handler-crash-releases"(e, id) {
    const s = await e.serve({}, (_req, res, s) => {
      const run = ++s.runs;
      if (run === 1) {
        throw new Error("the handler crashed");
      }
      answer(res, run, 201, '{"ok":true}');
    });
    const k = newKey(id);
    const first = await s.send({ key: k });
    assert.ok(first.status >= 500, `the first request: ${first.status}; want a 5xx`);
    wantFirst("the retry", await s.send({ key: k }), 201, '{"ok":true}');
    assert.equal(s.runs, 2);
  },

  async "client-error-stored"(e, id) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 402, '{"error":"card_declined"}'));
    const k = newKey(id);
    const first = await s.send({ key: k });
    wantFirst("the first request", first, 402, '{"error":"card_declined"}');
    wantReplay("the repeat", await s.send({ key: k }), first);
    assert.equal(s.runs, 1);
  },

  async "callers-separate"(e, id) {
    const s = await e.serve({}, (req, res, s) => answer(res, ++s.runs, 201, JSON.stringify({ caller: req.get("X-Caller") })));
    const k = newKey(id);
    const alice = await s.send({ key: k });
    wantFirst("alice", alice, 201, '{"caller":"alice"}');
    wantFirst("bob", await s.send({ key: k, caller: "bob" }), 201, '{"caller":"bob"}');
    wantReplay("alice again", await s.send({ key: k }), alice);
    wantProblem("no caller", await s.send({ key: k, caller: null }), "caller-unidentified", 401);
    assert.equal(s.runs, 2);
  },

  async "unguarded-method"(e, id) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 200, "{}"));
    const k = newKey(id);
    for (const method of ["GET", "GET", "PUT", "PUT"]) {
      wantFirst(method, await s.send({ method, key: k }), 200, "{}");
    }
    assert.equal(s.runs, 4);
    await assert.rejects(e.lookup(recordKey("alice", k)), NotFoundError);
  },

  async "large-body-unstored"(e, id) {
    const big = "x".repeat(3000);
    const s = await e.serve({ maxBodyBytes: 1024 }, (_req, res, s) => answer(res, ++s.runs, 201, big));
    const k = newKey(id);
    wantFirst("the first request", await s.send({ key: k }), 201, big);
    const r = await s.send({ key: k });
    assert.equal(r.status, 201);
    assert.equal(r.body.length, 0);
    assert.ok(replayed(r));
    assert.equal(r.headers.get("idempotent-body-omitted"), "true");
    assert.equal(r.headers.get("location"), "/payments/1");
    assert.equal(r.headers.get("content-type"), null);
    assert.equal(s.runs, 1);
    const rec = await e.lookup(recordKey("alice", k));
    assert.equal(rec.state, State.COMPLETED);
    assert.deepEqual(Buffer.from(rec.result), Buffer.from(encodeEnvelope({ status: 201, headers: [["content-type", "application/json"], ["location", "/payments/1"]], body: new Uint8Array(), omitted: true })));
  },

  async "stored-response-refused"(e, id) {
    const big = "x".repeat(100000);
    const s = await e.serve({ maxBodyBytes: 200000 }, (_req, res, s) => answer(res, ++s.runs, 201, big));
    const k = newKey(id);
    wantFirst("the first request", await s.send({ key: k }), 201, big);
    const r = await s.send({ key: k });
    assert.equal(r.status, 201);
    assert.equal(r.body.length, 0);
    assert.ok(replayed(r));
    assert.equal(r.headers.get("idempotent-body-omitted"), "true");
    assert.equal(s.runs, 1);
    const rec = await e.lookup(recordKey("alice", k));
    assert.equal(rec.state, State.COMPLETED);
    assert.deepEqual(Buffer.from(rec.result), Buffer.from(encodeEnvelope({ status: 201, headers: [["content-type", "application/json"], ["location", "/payments/1"]], body: new Uint8Array(), omitted: true })));
  },

  async "streamed-response"(e, id) {
    let read!: () => void;
    const readP = new Promise<void>((r) => (read = r));
    const s = await e.serve({}, async (_req, res, s) => {
      s.runs++;
      res.setHeader("Content-Type", "text/event-stream");
      res.writeHead(200);
      res.write("data: 1\n\n");
      await Promise.race([readP, sleep(10_000)]);
      res.end("data: 2\n\n");
    });
    const k = newKey(id);
    const res = await fetch(s.url + "/events", { method: "POST", headers: { "X-Caller": "alice", "Idempotency-Key": JSON.stringify(k) }, body: "{}" });
    const reader = res.body!.getReader();
    let got = "";
    while (got.length < "data: 1\n\n".length) {
      const c = await reader.read();
      assert.ok(!c.done, `the stream ended after ${JSON.stringify(got)}`);
      got += Buffer.from(c.value).toString();
    }
    assert.equal(got, "data: 1\n\n");
    read();
    for (;;) {
      const c = await reader.read();
      if (c.done) {
        break;
      }
      got += Buffer.from(c.value).toString();
    }
    assert.equal(got, "data: 1\n\ndata: 2\n\n");
    const r = await s.send({ key: k, path: "/events" });
    assert.ok(replayed(r));
    assert.equal(r.status, 200);
    assert.equal(r.body.toString(), "data: 1\n\ndata: 2\n\n");
    assert.equal(r.headers.get("content-type"), "text/event-stream");
    assert.equal(s.runs, 1);
  },

  async "request-too-large"(e, id) {
    const s = await e.serve({ maxRequestBytes: 1024 }, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    wantProblem("a 2048-byte body", await s.send({ key: newKey(id), body: "x".repeat(2048) }), "request-too-large", 413);
    assert.equal(s.runs, 0);
  },

  async "long-key-hashed"(e, id) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    const k = newKey(id);
    const k2 = k + "x".repeat(300 - k.length);
    const k3 = k2.slice(0, -1) + "y";
    const first = await s.send({ key: k2 });
    wantFirst("K2", first, 201, "{}");
    wantReplay("K2 again", await s.send({ key: k2 }), first);
    wantFirst("K3", await s.send({ key: k3 }), 201, "{}");
    const rec = await e.lookup("#" + createHash("sha256").update("alice/" + k2).digest("hex"));
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(s.runs, 2);
  },

  async "stored-envelope-replayed"(e, id) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    for (const [i, v] of spec.vectors.envelopes.entries()) {
      const k = newKey(id, String(i));
      const rec = await e.claimFor(k);
      await e.client.complete({ namespace: rec.namespace, key: rec.key, token: rec.token, result: envelopeOf(v) });
      const r = await s.send({ key: k });
      assert.ok(replayed(r), `envelope ${i}: not a replay`);
      assert.equal(r.status, v.status, `envelope ${i}: status`);
      assert.deepEqual(r.body, v.omitted ? Buffer.alloc(0) : bodyOf(v), `envelope ${i}: body`);
      assert.equal(r.headers.get("idempotent-body-omitted"), v.omitted ? "true" : null, `envelope ${i}: Idempotent-Body-Omitted`);
      const want = new Map<string, string[]>();
      for (const [n, val] of v.headers) {
        if (!v.omitted || !n.startsWith("content-")) {
          want.set(n, [...(want.get(n) ?? []), val]);
        }
      }
      for (const [n, vals] of want) {
        assert.equal(r.headers.get(n), vals.join(", "), `envelope ${i}: ${n}`);
      }
      if (!want.has("content-type")) {
        assert.equal(r.headers.get("content-type"), null, `envelope ${i}: content-type`);
      }
    }
    assert.equal(s.runs, 0);
  },

  async "unreadable-or-failed-record"(e, id) {
    const s = await e.serve({}, (_req, res, s) => answer(res, ++s.runs, 201, "{}"));
    const k1 = newKey(id, "1");
    const k2 = newKey(id, "2");
    let rec = await e.claimFor(k1);
    await e.client.complete({ namespace: rec.namespace, key: rec.key, token: rec.token, result: "not an envelope" });
    wantProblem("a record without an envelope", await s.send({ key: k1 }), "record-unreadable", 500);
    rec = await e.claimFor(k2);
    await e.client.fail({ namespace: rec.namespace, key: rec.key, token: rec.token, error: "declined by an operator", retryable: false });
    const doc = wantProblem("a FAILED record", await s.send({ key: k2 }), "request-failed", 500);
    assert.equal(doc.detail, "declined by an operator");
    assert.equal(s.runs, 0);
  },

  async "idem-unreachable"(e, id) {
    const dead = await new Promise<string>((resolve) => {
      const l = net.createServer().listen(0, "127.0.0.1", () => {
        const port = (l.address() as AddressInfo).port;
        l.close(() => resolve(`127.0.0.1:${port}`));
      });
    });
    const c = e.newClient(dead, { maxAttempts: 3, baseDelayMs: 20 });
    let runs = 0;
    const h: Handler = (_req, res) => answer(res, ++runs, 201, "{}");
    const k = newKey(id);
    const closed = await e.serve({}, h, c);
    const r = await closed.send({ key: k });
    wantProblem("fail closed", r, "idem-unavailable", 503);
    assert.ok(r.headers.get("retry-after"), "Retry-After");
    assert.equal(runs, 0);
    const log = new Log();
    const open = await e.serve({ failOpen: true, logger: log.logger }, h, c);
    wantFirst("fail open", await open.send({ key: k }), 201, "{}");
    assert.equal(runs, 1);
    assert.ok(
      log.lines.some((l) => l.level === "warn" && l.fields.key === recordKey("alice", k)),
      `no warning naming the key: ${JSON.stringify(log.lines)}`,
    );
  },

  async "restart-before-stored"(e, id) {
    const s = await e.serve({}, async (_req, res, s) => {
      const run = ++s.runs;
      await e.h.control("/restart?down_ms=1500");
      answer(res, run, 201, '{"ok":true}');
    });
    const k = newKey(id);
    const first = await s.send({ key: k });
    wantFirst("the first request", first, 201, '{"ok":true}');
    wantReplay("the repeat", await s.send({ key: k }), first);
    assert.equal((await e.lookup(recordKey("alice", k))).state, State.COMPLETED);
    assert.equal(s.runs, 1);
  },
};

describe("the HTTP scenario file", () => {
  it("has an implementation here for each scenario, and no other", () => {
    const ids = spec.scenarios.map((s) => s.id);
    for (const id of ids) {
      assert.ok(scenarios[id], `scenario ${id} of ${SPEC_FILE} has no TypeScript implementation: add it to test/http.test.ts`);
    }
    for (const id of Object.keys(scenarios)) {
      assert.ok(ids.includes(id), `test/http.test.ts implements scenario ${id}, which ${SPEC_FILE} no longer has: remove it`);
    }
  });
});

for (const store of ["postgres", "sqlite"] as const) {
  describe(`HTTP scenarios on ${store}`, { timeout: 600_000 }, () => {
    let h: Harness;
    before(async () => {
      h = await startHarness(store);
    });
    after(async () => {
      await h?.stop();
    });
    const run = async (id: string) => {
      const e = new Env(h);
      try {
        await scenarios[id]!(e, id);
      } finally {
        await e.close();
      }
    };
    describe("shared", { concurrency: true }, () => {
      for (const s of spec.scenarios.filter((s) => !s.exclusive)) {
        it(s.id, { timeout: 120_000 }, () => run(s.id));
      }
    });
    describe("exclusive", () => {
      for (const s of spec.scenarios.filter((s) => s.exclusive)) {
        it(s.id, { timeout: 120_000 }, async () => {
          try {
            await run(s.id);
          } finally {
            await h.control("/ready");
          }
        });
      }
    });
  });
}
