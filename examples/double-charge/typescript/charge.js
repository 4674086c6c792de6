// One payment handler written twice: naively, as a first version often is,
// and fixed. test/charge.test.js runs both through @idemhq/idem/testkit.

/**
 * Provider is a fake payment provider that counts the charges it applied.
 * Like Stripe's API, it answers a request whose Idempotency-Key it has seen
 * with the first answer, and moves no money.
 */
export class Provider {
  chargesApplied = 0;
  #byKey = new Map();

  /** charge charges amountCents once per idempotencyKey (none: every time). */
  async charge(amountCents, idempotencyKey = '') {
    if (idempotencyKey !== '' && this.#byKey.has(idempotencyKey)) {
      return this.#byKey.get(idempotencyKey);
    }
    this.chargesApplied++;
    const charge = { id: `ch_${this.chargesApplied}`, amount_cents: amountCents };
    if (idempotencyKey !== '') {
      this.#byKey.set(idempotencyKey, charge);
    }
    return charge;
  }
}

/**
 * naiveHandler is the handler a worker passes to idem.do() for order: it
 * charges the card and returns the receipt. idem makes sure that two
 * deliveries of the order do not both run it, but a worker that dies after
 * the charge and before Complete leaves idem no way to know the charge
 * happened: the next delivery takes the job over and charges again.
 */
export function naiveHandler(provider, order) {
  return async () => JSON.stringify(await provider.charge(order.amount_cents));
}

/**
 * handler is naiveHandler fixed: the provider's idempotency key is the idem
 * record's namespace and key, the same for every delivery and every attempt
 * of the job, so the provider answers a takeover's repeated charge from its
 * records.
 */
export function handler(provider, job, order) {
  return async () => JSON.stringify(await provider.charge(order.amount_cents, `${job.namespace}/${job.key}`));
}
