// Takes the screenshots of docs/console.md: the overview, the held queue
// with three records checked, the confirmation of their release, a
// record's page, and its steps and timeline once resolved, as an operator
// (alice@example.com) sees them on a real idemd with a few records of two
// tenants.
//   node build/tools/screenshots.mjs ../docs   (make console-screenshots)
import * as path from "node:path";
import { chromium } from "playwright-core";
import { connectTransport, IdemClient, UnresolvedError } from "@idemhq/idem";
import { HOLD_NAMESPACE, startIdemd } from "./idemd.js";

const out = path.resolve(process.argv[2] ?? ".");
const idemd = await startIdemd();
try {
  const client = (tenant: string) => new IdemClient(connectTransport({ baseUrl: idemd.url, token: idemd.tokens[tenant] }));
  const acme = client("acme");
  const globex = client("globex");
  for (const [c, ns, n, done] of [
    [acme, "emails", 14, 11],
    [acme, "exports", 3, 1],
    [globex, "webhooks", 9, 6],
  ] as const) {
    for (let i = 0; i < n; i++) {
      const got = await c.claim({ namespace: ns, key: `${ns}-${1000 + i}` });
      if (i < done) {
        await c.complete({ namespace: ns, key: `${ns}-${1000 + i}`, token: got.record.token, result: JSON.stringify({ sent: true, id: i }) });
      }
    }
  }
  const held: [IdemClient, string, string][] = [
    [acme, "order-7731", "worker-3c9e1f"],
    [acme, "order-7735", "worker-3c9e1f"],
    [acme, "order-7740", "worker-91aa07"],
    [acme, "order-7742", "worker-91aa07"],
    [globex, "refund-2208", "worker-b17d42"],
    [globex, "refund-2211", "worker-b17d42"],
  ];
  // STEPS_KEY was released once by a worker that gave up, taken over, and
  // held with one step finished and one that may or may not have happened.
  const STEPS_KEY = "order-7740";
  for (const [c, key, claimant] of held) {
    const fingerprint = new TextEncoder().encode(key).slice(0, 8);
    if (key === STEPS_KEY) {
      const first = await c.claim({ namespace: HOLD_NAMESPACE, key, leaseTtlMs: 60_000, claimant: "worker-5e02aa", fingerprint });
      await c.fail({ namespace: HOLD_NAMESPACE, key, token: first.record.token, error: "payment gateway timed out", retryable: true });
    }
    const got = await c.claim({ namespace: HOLD_NAMESPACE, key, leaseTtlMs: 1000, claimant, fingerprint });
    if (key === STEPS_KEY) {
      const token = got.record.token;
      const charge = new TextEncoder().encode('{"charge":"ch_3Nx8","amount":4200,"currency":"eur"}');
      await c.raw.idempotency.completeStep({ namespace: HOLD_NAMESPACE, key, token, step: "charge-card", result: charge });
      await c.raw.idempotency.startStep({ namespace: HOLD_NAMESPACE, key, token, step: "send-receipt" });
    }
  }
  for (let i = 0; i < 5; i++) {
    const got = await acme.claim({ namespace: HOLD_NAMESPACE, key: `order-78${10 + i}` });
    if (i < 3) {
      await acme.complete({ namespace: HOLD_NAMESPACE, key: `order-78${10 + i}`, token: got.record.token, result: '{"charge":"ok"}' });
    }
  }
  for (const [c, key] of held) {
    for (;;) {
      await new Promise((r) => setTimeout(r, 300));
      try {
        await c.claim({ namespace: HOLD_NAMESPACE, key });
      } catch (err) {
        if (err instanceof UnresolvedError) {
          break;
        }
      }
    }
  }
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 640 }, colorScheme: "light", timezoneId: "UTC", locale: "en-US" });
  await page.goto(idemd.consoleUrl);
  await page.locator("#token").fill(idemd.tokens.alice!);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("overview-table").waitFor();
  await page.locator("select[name=refresh]").selectOption("0");
  await page.screenshot({ path: path.join(out, "console-overview.png") });
  await page.getByTestId("card-held").click();
  await page.locator("[data-testid=held-item]").nth(held.length - 1).waitFor();
  for (const name of ["acme/payments/order-7731", "acme/payments/order-7735", "globex/payments/refund-2208"]) {
    await page.getByRole("checkbox", { name: `Select ${name}` }).check();
  }
  await page.setViewportSize({ width: 1200, height: 420 });
  await page.screenshot({ path: path.join(out, "console-held.png") });
  await page.setViewportSize({ width: 1200, height: 640 });
  await page.getByTestId("bulk-bar").getByRole("button", { name: "Release…" }).click();
  await page.getByTestId("confirm-records").waitFor();
  await page.screenshot({ path: path.join(out, "console-confirm.png") });
  await page.getByRole("button", { name: "Cancel" }).click();
  await page.locator(`[data-testid=held-item][data-key="${STEPS_KEY}"] a.key`).click();
  await page.getByTestId("record-fields").waitFor();
  await page.getByTestId("step").first().waitFor();
  await page.setViewportSize({ width: 1200, height: 760 });
  await page.screenshot({ path: path.join(out, "console-record.png") });

  await page.getByRole("button", { name: "Completed…" }).click();
  await page.locator("#action-value").fill('{"charge":"ch_3Nx8","amount":4200,"currency":"eur"}');
  await page.getByRole("button", { name: "Review…" }).click();
  await page.locator("#action-reason").fill("ch_3Nx8 is captured in the processor's dashboard; the receipt was sent by hand");
  await page.getByRole("button", { name: "Resolve as COMPLETED" }).click();
  await page.getByRole("button", { name: "Close" }).click();
  await page.locator("[data-testid=timeline-entry][data-kind=resolved]").waitFor();
  await page.evaluate(() => window.scrollTo(0, 0)); // bounding boxes in the page's coordinates, as the clip is
  const steps = (await page.getByTestId("steps").boundingBox())!;
  const timeline = (await page.getByTestId("timeline").boundingBox())!;
  const clip = { x: 0, y: steps.y - 1, width: 1200, height: timeline.y + timeline.height - steps.y + 13 };
  await page.screenshot({ path: path.join(out, "console-timeline.png"), fullPage: true, clip });

  await browser.close();
  console.log(`screenshots in ${out}: console-overview.png, console-held.png, console-confirm.png, console-record.png, console-timeline.png`);
} finally {
  await idemd.stop();
}
