// Records: the listing, filtered by namespace, state and key prefix, a page
// at a time with the API's page tokens, sorted by time within the page.
import { useState } from "preact/hooks";
import { State } from "@idemhq/idem";
import type { Session } from "./api";
import type { Scope } from "./app";
import { STATES, stateName } from "./format";
import { RecordDialog, type Rec, StateBadge } from "./record";
import { Ago, dateOf, ErrorBox, useLoad } from "./ui";

export interface RecordFilter {
  namespace: string;
  state: State;
  prefix: string;
  pageSize: number;
}

export const NO_FILTER: RecordFilter = { namespace: "", state: State.UNSPECIFIED, prefix: "", pageSize: 100 };

type SortKey = "key" | "updated" | "created";

export function Records({
  session,
  scope,
  filter,
  setFilter,
  namespaces,
  now,
  intervalMs,
  onError,
}: {
  session: Session;
  scope: Scope;
  filter: RecordFilter;
  setFilter: (f: RecordFilter) => void;
  namespaces: string[];
  now: Date;
  intervalMs: number;
  onError: (e: unknown) => void;
}) {
  // tokens[i] is the page token of page i; tokens[0] is "".
  const [tokens, setTokens] = useState<string[]>([""]);
  const [sort, setSort] = useState<{ by: SortKey; desc: boolean }>({ by: "key", desc: false });
  const [open, setOpen] = useState<Rec | undefined>(undefined);
  const [draft, setDraft] = useState<RecordFilter>(filter);
  const page = tokens.length - 1;
  const loaded = useLoad(
    (signal) =>
      session.client.raw.admin.listRecords(
        {
          namespace: filter.namespace,
          state: filter.state,
          keyPrefix: filter.prefix,
          pageSize: filter.pageSize,
          pageToken: tokens[page],
          tenant: scope.tenant,
          allTenants: scope.all,
        },
        { signal },
      ),
    [session, scope.tenant, scope.all, filter, tokens],
    intervalMs,
    onError,
  );
  const apply = (f: RecordFilter) => {
    setTokens([""]);
    setFilter(f);
  };
  const recs = [...(loaded.data?.records ?? [])];
  if (sort.by !== "key") {
    const at = (r: Rec) => dateOf(sort.by === "updated" ? r.updatedAt : r.createdAt)?.getTime() ?? 0;
    recs.sort((a, b) => (sort.desc ? at(b) - at(a) : at(a) - at(b)));
  } else if (sort.desc) {
    recs.reverse();
  }
  const sortButton = (by: SortKey, label: string) => (
    <button
      type="button"
      class="sort"
      aria-sort={sort.by === by ? (sort.desc ? "descending" : "ascending") : "none"}
      onClick={() => setSort({ by, desc: sort.by === by ? !sort.desc : by !== "key" })}
    >
      {label}
      {sort.by === by ? (sort.desc ? " ↓" : " ↑") : ""}
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
          <select name="state" value={String(draft.state)} onChange={(e) => setDraft({ ...draft, state: Number((e.target as HTMLSelectElement).value) as State })}>
            <option value={String(State.UNSPECIFIED)}>all</option>
            {STATES.map((s) => (
              <option key={s} value={String(s)}>
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
        <label>
          Per page
          <select name="pageSize" value={String(draft.pageSize)} onChange={(e) => setDraft({ ...draft, pageSize: Number((e.target as HTMLSelectElement).value) })}>
            {[25, 100, 500, 1000].map((n) => (
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
          <button
            type="button"
            onClick={() => {
              setDraft(NO_FILTER);
              apply(NO_FILTER);
            }}
          >
            Clear
          </button>
        </div>
      </form>
      <ErrorBox error={loaded.error} title="Could not list the records" />
      <div class="pager">
        <button type="button" disabled={page === 0} onClick={() => setTokens(tokens.slice(0, -1))}>
          ← Previous
        </button>
        <span class="muted" data-testid="page-info">
          Page {page + 1}
          {loaded.data ? `: ${loaded.data.records.length} records` : ""}
        </span>
        <button type="button" disabled={!loaded.data?.nextPageToken} onClick={() => loaded.data && setTokens([...tokens, loaded.data.nextPageToken])}>
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
                {showTenant ? <th>Tenant</th> : null}
                <th>Namespace</th>
                <th>{sortButton("key", "Key")}</th>
                <th>State</th>
                <th class="num">Attempt</th>
                <th>{sortButton("updated", "Updated")}</th>
                <th>{sortButton("created", "Created")}</th>
              </tr>
            </thead>
            <tbody>
              {recs.map((r) => (
                <tr key={`${r.tenant}/${r.namespace}/${r.key}`} class="clickable" onClick={() => setOpen(r)} data-key={r.key}>
                  {showTenant ? <td>{r.tenant}</td> : null}
                  <td>{r.namespace}</td>
                  <td>
                    <a
                      href="#/records"
                      class="key"
                      onClick={(e) => {
                        e.preventDefault();
                        e.stopPropagation();
                        setOpen(r);
                      }}
                    >
                      {r.key}
                    </a>
                  </td>
                  <td>
                    <StateBadge state={r.state} />
                  </td>
                  <td class="num">{r.attempt}</td>
                  <td>
                    <Ago at={r.updatedAt} now={now} />
                  </td>
                  <td>
                    <Ago at={r.createdAt} now={now} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      {open ? <RecordDialog rec={open} session={session} now={now} onClose={() => setOpen(undefined)} onChanged={loaded.reload} /> : null}
    </section>
  );
}
