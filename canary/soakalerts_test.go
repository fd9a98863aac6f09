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
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26; alert HighErrorRate fired there at 2026-11-29T12:04:00Z, so its soak starts again from then, and must stay completed until 2026-11-29T12:14:00Z", d.Status.Reason)
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

// A soak with no alert looks again every 15 s for as long as the ring
// before soaks, possibly for days: a look that finds nothing new writes
// nothing, one write per wait.
func TestASoakWithNoAlertDoesNotWriteTheStatusAtEveryLook(t *testing.T) {
	s := soakingSim(t)
	s.cfg.Fleet.Rings[0].Soak = 24 * time.Hour
	s.snap.FleetAlerts = func(string, string, time.Time) (time.Time, string, error) { return time.Time{}, "", nil }
	s.now = t0.Add(time.Minute)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePending, d.Status.Phase)
	require.Equal(t, alertsRetry, d.RequeueAfter)

	writes := 0
	for i := 0; i < 40; i++ { // ten minutes of looks, of a day's soak
		s.now = s.now.Add(d.RequeueAfter)
		d = s.decide(nil)
		require.Equal(t, PhasePending, s.status.Phase)
		if d.Status != nil {
			writes++
		}
	}
	assert.Zero(t, writes, "status writes while nothing changed but the clock; last reason: %s", s.status.Reason)
}

// Snapshot.ReadPeers is where the agent takes its admission lock, held
// until the reconcile ends. A namespace its ring holds waits before it
// asks for a slot: the fleet's Prometheus (a query of up to its timeout)
// is never read under the lock, where a slow one would queue every other
// namespace's admission behind it.
func TestTheFleetsAlertsAreNotReadUnderTheAdmissionLock(t *testing.T) {
	s := soakingSim(t)
	peersRead, alertsUnderLock := false, 0
	s.snap.ReadPeers = func() []Peer {
		peersRead = true
		return nil
	}
	s.snap.FleetAlerts = func(string, string, time.Time) (time.Time, string, error) {
		if peersRead {
			alertsUnderLock++
		}
		return time.Time{}, "", nil
	}
	s.now = t0.Add(time.Minute)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePending, d.Status.Phase)
	require.True(t, d.Status.WaitsForRing)
	assert.Zero(t, alertsUnderLock, "Prometheus queried after the peers were read, under the admission lock")
}

// The alerts read are those of the last soak at most: an alert older than
// that has no soak left, and a namespace that completed a month ago is
// not read back a month.
func TestTheAlertsReadGoBackOneSoakAtMost(t *testing.T) {
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", t0.Add(-30*24*time.Hour))}))
	s.cfg.Fleet.SoakAlerts = true
	var since []string
	s.snap.FleetAlerts = func(_, _ string, from time.Time) (time.Time, string, error) {
		since = append(since, from.UTC().Format(time.RFC3339))
		return time.Time{}, "", nil
	}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	require.NotEmpty(t, since)
	for _, from := range since {
		assert.Equal(t, "2026-11-29T11:50:00Z", from, "from a soak (10m) before now")
	}
}

// An alert that keeps firing for the namespace of the ring before is one
// thing to wait for: each 15 s look that reads its newest firing must not
// write the status and emit a WaitingForRing Event again, for as long as
// it fires.
func TestAnAlertThatKeepsFiringDoesNotWriteAtEveryLook(t *testing.T) {
	s := soakingSim(t)
	s.cfg.Fleet.Rings[0].Soak = 24 * time.Hour
	s.snap.FleetAlerts = func(_, _ string, since time.Time) (time.Time, string, error) {
		// Firing at every rule evaluation: its last firing is the last
		// evaluation, at most 15 s ago.
		return s.now.Truncate(15 * time.Second), "HighErrorRate", nil
	}
	s.now = t0.Add(time.Minute)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePending, d.Status.Phase)

	writes := 0
	s.events = nil
	for i := 0; i < 40; i++ { // ten minutes of an alert firing
		s.now = s.now.Add(d.RequeueAfter)
		d = s.decide(nil)
		require.Equal(t, PhasePending, s.status.Phase)
		if d.Status != nil {
			writes++
		}
	}
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26; alert HighErrorRate is firing there, and its soak of 24h0m0s starts again when it stops", s.status.Reason)
	assert.LessOrEqual(t, writes, 1, "status writes while the same alert fired; last reason: %s", s.status.Reason)
	assert.LessOrEqual(t, len(s.events), 1, "events: %v", s.reasons())
}
