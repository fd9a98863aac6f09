package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestTheFirstWaveWaitsForTheMaintenanceWindow opts a namespace in while
// the configured maintenance window is closed: it stays Pending, says when
// the window opens, and nothing moves; the first wave starts when the
// window opens, and the migration completes inside it. The window is
// written in Asia/Kolkata (UTC+05:30) and opens at the next minute at
// least 8 s away, so the test waits 8 to 68 s for it.
func TestTheFirstWaveWaitsForTheMaintenanceWindow(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "night"
	f.Given().
		Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "cart", waveAnnotation("0")).
		Deployment(ns, "web", waveAnnotation("1")).
		RolledOut(ns)

	kolkata, err := time.LoadLocation("Asia/Kolkata")
	require.NoError(t, err)
	opens := time.Now().Add(8 * time.Second).Truncate(time.Minute).Add(time.Minute)
	local := opens.In(kolkata)
	cfg := testConfig(f)
	cfg.MaintenanceWindows = []agent.MaintenanceWindow{{
		Schedule: fmt.Sprintf("%d %d * * *", local.Minute(), local.Hour()), Duration: agent.Duration(5 * time.Minute), TimeZone: "Asia/Kolkata",
	}}
	require.NoError(t, cfg.Validate())
	optIn(f, ns, "1-26", 10)
	startAgent(t, f, cfg, newAPICounter(), "agent-1")

	st := waitForPhase(f, ns, canary.PhasePending, 30*time.Second)
	f.EventuallyWithin("the namespace to wait for its window", 30*time.Second, func() (bool, string) {
		st = status(f, ns)
		return st.NextWindow != nil, st.Reason
	})
	require.True(t, time.Now().Before(opens), "the window is still closed: the test set it up too slowly")
	assert.Equal(t, opens.UTC(), st.NextWindow.UTC())
	assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at "+opens.UTC().Format(time.RFC3339), st.Reason)
	assert.Equal(t, 0, st.Wave)
	for _, name := range []string{"cart", "web"} {
		_, moved := moveRecord(f, ns, name)
		assert.False(t, moved, "%s is not moved before the window opens", name)
	}

	done := waitForPhase(f, ns, canary.PhaseCompleted, time.Until(opens)+time.Minute)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", done.Reason)
	assert.Nil(t, done.NextWindow)
	first, ok := moveRecord(f, ns, "cart")
	require.True(t, ok)
	assert.False(t, first.At.Before(opens), "the first wave started at %s, not before the window opened at %s", first.At, opens)
	assert.Less(t, first.At.Sub(opens), 5*time.Second, "and promptly: the agent looked again when it opened")
	assert.False(t, done.StartedAt.Before(opens))

	var started []string
	for _, e := range eventsFor(f, "Namespace", "", ns) {
		if strings.HasPrefix(e, "WaveStarted") {
			started = append(started, e)
		}
	}
	assert.Equal(t, []string{"WaveStarted: wave 1/2 (canary) started: cart", "WaveStarted: wave 2/2 started: web"}, started)
}
