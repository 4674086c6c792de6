'use strict';
// The Node fingerprint must agree with the Go SDK's client.FingerprintJSON on
// every shared vector, or a Go worker and a Node worker claiming the same job
// would get FINGERPRINT_MISMATCH.

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { canonicalJSON, fingerprintJSON } = require('../lib/fingerprint');

const vectors = require(path.join(__dirname, '..', '..', '..', 'client', 'testdata', 'fingerprint_vectors.json')).vectors;

test('the shared vectors exist', () => {
  assert.ok(vectors.length >= 10, `only ${vectors.length} vectors`);
});

for (const v of vectors) {
  test(`vector: ${v.name}`, () => {
    const value = JSON.parse(v.input);
    assert.equal(canonicalJSON(value), v.canonical);
    assert.equal(fingerprintJSON(value).toString('hex'), v.sha256);
  });
}

test('integer-like keys sort as strings, not in JavaScript property order', () => {
  assert.equal(canonicalJSON({ 9: 'a', 10: 'b', x: 1 }), '{"10":"b","9":"a","x":1}');
});

test('an object and the same payload built in another order fingerprint alike', () => {
  const a = fingerprintJSON({ order: 'o-1', amount_cents: 1250, items: [{ sku: 'x', qty: 2 }] });
  const b = fingerprintJSON(JSON.parse('{"items":[{"qty":2.0,"sku":"x"}],"amount_cents":1.25e3,"order":"o-1"}'));
  assert.deepEqual(a, b);
});

test('values without a JSON form are rejected, as in the Go SDK', () => {
  assert.throws(() => canonicalJSON([Infinity]), RangeError);
  assert.throws(() => canonicalJSON(JSON.parse('[1e400]')), RangeError);
  assert.throws(() => canonicalJSON(10n), TypeError);
  assert.equal(canonicalJSON({ a: undefined, b: [undefined], c: new Date(0) }), '{"b":[null],"c":"1970-01-01T00:00:00.000Z"}');
});
