import { Code, ConnectError, type Interceptor, type Transport } from "@connectrpc/connect";
import type { UniversalClientFn } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import { createRegistry } from "@bufbuild/protobuf";
import { file_google_rpc_error_details } from "./gen/google/rpc/error_details_pb.js";

/**
 * detailTypes are the messages an error's details hold. A batch call's
 * answer carries each item's error as a google.rpc.Status in the response,
 * whose details, in JSON, can only be read with their types at hand.
 */
const detailTypes = createRegistry(file_google_rpc_error_details);

/** ConnectTransportOptions configure {@link connectTransport}. */
export interface ConnectTransportOptions {
  /**
   * baseUrl is idemd's HTTP/JSON listener (`--json-listen`, port 7072 by
   * default): "https://idem.internal:7072", or "http://127.0.0.1:7072" for
   * plaintext.
   */
  baseUrl: string;
  /**
   * token is sent as "Authorization: Bearer <token>" on every call. None by
   * default. It is never sent in plaintext to another machine: a token with
   * an http:// baseUrl is refused unless the host is a loopback address.
   */
  token?: string;
  /**
   * fetch is the fetch implementation; globalThis.fetch by default. Pass one
   * to set TLS options (a custom CA, client certificates) where the
   * runtime's fetch has them, or to add a proxy.
   */
  fetch?: typeof globalThis.fetch;
  /** binary sends protobuf instead of JSON (the Connect protocol either way). JSON by default. */
  binary?: boolean;
  /**
   * timeoutMs is every call's deadline unless the call sets its own; none by
   * default. Above 0 and at most 2³¹−1 (a timer's bound).
   */
  timeoutMs?: number;
  /** interceptors run around every call, after the one that adds the token. */
  interceptors?: Interceptor[];
}

/**
 * connectTransport returns a transport that speaks the Connect protocol
 * (JSON by default) over fetch to idemd's HTTP/JSON listener. It runs
 * wherever fetch does: Node 18+, Deno, Bun, browsers and edge runtimes.
 *
 * ```ts
 * const idem = new IdemClient(connectTransport({ baseUrl: "https://idem.internal:7072", token }));
 * ```
 */
export function connectTransport(options: ConnectTransportOptions): Transport {
  const url = parseBaseUrl(options.baseUrl, { flag: "--json-listen", port: 7072 });
  const interceptors = [...tokenInterceptors(url, options.token), ...(options.interceptors ?? [])];
  return createTransport({
    httpClient: fetchClient(options.fetch ?? ((input, init) => globalThis.fetch(input, init))),
    baseUrl: options.baseUrl,
    useBinaryFormat: options.binary ?? false,
    jsonOptions: { registry: detailTypes },
    interceptors,
    acceptCompression: [],
    sendCompression: null,
    compressMinBytes: Number.MAX_SAFE_INTEGER,
    readMaxBytes: 0xffffffff,
    writeMaxBytes: 0xffffffff,
    defaultTimeoutMs: timerMs(options.timeoutMs, "timeoutMs"),
  });
}

/** MAX_TIMER_MS is the longest delay a JavaScript timer holds: 2³¹−1 ms, about 24.8 days. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * timerMs checks an option that becomes a timer's delay: undefined, or a
 * number of milliseconds above 0 and at most MAX_TIMER_MS. A timer takes 0,
 * a negative number or NaN as "now" and one over the bound as 1 ms, so each
 * would fail every call at once with DEADLINE_EXCEEDED.
 */
export function timerMs(ms: number | undefined, field: string): number | undefined {
  if (ms === undefined) {
    return undefined;
  }
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0 || ms > MAX_TIMER_MS) {
    throw new RangeError(`idem: ${field} is ${String(ms)}; it must be a number of milliseconds above 0 and at most ${MAX_TIMER_MS}, or unset`);
  }
  return ms;
}

/**
 * fetchClient sends each (unary) request with one fetch. The request body
 * is collected first: fetch with a streamed body needs `duplex: "half"`,
 * which not every runtime has. A fetch that rejects for any reason but an
 * abort (connection refused, reset, DNS) is UNAVAILABLE, as the gRPC
 * transports report it, so that it is retried like one.
 */
