package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisTarget is a Redis lock: SET key NX EX claims it, SET key result
// completes it. It is fast and not durable (a failover or a restart without
// fsync forgets claims), so it is a reference for what a round trip costs,
// not an alternative.
type redisTarget struct {
	rdb      *redis.Client
	pid      uint32 // redis-server's, from INFO; 0 when unknown
	prefix   string
	leaseTTL time.Duration
	result   []byte
}

// redisRetention is how long a completed key stays, as idem's default
// retention; the run's keys are deleted at the end anyway.
const redisRetention = 24 * time.Hour

// openRedis connects to addr, or says why the target cannot run.
func openRedis(ctx context.Context, addr, prefix string, poolSize int, leaseTTL time.Duration, result []byte) (*redisTarget, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:        addr,
		PoolSize:    poolSize,
		DialTimeout: 2 * time.Second,
		MaxRetries:  -1, // a benchmark counts failures; it does not hide them
	})
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("no Redis answers at %s (%v); pass --redis-addr, or start one", addr, err)
	}
	t := &redisTarget{rdb: rdb, prefix: "idem-bench:" + prefix + ":", leaseTTL: leaseTTL, result: result}
	if info, err := rdb.Info(pingCtx, "server").Result(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				pid, _ := strconv.ParseUint(v, 10, 32)
				t.pid = uint32(pid)
			}
		}
	}
	return t, nil
}

func (t *redisTarget) name() string { return "redis" }

// serverPIDs is redis-server, when INFO named it; its CPU time can only be
// read when it runs on this machine.
func (t *redisTarget) serverPIDs(context.Context) []uint32 {
	if t.pid == 0 {
		return nil
	}
	return []uint32{t.pid}
}

func (t *redisTarget) job(ctx context.Context, key string) (outcome, time.Duration, error) {
	k := t.prefix + key
	start := time.Now()
	ok, err := t.rdb.SetNX(ctx, k, "started", t.leaseTTL).Result()
	claimTook := time.Since(start)
	if err != nil {
		return 0, claimTook, fmt.Errorf("SET NX: %w", err)
	}
	if !ok {
		return outcomeDuplicate, claimTook, nil
	}
	if err := t.rdb.Set(ctx, k, t.result, redisRetention).Err(); err != nil {
		return 0, claimTook, fmt.Errorf("SET: %w", err)
	}
	return outcomeAcquired, claimTook, nil
}

// close deletes the run's keys and disconnects.
func (t *redisTarget) close(ctx context.Context) error {
	defer t.rdb.Close()
	iter := t.rdb.Scan(ctx, 0, t.prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := t.rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := flush(); err != nil {
				return fmt.Errorf("redis: delete the run's keys: %w", err)
			}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redis: list the run's keys: %w", err)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("redis: delete the run's keys: %w", err)
	}
	return nil
}
