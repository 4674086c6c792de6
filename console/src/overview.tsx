// Overview: per tenant and namespace, the records by state, the oldest
// PROCESSING claim and the held count, from AdminService.Stats. Each count
// links to the records behind it, the held count to the held queue.
import { pb, State } from "@idemhq/idem";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Session } from "./api";
import { plural, STATES, stateName } from "./format";
import type { Scope } from "./app";
import { formatRoute, NO_QUERY, type Route } from "./route";
import { Ago, dateOf, ErrorBox, type Loaded, useLoad } from "./ui";

/** Group is one tenant's namespace: its counts by state. */
interface Group {
  tenant: string;
  namespace: string;
  counts: Map<State, bigint>;
  oldestProcessing: Timestamp | undefined;
  oldestHeld: Timestamp | undefined;
}

export function group(rows: pb.StatsRow[]): Group[] {
  const groups = new Map<string, Group>();
  for (const r of rows) {
    const id = `${r.tenant}\u0000${r.namespace}`;
    let g = groups.get(id);
    if (g === undefined) {
      g = { tenant: r.tenant, namespace: r.namespace, counts: new Map(), oldestProcessing: undefined, oldestHeld: undefined };
      groups.set(id, g);
    }
    g.counts.set(r.state, (g.counts.get(r.state) ?? 0n) + r.count);
    if (r.state === State.PROCESSING) {
      g.oldestProcessing = r.oldestUpdatedAt;
    } else if (r.state === State.UNRESOLVED) {
      g.oldestHeld = r.oldestUpdatedAt;
    }
  }
  return [...groups.values()];
}

function earliest(ts: (Timestamp | undefined)[]): Date | undefined {
  let min: Date | undefined;
  for (const t of ts) {
    const d = dateOf(t);
    if (d !== undefined && (min === undefined || d < min)) {
      min = d;
    }
  }
  return min;
}

export function useStats(session: Session, scope: Scope, intervalMs: number, onError: (e: unknown) => void): Loaded<pb.StatsRow[]> {
  return useLoad(
    async (signal) => (await session.client.raw.admin.stats({ tenant: scope.tenant, allTenants: scope.all }, { signal })).rows,
    [session, scope.tenant, scope.all],
    intervalMs,
    onError,
  );
}

/** COLUMNS are the states the table counts: Held first, the one an on-call person looks for. */
const COLUMNS: readonly State[] = [State.UNRESOLVED, ...STATES.filter((s) => s !== State.UNRESOLVED)];

export function Overview({ session, scope, route, stats, now }: { session: Session; scope: Scope; route: Route; stats: Loaded<pb.StatsRow[]>; now: Date }) {
  const groups = group(stats.data ?? []);
  const total = (s: State) => groups.reduce((n, g) => n + (g.counts.get(s) ?? 0n), 0n);
  const held = total(State.UNRESOLVED);
  const processing = total(State.PROCESSING);
  const oldest = earliest(groups.map((g) => g.oldestProcessing));
  const showTenant = session.role === "operator" && scope.all;
  // A count of one tenant's namespace leads an operator to that tenant's records.
  const tenantOf = (g: Group) => (session.role === "operator" ? g.tenant : route.tenant);
  const countHref = (g: Group, s: State) =>
    formatRoute(
      s === State.UNRESOLVED
        ? { page: "held", tenant: tenantOf(g), namespace: g.namespace }
        : { page: "records", tenant: tenantOf(g), query: { ...NO_QUERY, namespace: g.namespace, state: stateName(s) } },
    );
  return (
    <section>
      <h1>Overview</h1>
      <ErrorBox error={stats.error} title="Could not count the records" />
      <div class="cards">
        <a class={`card ${held > 0n ? "card-alert" : ""}`} href={formatRoute({ page: "held", tenant: route.tenant, namespace: "" })} data-testid="card-held">
          <span class="card-n">{held.toString()}</span>
          <span class="card-label">held for resolution</span>
        </a>
        <div class="card" data-testid="card-processing">
          <span class="card-n">{processing.toString()}</span>
          <span class="card-label">PROCESSING</span>
        </div>
        <div class="card" data-testid="card-oldest">
          <span class="card-n">{oldest ? <Ago at={oldest} now={now} /> : "—"}</span>
          <span class="card-label">oldest PROCESSING lease taken or renewed</span>
        </div>
      </div>
      {stats.data !== undefined && groups.length === 0 ? <p class="muted">No records{scope.all ? " in any tenant" : ""} yet.</p> : null}
      {groups.length > 0 ? (
        <div class="table-wrap">
          <table class="table overview" data-testid="overview-table">
            <thead>
              <tr>
                {showTenant ? <th class="wide">Tenant</th> : null}
                <th>Namespace</th>
                {COLUMNS.map((s) => (
                  <th key={s} class="num">
                    {s === State.UNRESOLVED ? "Held" : stateName(s)}
                  </th>
                ))}
                <th class="wide">Oldest PROCESSING</th>
              </tr>
            </thead>
            <tbody>
              {groups.map((g) => (
                <tr key={`${g.tenant}/${g.namespace}`}>
                  {showTenant ? <td class="wide">{g.tenant}</td> : null}
                  <td class="ns-cell">
                    {g.namespace}
                    {showTenant ? <div class="narrow-only muted small">{g.tenant}</div> : null}
                  </td>
                  {COLUMNS.map((s) => {
                    const n = g.counts.get(s) ?? 0n;
                    return (
                      <td key={s} class={`num ${s === State.UNRESOLVED && n > 0n ? "held-count" : ""}`}>
                        {n > 0n ? (
                          <a
                            href={countHref(g, s)}
                            title={s === State.UNRESOLVED ? `The held queue of ${g.namespace}` : `List the ${plural(n, "record", "records")} of ${g.namespace} in ${stateName(s)}`}
                          >
                            {n.toString()}
                          </a>
                        ) : (
                          <span class="muted">0</span>
                        )}
                      </td>
                    );
                  })}
                  <td class="wide">
                    <Ago at={g.oldestProcessing} now={now} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
    </section>
  );
}
