// Tests of the duplicate-delivery test kit (src/testkit.ts) against real
// idemd processes: the windows each kind of handler leaves open, the words
// (the same file as the Go kit's), and the failures it throws.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { after, before, describe, it } from "node:test";
import { cantTell, completed, IdemClient, release, State, type Attempt, type Job, type ResolverFn } from "../src/index.js";
import { grpcTransport } from "../src/node.js";
import { ALL_CASES, Case, CheckFailedError, checkHandler, inspectHandler, type Idemd, type MakeHandler, startIdemd } from "../src/testkit.js";
import { WORDS } from "../src/testkit-words.js";
import { PACKAGE_DIR, REPO } from "./harness.js";

const IDEMD = process.env.IDEMD_BIN ?? path.join(PACKAGE_DIR, "build", "idemd");

/**
 * PaymentsAPI is a fake payment provider that counts the charges it applied.
 * Like real providers, it can answer a request whose idempotency key it has
 * seen from its records, and refuse a write fenced by a token lower than
 * one it has seen.
 */
class PaymentsAPI {
  applied = 0;
  readonly #byKey = new Map<string, string>();
  readonly #maxToken = new Map<string, bigint>();
  readonly #charged = new Set<string>();

  charge(order: string, idempotencyKey = "", token = 0n): string {
    const seen = this.#byKey.get(idempotencyKey);
    if (idempotencyKey !== "" && seen !== undefined) {
      return seen;
    }
    if (token > 0n) {
      if (token < (this.#maxToken.get(order) ?? 0n)) {
        throw new Error("payments: a later attempt already wrote this order");
      }
      this.#maxToken.set(order, token);
    }
    this.applied++;
    this.#charged.add(order);
    const id = `ch_${this.applied}`;
    if (idempotencyKey !== "") {
      this.#byKey.set(idempotencyKey, id);
    }
    return id;
  }

  /** chargeBy is the charge made with idempotencyKey, if there is one. */
  chargeBy(idempotencyKey: string): string | undefined {
    return this.#byKey.get(idempotencyKey);
  }

  wasCharged(order: string): boolean {
    return this.#charged.has(order);
  }
}

const handlers: Record<string, (p: PaymentsAPI) => MakeHandler> = {
  naive: (p) => (job) => () => p.charge(job.key),
  "downstream key": (p) => (job) => () => p.charge(job.key, `${job.namespace}/${job.key}`),
  "fencing token": (p) => (job) => (a: Attempt) => p.charge(job.key, "", a.token),
  "takeover check": (p) => (job) => (a: Attempt) => (a.takeover && p.wasCharged(job.key) ? "charged earlier" : p.charge(job.key)),
  // Two effects, each recorded as a step; the downstream is not given the step's key.
  "two steps": (p) => (job) => async (a: Attempt) => {
    const charge = await a.step("charge", () => p.charge(`${job.key}#charge`));
    const receipt = await a.step("receipt", () => p.charge(`${job.key}#receipt`));
    return `${charge.text()} ${receipt.text()}`;
  },
  // The same, passing each step's key downstream as its idempotency key.
  "two steps with step keys": (p) => (job) => async (a: Attempt) => {
    const charge = await a.step("charge", (k) => p.charge(`${job.key}#charge`, k));
    const receipt = await a.step("receipt", (k) => p.charge(`${job.key}#receipt`, k));
    return `${charge.text()} ${receipt.text()}`;
  },
  // One effect recorded as a step, and one made outside every step.
  "a step and an unrecorded effect": (p) => (job) => async (a: Attempt) => {
    const charge = await a.step("charge", () => p.charge(`${job.key}#charge`));
    p.charge(`${job.key}#email`);
    return charge.text();
  },
};

let idemd: Idemd;

before(async () => {
  // One idemd for most tests: namespaces held.* are held (on_lease_expiry: hold).
  // Namespaces stepheld.* are held only for a step started and not finished (on_unfinished_step: hold).
  idemd = await startIdemd({
    bin: IDEMD,
    config: 'policies:\n  - namespaces: ["held.*"]\n    on_lease_expiry: hold\n  - namespaces: ["stepheld.*"]\n    on_unfinished_step: hold\n',
  });
});

after(async () => {
  await idemd?.stop();
});

describe("testkit", () => {
  it("reports in the words of idemtest/cases.json", () => {
    const file = JSON.parse(readFileSync(path.join(REPO, "idemtest", "cases.json"), "utf8")) as unknown;
    assert.deepEqual(WORDS, file, "src/testkit-words.ts differs from idemtest/cases.json: copy the file's object into it");
    assert.deepEqual(
      WORDS.cases.map((c) => c.id),
      [...ALL_CASES, Case.StepsHeldResolver],
    );
  });

  // steps: the handler records steps, so each is judged on its own: an open
  // window is a step's effect (or one outside every step) run twice.
  const expectations: Array<{ name: string; handler: string; job?: Job; open: Case[]; held?: Case[]; steps?: boolean }> = [
    { name: "naive", handler: "naive", open: [Case.CrashAfterEffect, Case.LeaseLapsed, Case.RetryableFailure, Case.StepsCrashBetweenSteps, Case.StepsCrashInsideStep] },
    { name: "downstream key", handler: "downstream key", open: [] },
    { name: "fencing token", handler: "fencing token", open: [Case.CrashAfterEffect, Case.RetryableFailure, Case.StepsCrashBetweenSteps, Case.StepsCrashInsideStep] },
    { name: "takeover check", handler: "takeover check", open: [Case.LeaseLapsed] },
    {
      name: "naive under hold",
      handler: "naive",
      job: { namespace: "held.payments", key: "order-7" },
      open: [Case.RetryableFailure],
      held: [Case.CrashAfterEffect, Case.LeaseLapsed, Case.StepsCrashBetweenSteps, Case.StepsCrashInsideStep],
    },
    { name: "two steps", handler: "two steps", open: [Case.StepsCrashInsideStep], steps: true },
    { name: "two steps with step keys", handler: "two steps with step keys", open: [], steps: true },
    {
      name: "two steps under on_unfinished_step: hold",
      handler: "two steps",
      job: { namespace: "stepheld.payments", key: "order-8" },
      open: [],
      held: [Case.StepsCrashInsideStep],
      steps: true,
    },
    {
      name: "a step and an unrecorded effect",
      handler: "a step and an unrecorded effect",
      open: [Case.CrashAfterEffect, Case.RetryableFailure, Case.StepsCrashBetweenSteps, Case.StepsCrashInsideStep],
      steps: true,
    },
  ];
  for (const e of expectations) {
    it(`finds the windows a handler leaves open: ${e.name}`, async () => {
      const api = new PaymentsAPI();
      const r = await inspectHandler(handlers[e.handler]!(api), () => api.applied, { server: idemd.grpcUrl, job: e.job });
      assert.equal(r.cases.length, ALL_CASES.length);
      for (const cr of r.cases) {
        assert.equal(cr.error, undefined, `${cr.case} could not run:\n${cr}`);
        if (e.open.includes(cr.case) && e.steps) {
          const twice = cr.repeatedStep !== "" ? cr.stepEffects?.get(cr.repeatedStep) : cr.repeatedUnrecorded ? cr.stepEffects?.get("") : 0;
          assert.ok(twice === 2 && !cr.ok && cr.window !== "" && cr.remedy !== "", `${cr.case}: want one effect twice, a window and a remedy:\n${cr}`);
        } else if (e.open.includes(cr.case)) {
          assert.ok(cr.effects === 2 && !cr.ok && cr.window !== "" && cr.remedy !== "", `${cr.case}: want the effect twice, a window and a remedy:\n${cr}`);
        } else {
          assert.ok(cr.ok, `${cr.case}: want the effect once:\n${cr}`);
        }
        assert.equal(cr.held !== "", (e.held ?? []).includes(cr.case), `${cr.case}: held note ${JSON.stringify(cr.held)}:\n${cr}`);
      }
    });
  }

  it("names the crash's window and remedy as the Go kit does", async () => {
    const api = new PaymentsAPI();
    const r = await inspectHandler(handlers.naive!(api), () => api.applied, { idemd: IDEMD, job: { namespace: "payments", key: "order-1042" } });
    const msg = String(r.case(Case.CrashAfterEffect));
    for (const want of [
      "crash-after-effect: the effect ran 2 times for one job; want once",
      "\n  delivery 1: ran the handler (attempt 1, token ",
      "the worker died before Complete, and its lease lapsed",
      "\n  delivery 2: ran the handler (attempt 2, token ",
      "\n  record: COMPLETED, attempt 2",
      "\n  window: between the side effect and Complete",
      "\n  remedy: pass the record's key (payments/order-1042.crash-after-effect) to the downstream system as its own idempotency key",
      "attempt.takeover",
    ]) {
      assert.ok(msg.includes(want), `the report does not say ${JSON.stringify(want)}:\n${msg}`);
    }
    assert.doesNotMatch(String(r), /\{[a-z_]+\}/);
  });

  it("names the step whose effect ran twice, and the remedy: pass the step key downstream, or record it as a step", async () => {
    const api = new PaymentsAPI();
    const job = { namespace: "payments", key: "order-2048" };
    let r = await inspectHandler(handlers["two steps"]!(api), () => api.applied, { server: idemd.grpcUrl, job });
    const inside = r.case(Case.StepsCrashInsideStep)!;
    let msg = String(inside);
    assert.equal(inside.repeatedStep, "charge", msg);
    for (const want of [
      "steps-crash-inside-step: the effect ran 2 times for one job; want once",
      "\n  window: inside the step charge, between its effect and its CompleteStep",
      "\n  remedy: pass the step key downstream: give the downstream API the key the step's function receives (attempt.stepKey(name)",
    ]) {
      assert.ok(msg.includes(want), `the report does not say ${JSON.stringify(want)}:\n${msg}`);
    }
    const between = r.case(Case.StepsCrashBetweenSteps)!;
    assert.ok(between.ok && String(between).startsWith("steps-crash-between-steps: the effect ran once"), String(between));
    assert.deepEqual([...between.stepEffects!.entries()].sort(), [["charge", 1], ["receipt", 1]], String(between));
    assert.doesNotMatch(String(r), /\{[a-z_]+\}/);

    const api2 = new PaymentsAPI();
    r = await inspectHandler(handlers["a step and an unrecorded effect"]!(api2), () => api2.applied, { server: idemd.grpcUrl, job });
    const unrecorded = r.case(Case.StepsCrashBetweenSteps)!;
    msg = String(unrecorded);
    assert.ok(unrecorded.repeatedUnrecorded && unrecorded.repeatedStep === "", msg);
    for (const want of ["\n  remedy: record it as a step: make the effect inside attempt.step(name, fn)", "(payments/order-2048.", ".steps-crash-between-steps)"]) {
      assert.ok(msg.includes(want), `the report does not say ${JSON.stringify(want)}:\n${msg}`);
    }
    assert.doesNotMatch(String(r), /\{[a-z_]+\}/);
  });

  // The resolver case: a resolver that looks the charge up by its step key
  // decides the held job right; one that releases it blindly makes the
  // charge twice; one that cannot tell leaves it held; and without a hold
  // policy there is nothing to decide.
  const resolvers: Array<{ name: string; handler: string; resolver: (api: PaymentsAPI) => ResolverFn; held: boolean; ok: boolean; want: string }> = [
    {
      name: "looks the charge up",
      handler: "two steps with step keys",
      resolver: (api) => (h) => {
        const id = api.chargeBy(h.stepKey("charge"));
        return id !== undefined ? completed(id, `charge ${id} found`) : release("no charge");
      },
      held: true,
      ok: true,
      want: "steps-held-resolver: the effect ran once",
    },
    { name: "releases blindly", handler: "two steps", resolver: () => () => release(), held: true, ok: false, want: "remedy: look the effect up downstream by the step's key (attempt.stepKey(name)" },
    {
      name: "cannot tell",
      handler: "two steps with step keys",
      resolver: () => () => {
        throw new Error("the provider is down");
      },
      held: true,
      ok: false,
      want: "the resolver left the record UNRESOLVED",
    },
    { name: "not held", handler: "two steps with step keys", resolver: () => () => cantTell(), held: false, ok: false, want: "the namespace's policy did not hold the record" },
  ];
  for (const tc of resolvers) {
    it(`checks the resolver option's decision of a job held inside a step: ${tc.name}`, async () => {
      const api = new PaymentsAPI();
      const job = { namespace: tc.held ? "stepheld.payments" : "payments", key: "order-11" };
      const r = await inspectHandler(handlers[tc.handler]!(api), () => api.applied, { server: idemd.grpcUrl, job, resolver: tc.resolver(api) });
      const cr = r.case(Case.StepsHeldResolver);
      assert.ok(cr !== undefined, `no ${Case.StepsHeldResolver} case in the report:\n${r}`);
      const msg = String(cr);
      assert.ok(cr.error === undefined && cr.ok === tc.ok && msg.includes(tc.want), `want ok ${tc.ok} and ${JSON.stringify(tc.want)}:\n${msg}`);
      if (tc.name === "releases blindly") {
        assert.equal(cr.repeatedStep, "charge", msg);
      }
      assert.doesNotMatch(msg, /\{[a-z_]+\}/);
    });
  }

  it("checkHandler throws the report of each open window, and passes a safe handler", async () => {
    const api = new PaymentsAPI();
    const err = await checkHandler(handlers.naive!(api), () => api.applied, { server: idemd.grpcUrl }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof CheckFailedError, `want a CheckFailedError; got ${String(err)}`);
    assert.deepEqual(
      err.report.failed().map((c) => c.case),
      [Case.CrashAfterEffect, Case.LeaseLapsed, Case.RetryableFailure, Case.StepsCrashBetweenSteps, Case.StepsCrashInsideStep],
    );
    for (const c of ["crash-after-effect: the effect ran 2 times", "lease-lapsed: the effect ran 2 times", "retryable-failure: the effect ran 2 times"]) {
      assert.ok(err.message.includes(c), `the failure does not say ${JSON.stringify(c)}:\n${err.message}`);
    }

    const safe = new PaymentsAPI();
    const logged: string[] = [];
    const r = await checkHandler(handlers["downstream key"]!(safe), () => safe.applied, { server: idemd.grpcUrl, log: (s) => logged.push(s) });
    assert.equal(r.failed().length, 0);
    assert.equal(logged.length, ALL_CASES.length);
  });

  it("says when the counter counts nothing, and when the handler fails", async () => {
    const api = new PaymentsAPI();
    let r = await inspectHandler(handlers["downstream key"]!(api), () => 0, { server: idemd.grpcUrl });
    for (const cr of r.cases) {
      assert.ok(!cr.ok && cr.finding.includes("the effect counter saw nothing") && String(cr).startsWith(`${cr.case}: the effect counter saw no effect`), String(cr));
    }
    const failing: MakeHandler = () => () => {
      throw new Error("no route to the provider");
    };
    r = await inspectHandler(failing, () => 1, { server: idemd.grpcUrl });
    for (const cr of r.cases) {
      assert.ok(cr.error !== undefined && String(cr).includes("the case could not run: the handler failed on a delivery that should succeed: no route to the provider"), String(cr));
    }
  });

  it("stops the worker right after the handler's own Complete, and names the effect lost", async () => {
    const api = new PaymentsAPI();
    // Completes its own record through its worker's client, then charges (with the record's key: no other window is open).
    const completesFirst: MakeHandler = (job, worker) => async (a) => {
      await worker.complete({ namespace: job.namespace, key: job.key, token: a.token, result: "done" });
      api.charge(job.key, `${job.namespace}/${job.key}`);
      return "done";
    };
    const err = await checkHandler(completesFirst, () => api.applied, { server: idemd.grpcUrl, job: { namespace: "payments", key: "order-1042" } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof CheckFailedError, `want a CheckFailedError; got ${String(err)}`);
    const cr = err.report.case(Case.CrashAfterComplete)!;
    const msg = String(cr);
    assert.ok(!cr.ok && cr.error === undefined && cr.effects === 0 && cr.finding === "", `want the effect lost, as a window:\n${msg}`);
    for (const want of [
      "crash-after-complete: the effect never ran, and the record says the job is done; want once",
      "the handler completed the record itself (Complete with its token), and the worker died right there",
      "\n  delivery 2: replayed the stored result; the handler did not run",
      "\n  record: COMPLETED, attempt 1",
      "\n  window: between the handler's own Complete and its side effect",
      "The effect is lost.",
      "\n  remedy: make the side effect before anything records the job as done: return the result from the handler and let do() send the Complete",
      "instead of completing with attempt.token yourself",
    ]) {
      assert.ok(msg.includes(want), `the report does not say ${JSON.stringify(want)}:\n${msg}`);
    }
    assert.ok(err.message.includes("crash-after-complete: the effect never ran"), err.message);
    assert.doesNotMatch(msg, /\{[a-z_]+\}/);
  });

  it("says what became of the record in the retryable-failure case, and when a handler's Complete went where the kit cannot see", async () => {
    const api = new PaymentsAPI();
    const own = new IdemClient(grpcTransport({ baseUrl: idemd.grpcUrl }));
    try {
      // Charges, then completes its own record through a client of its own.
      const completesItself: MakeHandler = (job) => async (a) => {
        api.charge(job.key, `${job.namespace}/${job.key}`);
        await own.complete({ namespace: job.namespace, key: job.key, token: a.token, result: "done" });
        return "done";
      };
      const r = await inspectHandler(completesItself, () => api.applied, { server: idemd.grpcUrl });
      const retry = r.case(Case.RetryableFailure)!;
      const msg = String(retry);
      assert.equal(retry.record?.state, State.COMPLETED, msg);
      assert.ok(retry.ok, `want the effect once:\n${msg}`);
      assert.ok(msg.includes("then failed, but the failure was not recorded (ALREADY_TERMINAL), so the job was not released"), msg);
      assert.ok(!msg.includes("recorded as retryable"), `the report says the job was released, while the record is COMPLETED:\n${msg}`);
      const crash = r.case(Case.CrashAfterComplete)!;
      assert.ok(
        crash.error?.message.includes("the handler ended the record itself (COMPLETED) through a client the kit does not see") && crash.error.message.includes("makeHandler's second argument"),
        `want the case unable to run, naming the worker's client:\n${crash}`,
      );
    } finally {
      own.close();
    }
  });

  it("tells an effect made while the handler is built, outside do(), to move into the handler", async () => {
    const api = new PaymentsAPI();
    const chargesFirst: MakeHandler = (job) => {
      const id = api.charge(job.key); // before do() claimed the job
      return () => id;
    };
    const r = await inspectHandler(chargesFirst, () => api.applied, { server: idemd.grpcUrl });
    for (const cr of r.cases) {
      const msg = String(cr);
      assert.ok(!cr.ok && cr.error === undefined && cr.outside === cr.effects && cr.window === "" && cr.remedy === "", `${cr.case}: want every effect outside the handler:\n${msg}`);
      assert.ok(cr.finding.includes("effects happened while the kit built the handler of a delivery, before do() claimed the job"), msg);
      assert.ok(cr.finding.includes("Move it into the function the worker passes to do()"), msg);
      for (const wrong of ["retry loop", "idempotency key", "remedy:"]) {
        assert.ok(!msg.includes(wrong), `${cr.case}: the report says ${JSON.stringify(wrong)}:\n${msg}`);
      }
    }
    // One effect per delivery: the 8 at once, and the redelivery of each that found the job in progress.
    const concurrent = r.case(Case.Concurrent)!;
    const n = concurrent.effects;
    assert.ok(n >= 8 && concurrent.finding.includes(`${n} of the ${n} effects happened while the kit built the handler of a delivery, before do() claimed the job (${n} deliveries, 1 of which ran the handler)`), String(concurrent));
  });

  it("blames a handler that does not await its effect, not the counter", async () => {
    const api = new PaymentsAPI();
    // The charge is started and not awaited: it lands after the handler returned.
    const unawaited: MakeHandler = (job) => () => {
      setTimeout(() => api.charge(job.key, `${job.namespace}/${job.key}`), 20);
      return "ok";
    };
    const r = await inspectHandler(unawaited, () => api.applied, { server: idemd.grpcUrl });
    for (const cr of r.cases) {
      const msg = String(cr);
      assert.ok(!cr.ok && cr.error === undefined && cr.late > 0, `${cr.case}: want the effect found late:\n${msg}`);
      assert.ok(msg.startsWith(`${cr.case}: the effect happened after the handler returned; want it made before`), msg);
      assert.ok(cr.finding.includes("the handler returned before its side effect was made") && cr.finding.includes("a promise it does not await"), msg);
      assert.ok(!msg.includes("the effect counter saw no"), `${cr.case}: the report blames the counter:\n${msg}`);
    }
  });

  it("starts an idemd of its own with the tenants and policies of a config", async () => {
    const token = "idem_test-token-of-payments";
    const hash = `sha256:${createHash("sha256").update(token).digest("hex")}`;
    const api = new PaymentsAPI();
    const r = await checkHandler(handlers["downstream key"]!(api), () => api.applied, {
      idemd: IDEMD,
      token,
      job: { namespace: "payments.card", key: "order-9" },
      config: `tenants:\n  - name: payments\n    tokens: ["${hash}"]\n    namespaces: ["payments.*"]\n    policies:\n      - namespaces: ["payments.*"]\n        on_lease_expiry: hold\n`,
    });
    const crash = r.case(Case.CrashAfterEffect)!;
    assert.ok(crash.held !== "" && crash.record?.hold === true, `the tenant's hold policy did not apply:\n${crash}`);
  });

  it("says how to give it idemd, and how to get one, when there is none", async () => {
    const getOne = "To get idemd: in a clone of https://github.com/idemhq/idem, `make install` (it says where it puts idemd) or `make build` (bin/idemd).";
    const missing = path.join(PACKAGE_DIR, "build", "no-such-idemd");
    await assert.rejects(startIdemd({ bin: missing }), (err: Error) => {
      assert.equal(err.message, `idem testkit: cannot start ${missing}: spawn ${missing} ENOENT; give the idemd option, set IDEMD_BIN, or put idemd on the PATH. ${getOne}`);
      return true;
    });
  });

  it("refuses a concurrency that is not a whole number, rather than deliver nothing", async () => {
    // Number(process.env.UNSET) is NaN: the concurrent case would make no
    // delivery at all and pass.
    let delivered = 0;
    const handler: MakeHandler = () => () => {
      delivered++;
      return "ok";
    };
    for (const concurrency of [NaN, 2.5, Infinity]) {
      await assert.rejects(inspectHandler(handler, () => delivered, { concurrency, idemd: IDEMD }), new RegExp(`concurrency is ${concurrency}; it must be a whole number`));
    }
    assert.equal(delivered, 0);
  });
});
