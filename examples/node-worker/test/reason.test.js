'use strict';
// Reason is read from the proto enum idem.v1.ErrorReason: its names are the
// ErrorInfo reasons the server sends.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Reason } = require('../lib/idem');

test('Reason names the ErrorInfo reasons of idem.v1.ErrorReason', () => {
  for (const reason of ['LEASE_LOST', 'FINGERPRINT_MISMATCH', 'ALREADY_TERMINAL', 'NOT_FOUND', 'INVALID_KEY', 'RATE_LIMITED', 'UNAUTHENTICATED']) {
    assert.equal(Reason[reason], reason);
  }
  assert.equal(Reason.UNSPECIFIED, undefined);
  assert.equal(Reason.ERROR_REASON_LEASE_LOST, undefined);
  assert.ok(Object.isFrozen(Reason));
  for (const [name, value] of Object.entries(Reason)) {
    assert.match(name, /^[A-Z][A-Z0-9_]*$/);
    assert.equal(value, name);
  }
});
