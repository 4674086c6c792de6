// A record's detail, and the actions on it: resolve (for an UNRESOLVED
// record) and delete, each behind a confirmation that says what will happen.
import { useState } from "preact/hooks";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MAX_ERROR_BYTES, pb, State } from "@idemhq/idem";
import { describe, reasonOf, type Session } from "./api";
import { byteLength, decodeBytes, hex, stateName } from "./format";
import { Dialog, Time } from "./ui";

export type Rec = pb.Record;
type ResolveRecordInit = MessageInitShape<typeof pb.ResolveRecordRequestSchema>;

/** recordName is how the console names a record: tenant/namespace/key. */
export function recordName(r: Rec): string {
  return `${r.tenant ? `${r.tenant}/` : ""}${r.namespace}/${r.key}`;
}

export function StateBadge({ state }: { state: State }) {
  const name = stateName(state);
  return <span class={`state state-${name.toLowerCase()}`}>{name}</span>;
}

function Bytes({ value, what }: { value: Uint8Array; what: string }) {
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

/** RecordFields lists every field of a record. */
export function RecordFields({ rec, now }: { rec: Rec; now: Date }) {
  const rows: [string, preact.ComponentChildren][] = [
    ["Tenant", rec.tenant || <span class="muted">—</span>],
    ["Namespace", rec.namespace],
    ["Key", <code class="key">{rec.key}</code>],
    ["State", <StateBadge state={rec.state} />],
    ["Token", rec.token.toString()],
    ["Attempt", rec.attempt],
    ["Claimant", rec.claimant ? <code>{rec.claimant}</code> : <span class="muted">none</span>],
    ["Fingerprint", rec.fingerprint.length ? <code class="hex">{hex(rec.fingerprint)}</code> : <span class="muted">none</span>],
    ["Lease expires", <Time at={rec.leaseExpiresAt} now={now} empty="no lease" />],
    ["Result", <Bytes value={rec.result} what="result" />],
    ["Error", rec.error ? <pre class="bytes">{rec.error}</pre> : <span class="muted">none</span>],
    ["Created", <Time at={rec.createdAt} now={now} />],
    ["Updated", <Time at={rec.updatedAt} now={now} />],
    ["Completed", <Time at={rec.completedAt} now={now} empty="not completed" />],
    ["Expires (may be purged)", <Time at={rec.expiresAt} now={now} empty={rec.state === State.UNRESOLVED ? "never while held" : "not while PROCESSING"} />],
    ["Policy", rec.policy || <span class="muted">none (the server's defaults)</span>],
    ["Held on lease expiry", rec.hold ? "yes (on_lease_expiry: hold)" : "no"],
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

/** RecordDialog shows a record and offers the actions on it. */
export function RecordDialog({ rec, session, now, onClose, onChanged }: { rec: Rec; session: Session; now: Date; onClose: () => void; onChanged: () => void }) {
  const [action, setAction] = useState<Action | undefined>(undefined);
  if (action !== undefined) {
    return <ActionDialog rec={rec} session={session} action={action} now={now} onClose={onClose} onChanged={onChanged} />;
  }
  return (
    <Dialog title={recordName(rec)} onClose={onClose} testid="record-dialog">
      <RecordFields rec={rec} now={now} />
      <div class="actions">
        {rec.state === State.UNRESOLVED ? <ResolveButtons onPick={setAction} /> : null}
        <button type="button" class="danger" onClick={() => setAction("delete")}>
          Delete…
        </button>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
    </Dialog>
  );
}

export type Action = "completed" | "failed" | "released" | "delete";

export function ResolveButtons({ onPick }: { onPick: (a: Action) => void }) {
  return (
    <>
      <button type="button" class="primary" onClick={() => onPick("completed")}>
        Completed…
      </button>
      <button type="button" onClick={() => onPick("failed")}>
        Failed…
      </button>
      <button type="button" onClick={() => onPick("released")}>
        Released…
      </button>
    </>
  );
}

const TITLES: Record<Action, string> = {
  completed: "Resolve as COMPLETED",
  failed: "Resolve as FAILED",
  released: "Release for another run",
  delete: "Delete the record",
};

type Answer = { ok: true; rec: Rec } | { ok: false; error: unknown; now?: Rec | null };

/**
 * ActionDialog runs one action in three steps: what to store (a result or
 * an error, for completed and failed), a confirmation that restates what
 * will happen, and the answer.
 */
export function ActionDialog({ rec, session, action, now, onClose, onChanged }: { rec: Rec; session: Session; action: Action; now: Date; onClose: () => void; onChanged: () => void }) {
  const [step, setStep] = useState<"edit" | "confirm" | "busy" | "done">(action === "completed" || action === "failed" ? "edit" : "confirm");
  const [value, setValue] = useState("");
  const [answer, setAnswer] = useState<Answer | undefined>(undefined);
  const name = recordName(rec);

  const run = async () => {
    setStep("busy");
    const admin = session.client.raw.admin;
    const ref = { namespace: rec.namespace, key: rec.key, tenant: rec.tenant };
    try {
      let got: Rec | undefined;
      if (action === "delete") {
        got = (await admin.deleteRecord(ref)).record;
      } else {
        const resolution: ResolveRecordInit["resolution"] =
          action === "completed"
            ? { case: "completed", value: { result: new TextEncoder().encode(value) } }
            : action === "failed"
              ? { case: "failed", value: { error: value } }
              : { case: "released", value: {} };
        got = (await admin.resolveRecord({ ...ref, resolution })).record;
      }
      setAnswer({ ok: true, rec: got ?? rec });
    } catch (error) {
      let current: Rec | null | undefined;
      if (reasonOf(error) === "NOT_UNRESOLVED") {
        current = await lookUp(session, rec);
      }
      setAnswer({ ok: false, error, now: current });
    }
    setStep("done");
    onChanged();
  };

  if (step === "edit") {
    const bytes = byteLength(value);
    const tooLong = action === "failed" && bytes > MAX_ERROR_BYTES;
    return (
      <Dialog title={`${TITLES[action]}: ${name}`} onClose={onClose} testid="action-dialog">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            if (!tooLong && (action !== "failed" || value !== "")) {
              setStep("confirm");
            }
          }}
        >
          <label for="action-value">
            {action === "completed"
              ? "The result every later Claim of this key replays (text, stored as UTF-8; may be empty):"
              : `The error every later Claim of this key gets (at most ${MAX_ERROR_BYTES} bytes):`}
          </label>
          <textarea id="action-value" rows={6} value={value} onInput={(e) => setValue((e.target as HTMLTextAreaElement).value)} autofocus />
          <div class={tooLong ? "error small" : "muted small"}>
            {bytes} bytes{tooLong ? `: the limit is ${MAX_ERROR_BYTES}` : ""}
          </div>
          <div class="actions">
            <button type="submit" class="primary" disabled={tooLong || (action === "failed" && value === "")}>
              Review…
            </button>
            <button type="button" onClick={onClose}>
              Cancel
            </button>
          </div>
        </form>
      </Dialog>
    );
  }

  if (step === "confirm" || step === "busy") {
    return (
      <Dialog title={`${TITLES[action]}?`} onClose={onClose} busy={step === "busy"} testid="confirm-dialog">
        <p class="restate" data-testid="restate">
          <Restate rec={rec} action={action} value={value} />
        </p>
        {action === "completed" || action === "failed" ? (
          <pre class="bytes" data-testid="restate-value">
            {value === "" ? "(empty)" : value}
          </pre>
        ) : null}
        <div class="actions">
          <button type="button" class={action === "delete" ? "danger" : "primary"} disabled={step === "busy"} onClick={() => void run()}>
            {step === "busy" ? "Working…" : confirmText(action)}
          </button>
          <button type="button" disabled={step === "busy"} onClick={onClose}>
            Cancel
          </button>
        </div>
      </Dialog>
    );
  }

  return (
    <Dialog title={answer?.ok ? "Done" : "Not done"} onClose={onClose} testid="answer-dialog">
      {answer?.ok ? (
        <p class="ok" role="status" data-testid="answer">
          {action === "delete"
            ? `Deleted ${name}; it was ${stateName(answer.rec.state)}, attempt ${answer.rec.attempt}.`
            : `${name} is now ${stateName(answer.rec.state)}.`}
        </p>
      ) : (
        <div class="error" role="alert" data-testid="answer">
          <p>
            <strong>{reasonOf(answer?.error) === "NOT_UNRESOLVED" ? "Someone else was faster. " : ""}</strong>
            {describe(answer?.error)}
          </p>
          {answer?.now ? (
            <p>
              {name} is now <StateBadge state={answer.now.state} />.
            </p>
          ) : answer?.now === null ? (
            <p>{name} no longer exists.</p>
          ) : null}
        </div>
      )}
      {answer?.ok ? <RecordFields rec={answer.rec} now={now} /> : answer?.now ? <RecordFields rec={answer.now} now={now} /> : null}
      <div class="actions">
        <button type="button" class="primary" onClick={onClose}>
          Close
        </button>
      </div>
    </Dialog>
  );
}

function confirmText(action: Action): string {
  return { completed: "Resolve as COMPLETED", failed: "Resolve as FAILED", released: "Release it", delete: "Delete it" }[action];
}

function Restate({ rec, action, value }: { rec: Rec; action: Action; value: string }) {
  const who = rec.tenant ? ` of tenant ${rec.tenant}` : "";
  const id = (
    <>
      <strong>{rec.namespace}</strong>/<code class="key">{rec.key}</code>
      {who}
    </>
  );
  switch (action) {
    case "completed":
      return (
        <>
          {id} becomes COMPLETED with the result below ({byteLength(value)} bytes). Every later Claim of this key replays it, and the job does not run again. Choose this only if
          the side effect did happen. The late holder's own Complete with another result will be refused (RESOLVED_BY_OPERATOR).
        </>
      );
    case "failed":
      return (
        <>
          {id} becomes FAILED with the error below. Every later Claim of this key gets FAILED and this error, and the job does not run again.
        </>
      );
    case "released":
      return (
        <>
          {id} becomes RELEASED: the next Claim of this key acquires it and runs the job again, with a token greater than any before. Choose this only if the side effect did
          not happen, or may safely happen again.
        </>
      );
    case "delete":
      return (
        <>
          {id}, now {stateName(rec.state)} at attempt {rec.attempt}, is deleted: idem forgets it, and the next Claim of this key runs the job again as attempt 1. A worker still
          holding it gets NOT_FOUND when it completes. This cannot be undone.
        </>
      );
  }
}

/** lookUp reads a record afresh through the listing, null when it is gone. */
async function lookUp(session: Session, rec: Rec): Promise<Rec | null | undefined> {
  try {
    const page = await session.client.raw.admin.listRecords({ namespace: rec.namespace, keyPrefix: rec.key, tenant: rec.tenant, pageSize: 100 });
    return page.records.find((r) => r.key === rec.key) ?? null;
  } catch {
    return undefined;
  }
}
