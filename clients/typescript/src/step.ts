// A job's named steps: the part of Attempt that records each effect of a
// multi-effect handler, so that a successor runs only what did not finish.

import type { IdemClient } from "./client.js";
import { StepState } from "./gen/idem/v1/idem_pb.js";
import { bytesOf, type JobStep } from "./record.js";
import { retry } from "./retry.js";
import { sha256 } from "./sha256.js";
import { jsonOf, utf8Text } from "./text.js";

/**
 * StepFn performs one step's effect and returns its result (a string is
 * stored as UTF-8). It receives the step's key: pass it downstream as the
 * idempotency key of the effect, so that a successor repeating a step that
 * was started and not finished is deduplicated there.
 */
export type StepFn = (stepKey: string) => Promise<Uint8Array | string | void> | Uint8Array | string | void;

/** StepResult is what {@link Attempt.step} returns. */
export interface StepResult {
  /** value is the step's result as recorded. */
  value: Uint8Array;
  /** replayed is true when the step had FINISHED earlier and its function was not called. */
  replayed: boolean;
  /** text returns value as UTF-8 text, as {@link DoResult.text} does. */
  text(): string;
  /** json returns value parsed as JSON, as {@link DoResult.json} does. */
  json<T = unknown>(): T;
}

/** Steps is the part of {@link Attempt} about the job's named steps. */
export interface Steps {
  /**
   * steps are the job's steps: as the Claim returned them (a takeover sees
   * its predecessors'), and updated as this attempt records its own.
   */
  steps: JobStep[];
  /**
   * step runs one named step of the job at most once across attempts: for
   * a step already FINISHED it returns the recorded result without calling
   * fn; otherwise it marks the step STARTED, calls fn with the step's key,
   * records fn's result and returns it. A refused StartStep or CompleteStep
   * throws the typed error ({@link LeaseLostError},
   * {@link StepAlreadyFinishedError}, …), and fn's result is then not
   * returned as if it were recorded; fn's own error is thrown as it is,
   * leaving the step STARTED.
   */
  step(name: string, fn: StepFn): Promise<StepResult>;
  /**
   * stepKey is the step's key: "idem-" and the lowercase hex SHA-256 of
   * namespace, a zero byte, key, a zero byte and name, the same in every
   * SDK and on every attempt, and different for each step.
   */
  stepKey(name: string): string;
}

/** stepKey is the key of step name of the job (namespace, key); see {@link Steps.stepKey}. */
export function stepKey(namespace: string, key: string, name: string): string {
  const digest = sha256(bytesOf(`${namespace}\0${key}\0${name}`));
  return "idem-" + Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Recorded is the {@link StepResult} that step() returns. */
class Recorded implements StepResult {
  constructor(
    public value: Uint8Array,
    public replayed: boolean,
  ) {}

  text(): string {
    return utf8Text(this.value);
  }

  json<T = unknown>(): T {
    return jsonOf<T>(this.value);
  }
}

/** JobRef names the job and the token a handler holds it with. */
interface JobRef {
  namespace: string;
  key: string;
  token: bigint;
}

/**
 * jobSteps is the {@link Steps} of the job held with ref.token, whose
 * Claim returned known; signal is the attempt's, aborted when the lease is
 * lost.
 */
export function jobSteps(client: IdemClient, ref: JobRef, known: readonly JobStep[], signal: AbortSignal): Steps {
  const steps = known.map((s) => ({ ...s }));
  const keyOf = (name: string) => stepKey(ref.namespace, ref.key, name);
  const remember = (s: JobStep) => {
    const i = steps.findIndex((x) => x.name === s.name);
    if (i < 0) {
      steps.push(s);
    } else {
      steps[i] = s;
    }
  };
  const step = async (name: string, fn: StepFn): Promise<StepResult> => {
    const done = steps.find((s) => s.name === name && s.state === StepState.FINISHED);
    if (done) {
      return new Recorded(done.result, true);
    }
    signal.throwIfAborted();
    const req = { namespace: ref.namespace, key: ref.key, token: ref.token, step: name };
    remember(await retry(client.retryPolicy, (b) => client.startStep(req, b), { signal }));
    const value = stepBytes(name, await fn(keyOf(name)));
    // The effect happened: its record is sent even if the attempt's signal
    // is aborted meanwhile (a lost lease refuses it anyway).
    const finished = await retry(client.retryPolicy, (b) => client.completeStep({ ...req, result: value }, b));
    remember(finished);
    return new Recorded(finished.result, false);
  };
  return { steps, step, stepKey: keyOf };
}

/** stepBytes is a step function's value as the bytes to record. */
function stepBytes(name: string, v: unknown): Uint8Array {
  if (v === undefined || v === null) {
    return new Uint8Array();
  }
  if (typeof v === "string" || v instanceof Uint8Array) {
    return bytesOf(v);
  }
  throw new TypeError(`idem: step ${JSON.stringify(name)} returned ${typeof v === "object" ? "an object" : `a ${typeof v}`}; return a Uint8Array or a string (JSON.stringify an object)`);
}
