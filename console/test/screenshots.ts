// Takes the screenshots of docs/console.md: the overview, the held queue
// with three records checked, the confirmation of their release, and a
// record's page, as an operator sees them on a real idemd with a few
// records of two tenants.
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
  for (const [c, key, claimant] of held) {
    const fingerprint = new TextEncoder().encode(key).slice(0, 8);
    await c.claim({ namespace: HOLD_NAMESPACE, key, leaseTtlMs: 1000, claimant, fingerprint });
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
  await page.locator("#token").fill(idemd.tokens.ops!);
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
  await page.locator('[data-testid=held-item][data-key="order-7740"] a.key').click();
  await page.getByTestId("record-fields").waitFor();
  await page.setViewportSize({ width: 1200, height: 760 });
  await page.screenshot({ path: path.join(out, "console-record.png") });

  await browser.close();
  console.log(`screenshots in ${out}: console-overview.png, console-held.png, console-confirm.png, console-record.png`);
} finally {
  await idemd.stop();
}