function fetchClient(fetchFn: typeof globalThis.fetch): UniversalClientFn {
  return async (req) => {
    let body: Uint8Array | undefined;
    if (req.body !== undefined) {
      const chunks: Uint8Array[] = [];
      for await (const chunk of req.body) {
        chunks.push(chunk);
      }
      body = concat(chunks);
    }
    let res: Response;
    try {
      res = await fetchFn(req.url, { method: req.method, headers: req.header, body: body as BodyInit | undefined, signal: req.signal });
    } catch (err) {
      if (req.signal?.aborted) {
        throw err; // the caller's cancel or deadline: connect reports it
      }
      throw new ConnectError(`idem: ${req.url}: ${describe(err)}`, Code.Unavailable, undefined, undefined, err);
    }
    return {
      status: res.status,
      header: res.headers,
      body: readBody(res, req.url),
      trailer: new Headers(),
    };
  };
}

async function* readBody(res: Response, url: string): AsyncIterable<Uint8Array> {
  if (res.body === null) {
    return;
  }
  const reader = res.body.getReader();
  try {
    for (;;) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await reader.read();
      } catch (err) {
        throw new ConnectError(`idem: ${url}: reading the response: ${describe(err)}`, Code.Unavailable, undefined, undefined, err);
      }
      if (r.done) {
        return;
      }
      yield r.value;
    }
  } finally {
    reader.releaseLock();
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) {
    return chunks[0]!;
  }
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** describe is an error's message with its causes, as fetch hides the useful part in cause. */
function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e = err, depth = 0; e !== undefined && depth < 4; depth++) {
    parts.push(e instanceof Error ? e.message : String(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join(": ");
}

/**
 * Listener names the idemd listener a transport talks to, for the hint of a
 * bad baseUrl.
 */
export interface Listener {
  /** flag is idemd's flag for it: "--listen" or "--json-listen". */
  flag: string;
  /** port is its default port. */
  port: number;
}

/** parseBaseUrl checks that baseUrl is an http:// or https:// URL of listener. */
export function parseBaseUrl(baseUrl: string, listener: Listener): URL {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    const { flag, port } = listener;
    throw new TypeError(`idem: baseUrl ${JSON.stringify(baseUrl)} is not a URL; give idemd's ${flag} address, like "https://idem.internal:${port}" (TLS) or "http://127.0.0.1:${port}" (plaintext)`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`idem: baseUrl ${JSON.stringify(baseUrl)} must start with https:// (TLS) or http:// (plaintext)`);
  }
  return url;
}

/**
 * tokenInterceptors returns the interceptor that sends token, none without
 * one. A token is refused over plaintext to a host that is not a loopback
 * address, so that it never crosses a network in the clear.
 */
export function tokenInterceptors(url: URL, token: string | undefined): Interceptor[] {
  if (token === undefined || token === "") {
    return [];
  }
  if (url.protocol === "http:" && !isLoopback(url.hostname)) {
    throw new Error(`idem: refusing to send the token in plaintext to ${url.host}: use https://, or a loopback address`);
  }
  // Headers drop the whitespace around a value (a token read from a file
  // keeps working), and refuse, at every call, what a header cannot hold.
  const trimmed = token.replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
  const bad = trimmed.search(/[^\x20-\x7e]/);
  if (bad >= 0) {
    throw new TypeError(`idem: the token has a character that cannot be sent in an HTTP header (${JSON.stringify(trimmed[bad])}) at index ${bad}; a bearer token is printable ASCII`);
  }
  const value = `Bearer ${trimmed}`;
  return [
    (next) => (req) => {
      req.header.set("Authorization", value);
      return next(req);
    },
  ];
}

function isLoopback(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/** streamingTransports are the transports known to carry idemd's server streams. */
const streamingTransports = new WeakSet<Transport>();

/** markStreaming records that t carries server streams to idemd (gRPC does), and returns it. */
export function markStreaming<T extends Transport>(t: T): T {
  streamingTransports.add(t);
  return t;
}

/** streams reports whether t was marked by {@link markStreaming}. */
export function streams(t: Transport): boolean {
  return streamingTransports.has(t);
}
