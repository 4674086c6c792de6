// Results as large as idemd takes, on both stores (the harness of
// internal/testsupport/sdkharness with --max-result-bytes at its 16 MiB
// ceiling), over both transports: completed by do() and read back by do(),
// claim(), lookup(), the batch calls and a page of listRecords, several in
// one answer; one larger, refused with an error that names the limit; and
// a doBatch whose BatchClaim answer was lost on its way back
// (too large for a proxy, say), though the server acquired a job in it:
// halved and sent again, the job's Claim is answered ACQUIRED under its
// claimant, and the handler runs.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { type BatchResult, CompletionUnknownError, connectTransport, IdemClient, Outcome, State } from "../src/index.js";
import { grpcTransport } from "../src/node.js";
import { startHarness, type Harness } from "./harness.js";

const MIB = 1 << 20;
const CEILING = 16 * MIB; // idemd's most --max-result-bytes

type Kind = "grpc" | "connect";

/** same reports whether a and b hold the same bytes, without a deep compare of megabytes. */
const same = (a: Uint8Array, b: Uint8Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);

function value<T>(r: BatchResult<T, unknown> | undefined): T {
  assert.ok(r !== undefined, "no item");
  assert.ok(r.ok, `${String(r.ok ? "" : r.error)}; want no error`);
  return r.value;
}

for (const store of ["postgres", "sqlite"] as const) {
  describe(`results up to 16 MiB on ${store}`, { timeout: 600_000 }, () => {
    let h: Harness;
    const clients: IdemClient[] = [];
    const client = (kind: Kind, tenant: keyof Harness["tokens"] = "worker", interceptors: Interceptor[] = []) => {
      const token = h.tokens[tenant];
      const c = new IdemClient(
        kind === "grpc"
          ? grpcTransport({ baseUrl: `http://${h.grpc_addr}`, token, interceptors })
          : connectTransport({ baseUrl: h.http_url, token, interceptors }),
      );
      clients.push(c);
      return c;
    };
    const key = (name: string) => `${name}-${randomBytes(4).toString("hex")}`;

    before(async () => {
      h = await startHarness(store, { maxResultBytes: CEILING });
    });
    after(async () => {
      for (const c of clients) {
        c.close();
      }
      await h?.stop();
    });

    for (const kind of ["grpc", "connect"] as const) {
      it(`reads results of every allowed size over ${kind}`, async () => {
        const c = client(kind);
        const ns = h.namespaces.plain;
        const prefix = key(`large-${kind}`);
        const keys: string[] = [];
        const results: Uint8Array[] = [];
        for (const size of [4 * MIB, CEILING]) {
          const want = new Uint8Array(size).fill(0x72);
          const k = `${prefix}-${size}`;
          keys.push(k);
          results.push(want);
          const got = await c.do({ namespace: ns, key: k }, () => want);
          assert.ok(same(got.value, want) && !got.replayed && got.record.state === State.COMPLETED, `do: ${got.value.length} bytes`);
          const again = await c.do({ namespace: ns, key: k }, () => assert.fail("the handler ran again"));
          assert.ok(again.replayed && same(again.value, want), `do again: ${again.value.length} bytes`);
          const claimed = await c.claim({ namespace: ns, key: k });
          assert.equal(claimed.outcome, Outcome.COMPLETED);
          assert.ok(same(claimed.record.result, want), `claim: ${claimed.record.result.length} bytes`);
          assert.ok(same((await c.lookup({ namespace: ns, key: k })).result, want), "lookup");
          assert.ok(same(value((await c.batchClaim([{ namespace: ns, key: k }]))[0]).record.result, want));
        }
        // Answers holding both: more than the largest request idemd reads.
        const recs = await c.batchLookup(keys.map((k) => ({ namespace: ns, key: k })));
        recs.forEach((r, i) => assert.ok(same(value(r).result, results[i]!), `batchLookup item ${i}`));
        const page = await client(kind, "operator").admin.listRecords({ tenant: "worker", namespace: ns, keyPrefix: prefix });
        assert.deepEqual(page.records.map((r) => r.result.length).sort(), results.map((r) => r.length).sort());
      });
    }

    for (const kind of ["grpc", "connect"] as const) {
      it(`names the limit of a result too large for idemd over ${kind}`, async () => {
        const c = client(kind);
        const err = await c.do({ namespace: h.namespaces.plain, key: key("too-large") }, () => new Uint8Array(17 * MIB)).then(
          () => assert.fail("do resolved; want CompletionUnknownError"),
          (e: unknown) => e,
        );
        assert.ok(err instanceof CompletionUnknownError, String(err));
        assert.match(String(err), /--max-result-bytes/);
      });
    }

    it("acquires a job whose BatchClaim answer was lost after the server acquired it, when doBatch sends it again", async () => {
      const ns = h.namespaces.plain;
      const stored = new Uint8Array(600 << 10).fill(0x73);
      const prefix = key("lost");
      const replays = [`${prefix}-a`, `${prefix}-b`];
      const fresh = `${prefix}-new`;
      const setup = client("connect");
      for (const k of replays) {
        await setup.do({ namespace: ns, key: k }, () => stored);
      }
      const proxyLimit = 1 * MIB; // of results: one of the stored results passes, two do not
      const batches: [number, boolean][] = [];
      const proxy: Interceptor = (next) => async (req) => {
        const res = await next(req); // idemd did the items
        if (req.method.name === "BatchClaim" && !res.stream) {
          const results = (res.message as unknown as { results: { result: { case?: string; value?: { record?: { result: Uint8Array } } } }[] }).results;
          const bytes = results.reduce((n, r) => n + (r.result.case === "response" ? (r.result.value?.record?.result.length ?? 0) : 0), 0);
          const lost = bytes > proxyLimit;
          batches.push([(req.message as unknown as { requests: unknown[] }).requests.length, lost]);
          if (lost) {
            throw new ConnectError("the answer is larger than the proxy passes", Code.ResourceExhausted);
          }
        }
        return res;
      };
      const c = client("connect", "worker", [proxy]);
      const ran: number[] = [];
      const out = await c.doBatch([...replays, fresh].map((k) => ({ namespace: ns, key: k })), (_, i) => {
        ran.push(i);
        return "done";
      });
      assert.deepEqual(batches[0], [3, true], `BatchClaims ${JSON.stringify(batches)}; want the first one's answer lost`);
      assert.deepEqual(ran, [2], "the handler ran for the new job only");
      for (const r of out.slice(0, 2)) {
        const v = value(r);
        assert.ok(v.replayed && same(v.value, stored));
      }
      const mine = value(out[2]);
      assert.equal(new TextDecoder().decode(mine.value), "done");
      assert.equal(mine.replayed, false);
      const rec = await c.lookup({ namespace: ns, key: fresh });
      assert.equal(rec.state, State.COMPLETED);
      assert.equal(rec.attempt, 1);
    });
  });
}
