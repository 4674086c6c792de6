// The console in a real browser: Debian's Chromium, headless, driven by
// playwright-core, against a real idemd (test/idemd.ts). Each test signs
// in from a fresh browser context, as a person opening a new window would.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { connectTransport, IdemClient, NotFoundError, pb, State, UnresolvedError } from "@idemhq/idem";
import { HOLD_NAMESPACE, type Idemd, logEntries, OPERATOR_NAME, startIdemd } from "./idemd.js";

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
async function hold(c: IdemClient, key: string, opts: { wait: boolean; claimant?: string; fingerprint?: Uint8Array; namespace?: string }): Promise<void> {
  const claimant = opts.claimant ?? `worker-${key}`;
  const namespace = opts.namespace ?? HOLD_NAMESPACE;
  await c.claim({ namespace, key, leaseTtlMs: 1000, claimant, fingerprint: opts.fingerprint });
  if (!opts.wait) {
    return;
  }
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    await new Promise((r) => setTimeout(r, 250));
    try {
      await c.claim({ namespace, key, claimant: "a-later-delivery" });
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

/** open opens the console in a fresh browser context, at the address at (a fragment like "#/held", or a whole URL). */
async function open(idemd: Idemd, viewport = { width: 1280, height: 900 }, at = ""): Promise<Opened> {
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
  await page.goto(at.startsWith("http") ? at : idemd.consoleUrl + at);
  return { context, page, cspViolations };
}

/**
 * decideWithReason presses the dialog's button named name, which stays
 * disabled, saying why, until a reason is written: then writes reason and
 * presses it.
 */
async function decideWithReason(page: Page, name: string, reason: string): Promise<void> {
  const button = page.getByRole("dialog").getByRole("button", { name, exact: true });
  assert.ok(await button.isDisabled(), `${name} is disabled while no reason is written`);
  assert.match(await page.getByTestId("reason-hint").innerText(), /^Write why: the reason is kept on the record's timeline/);
  await page.locator("#action-reason").fill("   ");
  assert.ok(await button.isDisabled(), `${name} is disabled while the reason is blank`);
  await page.locator("#action-reason").fill(reason);
  await button.click();
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

    await page.getByRole("link", { name: "Held", exact: true }).click();
    await page.locator("select[name=refresh]").selectOption("2000");
    await page.getByTestId("held-count").filter({ hasText: "Nothing is held." }).waitFor();

    const acme = client(idemd, "acme");
    const fingerprint = new Uint8Array([0xde, 0xad, 0xbe, 0xef]);
    await hold(acme, "order-1001", { wait: false, claimant: "worker-7f3a", fingerprint });
    const item = page.locator('[data-testid=held-item][data-key="order-1001"]');
    await item.waitFor(); // the sweeper held it, and the queue refreshed on its own
    const cells = await item.locator("td").allInnerTexts();
    const headers = await page.getByTestId("held-list").locator("th").allInnerTexts();
    const cell = (h: string) => cells[headers.indexOf(h)] ?? `(no column ${h} in ${headers.join(", ")})`;
    assert.equal(cell("Record"), "acme/payments/order-1001");
    assert.equal(cell("Last claimant"), "worker-7f3a");
    assert.equal(cell("Fingerprint"), "deadbeef");
    assert.equal(cell("Attempts"), "1");
    assert.match(cell("Lease lapsed"), /^(just now|\d+ (s|min) ago)$/);
    assert.match(await item.locator("time").first().getAttribute("title") ?? "", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/, "the time itself on hover");

    const result = '{"charge":"ch_3Nx","amount":4200}';
    await item.getByRole("button", { name: "Completed…" }).click();
    await page.locator("#action-value").fill(result);
    await page.getByRole("button", { name: "Review…" }).click();
    const restate = await page.getByTestId("restate").innerText();
    assert.match(restate, /payments\/order-1001 of tenant acme becomes COMPLETED with the result below \(33 bytes\)/);
    assert.match(restate, /replays it, and the job does not run again/);
    assert.equal(await page.getByTestId("restate-value").innerText(), result);
    await decideWithReason(page, "Resolve as COMPLETED", "charge ch_3Nx is in the card processor's dashboard");
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

    const resolved = logEntries(idemd, "record resolved");
    assert.ok(
      resolved.some((e) => e.tenant === "acme" && e.namespace === HOLD_NAMESPACE && e.reason === "charge ch_3Nx is in the card processor's dashboard"),
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
      await page.getByRole("link", { name: "Held", exact: true }).click();
      await page.locator('[data-testid=held-item][data-key="refund-42"]').waitFor();
    }
    // Both reach the confirmation; the first confirms, then the second.
    await first.page.locator('[data-testid=held-item][data-key="refund-42"]').getByRole("button", { name: "Completed…" }).click();
    await first.page.locator("#action-value").fill("refunded");
    await first.page.getByRole("button", { name: "Review…" }).click();
    await second.page.locator('[data-testid=held-item][data-key="refund-42"]').getByRole("button", { name: "Released…" }).click();
    assert.match(await second.page.getByTestId("restate").innerText(), /becomes RELEASED: the next Claim of this key acquires it and runs the job again/);

    await decideWithReason(first.page, "Resolve as COMPLETED", "refund seen at the bank");
    await first.page.getByTestId("answer").filter({ hasText: "is now COMPLETED" }).waitFor();
    await decideWithReason(second.page, "Release it", "no refund at the bank");
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
    await first.page.getByRole("link", { name: "Records", exact: true }).click();
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

    await page.getByRole("link", { name: "Records", exact: true }).click();
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
    await page.goBack();

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
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.locator('tr[data-key="stuck-export"] a.key').click();
    await page.getByRole("button", { name: "Delete…" }).click();
    assert.match(await page.getByTestId("restate").innerText(), /exports\/stuck-export of tenant acme, now PROCESSING at attempt 1, is deleted: idem forgets it/);
    await decideWithReason(page, "Delete it", "export stuck since the outage; the customer asked again");
    await page.getByTestId("answer").filter({ hasText: "Deleted acme/exports/stuck-export; it was PROCESSING, attempt 1." }).waitFor();
    // The record's page learns that the record is gone; the answer stays until closed.
    await page.getByTestId("record-missing").waitFor({ state: "attached" });
    assert.ok(await page.getByTestId("answer").isVisible(), "the answer is still shown");
    await page.getByRole("button", { name: "Close" }).click();
    assert.match(await page.getByTestId("record-missing").innerText(), /There is no record acme\/exports\/stuck-export: it was deleted/);
    await assert.rejects(acme.lookup({ namespace: "exports", key: "stuck-export" }), NotFoundError);
    assert.ok(logEntries(idemd, "record deleted by an operator").some((e) => e.tenant === "acme" && e.namespace === "exports"));
    // The deletion stays on the key's timeline, with who and why.
    await page.reload();
    const deleted = page.locator("[data-testid=timeline-entry][data-kind=deleted]");
    await deleted.waitFor();
    const told = await deleted.innerText();
    assert.match(told, /Deleted by tenant acme; it was PROCESSING/);
    assert.match(told, /Reason: export stuck since the outage; the customer asked again/);
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
    await decideWithReason(page, "Resolve as FAILED", "the issuer declined it");
    await page.getByTestId("answer").filter({ hasText: "is now FAILED" }).waitFor();
    const rec = await acme.lookup({ namespace: HOLD_NAMESPACE, key: "order-mobile-1" });
    assert.equal(rec.state, State.FAILED);
    assert.equal(rec.error, "card declined by the issuer");
    assert.deepEqual(cspViolations, []);
    await context.close();
  });
});

