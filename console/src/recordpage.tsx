// A record's own page, at an address of its own (#/record/TENANT/NAMESPACE/KEY)
// that can be pasted into an incident channel: every field, its steps and
// its key's timeline, kept fresh, and the actions on the record: resolve
// (an UNRESOLVED record) and delete, each behind a confirmation that says
// what will happen and asks why.
import { useState } from "preact/hooks";
import { pb, State } from "@idemhq/idem";
import { describe, fetchRecordWithHistory, type Session } from "./api";
import { reasonProblem, stateName, stepStateName, tellEntry } from "./format";
import { Bytes, type Rec, RecordFields, recordName } from "./record";
import { type Decision, DecisionButtons, ReasonField, ResolveDialog } from "./resolve";
import { formatRoute, NO_QUERY, type Route } from "./route";
import { Dialog, ErrorBox, Time, useLoad } from "./ui";

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
  const loaded = useLoad((signal) => fetchRecordWithHistory(session, id, signal), [session, id.tenant, id.namespace, id.key], intervalMs, onError);
  // The dialog keeps the record it acts on: a deleted record leaves the page's data, not its answer.
  const [open, setOpen] = useState<{ action: Decision | "delete"; rec: Rec } | undefined>(undefined);
  const rec = loaded.data?.record ?? undefined;
  const history = loaded.data?.history ?? [];
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
      {loaded.data?.record === null ? (
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
          <StepsPanel steps={rec.steps} now={now} />
        </>
      ) : null}
      {rec !== undefined || history.length > 0 ? <TimelinePanel history={history} now={now} /> : null}
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
  const [reason, setReason] = useState("");
  const name = recordName(rec);
  const run = async () => {
    setStep("busy");
    try {
      const got = (await session.client.raw.admin.deleteRecord({ namespace: rec.namespace, key: rec.key, tenant: rec.tenant, reason })).record;
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
        <ReasonField value={reason} onInput={setReason} disabled={step === "busy"} />
        <div class="actions">
          <button type="button" class="danger" disabled={step === "busy" || reasonProblem(reason) !== ""} onClick={() => void run()}>
            {step === "busy" ? "Working…" : "Delete it"}
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

/** StepsPanel lists a job's steps in the order they were first recorded, each with its result. */
function StepsPanel({ steps, now }: { steps: pb.Step[]; now: Date }) {
  return (
    <section class="panel" data-testid="steps">
      <h2>Steps</h2>
      {steps.length === 0 ? (
        <p class="muted small">No steps: the job recorded none (StartStep, CompleteStep).</p>
      ) : (
        <div class="table-wrap">
          <table class="table steps-table">
            <thead>
              <tr>
                <th>Step</th>
                <th>State</th>
                <th>When</th>
                <th class="num">Token</th>
                <th>Result</th>
              </tr>
            </thead>
            <tbody>
              {steps.map((s) => (
                <tr key={s.name} data-testid="step" data-step={s.name}>
                  <td>
                    <code class="key">{s.name}</code>
                  </td>
                  <td>
                    <span class={`state step-${stepStateName(s.state).toLowerCase()}`}>{stepStateName(s.state)}</span>
                  </td>
                  <td class="when">
                    {s.state === pb.StepState.FINISHED ? "finished " : "started "}
                    <Time at={s.finishedAt ?? s.startedAt} now={now} />
                  </td>
                  <td class="num">
                    <code>{s.token.toString()}</code>
                  </td>
                  <td>
                    {s.state === pb.StepState.FINISHED ? (
                      <Bytes value={s.result} what="step-result" />
                    ) : (
                      <span class="muted">may or may not have happened</span>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

/** TimelinePanel lists the exceptions in the life of the record's key, newest last. */
function TimelinePanel({ history, now }: { history: pb.TimelineEntry[]; now: Date }) {
  return (
    <section class="panel" data-testid="timeline">
      <h2>Timeline</h2>
      {history.length === 0 ? (
        <p class="muted small">Nothing out of the ordinary: no takeover, failure, hold, resolution or deletion.</p>
      ) : (
        <ol class="timeline">
          {history.map((e, i) => {
            const told = tellEntry(e);
            return (
              <li key={i} data-testid="timeline-entry" data-kind={told.kind}>
                <div class="timeline-head">
                  <span class={`tl-kind tl-${told.kind.replace(/ /g, "-")}`}>{told.kind}</span> <Time at={e.at} now={now} />
                </div>
                <div class="timeline-headline">{told.headline}</div>
                {told.details.map((d) => (
                  <div key={d} class="timeline-detail">
                    {d}
                  </div>
                ))}
              </li>
            );
          })}
        </ol>
      )}
    </section>
  );
}
