// Held for resolution: the UNRESOLVED records, oldest first, one compact
// row each with what a person needs to decide, filtered by namespace (in
// the address: #/held?namespace=…). Each row offers the three resolutions
// of ResolveRecord; checked rows are released or failed together, behind
// one confirmation.
import { useState } from "preact/hooks";
import { State } from "@idemhq/idem";
import type { Session } from "./api";
import type { Scope } from "./app";
import { hex, plural } from "./format";
import { type Rec, recordName } from "./record";
import { type Decision, DecisionButtons, ResolveDialog } from "./resolve";
import { formatRoute, navigate, recordRoute, type Route } from "./route";
import { Ago, dateOf, ErrorBox, useLoad } from "./ui";

/** HELD_LIMIT bounds how many held records the queue reads (ten full pages). */
const HELD_LIMIT = 10_000;

export interface HeldQueue {
  records: Rec[];
  /** more is true when there were more than HELD_LIMIT. */
  more: boolean;
}

/** oldestFirst orders held records by when their lease lapsed, then by when they were held. */
export function oldestFirst(a: Rec, b: Rec): number {
  const t = (r: Rec) => dateOf(r.leaseExpiresAt ?? r.updatedAt)?.getTime() ?? 0;
  const u = (r: Rec) => dateOf(r.updatedAt)?.getTime() ?? 0;
  return t(a) - t(b) || u(a) - u(b) || recordName(a).localeCompare(recordName(b));
}

async function loadHeld(session: Session, scope: Scope, signal: AbortSignal): Promise<HeldQueue> {
  const records: Rec[] = [];
  let pageToken = "";
  do {
    const page = await session.client.raw.admin.listRecords(
      { state: State.UNRESOLVED, pageSize: 1000, pageToken, tenant: scope.tenant, allTenants: scope.all },
      { signal },
    );
    records.push(...page.records);
    pageToken = page.nextPageToken;
  } while (pageToken !== "" && records.length < HELD_LIMIT);
  records.sort(oldestFirst);
  return { records, more: pageToken !== "" };
}

/** FINGERPRINT_CHARS is how much of a fingerprint a row shows; the rest is on hover and on the record's page. */
const FINGERPRINT_CHARS = 16;

