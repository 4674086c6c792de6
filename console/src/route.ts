// The console's places, in the URL's fragment so that a link pasted into an
// incident channel opens the same view, a reload keeps it and Back returns
// to the last one: #/overview, #/records?namespace=…&state=…, #/held?namespace=…,
// #/record/TENANT/NAMESPACE/KEY. The fragment never reaches a server, and
// nothing secret goes in it. Pure functions (tested in test/route.test.ts)
// and a hook that follows the address.
import { useEffect, useMemo, useState } from "preact/hooks";

/** SortKey is the column a page of records is sorted by; desc turns it round. */
export type SortKey = "key" | "updated" | "created";

/**
 * RecordsQuery is the records page's filters, page and sort, as the address
 * writes them: text, checked where it is used (records.tsx), so that a bad
 * value someone typed into a link is reported, not silently dropped.
 */
export interface RecordsQuery {
  namespace: string;
  /** state is a State's name ("PROCESSING"); "" for all. */
  state: string;
  prefix: string;
  /** older is how long a record has not changed, as typed ("15m", "2h"); "" for any. */
  older: string;
  /** size is the page size as typed; "" for the default. */
  size: string;
  /** after is the API's page token of this page; "" for the first. */
  after: string;
  sort: SortKey;
  desc: boolean;
}

export const NO_QUERY: RecordsQuery = { namespace: "", state: "", prefix: "", older: "", size: "", after: "", sort: "key", desc: false };

/** RecordId names one record: its tenant ("" for the caller's own), namespace and key. */
export interface RecordId {
  tenant: string;
  namespace: string;
  key: string;
}

/**
 * Route is a place in the console. tenant is the tenant an operator looks
 * at ("" for all of them; a tenant's admin always sees its own).
 */
export type Route =
  | { page: "overview"; tenant: string }
  | { page: "records"; tenant: string; query: RecordsQuery }
  | { page: "record"; tenant: string; id: RecordId }
  | { page: "held"; tenant: string; namespace: string };

export type Page = Route["page"];

const SORTS: readonly SortKey[] = ["key", "updated", "created"];

/** parseRoute reads a fragment ("#/records?state=FAILED"); anything it does not know is the overview. */
export function parseRoute(hash: string): Route {
  const frag = hash.replace(/^#/, "").replace(/^\/?/, "");
  const q = frag.indexOf("?");
  const path = q < 0 ? frag : frag.slice(0, q);
  const params = new URLSearchParams(q < 0 ? "" : frag.slice(q + 1));
  const tenant = params.get("tenant") ?? "";
  const parts = path.split("/");
  switch (parts[0]) {
    case "records": {
      const sort = params.get("sort") ?? "";
      const by = sort.replace(/^-/, "") as SortKey;
      return {
        page: "records",
        tenant,
        query: {
          namespace: params.get("namespace") ?? "",
          state: params.get("state") ?? "",
          prefix: params.get("prefix") ?? "",
          older: params.get("older") ?? "",
          size: params.get("size") ?? "",
          after: params.get("after") ?? "",
          sort: SORTS.includes(by) ? by : "key",
          desc: SORTS.includes(by) && sort.startsWith("-"),
        },
      };
    }
    case "record": {
      if (parts.length === 4) {
        try {
          const [t, ns, key] = parts.slice(1).map(decodeURIComponent) as [string, string, string];
          if (ns !== "" && key !== "") {
            return { page: "record", tenant, id: { tenant: t, namespace: ns, key } };
          }
        } catch {
          // a malformed escape: not a record's address
        }
      }
      return { page: "overview", tenant };
    }
    case "held":
      return { page: "held", tenant, namespace: params.get("namespace") ?? "" };
    default:
      return { page: "overview", tenant };
  }
}

/** formatRoute writes a route as a fragment, leaving out what is as by default. */
export function formatRoute(r: Route): string {
  const params = new URLSearchParams();
  const set = (k: string, v: string) => {
    if (v !== "") {
      params.set(k, v);
    }
  };
  let path: string;
  switch (r.page) {
    case "overview":
      path = "overview";
      break;
    case "records": {
      path = "records";
      const q = r.query;
      set("namespace", q.namespace);
      set("state", q.state);
      set("prefix", q.prefix);
      set("older", q.older);
      set("size", q.size);
      if (q.sort !== "key" || q.desc) {
        params.set("sort", `${q.desc ? "-" : ""}${q.sort}`);
      }
      set("after", q.after);
      break;
    }
    case "record":
      path = ["record", r.id.tenant, r.id.namespace, r.id.key].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join("/");
      break;
    case "held":
      path = "held";
      set("namespace", r.namespace);
      break;
  }
  set("tenant", r.tenant);
  const qs = params.toString();
  return `#/${path}${qs ? `?${qs}` : ""}`;
}

/** recordRoute is the address of a record's own page. */
export function recordRoute(id: RecordId, tenant: string): Route {
  return { page: "record", tenant, id: { tenant: id.tenant, namespace: id.namespace, key: id.key } };
}

/** PageState is what the console keeps in a history entry beside its address. */
export interface PageState {
  /** earlier are the page tokens of the records pages before this one, for Previous. */
  earlier?: string[];
}

const listeners = new Set<() => void>();

/**
 * navigate goes to r: a new history entry (Back returns here), or with
 * replace this one changed in place. Going to where the console already is
 * changes nothing.
 */
export function navigate(r: Route, opts: { replace?: boolean; state?: PageState } = {}): void {
  const hash = formatRoute(r);
  if (hash === window.location.hash && opts.state === undefined) {
    return;
  }
  const url = `${window.location.pathname}${window.location.search}${hash}`;
  if (opts.replace) {
    window.history.replaceState(opts.state ?? null, "", url);
  } else {
    window.history.pushState(opts.state ?? null, "", url);
  }
  for (const l of listeners) {
    l();
  }
}

/** pageState is the current history entry's PageState. */
export function pageState(): PageState {
  const s: unknown = window.history.state;
  return s !== null && typeof s === "object" ? (s as PageState) : {};
}

/** useRoute is the route of the address, following links, navigate, Back and Forward. */
export function useRoute(): Route {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const follow = () => setHash(window.location.hash);
    window.addEventListener("popstate", follow);
    window.addEventListener("hashchange", follow);
    listeners.add(follow);
    return () => {
      window.removeEventListener("popstate", follow);
      window.removeEventListener("hashchange", follow);
      listeners.delete(follow);
    };
  }, []);
  return useMemo(() => parseRoute(hash), [hash]);
}