/** fieldsText is the text of the record's fields, on whatever shows them. */
async function fieldsText(page: Page): Promise<string> {
  return page.getByTestId("record-fields").innerText();
}

/** box is an element's bounding box; it fails when the element is not laid out. */
async function box(page: Page, selector: string): Promise<{ x: number; y: number; width: number; height: number }> {
  const b = await page.locator(selector).first().boundingBox();
  assert.ok(b !== null, `${selector} is not laid out`);
  return b;
}

/**
 * inViewport fails unless the element lies within the viewport as it is,
 * nothing scrolled: across it, and with down also within its height.
 */
async function inViewport(page: Page, selector: string, what: string, down = true): Promise<void> {
  const b = await box(page, selector);
  const vp = page.viewportSize()!;
  const across = b.x >= 0 && b.x + b.width <= vp.width + 0.5;
  const within = !down || (b.y >= 0 && b.y + b.height <= vp.height + 0.5);
  assert.ok(across && within, `${what}: at x ${b.x}..${b.x + b.width}, y ${b.y}..${b.y + b.height} in a ${vp.width}x${vp.height} viewport`);
}

// LAPTOP is what a browser shows of a 1366x768 laptop screen: the task
// bar, the tab strip and the address bar take about 130 px of the height.
const LAPTOP = { width: 1366, height: 640 };

