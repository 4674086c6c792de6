// Resolving held records, one or many at once: the decision, what it
// stores (a result or an error), one confirmation that restates what will
// happen to which records, then the answer for each. Every record is one
// ResolveRecord call, so a record someone else decided meanwhile is
// reported and the others go on.
import { useEffect, useRef, useState } from "preact/hooks";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { MAX_ERROR_BYTES, pb } from "@idemhq/idem";
import { describe, fetchRecord, reasonOf, type Session } from "./api";
import { byteLength, joinList, MAX_REASON_BYTES, plural, reasonProblem, stateName } from "./format";
import { type Rec, RecordFields, recordName, StateBadge } from "./record";
import { Dialog } from "./ui";

/** Decision is one of ResolveRecord's three resolutions. */
export type Decision = "completed" | "failed" | "released";

/** Resolution is what a person decided for the records: the decision and what it stores. */
export interface Resolution {
  decision: Decision;
  /** value is the result (completed, as UTF-8) or the error (failed); unused for released. */
  value: string;
  /** reason is why, kept on the record's timeline. */
  reason: string;
}

type ResolveRecordInit = MessageInitShape<typeof pb.ResolveRecordRequestSchema>;

/**
 * resolveRequest is the ResolveRecord request that applies r to rec, to
 * the lease the person saw (rec.token): a record taken over and held again
 * since is refused with LEASE_LOST rather than decided blind.
 */
export function resolveRequest(rec: Rec, r: Resolution): ResolveRecordInit {
  const resolution: ResolveRecordInit["resolution"] =
    r.decision === "completed"
      ? { case: "completed", value: { result: new TextEncoder().encode(r.value) } }
      : r.decision === "failed"
        ? { case: "failed", value: { error: r.value } }
        : { case: "released", value: {} };
  return { namespace: rec.namespace, key: rec.key, tenant: rec.tenant, resolution, reason: r.reason, token: rec.token };
}

/**
 * Outcome is what became of one record: after is the resolved record; or
 * error says why not, and now is the record as it is since (null when it is
 * gone, undefined when it could not be read).
 */
export interface Outcome {
  rec: Rec;
  after?: Rec;
  error?: unknown;
  now?: Rec | null;
}

/** resolveEach applies r to each record in turn, reporting after each. */
export async function resolveEach(session: Session, recs: Rec[], r: Resolution, progress: (done: number) => void): Promise<Outcome[]> {
  const out: Outcome[] = [];
  for (const rec of recs) {
    try {
      const got = (await session.client.raw.admin.resolveRecord(resolveRequest(rec, r))).record;
      out.push({ rec, after: got ?? rec });
    } catch (error) {
      let now: Rec | null | undefined;
      if (reasonOf(error) === "NOT_UNRESOLVED" || reasonOf(error) === "LEASE_LOST") {
        now = await fetchRecord(session, rec).catch(() => undefined);
      }
      out.push({ rec, error, now });
    }
    progress(out.length);
  }
  return out;
}

const LABELS: Record<Decision, string> = { completed: "Completed…", failed: "Failed…", released: "Released…" };

/**
 * DecisionButtons offers the decisions, all alike: none is the default,
 * since nobody knows yet whether the side effect happened.
 */
export function DecisionButtons({ onPick, small = false }: { onPick: (d: Decision) => void; small?: boolean }) {
  return (
    <>
      {(["completed", "failed", "released"] as const).map((d) => (
        <button key={d} type="button" class={small ? "decision small-button" : "decision"} onClick={() => onPick(d)}>
          {LABELS[d]}
        </button>
      ))}
    </>
  );
}

const TITLES: Record<Decision, string> = {
  completed: "Resolve as COMPLETED",
  failed: "Resolve as FAILED",
  released: "Release for another run",
};

const VERBS: Record<Decision, { confirm: string; done: string }> = {
  completed: { confirm: "Complete", done: "Completed" },
  failed: { confirm: "Fail", done: "Failed" },
  released: { confirm: "Release", done: "Released" },
};

/**
 * ResolveDialog applies one decision to recs in three steps: what to store
 * (a result or an error, for completed and failed), a confirmation that
 * restates what will happen, and the answer for each record.
 */
