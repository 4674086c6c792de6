// Package services implements idem's gRPC services, IdempotencyService,
// AdminService and ResolverService: the rules of each call between the API's messages and
// the store — validation, the tenants' namespaces, policies and limits,
// waiting Claims, batches — and the one mapping of errors to gRPC statuses
// (rewriteError). It never builds SQL, and it knows nothing of transports:
// package middleware authenticates the caller, package gateway serves the
// HTTP/JSON API, package server assembles them.
package services

import (
	"cmp"
	"time"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/limits"
)

// Defaults of Config's bounds.
const (
	// DefaultMaxWaiters is how many Claims may wait at once in all.
	DefaultMaxWaiters = 10000
	// DefaultMaxWaitersPerTenant is how many Claims of one tenant may wait
	// at once.
	DefaultMaxWaitersPerTenant = 1000
	// DefaultBatchMaxItems is how many items one batch call may carry.
	DefaultBatchMaxItems = 500
	// DefaultBatchMaxBytes is how large one batch call's request may be,
	// encoded as protobuf.
	DefaultBatchMaxBytes = 4 << 20
	// DefaultHeldRelist is how often a WatchHeld stream lists its held
	// records again when nothing woke it.
	DefaultHeldRelist = 10 * time.Second
)

// Config holds the services' defaults and limits.
type Config struct {
	// DefaultLeaseTTL is the lease of a Claim or Heartbeat that sends none.
	// It defaults to limits.DefaultLeaseTTL.
	DefaultLeaseTTL time.Duration
	// DefaultRetention is how long a record is kept after it leaves
	// PROCESSING when the Claim sends no retention. It defaults to
	// limits.DefaultRetention.
	DefaultRetention time.Duration
	// MaxResultBytes bounds Complete's result. It defaults to
	// limits.DefaultMaxResultBytes.
	MaxResultBytes int
	// Tenants, when set, are the tenants of idemd's config file: every call
	// must come from one of them (middleware authenticates it), and each is
	// held to its namespaces, policies, rate limit and result limit. Nil
	// (the default) serves one tenant, DefaultTenant, without
	// authentication.
	Tenants *Tenants
	// Policies are the namespace policies of DefaultTenant when Tenants is
	// nil (each configured tenant has its own); the file was validated
	// (config.File.Validate).
	Policies []config.Policy
	// MaxWaiters bounds the Claims waiting at once (ClaimRequest.wait) in
	// all; a Claim that would wait beyond it answers IN_PROGRESS at once. It
	// defaults to DefaultMaxWaiters.
	MaxWaiters int
	// MaxWaitersPerTenant bounds the Claims of one tenant waiting at once.
	// It defaults to DefaultMaxWaitersPerTenant.
	MaxWaitersPerTenant int
	// BatchMaxItems bounds the items of one batch call (BatchClaim, …). It
	// defaults to DefaultBatchMaxItems.
	BatchMaxItems int
	// BatchMaxBytes bounds the encoded size of one batch call's request. It
	// defaults to DefaultBatchMaxBytes.
	BatchMaxBytes int
	// MaxSteps bounds the steps of one job (StartStep, CompleteStep). It
	// defaults to limits.DefaultMaxSteps.
	MaxSteps int
	// MaxStepBytes bounds the bytes of one job's steps' names and results
	// together. It defaults to limits.DefaultMaxStepBytes.
	MaxStepBytes int
	// HeldRelist is how often a WatchHeld stream lists its held records
	// again when the store woke it for none: so that it sees the records
	// that stopped being held by their holder's late call, which the store
	// does not announce. It defaults to DefaultHeldRelist.
	HeldRelist time.Duration
}

// DefaultConfig returns the defaults of DESIGN §2.
func DefaultConfig() Config {
	return Config{
		DefaultLeaseTTL:     limits.DefaultLeaseTTL,
		DefaultRetention:    limits.DefaultRetention,
		MaxResultBytes:      limits.DefaultMaxResultBytes,
		MaxWaiters:          DefaultMaxWaiters,
		MaxWaitersPerTenant: DefaultMaxWaitersPerTenant,
		BatchMaxItems:       DefaultBatchMaxItems,
		BatchMaxBytes:       DefaultBatchMaxBytes,
		MaxSteps:            limits.DefaultMaxSteps,
		MaxStepBytes:        limits.DefaultMaxStepBytes,
		HeldRelist:          DefaultHeldRelist,
	}
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	c.DefaultLeaseTTL = cmp.Or(c.DefaultLeaseTTL, d.DefaultLeaseTTL)
	c.DefaultRetention = cmp.Or(c.DefaultRetention, d.DefaultRetention)
	c.MaxResultBytes = cmp.Or(c.MaxResultBytes, d.MaxResultBytes)
	c.MaxWaiters = cmp.Or(c.MaxWaiters, d.MaxWaiters)
	c.MaxWaitersPerTenant = cmp.Or(c.MaxWaitersPerTenant, d.MaxWaitersPerTenant)
	c.BatchMaxItems = cmp.Or(c.BatchMaxItems, d.BatchMaxItems)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, d.BatchMaxBytes)
	c.MaxSteps = cmp.Or(c.MaxSteps, d.MaxSteps)
	c.MaxStepBytes = cmp.Or(c.MaxStepBytes, d.MaxStepBytes)
	c.HeldRelist = cmp.Or(c.HeldRelist, d.HeldRelist)
	return c
}
