// How the console shows a record: its name, its state, and every field.
import { type pb, State } from "@idemhq/idem";
import { decodeBytes, hex, stateName } from "./format";
import { CopyButton, Time } from "./ui";

export type Rec = pb.Record;

/** recordName is how the console names a record: tenant/namespace/key. */
export function recordName(r: { tenant: string; namespace: string; key: string }): string {
  return `${r.tenant ? `${r.tenant}/` : ""}${r.namespace}/${r.key}`;
}

export function StateBadge({ state }: { state: State }) {
  const name = stateName(state);
  return <span class={`state state-${name.toLowerCase()}`}>{name}</span>;
}

/** Bytes shows a result as JSON, text or a hex dump, saying which and how long. */
export function Bytes({ value, what }: { value: Uint8Array; what: string }) {
  const d = decodeBytes(value);
  if (d.kind === "empty") {
    return <span class="muted">none</span>;
  }
  const label = { json: "JSON", text: "text", binary: "binary, shown as hex" }[d.kind];
  return (
    <div>
      <div class="muted small" data-testid={`${what}-kind`}>
        {label}, {value.length} bytes
      </div>
      <pre class="bytes" data-testid={what}>
        {d.text}
      </pre>
    </div>
  );
}

/**
 * ended is the time a record ended, named by how it ended: the API's
 * completed_at is when a record became COMPLETED or FAILED, so a FAILED
 * record shows "Failed", never "Completed". Other states have not ended.
 */
function ended(rec: Rec, now: Date): [string, preact.ComponentChildren][] {
  const label = rec.state === State.COMPLETED ? "Completed" : rec.state === State.FAILED ? "Failed" : "Ended";
  if (rec.completedAt === undefined && label === "Ended") {
    return [];
  }
  return [[label, <Time at={rec.completedAt} now={now} />]];
}

/** RecordFields lists every field of a record. */
export function RecordFields({ rec, now }: { rec: Rec; now: Date }) {
  const rows: [string, preact.ComponentChildren][] = [
    ["Tenant", rec.tenant || <span class="muted">—</span>],
    ["Namespace", rec.namespace],
    [
      "Key",
      <span class="with-copy">
        <code class="key">{rec.key}</code>
        <CopyButton text={rec.key} what="key" />
      </span>,
    ],
    ["State", <StateBadge state={rec.state} />],
    [
      "Token",
      <span class="with-copy">
        <code>{rec.token.toString()}</code>
        <CopyButton text={rec.token.toString()} what="token" />
      </span>,
    ],
    ["Attempt", rec.attempt],
    ["Claimant", rec.claimant ? <code>{rec.claimant}</code> : <span class="muted">none</span>],
    ["Fingerprint", rec.fingerprint.length ? <code class="hex">{hex(rec.fingerprint)}</code> : <span class="muted">none</span>],
    ["Lease expires", <Time at={rec.leaseExpiresAt} now={now} empty="no lease" />],
    ["Result", <Bytes value={rec.result} what="result" />],
    ["Error", rec.error ? <pre class="bytes">{rec.error}</pre> : <span class="muted">none</span>],
    ["Created", <Time at={rec.createdAt} now={now} />],
    ["Updated", <Time at={rec.updatedAt} now={now} />],
    ...ended(rec, now),
    ["Expires (may be purged)", <Time at={rec.expiresAt} now={now} empty={rec.state === State.UNRESOLVED ? "never while held" : "not while PROCESSING"} />],
    ["Policy", rec.policy || <span class="muted">none (the server's defaults)</span>],
    ["Held on lease expiry", rec.hold ? "yes (on_lease_expiry: hold)" : "no"],
    ...(rec.steps.length > 0 ? [["Held for an unfinished step", rec.holdUnfinished ? "yes (on_unfinished_step: hold: a takeover while a step is STARTED holds it instead)" : "no"] as [string, preact.ComponentChildren]] : []),
  ];
  return (
    <dl class="fields" data-testid="record-fields">
      {rows.map(([k, v]) => (
        <div class="field" key={k}>
          <dt>{k}</dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

