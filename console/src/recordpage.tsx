// A record's own page, at an address of its own (#/record/TENANT/NAMESPACE/KEY)
// that can be pasted into an incident channel: every field, kept fresh, and
// the actions on the record: resolve (an UNRESOLVED record) and delete, each
// behind a confirmation that says what will happen.
import { useState } from "preact/hooks";
import { State } from "@idemhq/idem";
import { describe, fetchRecord, type Session } from "./api";
import { stateName } from "./format";
import { type Rec, RecordFields, recordName } from "./record";
import { type Decision, DecisionButtons, ResolveDialog } from "./resolve";
import { formatRoute, NO_QUERY, type Route } from "./route";
import { Dialog, ErrorBox, useLoad } from "./ui";

export function RecordPage({
  session,
  route,
  now,
  intervalMs,
  onError,
}: {
  session: Session;
  route: Extract<Route, { page: "record" }>;
  now: Date;
  intervalMs: number;
  onError: (e: unknown) => void;
}) {
  const id = route.id;
  const loaded = useLoad((signal) => fetchRecord(session, id, signal), [session, id.tenant, id.namespace, id.key], intervalMs, onError);
  // The dialog keeps the record it acts on: a deleted record leaves the page's data, not its answer.
  const [open, setOpen] = useState<{ action: Decision | "delete"; rec: Rec } | undefined>(undefined);
  const rec = loaded.data ?? undefined;
  const name = recordName(id);
  const tenant = route.tenant;
  return (
    <section data-testid="record-page">
      <nav class="crumbs" aria-label="Around this record">
        <a href={formatRoute({ page: "records", tenant, query: { ...NO_QUERY, namespace: id.namespace } })}>Records of {id.namespace}</a>
        {rec?.state === State.UNRESOLVED ? <a href={formatRoute({ page: "held", tenant, namespace: id.namespace })}>Held records of {id.namespace}</a> : null}
      </nav>
      <h1 class="record-name">{name}</h1>
      <ErrorBox error={loaded.error} title="Could not read the record" />
      {loaded.data === null ? (
        <p class="muted" data-testid="record-missing">
          There is no record {name}: it was deleted, or purged after its retention, or never existed.
        </p>
      ) : null}
      {loaded.data === undefined && loaded.error === undefined ? <p class="muted">Loading…</p> : null}
      {rec ? (
        <>
          <div class="panel">
            <RecordFields rec={rec} now={now} />
          </div>
          <div class="actions">
            {rec.state === State.UNRESOLVED ? <DecisionButtons onPick={(action) => setOpen({ action, rec })} /> : null}
            <button type="button" class="danger" onClick={() => setOpen({ action: "delete", rec })}>
              Delete…
            </button>
          </div>
        </>
      ) : null}
      {open === undefined ? null : open.action === "delete" ? (
        <DeleteDialog rec={open.rec} session={session} onClose={() => setOpen(undefined)} onChanged={loaded.reload} />
      ) : (
        <ResolveDialog recs={[open.rec]} decision={open.action} session={session} now={now} onClose={() => setOpen(undefined)} onChanged={loaded.reload} />
      )}
    </section>
  );
}

/** DeleteDialog deletes a record after a confirmation that says what that does. */
function DeleteDialog({ rec, session, onClose, onChanged }: { rec: Rec; session: Session; onClose: () => void; onChanged: () => void }) {
  const [step, setStep] = useState<"confirm" | "busy" | "done">("confirm");
  const [answer, setAnswer] = useState<{ ok: true; rec: Rec } | { ok: false; error: unknown } | undefined>(undefined);
  const name = recordName(rec);
  const run = async () => {
    setStep("busy");
    try {
      const got = (await session.client.raw.admin.deleteRecord({ namespace: rec.namespace, key: rec.key, tenant: rec.tenant })).record;
      setAnswer({ ok: true, rec: got ?? rec });
    } catch (error) {
      setAnswer({ ok: false, error });
    }
    setStep("done");
    onChanged();
  };
  if (step !== "done") {
    return (
      <Dialog title="Delete the record?" onClose={onClose} busy={step === "busy"} testid="confirm-dialog">
        <p class="restate" data-testid="restate">
          <strong>{rec.namespace}</strong>/<code class="key">{rec.key}</code>
          {rec.tenant ? ` of tenant ${rec.tenant}` : ""}, now {stateName(rec.state)} at attempt {rec.attempt}, is deleted: idem forgets it, and the next Claim of this key runs
          the job again as attempt 1. A worker still holding it gets NOT_FOUND when it completes. This cannot be undone.
        </p>
        <div class="actions">
          <button type="button" class="danger" disabled={step === "busy"} onClick={() => void run()}>
            {step === "busy" ? "Working…" : "Delete it"}
          </button>
          <button type="button" disabled={step === "busy"} onClick={onClose} autofocus>
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
          Deleted {name}; it was {stateName(answer.rec.state)}, attempt {answer.rec.attempt}.
        </p>
      ) : (
        <div class="error" role="alert" data-testid="answer">
          {describe(answer?.error)}
        </div>
      )}
      <div class="actions">
        <button type="button" class="primary" onClick={onClose}>
          Close
        </button>
      </div>
    </Dialog>
  );
}
