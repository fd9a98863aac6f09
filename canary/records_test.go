package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestARemovedMoveRecordIsWrittenBackWithoutARestart(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	require.Equal(t, 1, s.patches["a"])
	stamp := s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt]
	delete(s.snap.Workloads[0].Annotations, AnnotationMove)

	d := s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.True(t, d.Moves[0].RecordOnly)
	assert.JSONEq(t, `{"metadata":{"annotations":{"meshwave.io/move":"{\"revision\":\"1-26\",\"from\":\"1-25\",\"wave\":1,\"at\":\"2026-11-29T12:00:00Z\",\"migration\":\"1-26@2026-11-29T12:00:00Z\"}"},"resourceVersion":"100"}}`, string(d.Moves[0].Patch))
	assert.Equal(t, []Event{{Workload: "a", Type: EventWarning, Reason: "MoveRecordRestored",
		Message: "a had no readable meshwave.io/move record of wave 1, but its template was restarted at " + stamp + ", after the wave started: the record is written back, and a is not restarted again"}}, d.Events)
	assert.Equal(t, 1, s.patches["a"])
	assert.Equal(t, stamp, s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt])

	// The wave fails: the restored record sends a back with the rollback.
	s.decide(failRollout("a", "a did not roll out"))
	assert.Equal(t, PhaseRollingBack, s.status.Phase)
	assert.Equal(t, 2, s.patches["a"])
	assert.Equal(t, map[string]int{"a": 1}, s.restored)
}

// Wave 2 (b, c) was patched; b's meshwave.io/move is then changed so that
// meshwave can no longer read it as this move: a newer meshwave (a rolling
// upgrade, then a rollback of the agent) wrote it with a field this version
// does not know, or a GitOps re-apply of a manifest exported earlier put
// back an older migration's record. b's template shows it was restarted
// after the wave started, so it is not restarted a second time: no
// Deployment is restarted twice for one move.
func TestAMemberWhoseRecordWasOverwrittenIsNotRestartedAgain(t *testing.T) {
	for _, tt := range []struct {
		name   string
		record func(string) string
	}{
		{"a record with a field this version does not know", func(r string) string {
			return strings.Replace(r, `"wave":2`, `"wave":2,"attempt":1`, 1)
		}},
		{"an older migration's record put back", func(string) string {
			return MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: t0.Add(-24 * time.Hour), Migration: MigrationID("1-26", t0.Add(-24*time.Hour))}.Encode()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := toWave2(t)
			b := &s.snap.Workloads[1]
			stamp := b.TemplateAnnotations[AnnotationRestartedAt]
			b.Annotations[AnnotationMove] = tt.record(b.Annotations[AnnotationMove])
			d := s.decide(nil)
			assert.Empty(t, forwardMoves(d), "b's template shows its wave-2 restart at %s (the wave started at %s), yet it is restarted again; patches %v",
				stamp, s.status.WaveStartedAt.Format(time.RFC3339), s.patches)
		})
	}
}

// A workload counts as moved only once its wave passed. Under policy
// Pause, the canary a fails its rollout and the namespace pauses; the owner
// sets meshwave.io/skip on a and resumes, as the README says, so a is taken
// out of wave 1, which passes without it, and its record says it was
// skipped. Once the owner removes the skip, a is planned again: restarted
// and judged in a wave of its own, not counted as moved by the forward
// record it still carries.
func TestAWorkloadSkippedOutOfItsWaveIsPlannedAgainOnceUnskipped(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.FailurePolicy = PolicyPause
	s.cfg.DelayBetweenWaves = 0
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	require.Equal(t, PhasePaused, s.status.Phase)
	s.snap.Workloads[0].Annotations[AnnotationSkip] = "true"
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.decide(nil) // a's record says it was skipped out of wave 1
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave, "wave 1 passed without a; wave 2 started")
	delete(s.snap.Workloads[0].Annotations, AnnotationSkip)

	for i := 0; i < 20 && s.status.Phase != PhaseCompleted; i++ {
		s.rollOut("1-26", "b", "c")
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	assert.Equal(t, 2, s.patches["a"], "a is restarted again once unskipped: %s (counts %+v)", s.status.Reason, s.status.Counts)
	assert.NotEqual(t, PhaseCompleted, s.status.Phase, "a's pods never rolled out, so its wave cannot pass: %s", s.status.Reason)
}
