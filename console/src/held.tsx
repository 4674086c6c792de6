// Held for resolution: the UNRESOLVED records, oldest first, with what a
// person needs to decide, and the three resolutions of ResolveRecord.
import { useState } from "preact/hooks";
import { State } from "@idemhq/idem";
import type { Session } from "./api";
import type { Scope } from "./app";
import { hex, plural } from "./format";
import { type Action, ActionDialog, RecordDialog, type Rec, recordName, ResolveButtons } from "./record";
import { Ago, dateOf, ErrorBox, Time, useLoad } from "./ui";

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

export function Held({ session, scope, now, intervalMs, onError }: { session: Session; scope: Scope; now: Date; intervalMs: number; onError: (e: unknown) => void }) {
  const loaded = useLoad((signal) => loadHeld(session, scope, signal), [session, scope.tenant, scope.all], intervalMs, onError);
  const [open, setOpen] = useState<{ rec: Rec; action?: Action } | undefined>(undefined);
  const recs = loaded.data?.records ?? [];
  return (
    <section>
      <h1>Held for resolution</h1>
      <p class="muted intro">
        These records' leases ran out under a policy with <code>on_lease_expiry: hold</code>: the worker stopped reporting, and nobody knows whether the side effect happened.
        No Claim takes them over. Check the downstream system, then resolve each: <strong>completed</strong> if it happened (with the result later Claims replay),{" "}
        <strong>failed</strong> if it must not be tried again, <strong>released</strong> if it did not happen and may run again.
      </p>
      <ErrorBox error={loaded.error} title="Could not read the held records" />
      {loaded.data ? (
        <p class="muted" data-testid="held-count">
          {recs.length === 0 ? "Nothing is held." : `${plural(recs.length, "record", "records")} held, oldest first${loaded.data.more ? ` (the first ${HELD_LIMIT})` : ""}.`}
        </p>
      ) : null}
      <ol class="held" data-testid="held-list">
        {recs.map((r) => (
          <li class="held-item" key={recordName(r)} data-key={r.key} data-testid="held-item">
            <div class="held-head">
              <a
                href="#/held"
                class="key"
                onClick={(e) => {
                  e.preventDefault();
                  setOpen({ rec: r });
                }}
              >
                {recordName(r)}
              </a>
            </div>
            <dl class="held-facts">
              <div>
                <dt>Lease lapsed</dt>
                <dd>
                  <Time at={r.leaseExpiresAt} now={now} />
                </dd>
              </div>
              <div>
                <dt>Held since</dt>
                <dd>
                  <Ago at={r.updatedAt} now={now} />
                </dd>
              </div>
              <div>
                <dt>Attempts</dt>
                <dd>{r.attempt}</dd>
              </div>
              <div>
                <dt>Last claimant</dt>
                <dd>{r.claimant ? <code>{r.claimant}</code> : <span class="muted">none</span>}</dd>
              </div>
              <div>
                <dt>Fingerprint</dt>
                <dd>{r.fingerprint.length ? <code class="hex">{hex(r.fingerprint)}</code> : <span class="muted">none</span>}</dd>
              </div>
              <div>
                <dt>Policy</dt>
                <dd>{r.policy || <span class="muted">none</span>}</dd>
              </div>
            </dl>
            <div class="actions">
              <ResolveButtons onPick={(action) => setOpen({ rec: r, action })} />
            </div>
          </li>
        ))}
      </ol>
      {open?.action ? (
        <ActionDialog rec={open.rec} session={session} action={open.action} now={now} onClose={() => setOpen(undefined)} onChanged={loaded.reload} />
      ) : open ? (
        <RecordDialog rec={open.rec} session={session} now={now} onClose={() => setOpen(undefined)} onChanged={loaded.reload} />
      ) : null}
    </section>
  );
}
