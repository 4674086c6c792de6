// The console's one way to idemd: the TypeScript client (@idemhq/idem) over
// the Connect protocol to the origin that served the console, with the
// token the person pasted.
import { connectTransport, IdemClient, type pb, RpcError } from "@idemhq/idem";
import { Code } from "@connectrpc/connect";

export { RpcError };
export type { IdemClient };

/** ServerInfo is /console/server.json: what idemd says about itself. */
export interface ServerInfo {
  /** authentication is "none" when idemd runs without a config: anyone who reaches the port can act. */
  authentication: "none" | "required";
  /** client_certificates is whether a client certificate may sign the caller in. */
  client_certificates: boolean;
}

export async function fetchServerInfo(): Promise<ServerInfo> {
  const res = await fetch(new URL("server.json", consoleBase()), { cache: "no-store" });
  if (!res.ok) {
    throw new Error(`reading ${res.url}: HTTP ${res.status}`);
  }
  return (await res.json()) as ServerInfo;
}

/** consoleBase is the console's own URL (…/console/). */
function consoleBase(): URL {
  return new URL(".", window.location.href);
}

/**
 * apiBase is where the API is: the console's parent path, so that a proxy
 * that serves idemd under a prefix (/idem/console/) serves the API there too.
 */
export function apiBase(): string {
  return new URL("../", consoleBase()).href.replace(/\/$/, "");
}

/**
 * Who the token is, as far as the AdminService tells: an operator (may name
 * any tenant, or all), a tenant's admin (its own records), or the one
 * tenant of an idemd without authentication.
 */
export type Role = "operator" | "admin" | "open";

export interface Session {
  client: IdemClient;
  role: Role;
  /** tenant is the caller's tenant when the API named it ("" when it did not). */
  tenant: string;
  /** tenants are the tenants that had records at sign-in (an operator's), for its tenant picker. */
  tenants: string[];
  /** namespaces are the namespaces that had records at sign-in, for the filters. */
  namespaces: string[];
  /** callerName is the name idemd's config gives the token (named_tokens), "" for none: who the timeline says decided. */
  callerName: string;
}

const TOKEN_KEY = "idem.console.token";

/** savedToken is the token of this browser tab's session, if any. */
export function savedToken(): string | null {
  return window.sessionStorage.getItem(TOKEN_KEY);
}

export function forgetToken(): void {
  window.sessionStorage.removeItem(TOKEN_KEY);
}

/**
 * signIn makes a client with token and asks the AdminService what it may
 * do: a count across all tenants succeeds for an operator (and without
 * authentication), and a tenant's admin is refused with NOT_OPERATOR, which
 * names its tenant. A token that signs in is kept in sessionStorage (this
 * tab only, until it closes), never in a URL or a cookie. Anything else
 * throws a SignInError that says what to do.
 */
export async function signIn(token: string, info: ServerInfo): Promise<Session> {
  let client: IdemClient;
  try {
    client = new IdemClient(connectTransport({ baseUrl: apiBase(), token: token === "" ? undefined : token, timeoutMs: 15_000 }));
  } catch (err) {
    throw new SignInError(err instanceof Error ? err.message.replace(/^idem: /, "") : String(err));
  }
  let role: Role = info.authentication === "none" ? "open" : "operator";
  let tenant = info.authentication === "none" ? "default" : "";
  let rows: { tenant: string; namespace: string }[];
  let callerName = "";
  try {
    ({ rows, callerName } = await client.raw.admin.stats({ allTenants: true }));
  } catch (raw) {
    const err = RpcError.from(raw);
    if (!(err instanceof RpcError) || err.reasonName !== "NOT_OPERATOR") {
      throw new SignInError(describe(err), err);
    }
    role = "admin";
    tenant = err.metadata["tenant"] ?? "";
    try {
      ({ rows, callerName } = await client.raw.admin.stats({}));
    } catch (raw2) {
      throw new SignInError(describe(raw2), raw2);
    }
  }
  if (info.authentication !== "none") {
    window.sessionStorage.setItem(TOKEN_KEY, token);
  }
  const uniq = (xs: string[]) => [...new Set(xs)].sort();
  return { client, role, tenant, tenants: uniq(rows.map((r) => r.tenant)), namespaces: uniq(rows.map((r) => r.namespace)), callerName };
}