export function ResolveDialog({
  recs,
  decision,
  session,
  now,
  onClose,
  onChanged,
}: {
  recs: Rec[];
  decision: Decision;
  session: Session;
  now: Date;
  onClose: (outcomes: Outcome[]) => void;
  onChanged: () => void;
}) {
  const [step, setStep] = useState<"edit" | "confirm" | "busy" | "done">(decision === "released" ? "confirm" : "edit");
  const [value, setValue] = useState("");
  const [reason, setReason] = useState("");
  const [done, setDone] = useState(0);
  const [outcomes, setOutcomes] = useState<Outcome[]>([]);
  const one = recs.length === 1 ? recs[0] : undefined;
  const what = one ? recordName(one) : plural(recs.length, "record", "records");
  const close = () => onClose(outcomes);

  const run = async () => {
    setStep("busy");
    setOutcomes(await resolveEach(session, recs, { decision, value, reason }, setDone));
    setStep("done");
    onChanged();
  };

  if (step === "edit") {
    const bytes = byteLength(value);
    const tooLong = decision === "failed" && bytes > MAX_ERROR_BYTES;
    const each = one ? "this key" : "each of these keys";
    return (
      <Dialog title={`${TITLES[decision]}: ${what}`} onClose={close} testid="action-dialog">
        <form
          onSubmit={(e) => {
            e.preventDefault();
            if (!tooLong && (decision !== "failed" || value !== "")) {
              setStep("confirm");
            }
          }}
        >
          <label for="action-value">
            {decision === "completed"
              ? `The result every later Claim of ${each} replays (text, stored as UTF-8; may be empty):`
              : `The error every later Claim of ${each} gets (at most ${MAX_ERROR_BYTES} bytes):`}
          </label>
          <textarea id="action-value" rows={6} value={value} onInput={(e) => setValue((e.target as HTMLTextAreaElement).value)} autofocus />
          <div class={tooLong ? "error small" : "muted small"}>
            {bytes} bytes{tooLong ? `: the limit is ${MAX_ERROR_BYTES}` : ""}
          </div>
          <div class="actions">
            <button type="submit" class="primary" disabled={tooLong || (decision === "failed" && value === "")}>
              Review…
            </button>
            <button type="button" onClick={close}>
              Cancel
            </button>
          </div>
        </form>
      </Dialog>
    );
  }

  if (step === "confirm" || step === "busy") {
    const confirm = one ? { completed: "Resolve as COMPLETED", failed: "Resolve as FAILED", released: "Release it" }[decision] : `${VERBS[decision].confirm} ${what}`;
    return (
      <Dialog title={one ? `${TITLES[decision]}?` : `${VERBS[decision].confirm} ${what}?`} onClose={close} busy={step === "busy"} testid="confirm-dialog">
        <p class="restate" data-testid="restate">
          {one ? <RestateOne rec={one} decision={decision} value={value} /> : <RestateMany recs={recs} decision={decision} value={value} />}
        </p>
        {decision !== "released" ? (
          <pre class="bytes" data-testid="restate-value">
            {value === "" ? "(empty)" : value}
          </pre>
        ) : null}
        {one ? null : (
          <ul class="record-list" data-testid="confirm-records">
            {recs.map((r) => (
              <li key={recordName(r)}>
                <code class="key">{recordName(r)}</code>
              </li>
            ))}
          </ul>
        )}
        <ReasonField value={reason} onInput={setReason} disabled={step === "busy"} />
        <div class="actions">
          <button type="button" class="primary" disabled={step === "busy" || reasonProblem(reason) !== ""} onClick={() => void run()}>
            {step === "busy" ? (one ? "Working…" : `Working… ${done} of ${recs.length}`) : confirm}
          </button>
          <button type="button" disabled={step === "busy"} onClick={close}>
            Cancel
          </button>
        </div>
      </Dialog>
    );
  }

  const failed = outcomes.filter((o) => o.after === undefined);
  return (
    <Dialog title={failed.length === 0 ? "Done" : failed.length === outcomes.length ? "Not done" : "Partly done"} onClose={close} testid="answer-dialog">
      {one ? <AnswerOne outcome={outcomes[0]} now={now} /> : <AnswerMany outcomes={outcomes} decision={decision} />}
      <div class="actions">
        <button type="button" class="primary" onClick={close}>
          Close
        </button>
      </div>
    </Dialog>
  );
}

/**
 * ReasonField asks why, for a resolution or a deletion: the console sends
 * none without one, and says so under the field until one is written. It
 * has the focus, so that the dialog's first key press goes to the reason,
 * never to a decision.
 */
export function ReasonField({ value, onInput, disabled }: { value: string; onInput: (v: string) => void; disabled: boolean }) {
  const problem = reasonProblem(value);
  const ref = useRef<HTMLTextAreaElement>(null);
  useEffect(() => ref.current?.focus(), []);
  return (
    <div class="reason">
      <label for="action-reason">Why (required):</label>
      <textarea
        ref={ref}
        id="action-reason"
        name="reason"
        rows={2}
        value={value}
        disabled={disabled}
        aria-describedby="action-reason-hint"
        onInput={(e) => onInput((e.target as HTMLTextAreaElement).value)}
      />
      <div id="action-reason-hint" class={problem !== "" && value.trim() !== "" ? "error small" : "muted small"} data-testid="reason-hint">
        {problem !== "" ? problem : `${byteLength(value)} of ${MAX_REASON_BYTES} bytes.`}
      </div>
    </div>
  );
}

