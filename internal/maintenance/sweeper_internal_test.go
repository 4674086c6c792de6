package maintenance

import (
	"math"
	"testing"
	"time"
)

// TestRestAfter: the rest after a full batch for every kind of Duty a
// library caller may set, including those the command line refuses.
func TestRestAfter(t *testing.T) {
	t.Parallel()
	const took = 100 * time.Millisecond
	for _, tc := range []struct {
		duty     float64
		interval time.Duration
		want     time.Duration
	}{
		{0.25, 0, 300 * time.Millisecond},
		{0.5, 0, 100 * time.Millisecond},
		{1, 0, 0},
		{2, 0, 0},                               // more than all the time: no rest, not the default
		{0, 0, 300 * time.Millisecond},          // unset: the default
		{-1, 0, 300 * time.Millisecond},         // nonsense: the default
		{math.NaN(), 0, 300 * time.Millisecond}, // nonsense: the default
		{0.001, 0, 9900 * time.Millisecond},     // below MinSweepDuty: MinSweepDuty
		{0.01, time.Second, time.Second},        // bounded by the interval
		{0.25, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := restAfter(took, tc.duty, tc.interval); got != tc.want {
			t.Errorf("restAfter(%s, duty %v, interval %s) = %s, want %s", took, tc.duty, tc.interval, got, tc.want)
		}
	}
}
