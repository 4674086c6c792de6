import { messageOf } from "./errors.js";

// Copied from limits/limits.go in the Go module; limits/copies_test.go fails when a copy disagrees.
/** MAX_ERROR_BYTES is the server's bound on Fail's error text, in bytes of UTF-8. */
export const MAX_ERROR_BYTES = 4096;

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

// A lone surrogate: a high one not followed by a low one, or a low one not
// preceded by a high one. TextEncoder writes each as U+FFFD.
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * storableText returns s as text idem stores, for an error message that must
 * be recorded whatever it holds: every NUL (U+0000) and every lone UTF-16
 * surrogate (which has no UTF-8 form) becomes U+FFFD, and the text is cut to
 * at most maxBytes bytes of UTF-8 on a character boundary. Text that is
 * already fine comes back unchanged.
 */
export function storableText(s: string, maxBytes: number = MAX_ERROR_BYTES): string {
  // Each UTF-16 code unit is at least one byte of UTF-8, so the first
  // maxBytes units and the rest of a pair cut in two are all it needs.
  if (s.length > maxBytes + 1) {
    s = s.slice(0, maxBytes + 1);
  }
  s = s.replace(/\0/g, "\uFFFD").replace(loneSurrogate, "\uFFFD");
  const bytes = utf8Encoder.encode(s);
  if (bytes.length <= maxBytes) {
    return s;
  }
  let end = maxBytes;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) {
    end--; // back to the first byte of the character the cut falls in
  }
  return utf8Decoder.decode(bytes.subarray(0, end));
}

const strictUTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * utf8Text returns a result's bytes as UTF-8 text, as Python's Result.text()
 * does: a byte order mark is kept, and bytes that are not UTF-8 throw a
 * TypeError.
 */
export function utf8Text(value: Uint8Array): string {
  try {
    return strictUTF8.decode(value);
  } catch (err) {
    throw new TypeError(`the result (${value.length} bytes) is not UTF-8 text; its bytes are in .value`, { cause: err });
  }
}

/**
 * jsonOf returns a result's bytes parsed as JSON, as Python's Result.json()
 * does: a leading byte order mark is skipped, text that is not JSON throws a
 * SyntaxError, and bytes that are not UTF-8 a TypeError.
 */
export function jsonOf<T = unknown>(value: Uint8Array): T {
  const text = utf8Text(value);
  try {
    return JSON.parse(text.startsWith("\ufeff") ? text.slice(1) : text) as T;
  } catch (err) {
    throw new SyntaxError(`the result (${value.length} bytes) is not JSON: ${messageOf(err)}; read it with .text()`, { cause: err });
  }
}
