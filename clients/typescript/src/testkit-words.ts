// The words of the duplicate-delivery test kit: a copy of idemtest/cases.json
// (the Go kit's, which every language's kit reports in). test/testkit.test.ts
// fails when the two differ: copy the file's object here again.

/** WORDS is idemtest/cases.json. */
export const WORDS = {
  "version": 1,
  "about": "The words of the duplicate-delivery test kit: its cases and the messages it reports. The Go kit (idemtest.CheckHandler) embeds this file; the TypeScript (@idemhq/idem/testkit) and Python (idem.testkit) kits ship copies that their tests compare with it, so a team gets the same report in every language. {name} is filled in by the kit: namespace, key, effects, runs, deliveries, outside, late, i, to, what, attempt, token, state, reason, error, n, and the language's own terms: takeover (the attempt's takeover flag), token_field (the attempt's fencing token), permanent (how a handler marks a failure permanent), lost_check (how a handler checks that its lease is still held), worker_client (how a handler reaches the client of the worker it runs in).",
  "cases": [
    {
      "id": "twice-in-sequence",
      "title": "the same job delivered twice, one after the other"
    },
    {
      "id": "concurrent",
      "title": "the same job delivered {n} times at once"
    },
    {
      "id": "crash-after-effect",
      "title": "the worker died after the side effect and before Complete; its lease lapsed and the job was delivered again",
      "window": "between the side effect and Complete. The worker died there, and idem cannot tell a worker that died after its effect from one that died before it: the record stayed PROCESSING, and once the lease lapsed the next delivery took the job over and made the effect again.",
      "remedy": "pass the record's key ({namespace}/{key}) to the downstream system as its own idempotency key (Stripe's Idempotency-Key header, say), so that it answers the repeat from its records instead of acting again; or, when {takeover} is true, look the effect up downstream before making it; or set on_lease_expiry: hold in the namespace's policy, so that the record becomes UNRESOLVED instead of being taken over, and a person decides.",
      "held": "the namespace's policy holds the record (on_lease_expiry: hold): the redelivery found it UNRESOLVED and did not run the handler, so the effect ran once, and the job waits for a person to resolve it (idem resolve)."
    },
    {
      "id": "crash-after-complete",
      "title": "the worker died as soon as the job's record was completed; the job was delivered again",
      "window": "between the handler's own Complete and its side effect. The handler recorded the job as done (a Complete with its own token) before it made the effect, and the worker died in between: the record is COMPLETED, the effect never happened, and every redelivery replays the stored result instead of running the handler. The effect is lost.",
      "remedy": "make the side effect before anything records the job as done: return the result from the handler and let do() send the Complete once the handler returned, instead of completing with {token_field} yourself. Work that must follow the Complete belongs in a job of its own, with a key of its own."
    },
    {
      "id": "lease-lapsed",
      "title": "the lease lapsed while the handler still ran (its heartbeats held), and a second delivery took the job over",
      "window": "while the handler ran. It stalled (a pause, a slow call, a partition keeping its heartbeats from the server) until its lease lapsed; the next delivery took the job over and made the effect, and then the first worker, not knowing its lease was gone, made it too. idem refused that worker's Complete (LEASE_LOST), but its effect was already out.",
      "remedy": "make the effect check the fencing token: the downstream keeps the highest {token_field} it has seen for the job and refuses a write with a lower one (a conditional write, UPDATE ... WHERE token < $1); or pass the record's key ({namespace}/{key}) to the downstream system as its own idempotency key; or set on_lease_expiry: hold in the namespace's policy, so that no delivery takes over while a worker may still run. Checking {lost_check} right before the effect helps a slow handler that heard of the takeover, not a stalled one; a longer lease makes the window rarer, not closed.",
      "held": "the namespace's policy holds the record (on_lease_expiry: hold): the second delivery found it UNRESOLVED and did not run the handler, and the first worker's late Complete, which no takeover had superseded, settled the record, so the effect ran once."
    },
    {
      "id": "complete-answer-lost",
      "title": "Complete was applied but its answer lost; the worker retried it, and the queue delivered the job again"
    },
    {
      "id": "retryable-failure",
      "title": "the handler made its effect and then returned a retryable error; the job was delivered again and succeeded",
      "window": "between the side effect and the handler's return. The handler made its effect and then failed (here the kit's error, standing in for a timeout on the downstream's answer or a later step that failed): the failure was recorded as retryable, the job was released, and the next delivery made the effect again.",
      "remedy": "pass the record's key ({namespace}/{key}) to the downstream system as its own idempotency key, so that the retry is answered from its records; or, once the effect may have happened, fail with {permanent}, so that the job is FAILED instead of retried and a person looks. on_lease_expiry: hold does not cover this window: no lease lapsed."
    },
    {
      "id": "steps-crash-between-steps",
      "title": "the worker died between two of the job's effects (after a step was recorded, before the next one started, or before Complete); its lease lapsed and the job was delivered again",
      "window": "between two of the job's effects, after the first was made. The worker died there; once the lease lapsed the next delivery took the job over and ran the handler again, and an effect the first worker had made, which no step recorded, was made again.",
      "remedy": "the step {step} was recorded FINISHED and its effect was made again all the same: the handler names its steps differently on each delivery (a time or a random part in the name), so the successor does not find it. Name each step the same on every delivery.",
      "remedy_unrecorded": "record it as a step: make the effect inside {step_call}, so that the successor finds the step FINISHED and gets its recorded result instead of making the effect again; or pass the record's key ({namespace}/{key}) to the downstream system as its own idempotency key.",
      "held": "the namespace's policy holds the record (on_lease_expiry: hold): the redelivery found it UNRESOLVED and did not run the handler, so each effect ran once, and the job waits for a resolver or a person to decide it."
    },
    {
      "id": "steps-crash-inside-step",
      "title": "the worker died inside a step, after the step's effect and before its CompleteStep; its lease lapsed and the job was delivered again",
      "window": "inside the step {step}, between its effect and its CompleteStep. The step stayed STARTED, which says its effect may or may not have happened; under on_unfinished_step: rerun (the default) the next delivery ran the step again, and the downstream, not given the step's key, made the effect again.",
      "window_unrecorded": "between the side effect and Complete. The handler recorded no step, so the worker died where it dies in crash-after-effect, and the next delivery made the effect again.",
      "remedy": "pass the step key downstream: give the downstream API the key the step's function receives ({step_key_call}, the same on every attempt) as its idempotency key, so that it answers the repeat from its records; or set on_unfinished_step: hold in the namespace's policy, so that the record becomes UNRESOLVED and a resolver or a person decides.",
      "remedy_unrecorded": "record it as a step: make the effect inside {step_call} and pass the key its function receives to the downstream system as its idempotency key, so that a successor that runs the step again is answered from the downstream's records.",
      "held": "the namespace's policy holds the record (on_unfinished_step: hold, or on_lease_expiry: hold): the redelivery found it UNRESOLVED and did not run the handler, so the effect ran once, and the job waits for a resolver or a person to decide it."
    },
    {
      "id": "steps-held-resolver",
      "title": "the worker died inside a step under a policy that holds the job; the test's resolver decided the held record, and the job was delivered again",
      "window": "the resolver's answer. The record was held with a step STARTED whose effect had happened, and the resolver answered release, so the next delivery ran the job again and made the effect again.",
      "remedy": "look the effect up downstream by the step's key ({step_key_call} on the held record: the key the step's function received) or by the record's key ({namespace}/{key}), answer completed when the effect happened and release only when it did not, and can't tell when the downstream cannot say; or pass the step key downstream, so that a rerun step is answered from the downstream's records.",
      "undecided": "the resolver left the record UNRESOLVED: it answered can't tell, or failed, about a job whose effect had happened; a resolver that can look the effect up (by the step's key, {step_key_call} on the held record) should decide it.",
      "not_held": "the namespace's policy did not hold the record, so there was nothing for the resolver to decide: give the kit a policy with on_unfinished_step: hold or on_lease_expiry: hold for the job's namespace."
    }
  ],
  "messages": {
    "ok": "{id}: the effect ran once",
    "more": "{id}: the effect ran {effects} times for one job; want once",
    "lost": "{id}: the effect never ran, and the record says the job is done; want once",
    "late": "{id}: the effect happened after the handler returned; want it made before",
    "none": "{id}: the effect counter saw no effect; want one",
    "error": "{id}: the case could not run: {error}",
    "delivery": "delivery {i}: {what}",
    "deliveries": "deliveries {i} to {to}: {what}",
    "record": "record: {state}, attempt {attempt}, token {token}",
    "window": "window: {text}",
    "remedy": "remedy: {text}",
    "held": "held: {text}",
    "no_effect": "the handler ran, but the effect counter saw nothing, during the case or for a second after it: either the handler made no side effect on these deliveries, or the counter does not count it (it must count the effect as the downstream knows it: rows in your table, charges your fake API applied).",
    "extra_effects": "the handler made {effects} effects in {runs} runs: one run makes more than one effect (a retry loop around the downstream call, an effect per item of something repeated), or the counter counts more than the effect. Make one run make one effect, and let the downstream call's own retries carry the record's key ({namespace}/{key}) as their idempotency key.",
    "extra_runs": "idem ran the handler {runs} times where it must run it once: a bug in idem or its SDK, not in your handler; please report it with this message.",
    "outside_effects": "{outside} of the {effects} effects happened while the kit built the handler of a delivery, before do() claimed the job ({deliveries} deliveries, {runs} of which ran the handler): the effect runs outside the handler, where idem cannot keep it to one delivery. Move it into the function the worker passes to do(), and build that function without side effects.",
    "late_effect": "the handler returned before its side effect was made ({late} effects came after it returned): it does not wait for the effect (a promise it does not await, a callback, a thread or goroutine it started), so do() recorded the job as done before the effect happened; a crash in between loses the effect, and an error in it goes unseen. Wait for the effect before the handler returns.",
    "ended_unseen": "the handler ended the record itself ({state}) through a client the kit does not see, so the kit cannot stop the worker right after it: make the handler's own calls to idem through the worker's client ({worker_client}), or let do() record the outcome.",
    "ran": "ran the handler (attempt {attempt}, token {token})",
    "ran_stalled": "ran the handler (attempt {attempt}, token {token}) after stalling until its lease lapsed",
    "completed": "Complete confirmed",
    "answer_lost": "Complete applied and its answer lost; the retried Complete was confirmed",
    "died": "the worker died before Complete, and its lease lapsed",
    "died_after_complete": "Complete applied, and the worker died before it heard back",
    "died_after_own_complete": "the handler completed the record itself (Complete with its token), and the worker died right there; what the handler did after that is not counted",
    "lease_lost": "the job had been taken over: Complete refused (LEASE_LOST)",
    "late_complete": "no one had taken over: Complete accepted",
    "released": "then failed; the failure was recorded as retryable and the job released",
    "not_released": "then failed, but the failure was not recorded ({reason}), so the job was not released",
    "replayed": "replayed the stored result; the handler did not run",
    "in_progress": "found the job in progress elsewhere; the handler did not run",
    "unresolved": "found the record UNRESOLVED (held for a person); the handler did not run",
    "failed": "failed: {error}",
    "injected_failure": "the test kit's error after the handler's effect (a timeout on the downstream's answer, say)",
    "handler_failed": "the handler failed on a delivery that should succeed: {error}",
    "handler_panicked": "the handler panicked: {error}"
  }
};
