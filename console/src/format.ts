// How the console shows times, bytes and states: pure functions, tested in
// test/format.test.ts.
import { pb, State } from "@idemhq/idem";

/** stateName is a State's name as the API and the CLI spell it: "PROCESSING". */
export function stateName(s: State): string {
  const name = State[s];
  return name === undefined ? `STATE_${s}` : name;
}

/** STATES are the states a record can be in, in the order tables show them. */
export const STATES: readonly State[] = [
  State.PROCESSING,
  State.UNRESOLVED,
  State.COMPLETED,
  State.FAILED,
  State.RELEASED,
  State.EXPIRED,
];

/** utc shows a time to the second in UTC: "2026-12-01 22:41:07 UTC". */
export function utc(d: Date): string {
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

/**
 * relative says how far d is from now in the largest whole unit: "just now",
 * "42 s ago", "3 min ago", "in 5 h", "2 d ago".
 */
export function relative(d: Date, now: Date): string {
  const ms = d.getTime() - now.getTime();
  const abs = Math.abs(ms);
  if (abs < 1000) {
    return "just now";
  }
  const units: [number, string][] = [
    [86_400_000, "d"],
    [3_600_000, "h"],
    [60_000, "min"],
    [1000, "s"],
  ];
  let text = "";
  for (const [size, unit] of units) {
    if (abs >= size) {
      text = `${Math.floor(abs / size)} ${unit}`;
      break;
    }
  }
  return ms < 0 ? `${text} ago` : `in ${text}`;
}

/** hex writes bytes as lowercase hex without separators. */
export function hex(b: Uint8Array): string {
  let s = "";
  for (const byte of b) {
    s += byte.toString(16).padStart(2, "0");
  }
  return s;
}

/** hexDump writes bytes 16 to a line: offset, hex, and the printable ASCII. */
export function hexDump(b: Uint8Array): string {
  const lines: string[] = [];
  for (let off = 0; off < b.length; off += 16) {
    const row = b.subarray(off, off + 16);
    const hexes = [...row].map((x) => x.toString(16).padStart(2, "0")).join(" ");
    const ascii = [...row].map((x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : ".")).join("");
    lines.push(`${off.toString(16).padStart(8, "0")}  ${hexes.padEnd(47)}  ${ascii}`);
  }
  return lines.join("\n");
}

/** Decoded is how a result's bytes are best shown. */
export interface Decoded {
  kind: "empty" | "json" | "text" | "binary";
  /** text is what to show: indented JSON, the text, or a hex dump. */
  text: string;
}

const strictUTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * decodeBytes shows bytes as JSON (indented, every value exactly as stored)
 * when they are a JSON document, as text when they are UTF-8 without control
 * characters other than tab and line breaks, and as a hex dump otherwise.
 */
export function decodeBytes(b: Uint8Array): Decoded {
  if (b.length === 0) {
    return { kind: "empty", text: "" };
  }
  let text: string;
  try {
    text = strictUTF8.decode(b);
  } catch {
    return { kind: "binary", text: hexDump(b) };
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(text)) {
    return { kind: "binary", text: hexDump(b) };
  }
  const trimmed = text.trim();
  if (/^[[{]/.test(trimmed)) {
    try {
      JSON.parse(trimmed);
      return { kind: "json", text: indentJSON(trimmed) };
    } catch {
      // not JSON: text
    }
  }
  return { kind: "text", text };
}

/**
 * indentJSON re-indents a valid JSON document by its tokens, so that every
 * number and string keeps its exact text (JSON.parse would round a large
 * number).
 */
export function indentJSON(json: string): string {
  let out = "";
  let depth = 0;
  const nl = () => "\n" + "  ".repeat(depth);
  for (let i = 0; i < json.length; i++) {
    const c = json[i]!;
    if (c === '"') {
      let j = i + 1;
      while (j < json.length && json[j] !== '"') {
        j += json[j] === "\\" ? 2 : 1;
      }
      out += json.slice(i, j + 1);
      i = j;
    } else if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      let j = i + 1;
      while (j < json.length && /\s/.test(json[j]!)) {
        j++;
      }
      if (json[j] === close) {
        out += c + close;
        i = j;
      } else {
        depth++;
        out += c + nl();
      }
    } else if (c === "}" || c === "]") {
      depth--;
      out += nl() + c;
    } else if (c === ",") {
      out += "," + nl();
    } else if (c === ":") {
      out += ": ";
    } else if (!/\s/.test(c)) {
      out += c;
    }
  }
  return out;
}

/** byteLength is the length of text in UTF-8. */
export function byteLength(text: string): number {
  return new TextEncoder().encode(text).length;
}

/** plural writes "1 record", "2 records". */
export function plural(n: number | bigint, one: string, many: string): string {
  return `${n} ${n === 1 || n === 1n ? one : many}`;
}

/** MAX_OLDER_THAN_S is the longest older_than ListRecords takes: 87600h (10 years), in seconds. */
export const MAX_OLDER_THAN_S = 87_600 * 3600;

const UNIT_S: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/**
 * parseDuration reads how long a record has not changed, as a person writes
 * it: "90s", "15m", "2h", "7d", "1h30m". It returns whole seconds, or throws
 * an Error that says what to write.
 */
export function parseDuration(text: string): number {
  const t = text.trim();
  if (!/^(\d+[smhd])+$/.test(t)) {
    throw new Error(`"${text}" is not a duration: write a number and a unit (s, m, h or d), like 90s, 15m, 2h, 7d or 1h30m`);
  }
  let s = 0;
  for (const [, n, unit] of t.matchAll(/(\d+)([smhd])/g)) {
    s += Number(n) * UNIT_S[unit!]!;
  }
  if (s > MAX_OLDER_THAN_S) {
    throw new Error(`"${text}" is longer than 87600h (10 years), the longest the listing takes`);
  }
  return s;
}

/** joinList writes ["a", "b", "c"] as "a, b and c". */
export function joinList(items: readonly string[]): string {
  if (items.length <= 1) {
    return items[0] ?? "";
  }
  return `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

/** stepStateName is a StepState's name without its prefix: "STARTED", "FINISHED". */
export function stepStateName(s: pb.StepState): string {
  const name = pb.StepState[s];
  return name === undefined ? `STEP_STATE_${s}` : name;
}

/** MAX_REASON_BYTES is the longest reason ResolveRecord and DeleteRecord take, in bytes of UTF-8. */
export const MAX_REASON_BYTES = 1024;

/**
 * reasonProblem says why a reason cannot be sent yet ("" when it can): the
 * console asks for one, though the API takes none, so that the timeline
 * says why a person decided.
 */
export function reasonProblem(reason: string): string {
  if (reason.trim() === "") {
    return "Write why: the reason is kept on the record's timeline, with who you are, for the next person who looks.";
  }
  if (reason.includes("\u0000")) {
    return "The reason may not contain a NUL character.";
  }
  const n = byteLength(reason);
  if (n > MAX_REASON_BYTES) {
    return `The reason is ${n} bytes; the limit is ${MAX_REASON_BYTES}.`;
  }
  return "";
}

/**
 * actorName says who made a call a timeline entry records: the token's
 * name or the resolver's, then the tenant ("alice@example.com (tenant
 * ops)", "resolver refunds-bot (tenant acme)", "tenant acme").
 */
export function actorName(a: pb.Actor | undefined): string {
  if (a === undefined) {
    return "someone unknown";
  }
  const tenant = a.tenant ? `tenant ${a.tenant}` : "";
  const who = a.resolver ? `resolver ${a.resolver}` : a.operator;
  if (who === "") {
    return tenant || "someone unknown";
  }
  return tenant ? `${who} (${tenant})` : who;
}

/** Told is how the console tells a timeline entry: a headline and the lines under it. */
export interface Told {
  /** kind is the entry's kind in a word, for its badge: "taken over", "resolved". */
  kind: string;
  headline: string;
  details: string[];
}

const claimantOf = (c: string) => (c ? ` (claimant ${c})` : "");

/** tellEntry says what a timeline entry records, in words for the person at the console. */
export function tellEntry(e: pb.TimelineEntry): Told {
  const K = pb.TimelineEntryKind;
  const details: string[] = [];
  let kind: string;
  let headline: string;
  switch (e.kind) {
    case K.TAKEN_OVER:
      kind = "taken over";
      headline = `Taken over from ${stateName(e.previousState)}: token ${e.previousToken}${claimantOf(e.previousClaimant)} → token ${e.token}${claimantOf(e.claimant)}`;
      break;
    case K.FAILED:
      kind = "failed";
      headline = `Failed for good by its holder, token ${e.token}${claimantOf(e.claimant)}`;
      break;
    case K.RELEASED:
      kind = "released";
      headline = `Released for a retry by its holder, token ${e.token}${claimantOf(e.claimant)}`;
      break;
    case K.HELD:
      kind = "held";
      headline = `Held for resolution: the lease of token ${e.token}${claimantOf(e.claimant)} ran out under a hold policy`;
      break;
    case K.RESOLVED:
      kind = "resolved";
      headline = `Resolved as ${stateName(e.state)} by ${actorName(e.actor)}`;
      break;
    case K.DELETED:
      kind = "deleted";
      headline = `Deleted by ${actorName(e.actor)}; it was ${stateName(e.previousState)}, token ${e.token}`;
      break;
    case K.FINGERPRINT_MISMATCH:
      kind = "fingerprint mismatch";
      headline = `A Claim${claimantOf(e.claimant)} with another fingerprint was refused`;
      details.push(`Its fingerprint: ${hex(e.fingerprint) || "none"}`);
      break;
    default:
      kind = "other";
      headline = `Entry of kind ${e.kind}`;
  }
  if (e.kind === K.RESOLVED || e.kind === K.DELETED) {
    details.push(e.reason ? `Reason: ${e.reason}` : "No reason was given.");
  }
  if (e.error) {
    details.push(`Error: ${e.error}`);
  }
  return { kind, headline, details };
}
