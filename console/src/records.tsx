// Records: the listing, filtered by namespace, state, key prefix and how
// long a record has not changed, a page at a time with the API's page
// tokens, sorted within the page. The filters, the page and the sort are
// the address (#/records?…): a reload keeps them, and Back returns to them.
import { useEffect, useState } from "preact/hooks";
import { State } from "@idemhq/idem";
import type { Session } from "./api";
import type { Scope } from "./app";
import { parseDuration, STATES, stateName } from "./format";
import { type Rec, recordName, StateBadge } from "./record";
import { formatRoute, navigate, NO_QUERY, pageState, recordRoute, type RecordsQuery, type Route, type SortKey } from "./route";
import { Ago, dateOf, ErrorBox, useLoad } from "./ui";

/** PAGE_SIZES are the page sizes the form offers; the first one past the default is the default. */
const PAGE_SIZES = [25, 100, 500, 1000];
const DEFAULT_PAGE_SIZE = 100;

/** Filter is a RecordsQuery checked and made ready for ListRecords. */
interface Filter {
  namespace: string;
  state: State;
  prefix: string;
  /** olderS is the older-than filter in seconds; undefined for none. */
  olderS: number | undefined;
  pageSize: number;
}

/**
 * checkQuery turns the address's filters into a Filter, or says what is
 * wrong with them (a link edited by hand), naming the filter.
 */
export function checkQuery(q: RecordsQuery): { filter: Filter; problems: string[] } {
  const problems: string[] = [];
  let state = State.UNSPECIFIED;
  if (q.state !== "") {
    const s = STATES.find((x) => stateName(x) === q.state.toUpperCase());
    if (s === undefined) {
      problems.push(`State: "${q.state}" is not a state; it is one of ${STATES.map(stateName).join(", ")}`);
    } else {
      state = s;
    }
  }
  let olderS: number | undefined;
  if (q.older !== "") {
    try {
      olderS = parseDuration(q.older);
    } catch (err) {
      problems.push(`Unchanged for: ${(err as Error).message}`);
    }
  }
  let pageSize = DEFAULT_PAGE_SIZE;
  if (q.size !== "") {
    const n = Number(q.size);
    if (!Number.isInteger(n) || n < 1 || n > 1000) {
      problems.push(`Per page: "${q.size}" is not a page size; it is 1 to 1000`);
    } else {
      pageSize = n;
    }
  }
  return { filter: { namespace: q.namespace, state, prefix: q.prefix, olderS, pageSize }, problems };
}

/** formOf is what the form shows of q: a state that is none shows as all, which is what Filter then sends. */
function formOf(q: RecordsQuery): RecordsQuery {
  const state = q.state.toUpperCase();
  return { ...q, state: STATES.some((s) => stateName(s) === state) ? state : "" };
}

