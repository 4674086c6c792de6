// The console in a real browser: Debian's Chromium, headless, driven by
// playwright-core, against a real idemd (test/idemd.ts). Each test signs
// in from a fresh browser context, as a person opening a new window would.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { connectTransport, IdemClient, NotFoundError, State, UnresolvedError } from "@idemhq/idem";
import { HOLD_NAMESPACE, type Idemd, logEntries, startIdemd } from "./idemd.js";

const CHROMIUM = process.env.CHROMIUM_BIN ?? "/usr/bin/chromium";
const WAIT_MS = 30_000;

let browser: Browser;

before(async () => {
  // Playwright gives the browser a fresh --user-data-dir of its own (it
  // refuses one in args; launchPersistentContext would allow one context
  // only, and the race below needs two) and removes it on close.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
});

/** client is an API client of tenant's token, as a worker or a script would have. */
function client(idemd: Idemd, tenant: string): IdemClient {
  return new IdemClient(connectTransport({ baseUrl: idemd.url, token: idemd.tokens[tenant] }));
}

/**
 * hold makes namespace/key of the client's tenant UNRESOLVED: a Claim with
 * a one-second lease under the hold policy, and no Complete. With wait it
 * also waits until a Claim reports it UNRESOLVED; without, the sweeper
 * (every second) gets there.
 */
async function hold(c: IdemClient, key: string, opts: { wait: boolean; claimant?: string; fingerprint?: Uint8Array }): Promise<void> {
  const claimant = opts.claimant ?? `worker-${key}`;
  await c.claim({ namespace: HOLD_NAMESPACE, key, leaseTtlMs: 1000, claimant, fingerprint: opts.fingerprint });
  if (!opts.wait) {
    return;
  }
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    await new Promise((r) => setTimeout(r, 250));
    try {
      await c.claim({ namespace: HOLD_NAMESPACE, key, claimant: "a-later-delivery" });
    } catch (err) {
      if (err instanceof UnresolvedError) {
        return;
      }
      if (!(err instanceof Error && err.name === "InProgressError") || Date.now() > deadline) {
        throw err;
      }
    }
  }
}

interface Opened {
  context: BrowserContext;
  page: Page;
  /** cspViolations collects what the browser refused under the Content-Security-Policy. */
  cspViolations: string[];
}

async function open(idemd: Idemd, viewport = { width: 1280, height: 900 }): Promise<Opened> {
  const context = await browser.newContext({ viewport, colorScheme: "light", locale: "en-US", timezoneId: "UTC" });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const cspViolations: string[] = [];
  page.on("console", (m) => {
    if (/Content.Security.Policy/i.test(m.text())) {
      cspViolations.push(m.text());
    }
  });
  page.on("pageerror", (e) => cspViolations.push(`page error: ${e.message}`));
  await page.goto(idemd.consoleUrl);
  return { context, page, cspViolations };
}

