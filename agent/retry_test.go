package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestAFailingNamespaceIsRetriedWithinThirtySecondsHoweverOftenItFailed(t *testing.T) {
	l := newRetryLimiter()
	var delays []time.Duration
	for range 40 {
		delays = append(delays, l.When("busy"))
	}
	assert.Equal(t, 5*time.Millisecond, delays[0], "the first retry is at once")
	assert.Equal(t, 10*time.Millisecond, delays[1], "and backs off")
	assert.Equal(t, 30*time.Second, delays[39], "never past the cap")
	for i := 1; i < len(delays); i++ {
		assert.GreaterOrEqual(t, delays[i], delays[i-1])
	}
	l.Forget("busy")
	assert.Equal(t, 5*time.Millisecond, l.When("busy"), "a success starts the backoff again")
	assert.Equal(t, 5*time.Millisecond, l.When("other"), "each namespace backs off on its own")
}
