package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A wave failed under policy Pause (a moved to 1-26 and failed there);
// the person asks meshwave.io/rollback=wave, and in the same reconcile the
// tag canary names 1-27. The decision reads the repoint before the
// request: the paused status is "a migration going forward", so it starts
// over (TargetChanged), the fresh status has no wave, and pending()
// clears the request with "nothing to roll back: no wave has started".
// The rollback asked for never happens (a stays on 1-26, where it
// failed), and the reason given is false. Had the rollback reconcile come
// first, a would have been returned to 1-25 and the status kept 1-26.
func TestAttack3ARollbackRequestedOnAFailedWaveSurvivesARepoint(t *testing.T) {
	s := onTag4(t)
	s.cfg.FailurePolicy = PolicyPause
	s.step3(s.gates) // wave 1: a
	s.now = s.now.Add(5 * time.Minute)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, WaveFailed, s.status.WaveState)
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.snap.Mesh.Tags["canary"] = "1-27"
	var played []Decision
	for i := 0; i < 6; i++ {
		played = append(played, s.step3(s.gates))
	}
	for _, e := range s.events {
		if e.Reason == "RollbackIgnored" {
			t.Logf("%s: %s", e.Reason, e.Message)
		}
	}
	assert.Equal(t, map[string]int{"a": 1}, backMoves(played), "the failed wave is rolled back as asked: %s %s", s.status.Phase, s.status.Reason)
	assert.NotContains(t, s.reasons(), "RollbackIgnored")
}