describe("the console an on-call person can link to", () => {
  let idemd: Idemd;
  before(async () => {
    idemd = await startIdemd();
  });
  after(async () => {
    await idemd?.stop();
  });

  test("a record's address, opened cold in a new window, signs in and shows that record on its own page; reload keeps it", async () => {
    const acme = client(idemd, "acme");
    // A key with the characters a URL gives meaning to.
    const key = "order/77?x=1&y=#2 %41é";
    await acme.claim({ namespace: "links", key });
    await acme.claim({ namespace: "links", key: "order/78" });
    const first = await open(idemd);
    await signIn(first.page, idemd.tokens.ops!);
    await first.page.getByRole("link", { name: "Records", exact: true }).click();
    await first.page.locator("input[name=prefix]").fill("order/77");
    await first.page.getByRole("button", { name: "Filter" }).click();
    await first.page.getByTestId("page-info").filter({ hasText: "1 records" }).waitFor();
    await first.page.locator("tr[data-key] a.key").click();
    await first.page.getByTestId("record-page").waitFor();
    const link = first.page.url();
    assert.ok(!link.includes(idemd.tokens.ops!), "the token is not in the address");
    await first.context.close();

    // Someone else opens the pasted link in a fresh window: sign-in first.
    const { context, page, cspViolations } = await open(idemd, undefined, link);
    await signIn(page, idemd.tokens.ops!);
    await page.getByTestId("record-page").waitFor();
    assert.equal(page.url(), link, "signing in keeps the linked address");
    let fields = await fieldsText(page);
    assert.match(fields, /Tenant\s*acme/);
    assert.match(fields, /Namespace\s*links/);
    assert.ok(fields.includes(key), `the record's fields show its key ${key}: ${fields}`);
    assert.equal(await page.locator("dialog[open]").count(), 0, "the record is a page, not a dialog");
    assert.match(await page.locator("h1").innerText(), /acme\/links\/order\/77\?x=1&y=#2 %41é/);

    await page.reload();
    await page.getByTestId("record-page").waitFor();
    fields = await fieldsText(page);
    assert.ok(fields.includes(key), "a reload shows the same record");
    assert.equal(page.url(), link);
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("the records' filters are in the address: a reload keeps them and Back returns to the filtered list", async () => {
    const acme = client(idemd, "acme");
    const globex = client(idemd, "globex");
    for (const key of ["inv-a-1", "inv-a-2", "inv-b-1"]) {
      await acme.claim({ namespace: "invoices", key });
    }
    const done = await acme.claim({ namespace: "invoices", key: "inv-a-3" });
    await acme.complete({ namespace: "invoices", key: "inv-a-3", token: done.record.token, result: "ok" });
    await globex.claim({ namespace: "invoices", key: "inv-a-9" });

    const { context, page, cspViolations } = await open(idemd);
    await signIn(page, idemd.tokens.ops!);
    await page.getByTestId("tenant-picker").selectOption("acme");
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.locator("input[name=namespace]").fill("invoices");
    await page.locator("select[name=state]").selectOption({ label: "PROCESSING" });
    await page.locator("input[name=prefix]").fill("inv-a-");
    await page.getByRole("button", { name: "Filter" }).click();
    const listed = async () => (await page.locator("tr[data-key]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key")))).sort();
    await page.getByTestId("page-info").filter({ hasText: "2 records" }).waitFor();
    assert.deepEqual(await listed(), ["inv-a-1", "inv-a-2"]);
    const filtered = page.url();

    await page.reload();
    await page.getByTestId("page-info").filter({ hasText: "2 records" }).waitFor();
    assert.deepEqual(await listed(), ["inv-a-1", "inv-a-2"], "a reload lists the same records");
    assert.equal(await page.locator("input[name=namespace]").inputValue(), "invoices");
    assert.equal(await page.locator("input[name=prefix]").inputValue(), "inv-a-");
    assert.equal(await page.locator("select[name=state] option:checked").innerText(), "PROCESSING");
    assert.equal(await page.getByTestId("tenant-picker").inputValue(), "acme", "the tenant an operator picked is kept too");

    // Unchanged for at least an hour: none of these.
    await page.locator("input[name=older]").fill("1h");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByText("No records match.").waitFor();
    assert.notEqual(page.url(), filtered);

    await page.goBack();
    await page.getByTestId("page-info").filter({ hasText: "2 records" }).waitFor();
    assert.equal(page.url(), filtered);
    assert.equal(await page.locator("input[name=older]").inputValue(), "", "Back restores the form as well as the list");

    await page.locator('tr[data-key="inv-a-2"] a.key').click();
    await page.getByTestId("record-page").waitFor();
    assert.match(await fieldsText(page), /inv-a-2/);
    await page.goBack();
    await page.getByTestId("page-info").filter({ hasText: "2 records" }).waitFor();
    assert.equal(page.url(), filtered, "Back from a record returns to the list with its filters");
    assert.deepEqual(await listed(), ["inv-a-1", "inv-a-2"]);
    assert.equal(await page.locator("input[name=prefix]").inputValue(), "inv-a-");
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("the page of a listing is in the address, and a filter in a link that is not one is named", async () => {
    const acme = client(idemd, "acme");
    await acme.batchClaim(Array.from({ length: 27 }, (_, i) => ({ namespace: "pages", key: `page-${String(i).padStart(2, "0")}` })));
    const { context, page } = await open(idemd, undefined, "#/records?namespace=pages&size=25");
    await signIn(page, idemd.tokens.acme!);
    await page.getByTestId("page-info").filter({ hasText: "Page 1: 25 records" }).waitFor();
    await page.getByRole("button", { name: "Next →" }).click();
    await page.getByTestId("page-info").filter({ hasText: "Page 2: 2 records" }).waitFor();
    const second = page.url();
    assert.match(second, /[?&]after=/, "the page token is in the address");
    await page.reload();
    await page.getByTestId("page-info").filter({ hasText: "Page 2: 2 records" }).waitFor();
    assert.deepEqual(await page.locator("tr[data-key]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key"))), ["page-25", "page-26"]);
    await page.getByRole("button", { name: "← Previous" }).click();
    await page.getByTestId("page-info").filter({ hasText: "Page 1: 25 records" }).waitFor();
    await page.goBack();
    await page.getByTestId("page-info").filter({ hasText: "Page 2: 2 records" }).waitFor();
    assert.equal(page.url(), second);

    await page.goto(`${idemd.consoleUrl}#/records?older=5x&state=DONE`);
    const problems = await page.getByRole("alert").allInnerTexts();
    assert.ok(problems.some((p) => /^Unchanged for: "5x" is not a duration: write a number and a unit/.test(p)), problems.join(" | "));
    assert.ok(problems.some((p) => /^State: "DONE" is not a state; it is one of PROCESSING, UNRESOLVED/.test(p)), problems.join(" | "));
    await page.locator("input[name=older]").fill("100000h");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByRole("alert").filter({ hasText: 'Unchanged for: "100000h" is longer than 87600h (10 years)' }).waitFor();
    await context.close();
  });

  test("the held queue filters by namespace in the address, shows 20 held records on a laptop screen, and pre-selects no decision", async () => {
    const acme = client(idemd, "acme");
    const keys = Array.from({ length: 21 }, (_, i) => `queue-${String(i).padStart(2, "0")}`);
    await Promise.all([
      ...keys.map((key) => hold(acme, key, { wait: true, namespace: "payments-queue", fingerprint: new TextEncoder().encode(key) })),
      hold(acme, "elsewhere-1", { wait: true, namespace: "payments-other" }),
    ]);
    const { context, page, cspViolations } = await open(idemd, LAPTOP);
    await signIn(page, idemd.tokens.ops!);
    await page.getByRole("link", { name: "Held", exact: true }).click();
    await page.locator('[data-testid=held-item][data-key="elsewhere-1"]').waitFor();
    await page.locator("select[name=namespace]").selectOption("payments-queue");
    await page.locator('[data-testid=held-item][data-key="elsewhere-1"]').waitFor({ state: "detached" });
    await page.reload();
    await page.locator('[data-testid=held-item][data-key="queue-20"]').waitFor();
    assert.equal(await page.locator("select[name=namespace]").inputValue(), "payments-queue", "a reload keeps the namespace");
    assert.equal(await page.locator('[data-testid=held-item][data-key="elsewhere-1"]').count(), 0, "another namespace's held record is not listed");
    assert.equal(await page.locator("[data-testid=held-item]").count(), 21);
    assert.match(await page.getByTestId("held-count").innerText(), /21 records held/);
    for (let i = 0; i < 20; i++) {
      await inViewport(page, `[data-testid=held-item] >> nth=${i}`, `held record ${i + 1} of 20 on a ${LAPTOP.width}x${LAPTOP.height} page`);
    }
    await noHorizontalScroll(page, "held queue");

    // No decision is offered as the default: the three look alike, and
    // none has the focus.
    const row = page.locator("[data-testid=held-item]").first();
    const looks = await Promise.all(
      ["Completed…", "Failed…", "Released…"].map((name) =>
        row.getByRole("button", { name }).evaluate((b) => {
          const cs = getComputedStyle(b);
          return `${b.className}|${cs.backgroundColor}|${cs.color}|${cs.borderColor}|${cs.fontWeight}`;
        }),
      ),
    );
    assert.equal(new Set(looks).size, 1, `the three decisions look alike: ${looks.join(" / ")}`);
    assert.ok(!looks[0]!.startsWith("primary"), `no decision is the primary button: ${looks[0]}`);
    const focused = await page.evaluate(() => (document.activeElement && document.activeElement !== document.body ? document.activeElement.outerHTML : ""));
    assert.doesNotMatch(focused, /Completed|Failed|Released|Release|Fail/, `no decision has the focus: ${focused}`);
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("three held records released at once, after one confirmation that restates the count, the namespaces and the decision", async () => {
    const acme = client(idemd, "acme");
    const globex = client(idemd, "globex");
    await Promise.all([
      hold(acme, "bulk-1", { wait: true, namespace: "payments-bulk" }),
      hold(acme, "bulk-2", { wait: true, namespace: "payments-bulk" }),
      hold(globex, "bulk-3", { wait: true, namespace: "payments-bulk-eu" }),
      hold(acme, "bulk-left-alone", { wait: true, namespace: "payments-bulk" }),
    ]);
    const { context, page, cspViolations } = await open(idemd);
    await signIn(page, idemd.tokens.ops!);
    await page.getByRole("link", { name: "Held", exact: true }).click();
    for (const name of ["acme/payments-bulk/bulk-1", "acme/payments-bulk/bulk-2", "globex/payments-bulk-eu/bulk-3"]) {
      await page.getByRole("checkbox", { name: `Select ${name}` }).check();
    }
    const bar = page.getByTestId("bulk-bar");
    assert.match(await bar.innerText(), /3 selected/);
    const decisions = await bar.getByRole("button").evaluateAll((bs) => bs.map((b) => `${b.className}|${getComputedStyle(b).backgroundColor}`));
    assert.equal(new Set(decisions).size, 1, `the bulk decisions look alike: ${decisions.join(" / ")}`);
    await bar.getByRole("button", { name: "Release…" }).click();
    const dialog = page.getByTestId("confirm-dialog");
    await dialog.waitFor();
    const restate = await dialog.getByTestId("restate").innerText();
    assert.match(restate, /3 records/);
    assert.match(restate, /namespaces payments-bulk and payments-bulk-eu/);
    assert.match(restate, /tenants acme and globex/);
    assert.match(restate, /become RELEASED: the next Claim of each key acquires it and runs the job again/);
    const listed = await dialog.getByTestId("confirm-records").innerText();
    for (const name of ["acme/payments-bulk/bulk-1", "acme/payments-bulk/bulk-2", "globex/payments-bulk-eu/bulk-3"]) {
      assert.ok(listed.includes(name), `the confirmation lists ${name}: ${listed}`);
    }
    assert.ok(!listed.includes("bulk-left-alone"));
    const focused = await page.evaluate(() => document.activeElement?.id ?? "");
    assert.equal(focused, "action-reason", "the confirmation's focus is on the reason, not on the decision");
    await decideWithReason(page, "Release 3 records", "the gateway never received them: its log for the hour is empty");
    await page.getByTestId("answer").filter({ hasText: "Released 3 of 3 records." }).waitFor();
    for (const [c, ns, key] of [
      [acme, "payments-bulk", "bulk-1"],
      [acme, "payments-bulk", "bulk-2"],
      [globex, "payments-bulk-eu", "bulk-3"],
    ] as const) {
      assert.equal((await c.lookup({ namespace: ns, key })).state, State.RELEASED, `${key} is RELEASED`);
    }
    const got = await client(idemd, "globex").raw.admin.getRecord({ namespace: "payments-bulk-eu", key: "bulk-3", includeHistory: true });
    const last = got.history[got.history.length - 1];
    assert.equal(last?.kind, pb.TimelineEntryKind.RESOLVED);
    assert.equal(last?.reason, "the gateway never received them: its log for the hour is empty", "each record of a bulk decision keeps the reason");
    assert.equal((await acme.lookup({ namespace: "payments-bulk", key: "bulk-left-alone" })).state, State.UNRESOLVED, "the record not selected is left alone");
    await page.getByRole("button", { name: "Close" }).click();
    await page.locator('[data-testid=held-item][data-key="bulk-1"]').waitFor({ state: "detached" });
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("a bulk failure reports the record someone else decided first, and fails the others", async () => {
    const acme = client(idemd, "acme");
    await Promise.all(["race-1", "race-2", "race-3"].map((key) => hold(acme, key, { wait: true, namespace: "payments-race" })));
    const { context, page } = await open(idemd, undefined, "#/held?namespace=payments-race");
    await signIn(page, idemd.tokens.acme!);
    await page.locator('[data-testid=held-item][data-key="race-3"]').waitFor();
    await page.getByRole("checkbox", { name: "Select all shown" }).check();
    await page.getByTestId("bulk-bar").getByRole("button", { name: "Fail…" }).click();
    await page.locator("#action-value").fill("card network timeout; refunded by hand");
    await page.getByRole("button", { name: "Review…" }).click();
    const dialog = page.getByTestId("confirm-dialog");
    const restate = await dialog.getByTestId("restate").innerText();
    assert.match(restate, /3 records of namespace payments-race \(tenant acme\) become FAILED with the error below/);
    // Someone else decides race-2 while this confirmation is open.
    await acme.admin.resolveRecord({ namespace: "payments-race", key: "race-2", completed: "charged" });
    await decideWithReason(page, "Fail 3 records", "refunded by hand");
    const answer = page.getByTestId("answer");
    await answer.filter({ hasText: "Failed 2 of 3 records." }).waitFor();
    const text = await answer.innerText();
    assert.match(text, /acme\/payments-race\/race-2: someone else decided it first.*it is now COMPLETED/s);
    for (const key of ["race-1", "race-3"]) {
      const rec = await acme.lookup({ namespace: "payments-race", key });
      assert.equal(rec.state, State.FAILED);
      assert.equal(rec.error, "card network timeout; refunded by hand");
    }
    assert.equal(new TextDecoder().decode((await acme.lookup({ namespace: "payments-race", key: "race-2" })).result), "charged", "the other decision stands");
    await context.close();
  });

  test("375 px wide: the records list shows each record's State, the overview its Held count", async () => {
    const acme = client(idemd, "acme");
    await hold(acme, "narrow-held-1", { wait: true, namespace: "payments-narrow" });
    await acme.claim({ namespace: "notifications-for-customers", key: "a-rather-long-key-of-a-notification-0001" });
    const { context, page, cspViolations } = await open(idemd, { width: 375, height: 740 });
    await signIn(page, idemd.tokens.ops!);
    await page.getByTestId("overview-table").waitFor();
    await noHorizontalScroll(page, "overview");
    await inViewport(page, "[data-testid=overview-table] th:text-is('Held')", "the overview's Held column", false);
    await inViewport(page, "[data-testid=overview-table] tr:has(td:has-text('payments-narrow')) .held-count", "the held count of payments-narrow", false);

    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.locator("input[name=namespace]").fill("notifications-for-customers");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.getByTestId("page-info").filter({ hasText: "1 records" }).waitFor();
    await noHorizontalScroll(page, "records");
    await inViewport(page, "[data-testid=records-table] th:text-is('State')", "the records' State column", false);
    await inViewport(page, "tr[data-key='a-rather-long-key-of-a-notification-0001'] .state", "the record's state", false);
    await inViewport(page, "tr[data-key='a-rather-long-key-of-a-notification-0001'] a.key", "the record's key", false);
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("a record's page copies its key and its token", async () => {
    const acme = client(idemd, "acme");
    const got = await acme.claim({ namespace: "copies", key: "copy-me-7" });
    const { context, page } = await open(idemd);
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(idemd.consoleUrl).origin });
    await signIn(page, idemd.tokens.acme!);
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.locator('tr[data-key="copy-me-7"] a.key').click();
    await page.getByTestId("record-page").waitFor();
    await page.getByRole("button", { name: "Copy key" }).click();
    await page.getByRole("button", { name: "Copy key" }).filter({ hasText: "Copied" }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "copy-me-7");
    await page.getByRole("button", { name: "Copy token" }).click();
    await page.getByRole("button", { name: "Copy token" }).filter({ hasText: "Copied" }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), got.record.token.toString());
    await context.close();
  });

  test("a FAILED record's detail says when it failed, and shows no Completed time", async () => {
    const acme = client(idemd, "acme");
    const got = await acme.claim({ namespace: "failures", key: "gave-up-1" });
    await acme.fail({ namespace: "failures", key: "gave-up-1", token: got.record.token, error: "card declined", retryable: false });
    const { context, page } = await open(idemd);
    await signIn(page, idemd.tokens.acme!);
    await page.getByRole("link", { name: "Records", exact: true }).click();
    await page.locator('tr[data-key="gave-up-1"] a.key').click();
    const fields = await fieldsText(page);
    assert.match(fields, /State\s*FAILED/);
    assert.doesNotMatch(fields, /Completed/, `a FAILED record did not complete: ${fields}`);
    assert.match(fields, /Failed\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
    await context.close();
  });
});

/** untilState waits until namespace/key of the client's tenant is in state (the sweeper gets it there). */
async function untilState(c: IdemClient, namespace: string, key: string, state: State): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while ((await c.lookup({ namespace, key })).state !== state) {
    assert.ok(Date.now() < deadline, `${namespace}/${key} did not become ${State[state]} within ${WAIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

describe("what happened to a record, as it happens", () => {
  let idemd: Idemd;
  before(async () => {
    idemd = await startIdemd();
  });
  after(async () => {
    await idemd?.stop();
  });

  test("a record's page shows its steps, and its timeline: a release, a takeover, a hold, and a resolution with the reason and the operator's name", async () => {
    const acme = client(idemd, "acme");
    const [ns, key] = [HOLD_NAMESPACE, "order-steps-1"];
    const first = await acme.claim({ namespace: ns, key, leaseTtlMs: 60_000, claimant: "worker-a" });
    await acme.fail({ namespace: ns, key, token: first.record.token, error: "gateway timeout", retryable: true });
    const second = await acme.claim({ namespace: ns, key, leaseTtlMs: 1000, claimant: "worker-b" });
    const token = second.record.token;
    await acme.raw.idempotency.completeStep({ namespace: ns, key, token, step: "charge-card", result: new TextEncoder().encode('{"charge":"ch_1","amount":4200}') });
    await acme.raw.idempotency.startStep({ namespace: ns, key, token, step: "send-receipt" });
    await untilState(acme, ns, key, State.UNRESOLVED);

    const { context, page, cspViolations } = await open(idemd, undefined, `#/record/acme/${ns}/${key}`);
    await signIn(page, idemd.tokens.alice!);
    await page.getByTestId("record-page").waitFor();
    assert.equal(await page.getByTestId("who").innerText(), `${OPERATOR_NAME} (operator)`, "the header names the person a named token is");
    const charge = page.locator('[data-testid=step][data-step="charge-card"]');
    await charge.waitFor();
    const chargeText = await charge.innerText();
    assert.match(chargeText, /FINISHED/);
    assert.match(chargeText, /finished \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((just now|\d+ (s|min) ago)\)/);
    assert.ok(chargeText.includes(token.toString()), `the step shows the token that wrote it: ${chargeText}`);
    assert.match(await charge.getByTestId("step-result-kind").innerText(), /JSON, 31 bytes/);
    assert.match(await charge.getByTestId("step-result").innerText(), /"charge": "ch_1",\s+"amount": 4200/);
    const receipt = await page.locator('[data-testid=step][data-step="send-receipt"]').innerText();
    assert.match(receipt, /STARTED/);
    assert.match(receipt, /may or may not have happened/);

    const kinds = () => page.locator("[data-testid=timeline-entry]").evaluateAll((es) => es.map((e) => e.getAttribute("data-kind")));
    assert.deepEqual(await kinds(), ["released", "taken over", "held"], "the timeline is oldest first, newest last");
    const entry = (kind: string) => page.locator(`[data-testid=timeline-entry][data-kind="${kind}"]`).innerText();
    assert.match(await entry("released"), /Released for a retry by its holder, token \d+ \(claimant worker-a\)\s+Error: gateway timeout/);
    assert.match(await entry("taken over"), new RegExp(`Taken over from RELEASED: token ${first.record.token} \\(claimant worker-a\\) → token ${token} \\(claimant worker-b\\)`));
    assert.match(await entry("held"), new RegExp(`Held for resolution: the lease of token ${token} \\(claimant worker-b\\) ran out`));
    assert.match(await entry("held"), /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((just now|\d+ (s|min) ago)\)/, "times are absolute and relative");

    const looks = await page
      .locator(".actions button.decision")
      .evaluateAll((bs) => bs.map((b) => `${b.textContent}:${b.className}|${getComputedStyle(b).backgroundColor}|${getComputedStyle(b).fontWeight}`));
    assert.equal(looks.length, 3, looks.join(" / "));
    assert.equal(new Set(looks.map((l) => l.replace(/^[^:]*:/, ""))).size, 1, `no decision is the default on the record's page: ${looks.join(" / ")}`);
    await page.getByRole("button", { name: "Completed…" }).click();
    await page.locator("#action-value").fill('{"charge":"ch_1"}');
    await page.getByRole("button", { name: "Review…" }).click();
    await decideWithReason(page, "Resolve as COMPLETED", "ch_1 is captured; the receipt went out by hand");
    await page.getByTestId("answer").filter({ hasText: "is now COMPLETED" }).waitFor();
    await page.getByRole("button", { name: "Close" }).click();
    const resolved = page.locator("[data-testid=timeline-entry][data-kind=resolved]");
    await resolved.waitFor();
    assert.deepEqual(await kinds(), ["released", "taken over", "held", "resolved"]);
    const told = await resolved.innerText();
    assert.match(told, new RegExp(`Resolved as COMPLETED by ${OPERATOR_NAME.replace(/\./g, "\\.")} \\(tenant ops\\)`));
    assert.match(told, /Reason: ch_1 is captured; the receipt went out by hand/);

    const got = await acme.raw.admin.getRecord({ namespace: ns, key, includeHistory: true });
    const last = got.history[got.history.length - 1]!;
    assert.deepEqual([last.actor?.tenant, last.actor?.operator, last.reason], ["ops", OPERATOR_NAME, "ch_1 is captured; the receipt went out by hand"]);
    await page.setViewportSize({ width: 375, height: 740 });
    await noHorizontalScroll(page, "a record's page with steps and a timeline");
    assert.deepEqual(cspViolations, []);
    await context.close();
  });

  test("the held queue shows a decision made through the API without a reload, and the refreshes add no log lines", async () => {
    const acme = client(idemd, "acme");
    await hold(acme, "live-1", { wait: true });
    await hold(acme, "live-2", { wait: true });
    const { context, page, cspViolations } = await open(idemd, undefined, "#/held");
    let listings = 0;
    page.on("request", (r) => {
      if (r.url().endsWith("/idem.v1.AdminService/ListRecords")) {
        listings++;
      }
    });
    await signIn(page, idemd.tokens.ops!);
    await page.locator("select[name=refresh]").selectOption("2000");
    const one = page.locator('[data-testid=held-item][data-key="live-1"]');
    await one.waitFor();
    await acme.raw.admin.resolveRecord({ namespace: HOLD_NAMESPACE, key: "live-1", resolution: { case: "released", value: {} }, reason: "a resolver saw no charge" });
    await one.waitFor({ state: "detached" });
    assert.equal(await page.locator('[data-testid=held-item][data-key="live-2"]').count(), 1, "the other held record stays");
    // A few more refreshes: idemd writes the operator's cross-tenant line once, not once a refresh.
    const seen = listings;
    while (listings < seen + 3) {
      await page.waitForRequest((r) => r.url().endsWith("/idem.v1.AdminService/ListRecords"));
    }
    const across = logEntries(idemd, "operator call across tenants").filter((e) => e.level === "INFO" && e.operator === "ops" && e.all_tenants === true && e.who === undefined);
    assert.equal(across.length, 1, `one line for the operator's token across all tenants, however often the queue refreshes: ${JSON.stringify(across)}`);

    // A hidden tab does not refresh; shown again, it refreshes at once.
    const setVisibility = (state: string) =>
      page.evaluate((v) => {
        Object.defineProperty(document, "visibilityState", { configurable: true, get: () => v });
        document.dispatchEvent(new Event("visibilitychange"));
      }, state);
    await setVisibility("hidden");
    await page.waitForTimeout(500); // a listing already under way is still reported
    const hiddenFrom = listings;
    await acme.raw.admin.resolveRecord({ namespace: HOLD_NAMESPACE, key: "live-2", resolution: { case: "failed", value: { error: "declined" } }, reason: "the bank declined it" });
    await page.waitForTimeout(5000);
    assert.equal(listings, hiddenFrom, "no refresh while the tab is hidden (the interval is 2 s)");
    assert.equal(await page.locator('[data-testid=held-item][data-key="live-2"]').count(), 1, "a hidden tab keeps what it showed");
    await setVisibility("visible");
    await page.locator('[data-testid=held-item][data-key="live-2"]').waitFor({ state: "detached" });
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