export function Records({
  session,
  scope,
  route,
  namespaces,
  now,
  intervalMs,
  onError,
}: {
  session: Session;
  scope: Scope;
  route: Extract<Route, { page: "records" }>;
  namespaces: string[];
  now: Date;
  intervalMs: number;
  onError: (e: unknown) => void;
}) {
  const q = route.query;
  const here = formatRoute(route);
  const { filter, problems } = checkQuery(q);
  const [draft, setDraft] = useState<RecordsQuery>(() => formOf(q));
  const [draftProblem, setDraftProblem] = useState("");
  // The form shows the address's filters again after Back, Forward or a link.
  useEffect(() => {
    setDraft(formOf(q));
    setDraftProblem("");
  }, [here]);
  const loaded = useLoad(
    async (signal) =>
      problems.length > 0
        ? undefined
        : session.client.raw.admin.listRecords(
            {
              namespace: filter.namespace,
              state: filter.state,
              keyPrefix: filter.prefix,
              olderThan: filter.olderS === undefined ? undefined : { seconds: BigInt(filter.olderS) },
              pageSize: filter.pageSize,
              pageToken: q.after,
              tenant: scope.tenant,
              allTenants: scope.all,
            },
            { signal },
          ),
    [session, scope.tenant, scope.all, here.replace(/[?&]sort=[^&]*/, "")],
    intervalMs,
    onError,
  );
  const go = (query: RecordsQuery, opts: Parameters<typeof navigate>[1] = {}) => navigate({ ...route, query }, opts);
  const apply = (d: RecordsQuery) => {
    if (d.older.trim() !== "") {
      try {
        parseDuration(d.older);
      } catch (err) {
        setDraftProblem(`Unchanged for: ${(err as Error).message}`);
        return;
      }
    }
    setDraftProblem("");
    go({ ...d, older: d.older.trim(), after: "", sort: q.sort, desc: q.desc });
  };
  const earlier = pageState().earlier;
  const pageNumber = q.after === "" ? 1 : earlier !== undefined ? earlier.length + 1 : undefined;

  const recs = [...(loaded.data?.records ?? [])];
  if (q.sort !== "key") {
    const at = (r: Rec) => dateOf(q.sort === "updated" ? r.updatedAt : r.createdAt)?.getTime() ?? 0;
    recs.sort((a, b) => (q.desc ? at(b) - at(a) : at(a) - at(b)));
  } else if (q.desc) {
    recs.reverse();
  }
  const sortButton = (by: SortKey, label: string) => (
    <button
      type="button"
      class="sort"
      aria-sort={q.sort === by ? (q.desc ? "descending" : "ascending") : "none"}
      onClick={() => go({ ...q, sort: by, desc: q.sort === by ? !q.desc : by !== "key" }, { replace: true, state: pageState() })}
    >
      {label}
      {q.sort === by ? (q.desc ? " ↓" : " ↑") : ""}
    </button>
  );
  const showTenant = scope.all;
  return (
    <section>
      <h1>Records</h1>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          apply(draft);
        }}
      >
        <label>
          Namespace
          <input
            name="namespace"
            list="namespaces"
            value={draft.namespace}
            placeholder="all"
            autocomplete="off"
            onInput={(e) => setDraft({ ...draft, namespace: (e.target as HTMLInputElement).value.trim() })}
          />
          <datalist id="namespaces">
            {namespaces.map((n) => (
              <option key={n} value={n} />
            ))}
          </datalist>
        </label>
        <label>
          State
          <select name="state" value={draft.state} onChange={(e) => setDraft({ ...draft, state: (e.target as HTMLSelectElement).value })}>
            <option value="">all</option>
            {STATES.map((s) => (
              <option key={s} value={stateName(s)}>
                {stateName(s)}
              </option>
            ))}
          </select>
        </label>
        <label>
          Key prefix
          <input
            name="prefix"
            value={draft.prefix}
            placeholder="any key"
            autocomplete="off"
            onInput={(e) => setDraft({ ...draft, prefix: (e.target as HTMLInputElement).value })}
          />
        </label>
        <label title="Only records that have not changed for at least this long: with PROCESSING, the claims that have not heartbeated lately">
          Unchanged for
          <input
            name="older"
            list="older-choices"
            value={draft.older}
            placeholder="any time"
            autocomplete="off"
            size={8}
            onInput={(e) => setDraft({ ...draft, older: (e.target as HTMLInputElement).value })}
          />
          <datalist id="older-choices">
            {["5m", "15m", "1h", "6h", "1d", "7d"].map((d) => (
              <option key={d} value={d} />
            ))}
          </datalist>
        </label>
        <label>
          Per page
          <select name="pageSize" value={draft.size || String(DEFAULT_PAGE_SIZE)} onChange={(e) => setDraft({ ...draft, size: (e.target as HTMLSelectElement).value })}>
            {[...new Set([...PAGE_SIZES, filter.pageSize])].map((n) => (
              <option key={n} value={String(n)}>
                {n}
              </option>
            ))}
          </select>
        </label>
        <div class="filter-buttons">
          <button type="submit" class="primary">
            Filter
          </button>
          <button type="button" onClick={() => apply(NO_QUERY)}>
            Clear
          </button>
        </div>
      </form>
      {[draftProblem, ...problems]
        .filter((p) => p !== "")
        .map((p) => (
          <div class="error" role="alert" key={p}>
            {p}
          </div>
        ))}
      <ErrorBox error={loaded.error} title="Could not list the records" />
      <div class="pager">
        <button
          type="button"
          disabled={q.after === ""}
          onClick={() =>
            earlier !== undefined && earlier.length > 0
              ? go({ ...q, after: earlier[earlier.length - 1]! }, { state: { earlier: earlier.slice(0, -1) } })
              : go({ ...q, after: "" })
          }
        >
          {q.after !== "" && (earlier === undefined || earlier.length === 0) ? "← First page" : "← Previous"}
        </button>
        <span class="muted" data-testid="page-info">
          {pageNumber !== undefined ? `Page ${pageNumber}` : "A later page"}
          {loaded.data ? `: ${loaded.data.records.length} records` : ""}
        </span>
        <button
          type="button"
          disabled={!loaded.data?.nextPageToken}
          onClick={() => loaded.data && go({ ...q, after: loaded.data.nextPageToken }, { state: { earlier: [...(earlier ?? []), q.after] } })}
        >
          Next →
        </button>
      </div>
      {loaded.data && recs.length === 0 ? (
        <p class="muted">{loaded.data.nextPageToken ? "No records on this page that you may see; the next page may have some." : "No records match."}</p>
      ) : null}
      {recs.length > 0 ? (
        <div class="table-wrap">
          <table class="table records" data-testid="records-table">
            <thead>
              <tr>
                {showTenant ? <th class="wide">Tenant</th> : null}
                <th class="wide">Namespace</th>
                <th>{sortButton("key", "Key")}</th>
                <th>State</th>
                <th class="num wide">Attempt</th>
                <th>{sortButton("updated", "Updated")}</th>
                <th class="wide">{sortButton("created", "Created")}</th>
              </tr>
            </thead>
            <tbody>
              {recs.map((r) => {
                const to = recordRoute(r, route.tenant);
                return (
                  <tr key={recordName(r)} class="clickable" onClick={() => navigate(to)} data-key={r.key}>
                    {showTenant ? <td class="wide">{r.tenant}</td> : null}
                    <td class="wide">{r.namespace}</td>
                    <td class="key-cell">
                      <a href={formatRoute(to)} class="key" onClick={(e) => e.stopPropagation()}>
                        {r.key}
                      </a>
                      <div class="narrow-only muted small">{showTenant ? `${r.tenant}/${r.namespace}` : r.namespace}</div>
                    </td>
                    <td>
                      <StateBadge state={r.state} />
                    </td>
                    <td class="num wide">{r.attempt}</td>
                    <td>
                      <Ago at={r.updatedAt} now={now} />
                    </td>
                    <td class="wide">
                      <Ago at={r.createdAt} now={now} />
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
