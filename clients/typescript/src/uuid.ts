/**
 * randomUUID returns a random (version 4) UUID from the runtime's
 * cryptographic generator: Web Crypto where it is global (Node 19+, Deno,
 * Bun, browsers, edge runtimes), node:crypto on Node 18.
 */
export async function randomUUID(): Promise<string> {
  const webCrypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (typeof webCrypto?.randomUUID === "function") {
    return webCrypto.randomUUID();
  }
  // A variable keeps bundlers for browsers from resolving node:crypto, which
  // only a runtime without Web Crypto reaches.
  const nodeCrypto = "node:crypto";
  const m = (await import(nodeCrypto)) as { randomUUID: () => string };
  return m.randomUUID();
}
