package client

// WithoutHeartbeat makes Do send no heartbeats, so that a test can let the
// lease run out while fn runs.
func WithoutHeartbeat() DoOption { return func(o *doOptions) { o.noHeartbeat = true } }

// CanonicalJSON exposes the text FingerprintJSON hashes, for the vectors.
var CanonicalJSON = canonicalJSON

// StorableText exposes what Do makes of an error text before it sends it.
var StorableText = storableText

// QueuedClaims is how many Claims wait for the next BatchClaim of a
// coalescing Client.
func (c *Client) QueuedClaims() int {
	c.claims.mu.Lock()
	defer c.claims.mu.Unlock()
	return len(c.claims.queue)
}
