// What every language's Idempotency-Key middleware computes alike (the
// rules and vectors are in clients/scenarios/http.json of the idem
// repository): the key of the header, the record's key, the fingerprint of
// a request and the envelope a record stores a response in. Node only: it
// hashes with node:crypto.

import { createHash } from "node:crypto";

// Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
/** MAX_KEY_BYTES is idem's bound on a record's key. */
const MAX_KEY_BYTES = 256;

/**
 * parseKey reads the value of the Idempotency-Key header: an RFC 8941 Item
 * whose bare item is a String, parameters allowed and ignored. Several field
 * lines are one value joined with ", ", and so malformed; so is an empty
 * string. It throws an Error saying what is wrong.
 */
export function parseKey(value: string): string {
  const p = new SfParser(value.replace(/^[ \t]+|[ \t]+$/g, ""));
  if (p.s === "") {
    throw new Error("the value is empty");
  }
  if (p.peek() !== '"') {
    throw new Error('the value must be a quoted string (RFC 8941), like "8e03978e-40d5-43e8-bc93-6894a57f9324"');
  }
  const key = p.string();
  p.parameters();
  if (p.i !== p.s.length) {
    throw new Error("the value has more than one quoted string (RFC 8941): one key per request");
  }
  if (key === "") {
    throw new Error("the key is empty; it must be at least 1 character");
  }
  return key;
}

class SfParser {
  i = 0;
  constructor(readonly s: string) {}

  peek(): string {
    return this.s[this.i] ?? "";
  }

  /** string parses an sf-string: printable ASCII in double quotes, with \" and \\ its only escapes. */
  string(): string {
    this.i++;
    let out = "";
    while (this.i < this.s.length) {
      const c = this.s[this.i++]!;
      if (c === "\\") {
        const next = this.s[this.i];
        if (next !== '"' && next !== "\\") {
          throw new Error('a backslash in the string escapes only " or \\');
        }
        out += next;
        this.i++;
      } else if (c === '"') {
        return out;
      } else if (c < " " || c > "~") {
        throw new Error("the string holds a character that is not printable ASCII");
      } else {
        out += c;
      }
    }
    throw new Error("the string has no closing quote");
  }

  /** parameters parses and drops *( ";" *SP key [ "=" bare-item ] ). */
  parameters(): void {
    while (this.peek() === ";") {
      this.i++;
      while (this.peek() === " ") {
        this.i++;
      }
      if (!/^[a-z*]$/.test(this.peek())) {
        throw new Error("a parameter's name must start with a lowercase letter or *");
      }
      while (/^[a-z0-9_\-.*]$/.test(this.peek())) {
        this.i++;
      }
      if (this.peek() === "=") {
        this.i++;
        this.bareItem();
      }
    }
  }