export function Held({
  session,
  scope,
  route,
  now,
  intervalMs,
  onError,
}: {
  session: Session;
  scope: Scope;
  route: Extract<Route, { page: "held" }>;
  now: Date;
  intervalMs: number;
  onError: (e: unknown) => void;
}) {
  const loaded = useLoad((signal) => loadHeld(session, scope, signal), [session, scope.tenant, scope.all], intervalMs, onError);
  const [selected, setSelected] = useState<ReadonlySet<string>>(new Set());
  const [flow, setFlow] = useState<{ recs: Rec[]; decision: Decision } | undefined>(undefined);
  const all = loaded.data?.records ?? [];
  const counts = new Map<string, number>();
  for (const r of all) {
    counts.set(r.namespace, (counts.get(r.namespace) ?? 0) + 1);
  }
  if (route.namespace !== "" && !counts.has(route.namespace)) {
    counts.set(route.namespace, 0);
  }
  const recs = route.namespace === "" ? all : all.filter((r) => r.namespace === route.namespace);
  const chosen = recs.filter((r) => selected.has(recordName(r)));
  const allChosen = recs.length > 0 && chosen.length === recs.length;
  const toggle = (names: string[], on: boolean) => {
    const next = new Set(selected);
    for (const n of names) {
      if (on) {
        next.add(n);
      } else {
        next.delete(n);
      }
    }
    setSelected(next);
  };
  const where = route.namespace === "" ? "" : ` in ${route.namespace}`;
  return (
    <section>
      <div class="held-bar">
        <h1>Held for resolution</h1>
        <label class="inline">
          <span class="label">Namespace</span>
          <select name="namespace" value={route.namespace} onChange={(e) => navigate({ ...route, namespace: (e.target as HTMLSelectElement).value })}>
            <option value="">all ({all.length})</option>
            {[...counts.keys()].sort().map((ns) => (
              <option key={ns} value={ns}>
                {ns} ({counts.get(ns)})
              </option>
            ))}
          </select>
        </label>
        {loaded.data ? (
          <span class="muted" data-testid="held-count">
            {recs.length === 0
              ? `Nothing is held${where}.`
              : `${plural(recs.length, "record", "records")} held${where}, oldest first${loaded.data.more ? ` (of the first ${HELD_LIMIT})` : ""}.`}
          </span>
        ) : null}
        <div class="bulk" data-testid="bulk-bar">
          <span class="muted">{chosen.length} selected</span>
          {(["released", "failed"] as const).map((d) => (
            <button key={d} type="button" class="decision" disabled={chosen.length === 0} onClick={() => setFlow({ recs: chosen, decision: d })}>
              {d === "released" ? "Release…" : "Fail…"}
            </button>
          ))}
        </div>
      </div>
      <ErrorBox error={loaded.error} title="Could not read the held records" />
      {recs.length > 0 ? (
        <div class="table-wrap">
          <table class="table held-table" data-testid="held-list">
            <thead>
              <tr>
                <th class="check">
                  <input
                    type="checkbox"
                    aria-label="Select all shown"
                    checked={allChosen}
                    indeterminate={chosen.length > 0 && !allChosen}
                    onChange={(e) => toggle(recs.map(recordName), (e.target as HTMLInputElement).checked)}
                  />
                </th>
                <th>Record</th>
                <th>Lease lapsed</th>
                <th class="num wide">Attempts</th>
                <th class="wide">Last claimant</th>
                <th class="wide">Fingerprint</th>
                <th class="wide">Policy</th>
                <th>Decide</th>
              </tr>
            </thead>
            <tbody>
              {recs.map((r) => {
                const name = recordName(r);
                const fp = hex(r.fingerprint);
                return (
                  <tr key={name} data-key={r.key} data-testid="held-item" class={selected.has(name) ? "selected" : ""}>
                    <td class="check">
                      <input type="checkbox" aria-label={`Select ${name}`} checked={selected.has(name)} onChange={(e) => toggle([name], (e.target as HTMLInputElement).checked)} />
                    </td>
                    <td class="held-name">
                      <a class="key" href={formatRoute(recordRoute(r, route.tenant))} title={name}>
                        {name}
                      </a>
                    </td>
                    <td>
                      <Ago at={r.leaseExpiresAt ?? r.updatedAt} now={now} />
                    </td>
                    <td class="num wide">{r.attempt}</td>
                    <td class="clip wide">{r.claimant ? <code title={r.claimant}>{r.claimant}</code> : <span class="muted">none</span>}</td>
                    <td class="wide">
                      {fp ? (
                        <code class="hex" title={fp}>
                          {fp.length > FINGERPRINT_CHARS ? `${fp.slice(0, FINGERPRINT_CHARS)}…` : fp}
                        </code>
                      ) : (
                        <span class="muted">none</span>
                      )}
                    </td>
                    <td class="clip wide">{r.policy ? <span title={r.policy}>{r.policy}</span> : <span class="muted">none</span>}</td>
                    <td>
                      <div class="decide">
                        <DecisionButtons small onPick={(decision) => setFlow({ recs: [r], decision })} />
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      ) : null}
      <p class="muted intro small">
        These records' leases ran out under a policy with <code>on_lease_expiry: hold</code>: the worker stopped reporting, and nobody knows whether the side effect happened.
        No Claim takes them over. Check the downstream system, then resolve each: <strong>completed</strong> if it happened (with the result later Claims replay),{" "}
        <strong>failed</strong> if it must not be tried again, <strong>released</strong> if it did not happen and may run again.
      </p>
      {flow ? (
        <ResolveDialog
          recs={flow.recs}
          decision={flow.decision}
          session={session}
          now={now}
          onClose={(outcomes) => {
            toggle(
              outcomes.filter((o) => o.after !== undefined || o.now !== undefined).map((o) => recordName(o.rec)),
              false,
            );
            setFlow(undefined);
          }}
          onChanged={loaded.reload}
        />
      ) : null}
    </section>
  );
}