export class SignInError extends Error {
  override name = "SignInError";
  constructor(
    message: string,
    readonly rpc?: unknown,
  ) {
    super(message);
  }
}

/**
 * describe says what went wrong in words for the person at the console:
 * the server's message (which names the field and the bound), with what to
 * do for the errors a person meets here.
 */
export function describe(raw: unknown): string {
  const err = RpcError.from(raw);
  if (!(err instanceof RpcError)) {
    return err instanceof Error ? err.message.replace(/^idem: /, "") : String(err);
  }
  const tenant = err.metadata["tenant"];
  switch (err.reasonName) {
    case "UNAUTHENTICATED":
      return `idemd did not accept this token (${err.serverMessage}). Paste a token that \`idemd token new\` printed for a tenant whose hash is in idemd's config.`;
    case "NOT_ADMIN":
      return `Tenant ${tenant ? `"${tenant}" ` : ""}may not use the console: it needs admin: true (its own records) or operator: true (every tenant's) in idemd's config.`;
    case "NOT_OPERATOR":
      return `Only an operator may look at another tenant's records: ${err.serverMessage}.`;
    case "NOT_UNRESOLVED":
      return "The record is no longer UNRESOLVED: someone else resolved it first (or its late holder finished it). Nothing was changed by you.";
    case "LEASE_LOST":
      return "The record was taken over and held again since you looked at it: your decision was about a lease it no longer holds. Nothing was changed by you; look at it again.";
  }
  if (err.code === Code.Unauthenticated) {
    return `idemd did not accept this token: ${err.serverMessage}`;
  }
  if (err.code === Code.Unavailable) {
    return `idemd or its database cannot be reached: ${err.serverMessage}. Try again in a moment.`;
  }
  return `${err.serverMessage} (${err.reasonName ? `${err.codeName} / ${err.reasonName}` : err.codeName})`;
}

/** isUnauthenticated tells an error that means the token no longer signs in. */
export function isUnauthenticated(raw: unknown): boolean {
  const err = RpcError.from(raw);
  return err instanceof RpcError && err.code === Code.Unauthenticated;
}

/** reasonOf is the error's idem reason ("NOT_UNRESOLVED"), "" for none. */
export function reasonOf(raw: unknown): string {
  const err = RpcError.from(raw);
  return err instanceof RpcError ? err.reasonName : "";
}

/** RecordId names one record: its tenant ("" for the caller's own), namespace and key. */
export interface RecordId {
  tenant: string;
  namespace: string;
  key: string;
}

/** RecordWithHistory is a record (null when there is none) and its key's timeline, oldest first. */
export interface RecordWithHistory {
  record: pb.Record | null;
  history: pb.TimelineEntry[];
}

/**
 * fetchRecordWithHistory reads one record afresh with its steps and its
 * timeline; a key without either is no record and no history.
 */
export async function fetchRecordWithHistory(session: Session, id: RecordId, signal?: AbortSignal, includeHistory = true): Promise<RecordWithHistory> {
  try {
    const got = await session.client.raw.admin.getRecord({ namespace: id.namespace, key: id.key, tenant: id.tenant, includeHistory }, { signal });
    return { record: got.record ?? null, history: got.history };
  } catch (raw) {
    const err = RpcError.from(raw);
    if (err instanceof RpcError && err.code === Code.NotFound) {
      return { record: null, history: [] };
    }
    throw raw;
  }
}

/** fetchRecord reads one record afresh, null when there is none. */
export async function fetchRecord(session: Session, id: RecordId, signal?: AbortSignal): Promise<pb.Record | null> {
  return (await fetchRecordWithHistory(session, id, signal, false)).record;
}
