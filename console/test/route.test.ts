// The console's addresses: what each place writes in the fragment, and
// that reading it back gives the same place.
import assert from "node:assert/strict";
import { test } from "node:test";
import { formatRoute, NO_QUERY, parseRoute, type Route } from "../src/route.js";
import { joinList, parseDuration } from "../src/format.js";

test("every place reads back as itself from its address", () => {
  const places: Route[] = [
    { page: "overview", tenant: "" },
    { page: "overview", tenant: "acme" },
    { page: "records", tenant: "", query: NO_QUERY },
    {
      page: "records",
      tenant: "globex",
      query: { namespace: "payments.eu", state: "UNRESOLVED", prefix: "order 7&x=1#", older: "1h30m", size: "25", after: "cGF5bWVudHMAb3JkZXI", sort: "updated", desc: true },
    },
    { page: "records", tenant: "", query: { ...NO_QUERY, sort: "key", desc: true } },
    { page: "held", tenant: "", namespace: "" },
    { page: "held", tenant: "acme", namespace: "payments" },
    { page: "record", tenant: "", id: { tenant: "acme", namespace: "payments", key: "order-1001" } },
    { page: "record", tenant: "acme", id: { tenant: "acme", namespace: "a/b", key: "order/77?x=1&y=#2 %41é\u{1F600}" } },
    { page: "record", tenant: "", id: { tenant: "", namespace: "emails", key: "k" } },
  ];
  for (const r of places) {
    const hash = formatRoute(r);
    assert.deepEqual(parseRoute(hash), r, `${hash} reads back as ${JSON.stringify(r)}`);
    assert.ok(!/[\s#]/.test(hash.slice(1)), `${hash} has no space and no second #`);
  }
});

test("addresses are short and readable: defaults are left out", () => {
  assert.equal(formatRoute({ page: "overview", tenant: "" }), "#/overview");
  assert.equal(formatRoute({ page: "records", tenant: "", query: NO_QUERY }), "#/records");
  assert.equal(formatRoute({ page: "records", tenant: "acme", query: { ...NO_QUERY, namespace: "emails", state: "FAILED" } }), "#/records?namespace=emails&state=FAILED&tenant=acme");
  assert.equal(formatRoute({ page: "held", tenant: "", namespace: "payments" }), "#/held?namespace=payments");
  assert.equal(formatRoute({ page: "record", tenant: "", id: { tenant: "acme", namespace: "payments", key: "order/1" } }), "#/record/acme/payments/order%2F1");
});

test("what is not a place is the overview, and the console's old addresses still work", () => {
  for (const hash of ["", "#", "#/", "#/nope", "#/record/acme/payments", "#/record/acme/payments/", "#/record/a/%E0%A4%A/k", "#/record/a/b/c/d"]) {
    assert.deepEqual(parseRoute(hash), { page: "overview", tenant: "" }, hash);
  }
  assert.equal(parseRoute("#/records").page, "records");
  assert.equal(parseRoute("#/held").page, "held");
  assert.equal(parseRoute("#records?sort=bogus").page, "records");
  assert.deepEqual(parseRoute("#/records?sort=bogus"), { page: "records", tenant: "", query: NO_QUERY }, "an unknown sort is by key");
});

test("a duration is read as a person writes it, within what the listing takes", () => {
  assert.equal(parseDuration("90s"), 90);
  assert.equal(parseDuration("15m"), 900);
  assert.equal(parseDuration(" 2h "), 7200);
  assert.equal(parseDuration("7d"), 604_800);
  assert.equal(parseDuration("1h30m"), 5400);
  assert.equal(parseDuration("0s"), 0);
  assert.equal(parseDuration("87600h"), 315_360_000);
  assert.throws(() => parseDuration("87600h1s"), /longer than 87600h \(10 years\)/);
  for (const bad of ["", "5", "5x", "-1h", "1.5h", "h", "1h 30m"]) {
    assert.throws(() => parseDuration(bad), /is not a duration: write a number and a unit/, bad);
  }
});

test("lists are written as a sentence has them", () => {
  assert.equal(joinList([]), "");
  assert.equal(joinList(["a"]), "a");
  assert.equal(joinList(["a", "b"]), "a and b");
  assert.equal(joinList(["a", "b", "c"]), "a, b and c");
});
