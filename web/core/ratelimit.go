package core

import (
	"fmt"
	"math"
	"time"
)

// RateLimitError is a request refused because its key's tokens per minute
// are spent: 429 rate_limit_exceeded in every API's shape, with
// Retry-After saying when the budget has refilled enough to admit one.
type RateLimitError struct {
	Tenant          string
	TokensPerMinute int
	// RetryAfter is how long until the key may send again.
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("tenant %q has used its %d tokens per minute: retry in %d s", e.Tenant, e.TokensPerMinute, e.RetryAfterSeconds())
}

// RetryAfterSeconds is RetryAfter as Retry-After writes it: whole seconds,
// rounded up, at least 1.
func (e *RateLimitError) RetryAfterSeconds() int {
	return max(1, int(math.Ceil(e.RetryAfter.Seconds())))
}