async function signIn(page: Page, token: string): Promise<void> {
  await page.locator("#token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
}

/** noHorizontalScroll fails when the page is wider than its viewport. */
async function noHorizontalScroll(page: Page, what: string): Promise<void> {
  const { scroll, client } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
  assert.ok(scroll <= client, `${what}: the page is ${scroll} px wide in a ${client} px viewport`);
}

describe("the console with tenants", () => {
  let idemd: Idemd;
  before(async () => {
    idemd = await startIdemd();
  });
  after(async () => {
    await idemd?.stop();
  });

  test("an operator sees a held record appear and resolves it as completed; the API then replays the result", async () => {
    const { context, page, cspViolations } = await open(idemd);
    const res = await page.request.get(idemd.consoleUrl);
    assert.match(res.headers()["content-security-policy"] ?? "", /frame-ancestors 'none'/);
    await signIn(page, idemd.tokens.ops!);
    await page.getByTestId("who").filter({ hasText: "operator" }).waitFor();
    assert.equal(await page.evaluate(() => window.sessionStorage.getItem("idem.console.token")), idemd.tokens.ops, "the token is kept in sessionStorage");
    assert.ok(!page.url().includes(idemd.tokens.ops!), "the token is not in the URL");
    assert.deepEqual(await context.cookies(), [], "the console sets no cookie");

    await page.getByRole("link", { name: "Held" }).click();
    await page.locator("select[name=refresh]").selectOption("2000");
    await page.getByTestId("held-count").filter({ hasText: "Nothing is held." }).waitFor();

    const acme = client(idemd, "acme");
    const fingerprint = new Uint8Array([0xde, 0xad, 0xbe, 0xef]);
    await hold(acme, "order-1001", { wait: false, claimant: "worker-7f3a", fingerprint });
    const item = page.locator('[data-testid=held-item][data-key="order-1001"]');
    await item.waitFor(); // the sweeper held it, and the queue refreshed on its own
    const text = await item.innerText();
    assert.match(text, /acme\/payments\/order-1001/);
    assert.match(text, /worker-7f3a/, "the last claimant");
    assert.match(text, /deadbeef/, "the fingerprint");
    assert.match(text, /Attempts\s*1/);
    assert.match(text, /Lease lapsed\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\s*\((just now|\d+ (s|min) ago)\)/);

    const result = '{"charge":"ch_3Nx","amount":4200}';
    await item.getByRole("button", { name: "Completed…" }).click();
    await page.locator("#action-value").fill(result);
    await page.getByRole("button", { name: "Review…" }).click();
    const restate = await page.getByTestId("restate").innerText();
    assert.match(restate, /payments\/order-1001 of tenant acme becomes COMPLETED with the result below \(33 bytes\)/);
    assert.match(restate, /replays it, and the job does not run again/);
    assert.equal(await page.getByTestId("restate-value").innerText(), result);
    await page.getByRole("button", { name: "Resolve as COMPLETED" }).click();
    const answer = page.getByTestId("answer");
    await answer.filter({ hasText: "acme/payments/order-1001 is now COMPLETED." }).waitFor();
    assert.match(await page.getByTestId("result-kind").innerText(), /JSON, 33 bytes/);

    const rec = await acme.lookup({ namespace: HOLD_NAMESPACE, key: "order-1001" });
    assert.equal(rec.state, State.COMPLETED);
    assert.equal(new TextDecoder().decode(rec.result), result);
    const replay = await acme.claim({ namespace: HOLD_NAMESPACE, key: "order-1001" });
    assert.equal(new TextDecoder().decode(replay.record.result), result, "a later Claim replays the operator's result");

    await page.getByRole("button", { name: "Close" }).click();
    await item.waitFor({ state: "detached" });

    const resolved = logEntries(idemd, "record resolved by an operator");
    assert.ok(
      resolved.some((e) => e.tenant === "acme" && e.namespace === HOLD_NAMESPACE),
      `idemd logs the resolution: ${JSON.stringify(resolved)}`,
    );
    const across = logEntries(idemd, "operator call across tenants");
    assert.ok(
      across.some((e) => e.operator === "ops" && e.tenant === "acme" && e.method === "ResolveRecord"),
      `idemd logs the operator's call on acme's record: ${JSON.stringify(across)}`,
    );
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("a second operator racing on the same record is told NOT_UNRESOLVED, and what the record now is", async () => {
    const globex = client(idemd, "globex");
    await hold(globex, "refund-42", { wait: true });
    await client(idemd, "acme").claim({ namespace: "emails", key: "acme-beside-the-race" });
    const first = await open(idemd);
    const second = await open(idemd);
    for (const { page } of [first, second]) {
      await signIn(page, idemd.tokens.ops!);
      await page.getByRole("link", { name: "Held" }).click();
      await page.locator('[data-testid=held-item][data-key="refund-42"]').waitFor();
    }
    // Both reach the confirmation; the first confirms, then the second.
    await first.page.locator('[data-testid=held-item][data-key="refund-42"]').getByRole("button", { name: "Completed…" }).click();
    await first.page.locator("#action-value").fill("refunded");
    await first.page.getByRole("button", { name: "Review…" }).click();
    await second.page.locator('[data-testid=held-item][data-key="refund-42"]').getByRole("button", { name: "Released…" }).click();
    assert.match(await second.page.getByTestId("restate").innerText(), /becomes RELEASED: the next Claim of this key acquires it and runs the job again/);

    await first.page.getByRole("button", { name: "Resolve as COMPLETED" }).click();
    await first.page.getByTestId("answer").filter({ hasText: "is now COMPLETED" }).waitFor();
    await second.page.getByRole("button", { name: "Release it" }).click();
    const lost = second.page.getByTestId("answer");
    await lost.filter({ hasText: "Someone else was faster." }).waitFor();
    const text = await lost.innerText();
    assert.match(text, /no longer UNRESOLVED/);
    assert.match(text, /Nothing was changed by you/);
    assert.match(text, /globex\/payments\/refund-42 is now COMPLETED/);

    const rec = await globex.lookup({ namespace: HOLD_NAMESPACE, key: "refund-42" });
    assert.equal(rec.state, State.COMPLETED, "the second operator's release changed nothing");
    assert.equal(new TextDecoder().decode(rec.result), "refunded");

    // An operator picks one tenant: the records are that tenant's alone.
    await first.page.getByRole("button", { name: "Close" }).click();
    await first.page.getByTestId("tenant-picker").selectOption("globex");
    await first.page.getByRole("link", { name: "Records" }).click();
    await first.page.locator('tr[data-key="refund-42"]').waitFor();
    assert.equal(await first.page.locator('tr[data-key="acme-beside-the-race"]').count(), 0, "acme's record is not among globex's");
    await first.page.getByTestId("tenant-picker").selectOption("*");
    await first.page.locator('tr[data-key="acme-beside-the-race"]').waitFor();
    await first.context.close();
    await second.context.close();
  });

  test("a tenant's token sees its own records only and cannot pick another tenant", async () => {
    const acme = client(idemd, "acme");
    const globex = client(idemd, "globex");
    await acme.claim({ namespace: "emails", key: "acme-welcome-1" });
    await globex.claim({ namespace: "emails", key: "globex-welcome-1" });
    const { context, page, cspViolations } = await open(idemd);
    await signIn(page, idemd.tokens.acme!);
    await page.getByTestId("who").filter({ hasText: "tenant acme" }).waitFor();
    assert.equal(await page.getByTestId("tenant-picker").count(), 0, "no tenant picker for a tenant's admin");

    await page.getByRole("link", { name: "Records" }).click();
    await page.locator('tr[data-key="acme-welcome-1"]').waitFor();
    const table = await page.getByTestId("records-table").innerText();
    assert.doesNotMatch(table, /globex/, "globex's records are not listed");

    // The key prefix filter, and the detail of a record.
    await page.locator("input[name=prefix]").fill("acme-wel");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByTestId("page-info").filter({ hasText: "1 records" }).waitFor();
    await page.locator('tr[data-key="acme-welcome-1"] a.key').click();
    const fields = await page.getByTestId("record-fields").innerText();
    assert.match(fields, /State\s*PROCESSING/);
    assert.match(fields, /Lease expires\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(in \d+ min\)/);
    await page.getByRole("button", { name: "Close" }).click();

    // What the API refuses, the console cannot do either: acme naming globex.
    const refused = await page.evaluate(async (token) => {
      const res = await fetch("/idem.v1.AdminService/ListRecords", {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
        body: JSON.stringify({ tenant: "globex" }),
      });
      return { status: res.status, body: await res.text() };
    }, idemd.tokens.acme!);
    assert.equal(refused.status, 403);
    assert.match(refused.body, /NOT_OPERATOR/);
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("a bad token, and a tenant that is no admin, get a clear message", async () => {
    const { context, page } = await open(idemd);
    await signIn(page, "not-a-token-of-this-idemd");
    const err = page.getByTestId("signin-error");
    await err.waitFor();
    assert.match(await err.innerText(), /idemd did not accept this token/);
    assert.equal(await page.evaluate(() => window.sessionStorage.getItem("idem.console.token")), null, "a refused token is not kept");

    await signIn(page, idemd.tokens.worker!);
    await err.filter({ hasText: "worker" }).waitFor();
    assert.match(await err.innerText(), /Tenant "worker" may not use the console: it needs admin: true/);
    await context.close();
  });

  test("a deleted record is gone after a confirmation that says what happens", async () => {
    const acme = client(idemd, "acme");
    await acme.claim({ namespace: "exports", key: "stuck-export" });
    const { context, page } = await open(idemd);
    await signIn(page, idemd.tokens.acme!);
    await page.getByRole("link", { name: "Records" }).click();
    await page.locator('tr[data-key="stuck-export"] a.key').click();
    await page.getByRole("button", { name: "Delete…" }).click();
    assert.match(await page.getByTestId("restate").innerText(), /exports\/stuck-export of tenant acme, now PROCESSING at attempt 1, is deleted: idem forgets it/);
    await page.getByRole("button", { name: "Delete it" }).click();
    await page.getByTestId("answer").filter({ hasText: "Deleted acme/exports/stuck-export; it was PROCESSING, attempt 1." }).waitFor();
    await assert.rejects(acme.lookup({ namespace: "exports", key: "stuck-export" }), NotFoundError);
    assert.ok(logEntries(idemd, "record deleted by an operator").some((e) => e.tenant === "acme" && e.namespace === "exports"));
    await context.close();
  });

  test("the console works 375 px wide: the overview, the held queue and a resolution", async () => {
    const acme = client(idemd, "acme");
    await hold(acme, "order-mobile-1", { wait: true });
    const { context, page, cspViolations } = await open(idemd, { width: 375, height: 740 });
    await noHorizontalScroll(page, "sign-in");
    await signIn(page, idemd.tokens.ops!);
    await page.getByTestId("overview-table").waitFor();
    await noHorizontalScroll(page, "overview");
    await page.getByTestId("card-held").click();
    const item = page.locator('[data-testid=held-item][data-key="order-mobile-1"]');
    await item.waitFor();
    await noHorizontalScroll(page, "held queue");
    await item.getByRole("button", { name: "Failed…" }).click();
    await page.locator("#action-value").fill("card declined by the issuer");
    await page.getByRole("button", { name: "Review…" }).click();
    await noHorizontalScroll(page, "confirmation");
    await page.getByRole("button", { name: "Resolve as FAILED" }).click();
    await page.getByTestId("answer").filter({ hasText: "is now FAILED" }).waitFor();
    const rec = await acme.lookup({ namespace: HOLD_NAMESPACE, key: "order-mobile-1" });
    assert.equal(rec.state, State.FAILED);
    assert.equal(rec.error, "card declined by the issuer");
    assert.deepEqual(cspViolations, []);
    await context.close();
  });
});

describe("the console without a config", () => {
  let idemd: Idemd;
  before(async () => {
    idemd = await startIdemd(false);
  });
  after(async () => {
    await idemd?.stop();
  });

  test("says plainly that anyone who reaches the port can act, and asks for no token", async () => {
    const { context, page } = await open(idemd);
    const banner = page.getByTestId("no-auth-banner");
    await banner.waitFor();
    assert.match(await banner.innerText(), /runs without authentication .*anyone who can reach 127\.0\.0\.1:\d+ can read, resolve and delete every record/);
    await page.getByTestId("who").filter({ hasText: "no authentication" }).waitFor();
    assert.equal(await page.locator("#token").count(), 0);
    await context.close();
  });
});
