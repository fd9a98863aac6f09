package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAReadingWithoutWindowsOrARetryHoldsUntilItsInputsChange(t *testing.T) {
	s := toWave2(t)
	r := Read(s.snap, s.status, nil, s.cfg, s.now)
	assert.True(t, r.Until().IsZero(), "until %v", r.Until())
}

func TestAReadingOfANamespaceWithWindowsHoldsUntilTheMinuteTurns(t *testing.T) {
	s := toWave2(t)
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = `{"schedule":"0 2 * * *","duration":"2h","timeZone":"UTC"}`
	now := time.Date(2026, 12, 1, 10, 17, 42, 5, time.UTC)
	r := Read(s.snap, s.status, nil, s.cfg, now)
	assert.Equal(t, time.Date(2026, 12, 1, 10, 18, 0, 0, time.UTC), r.Until())

	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	r = Read(s.snap, s.status, nil, s.cfg, now)
	assert.True(t, r.Until().IsZero(), "a namespace that opted out reads no window; until %v", r.Until())
}

// A migration stopped after a wave's rollback and given its target again
// is retried at the reading's time, and counts the rollbacks on record
// dated after it. Read by a replica whose clock is behind the one that
// wrote them, those records are dated ahead: the reading holds until the
// first of them, and no longer depends on the clock from then on, nor once
// the retried status is written.
func TestARetriedReadingHoldsUntilTheFirstRollbackOnRecordDatedAheadOfIt(t *testing.T) {
	s := stoppedAfterAWaveRollback(t)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"

	var first time.Time
	for _, w := range s.snap.Workloads {
		if rec, ok := ReadMoveRecord(w.Annotations); ok && rec.Rollback && (first.IsZero() || rec.At.Before(first)) {
			first = rec.At
		}
	}
	require.False(t, first.IsZero(), "the rollback is on record")

	behind := first.Add(-30 * time.Second)
	r := Read(s.snap, s.status, nil, s.cfg, behind)
	require.NotNil(t, r.Status.RetriedAt)
	assert.Equal(t, first, r.Until(), "the first rollback dated ahead of the reading")

	r = Read(s.snap, s.status, nil, s.cfg, first)
	assert.True(t, r.Until().IsZero(), "from the record's date on, no record is ahead; until %v", r.Until())

	s.now = first
	s.decide(s.gates())
	require.NotNil(t, s.status.RetriedAt, "the retry is written")
	r = Read(s.snap, s.status, nil, s.cfg, behind)
	assert.True(t, r.Until().IsZero(), "the written retry's time no longer moves; until %v", r.Until())
}
