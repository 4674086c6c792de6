// A payments API on Node's own http server whose POST /payments is guarded
// by idem's Idempotency-Key middleware ("@idemhq/idem/express", which takes
// any connect-style (req, res, next) chain, Express's among them): a client
// that retries a payment after a timeout, with the same key, gets the first
// response back and is charged once. docs/idempotent-http.md walks through
// it; the Go and Python examples beside it serve the same API.
//
//   node server.mjs --listen 127.0.0.1:8081 --idem 127.0.0.1:7070
//
// Callers authenticate with an API key (Authorization: Bearer sk_test_alice
// or sk_test_bob); the account it names is the middleware's caller. GET
// /charges says how many charges this process made; GET /healthz answers ok.

import * as http from "node:http";
import { parseArgs } from "node:util";
import { IdemClient } from "@idemhq/idem";
import { grpcTransport } from "@idemhq/idem/node";
import { idempotency } from "@idemhq/idem/express";

const { values: flags } = parseArgs({
  options: {
    listen: { type: "string", default: "127.0.0.1:8080" },
    idem: { type: "string", default: process.env.IDEM_ADDR || "127.0.0.1:7070" },
  },
});

const accounts = new Map([["sk_test_alice", "alice"], ["sk_test_bob", "bob"]]);

const idem = new IdemClient(grpcTransport({ baseUrl: `http://${flags.idem}`, token: process.env.IDEM_TOKEN || undefined }));
const idempotent = idempotency(idem, {
  namespace: "payments-api",
  caller: (req) => req.account, // set by authenticate, in front
  requireKey: true,
});

let charges = 0; // stands for the card network

function writeJSON(res, status, value) {
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json");
  res.end(JSON.stringify(value) + "\n");
}

async function readJSON(req) {
  let text = "";
  for await (const chunk of req) {
    text += chunk;
  }
  return JSON.parse(text);
}

async function createPayment(req, res) {
  let input;
  try {
    input = await readJSON(req);
  } catch {
    input = {};
  }
  if (!Number.isInteger(input.amount) || input.amount <= 0 || typeof input.currency !== "string" || input.currency === "") {
    writeJSON(res, 400, { error: "send a positive amount and a currency" });
    return;
  }
  charges++; // the side effect that must happen once per payment
  const id = `pay_${charges}`;
  res.setHeader("Location", `/payments/${id}`);
  writeJSON(res, 201, { amount: input.amount, currency: input.currency, id });
}

const server = http.createServer((req, res) => {
  const path = (req.url ?? "/").split("?")[0];
  if (req.method === "GET" && path === "/healthz") {
    res.end("ok\n");
  } else if (req.method === "GET" && path === "/charges") {
    writeJSON(res, 200, { charges });
  } else if (req.method === "POST" && path === "/payments") {
    req.account = accounts.get((req.headers.authorization ?? "").replace(/^Bearer /, ""));
    if (req.account === undefined) {
      writeJSON(res, 401, { error: "unknown API key" });
      return;
    }
    idempotent(req, res, (err) => {
      if (err) {
        console.error("http-payments:", err);
        writeJSON(res, 500, { error: "internal error" });
        return;
      }
      createPayment(req, res).catch((e) => {
        console.error("http-payments:", e);
        writeJSON(res, 500, { error: "internal error" });
      });
    });
  } else {
    writeJSON(res, 404, { error: "not found" });
  }
});

const [host, port] = [flags.listen.slice(0, flags.listen.lastIndexOf(":")), Number(flags.listen.slice(flags.listen.lastIndexOf(":") + 1))];
server.listen(port, host);
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close();
    server.closeAllConnections();
    idem.close();
  });
}
