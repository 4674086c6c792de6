/**
 * gRPC for Node: a transport over Node's HTTP/2 to idemd's gRPC listener.
 * It lives in its own entry point, "@idemhq/idem/node", so that the main one
 * stays free of Node's modules and runs in browsers and edge runtimes.
 */
import type * as http2 from "node:http2";
import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { markStreaming, parseBaseUrl, timerMs, tokenInterceptors } from "./transport.js";

/** TlsOptions set the TLS of a gRPC connection (an https:// baseUrl). */
export interface TlsOptions {
  /** ca is the certificate authority (PEM) to trust instead of the system's. */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  /** cert is the client certificate (PEM), for a server that authenticates clients by certificate. */
  cert?: string | Uint8Array;
  /** key is the client certificate's private key (PEM). */
  key?: string | Uint8Array;
  /** servername is the name the server's certificate must have; the baseUrl's host by default. */
  servername?: string;
}

/** GrpcTransportOptions configure {@link grpcTransport}. */
export interface GrpcTransportOptions {
  /**
   * baseUrl is idemd's gRPC listener (`--listen`, port 7070 by default):
   * "https://idem.internal:7070" for TLS, or "http://127.0.0.1:7070" for
   * plaintext (HTTP/2 without TLS).
   */
  baseUrl: string;
  /**
   * token is sent as "authorization: Bearer <token>" on every call. None by
   * default. It is never sent in plaintext to another machine: a token with
   * an http:// baseUrl is refused unless the host is a loopback address.
   */
  token?: string;
  /** tls sets the TLS of an https:// baseUrl; the system's roots by default. */
  tls?: TlsOptions;
  /**
   * timeoutMs is every call's deadline unless the call sets its own; none by
   * default. Above 0 and at most 2³¹−1 (a timer's bound).
   */
  timeoutMs?: number;
  /**
   * pingIntervalMs sends HTTP/2 PINGs on a connection with calls in flight,
   * to notice a dead connection; none by default. Above 0 and at most 2³¹−1.
   */
  pingIntervalMs?: number;
  /** interceptors run around every call, after the one that adds the token. */
  interceptors?: Interceptor[];
}

/** A transport whose HTTP/2 connection {@link IdemClient.close} closes. */
export type ClosableTransport = Transport & { close(): void };

/**
 * grpcTransport returns a transport that speaks gRPC over one HTTP/2
 * connection (re-made as needed) to idemd's gRPC listener.
 *
 * ```ts
 * import { IdemClient } from "@idemhq/idem";
 * import { grpcTransport } from "@idemhq/idem/node";
 * const idem = new IdemClient(grpcTransport({ baseUrl: "http://127.0.0.1:7070" }));
 * ```
 */
export function grpcTransport(options: GrpcTransportOptions): ClosableTransport {
  const url = parseBaseUrl(options.baseUrl, { flag: "--listen", port: 7070 });
  if (options.tls !== undefined && url.protocol !== "https:") {
    throw new TypeError(`idem: tls options need an https:// baseUrl; got ${options.baseUrl}`);
  }
  const interceptors = [...tokenInterceptors(url, options.token), ...(options.interceptors ?? [])];
  // Node's TLS takes any Uint8Array where its types say Buffer.
  const sessionOptions = { ...(options.tls ?? {}) } as http2.SecureClientSessionOptions;
  const timeoutMs = timerMs(options.timeoutMs, "timeoutMs");
  const sessions = new Http2SessionManager(url, { pingIntervalMs: timerMs(options.pingIntervalMs, "pingIntervalMs") }, sessionOptions);
  const transport = createGrpcTransport({
    baseUrl: options.baseUrl,
    sessionManager: sessions,
    interceptors,
    defaultTimeoutMs: timeoutMs,
  });
  return markStreaming({
    unary: transport.unary.bind(transport),
    stream: transport.stream.bind(transport),
    close: () => sessions.abort(),
  });
}