function AnswerOne({ outcome, now }: { outcome: Outcome | undefined; now: Date }) {
  if (outcome === undefined) {
    return null;
  }
  const name = recordName(outcome.rec);
  if (outcome.after) {
    return (
      <>
        <p class="ok" role="status" data-testid="answer">
          {name} is now {stateName(outcome.after.state)}.
        </p>
        <RecordFields rec={outcome.after} now={now} />
      </>
    );
  }
  return (
    <>
      <div class="error" role="alert" data-testid="answer">
        <p>
          <strong>{reasonOf(outcome.error) === "NOT_UNRESOLVED" ? "Someone else was faster. " : ""}</strong>
          {describe(outcome.error)}
        </p>
        {outcome.now ? (
          <p>
            {name} is now <StateBadge state={outcome.now.state} />.
          </p>
        ) : outcome.now === null ? (
          <p>{name} no longer exists.</p>
        ) : null}
      </div>
      {outcome.now ? <RecordFields rec={outcome.now} now={now} /> : null}
    </>
  );
}

/** whyNot says why a record of a bulk resolution was left as it was. */
function whyNot(o: Outcome): string {
  if (reasonOf(o.error) === "NOT_UNRESOLVED") {
    const now = o.now ? `it is now ${stateName(o.now.state)}` : o.now === null ? "it no longer exists" : "what it is now could not be read";
    return `someone else decided it first (or its late holder finished it); nothing was changed by you, and ${now}.`;
  }
  return describe(o.error);
}

function AnswerMany({ outcomes, decision }: { outcomes: Outcome[]; decision: Decision }) {
  const ok = outcomes.filter((o) => o.after !== undefined);
  const not = outcomes.filter((o) => o.after === undefined);
  return (
    <div data-testid="answer">
      <p class={not.length === 0 ? "ok" : "error"} role={not.length === 0 ? "status" : "alert"}>
        {VERBS[decision].done} {ok.length} of {plural(outcomes.length, "record", "records")}.
        {not.length > 0 ? ` ${plural(not.length, "record was", "records were")} left as they were:` : ""}
      </p>
      {not.length > 0 ? (
        <ul class="record-list" data-testid="answer-failures">
          {not.map((o) => (
            <li key={recordName(o.rec)}>
              <code class="key">{recordName(o.rec)}</code>: {whyNot(o)}
            </li>
          ))}
        </ul>
      ) : null}
      {ok.length > 0 ? (
        <details>
          <summary>{plural(ok.length, "record", "records")} now {stateName(ok[0]!.after!.state)}</summary>
          <ul class="record-list">
            {ok.map((o) => (
              <li key={recordName(o.rec)}>
                <code class="key">{recordName(o.rec)}</code>
              </li>
            ))}
          </ul>
        </details>
      ) : null}
    </div>
  );
}

function RestateOne({ rec, decision, value }: { rec: Rec; decision: Decision; value: string }) {
  const who = rec.tenant ? ` of tenant ${rec.tenant}` : "";
  const id = (
    <>
      <strong>{rec.namespace}</strong>/<code class="key">{rec.key}</code>
      {who}
    </>
  );
  switch (decision) {
    case "completed":
      return (
        <>
          {id} becomes COMPLETED with the result below ({byteLength(value)} bytes). Every later Claim of this key replays it, and the job does not run again. Choose this only if
          the side effect did happen. The late holder's own Complete with another result will be refused (RESOLVED_BY_OPERATOR).
        </>
      );
    case "failed":
      return <>{id} becomes FAILED with the error below. Every later Claim of this key gets FAILED and this error, and the job does not run again.</>;
    case "released":
      return (
        <>
          {id} becomes RELEASED: the next Claim of this key acquires it and runs the job again, with a token greater than any before. Choose this only if the side effect did
          not happen, or may safely happen again.
        </>
      );
  }
}

/** RestateMany says what happens to recs: how many, of which namespaces and tenants, and the decision. */
function RestateMany({ recs, decision, value }: { recs: Rec[]; decision: Decision; value: string }) {
  const namespaces = [...new Set(recs.map((r) => r.namespace))].sort();
  const tenants = [...new Set(recs.map((r) => r.tenant).filter((t) => t !== ""))].sort();
  const which = (
    <>
      <strong>{plural(recs.length, "record", "records")}</strong> of {namespaces.length === 1 ? "namespace" : "namespaces"} <strong>{joinList(namespaces)}</strong>
      {tenants.length > 0 ? ` (${tenants.length === 1 ? "tenant" : "tenants"} ${joinList(tenants)})` : ""}
    </>
  );
  switch (decision) {
    case "completed":
      return (
        <>
          {which} become COMPLETED with the result below ({byteLength(value)} bytes). Every later Claim of each key replays it, and the job does not run again. Choose this only
          if the side effect did happen for every one of them.
        </>
      );
    case "failed":
      return <>{which} become FAILED with the error below. Every later Claim of each key gets FAILED and this error, and the job does not run again.</>;
    case "released":
      return (
        <>
          {which} become RELEASED: the next Claim of each key acquires it and runs the job again, with a token greater than any before. Choose this only if the side effect
          did not happen for any of them, or may safely happen again.
        </>
      );
  }
}