  bareItem(): void {
    const c = this.peek();
    if (c === '"') {
      this.string();
    } else if (c === "-" || /^[0-9]$/.test(c)) {
      this.number();
    } else if (c === ":") {
      this.i++;
      while (/^[A-Za-z0-9+/=]$/.test(this.peek())) {
        this.i++;
      }
      if (this.peek() !== ":") {
        throw new Error("a parameter's byte sequence has no closing colon");
      }
      this.i++;
    } else if (c === "?") {
      this.i++;
      if (this.peek() !== "0" && this.peek() !== "1") {
        throw new Error("a parameter's boolean must be ?0 or ?1");
      }
      this.i++;
    } else if (/^[A-Za-z*]$/.test(c)) {
      while (/^[!#$%&'*+\-.^_`|~0-9A-Za-z:/]$/.test(this.peek())) {
        this.i++;
      }
    } else {
      throw new Error("a parameter's value is not an RFC 8941 bare item");
    }
  }

  number(): void {
    if (this.peek() === "-") {
      this.i++;
    }
    const digits = () => {
      let n = 0;
      while (/^[0-9]$/.test(this.peek())) {
        this.i++;
        n++;
      }
      return n;
    };
    const whole = digits();
    if (whole === 0) {
      throw new Error("a parameter's number has no digits");
    }
    if (this.peek() !== ".") {
      if (whole > 15) {
        throw new Error("a parameter's integer has more than 15 digits");
      }
      return;
    }
    this.i++;
    const frac = digits();
    if (whole > 12 || frac < 1 || frac > 3) {
      throw new Error("a parameter's decimal must have at most 12 digits, a dot and 1 to 3 digits");
    }
  }
}

const utf8 = new TextEncoder();

/**
 * recordKey is the key of the record of the request that caller sent with
 * key: the caller with '%', '/', '#' and control characters
 * percent-encoded, a '/', and the key; when that is longer than idem's 256
 * bytes, "#" and the hex SHA-256 of it instead.
 */
export function recordKey(caller: string, key: string): string {
  let escaped = "";
  for (const ch of caller) {
    const code = ch.codePointAt(0)!;
    if (ch === "%" || ch === "/" || ch === "#" || code < 0x20 || code === 0x7f) {
      escaped += "%" + code.toString(16).toUpperCase().padStart(2, "0");
    } else {
      escaped += ch;
    }
  }
  const composed = escaped + "/" + key;
  const bytes = utf8.encode(composed);
  if (bytes.length <= MAX_KEY_BYTES) {
    return composed;
  }
  return "#" + createHash("sha256").update(bytes).digest("hex");
}

/** Target is the path and query of a request line, as sent. */
export interface Target {
  /** path is the request target's path, not decoded. */
  path: string;
  /** query is what follows its "?", not decoded; "" when none. */
  query: string;
}

/** splitTarget splits a request target ("/payments?x=1") into its path and query. */
export function splitTarget(target: string): Target {
  const q = target.indexOf("?");
  return q < 0 ? { path: target, query: "" } : { path: target.slice(0, q), query: target.slice(q + 1) };
}

/**
 * fingerprint is the SHA-256 every language's middleware stores as the
 * fingerprint of a request: of the netstrings of "idem-http-1", the method,
 * the path percent-decoded, the query as sent, then for each of names
 * (lowercased, sorted, each once) that the request has, the name and its
 * value, and last the body. header(name) gives a header's value (its field
 * lines joined with ", "), or undefined when the request has none.
 */
export function fingerprint(method: string, target: Target, header: (name: string) => string | undefined, names: readonly string[], body: Uint8Array): Uint8Array {
  const h = createHash("sha256");
  const netstring = (b: Uint8Array) => {
    h.update(`${b.length}:`);
    h.update(b);
    h.update(",");
  };
  netstring(latin1("idem-http-1"));
  netstring(latin1(method));
  netstring(percentDecode(target.path));
  netstring(latin1(target.query));
  for (const name of fingerprintNames(names)) {
    const v = header(name);
    if (v !== undefined) {
      netstring(latin1(name));
      netstring(latin1(v));
    }
  }
  netstring(body);
  return new Uint8Array(h.digest());
}

/** fingerprintNames is names lowercased, sorted and without repeats. */
export function fingerprintNames(names: readonly string[]): string[] {
  return [...new Set(names.map((n) => n.toLowerCase()))].sort();
}

/** latin1 is a string of characters below U+0100 (a header, a request line) as its bytes. */
function latin1(s: string): Uint8Array {
  return Buffer.from(s, "latin1");
}

/** percentDecode decodes each %XX of a path to its byte, and leaves any other % as it is. */
export function percentDecode(s: string): Uint8Array {
  const out: number[] = [];
  const bytes = Buffer.from(s, "latin1");
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (c === 0x25 && i + 2 < bytes.length && isHex(bytes[i + 1]!) && isHex(bytes[i + 2]!)) {
      out.push(parseInt(String.fromCharCode(bytes[i + 1]!, bytes[i + 2]!), 16));
      i += 2;
    } else {
      out.push(c);
    }
  }
  return Uint8Array.from(out);
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** ENVELOPE_VERSION is the value of "idem_http" in the envelopes this version writes and reads. */
const ENVELOPE_VERSION = 1;

/** StoredResponse is a response as a record holds it. */
export interface StoredResponse {
  status: number;
  /** headers are [name, value] pairs, names in lowercase, values as Latin-1 strings. */
  headers: Array<[string, string]>;
  /** body is empty when omitted. */
  body: Uint8Array;
  /** omitted is true when the body was over the bound and was not stored. */
  omitted: boolean;
}

/**
 * encodeEnvelope is the record's result for a response: one line of JSON
 * ({"idem_http":1,"status":S,"headers":[[name,value],...]}, with
 * "omitted":true when the body was not stored), a newline, and the body.
 */
export function encodeEnvelope(s: StoredResponse): Uint8Array {
  const headers = s.headers.map(([n, v]) => `[${JSON.stringify(n)},${JSON.stringify(v)}]`).join(",");
  const head = Buffer.from(`{"idem_http":${ENVELOPE_VERSION},"status":${s.status},"headers":[${headers}]${s.omitted ? ',"omitted":true' : ""}}\n`, "utf8");
  return s.omitted || s.body.length === 0 ? new Uint8Array(head) : new Uint8Array(Buffer.concat([head, s.body]));
}

/** decodeEnvelope reads an envelope; it throws an Error saying why one is not. */
export function decodeEnvelope(b: Uint8Array): StoredResponse {
  const nl = b.indexOf(0x0a);
  if (nl < 0) {
    throw new Error("not a stored response: no newline after its first line");
  }
  let head: unknown;
  try {
    head = JSON.parse(Buffer.from(b.buffer, b.byteOffset, nl).toString("utf8"));
  } catch (err) {
    throw new Error(`not a stored response: its first line: ${(err as Error).message}`);
  }
  const h = head as { idem_http?: unknown; status?: unknown; headers?: unknown; omitted?: unknown };
  const body = b.subarray(nl + 1);
  if (typeof head !== "object" || head === null || h.idem_http === undefined) {
    throw new Error("not a stored response: its first line has no idem_http");
  }
  if (h.idem_http !== ENVELOPE_VERSION) {
    throw new Error(`not a stored response: it is version ${String(h.idem_http)} of the format; this version reads ${ENVELOPE_VERSION}`);
  }
  if (typeof h.status !== "number" || !Number.isInteger(h.status) || h.status < 200 || h.status > 599) {
    throw new Error(`not a stored response: status ${String(h.status)} is not a final status (200 to 599)`);
  }
  const omitted = h.omitted === true;
  if (omitted && body.length > 0) {
    throw new Error("not a stored response: a body follows a head that says it was omitted");
  }
  const headers: Array<[string, string]> = [];
  for (const pair of Array.isArray(h.headers) ? h.headers : []) {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string" || typeof pair[1] !== "string") {
      throw new Error("not a stored response: a header is not a [name, value] pair of strings");
    }
    for (const s of pair as string[]) {
      if (/[^\u0000-\u00ff]/.test(s)) {
        throw new Error(`not a stored response: a header holds ${JSON.stringify(s)}, which is not Latin-1`);
      }
    }
    headers.push([pair[0], pair[1]]);
  }
  return { status: h.status, headers, body, omitted };
}

