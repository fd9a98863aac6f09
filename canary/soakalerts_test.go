package canary

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// staging's shop completed 1-26 at t0; the soak is ten minutes.
func soakingSim(t *testing.T) *sim {
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", t0)}))
	s.cfg.Fleet.SoakAlerts = true
	return s
}

// An alert that fired for the namespace of the ring before after it
// completed starts its soak again from the alert's last firing; with none
// since, the soak is the completion's.
func TestAnAlertDuringTheSoakStartsItAgain(t *testing.T) {
	s := soakingSim(t)
	var asked []string
	alertAt := t0.Add(4 * time.Minute)
	s.snap.FleetAlerts = func(cluster, namespace string, since time.Time) (time.Time, string, error) {
		asked = append(asked, cluster+"/"+namespace+" since "+since.Format(time.RFC3339))
		return alertAt, "HighErrorRate", nil
	}
	s.now = t0.Add(9 * time.Minute)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26; alert HighErrorRate fired there at 2026-11-29T12:04:00Z, so its soak starts again from then, and must stay completed 5m0s more", d.Status.Reason)
	require.NotEmpty(t, asked)
	for _, a := range asked {
		assert.Equal(t, "staging/shop since 2026-11-29T12:00:00Z", a, "asked of the namespace awaited, since its completion")
	}
	assert.Equal(t, alertsRetry, d.RequeueAfter, "it looks again for new alerts while it soaks")
	assert.Empty(t, d.Moves)

	s.now = t0.Add(14*time.Minute + time.Second)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	require.Len(t, d.Moves, 1)
}

func TestASoakWithNoAlertEndsWithTheCompletionsSoak(t *testing.T) {
	s := soakingSim(t)
	s.snap.FleetAlerts = func(string, string, time.Time) (time.Time, string, error) { return time.Time{}, "", nil }
	s.now = t0.Add(10*time.Minute + time.Second)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// Alerts that cannot be read hold the ring: missing data never advances it.
func TestAlertsThatCannotBeReadHoldTheRing(t *testing.T) {
	s := soakingSim(t)
	s.snap.FleetAlerts = func(string, string, time.Time) (time.Time, string, error) {
		return time.Time{}, "", errors.New("prometheus: connection refused")
	}
	s.now = t0.Add(time.Hour)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks with no alert, but the alerts of namespace shop in cluster staging (ring staging) cannot be read: prometheus: connection refused; missing data never advances a ring", d.Status.Reason)
	assert.Equal(t, alertsRetry, d.RequeueAfter)
	assert.Empty(t, d.Moves)

	s.snap.FleetAlerts = nil
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks with no alert, but the alerts of namespace shop in cluster staging (ring staging) cannot be read: no Prometheus to read them from; missing data never advances a ring", d.Status.Reason)
}