/** PROBLEM_TYPE_PREFIX starts the type URI of every problem; the rest is its slug, a heading of docs/http-api.md. */
export const PROBLEM_TYPE_PREFIX = "https://github.com/idemhq/idem/blob/main/docs/http-api.md#";

/** Problem is one kind of RFC 9457 problem the middleware answers. */
export interface Problem {
  slug: string;
  status: number;
  title: string;
}

/** PROBLEMS are the problems, as clients/scenarios/http.json lists them for every language. */
export const PROBLEMS = {
  keyMissing: { slug: "key-missing", status: 400, title: "Idempotency-Key is missing" },
  keyMalformed: { slug: "key-malformed", status: 400, title: "Idempotency-Key is malformed" },
  callerUnidentified: { slug: "caller-unidentified", status: 401, title: "The caller is not identified" },
  requestTooLarge: { slug: "request-too-large", status: 413, title: "The request body is too large to fingerprint" },
  keyInFlight: { slug: "key-in-flight", status: 409, title: "A request with this Idempotency-Key is being processed" },
  keyUnresolved: { slug: "key-unresolved", status: 409, title: "The request with this Idempotency-Key awaits an operator's resolution" },
  keyReused: { slug: "key-reused", status: 422, title: "Idempotency-Key was used for another request" },
  requestFailed: { slug: "request-failed", status: 500, title: "The request with this Idempotency-Key failed for good" },
  recordUnreadable: { slug: "record-unreadable", status: 500, title: "The stored response cannot be read" },
  idemUnavailable: { slug: "idem-unavailable", status: 503, title: "Idempotency keys cannot be checked now" },
} as const satisfies Record<string, Problem>;

/**
 * RETRY_AFTER_SECONDS is the Retry-After of a key in flight and of idem
 * unavailable: the holder of a key usually finishes within a request's time.
 */
export const RETRY_AFTER_SECONDS = 1;

/** problemBody is the application/problem+json document of p with detail. */
export function problemBody(p: Problem, detail: string): string {
  return JSON.stringify({ type: PROBLEM_TYPE_PREFIX + p.slug, title: p.title, status: p.status, ...(detail ? { detail } : {}) });
}
