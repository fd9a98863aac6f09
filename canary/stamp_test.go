package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rollback in the same second as the move it undoes stamps its restart a
// second later (restartStamp), and the next migration can start in that
// second: the stamp must read as the rollback's, not as a restart of the
// new wave whose record was lost. Otherwise the workload is not restarted,
// its record is "restored", and it stays on the source.
func TestARollbackStampPushedIntoTheNextMigrationsFirstSecondIsNotItsMove(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.now = t0.Add(100 * time.Millisecond)
	var played []Decision
	for i := 0; i < 3 && forwardMovesTo(played, "1-26") == nil; i++ {
		played = append(played, s.decide(s.gates()))
	}
	require.Equal(t, []string{"a"}, forwardMovesTo(played, "1-26"), "%v", s.reasons())
	rollOutStamped := func(rev string) {
		s.rollOut(rev, "a")
		at, err := time.Parse(time.RFC3339, s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt])
		require.NoError(t, err)
		s.snap.Workloads[0].RolledOutRestart = at // its newest ReplicaSet's stamp
	}
	rollOutStamped("1-26")
	// Asked back within the same second.
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(200 * time.Millisecond)
	d := s.decide(s.gates())
	require.Equal(t, map[string]int{"a": 1}, backMoves([]Decision{d}), "%v", s.reasons())
	require.Equal(t, s.now.UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339), s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt], "pushed a second ahead of its record")
	rollOutStamped("1-25")
	s.now = s.now.Add(200 * time.Millisecond)
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase, "%v", s.reasons())
	// The next migration starts in the second the rollback's stamp names.
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	s.now = t0.Add(time.Second + 300*time.Millisecond)
	played = nil
	for i := 0; i < 3 && s.status.Wave == 0 || s.status.TargetRevision != "1-27"; i++ {
		played = append(played, s.decide(s.gates()))
	}
	for i := 0; i < 2; i++ {
		s.now = s.now.Add(100 * time.Millisecond)
		played = append(played, s.decide(s.gates()))
	}
	require.Equal(t, 1, s.status.Wave, "%v", s.reasons())
	assert.Equal(t, []string{"a"}, forwardMovesTo(played, "1-27"), "a restart, not a record written back: %v", s.reasons())
	for _, d := range played {
		for _, e := range d.Events {
			assert.NotContains(t, []string{"MoveRecordRestored", "TemplateReverted"}, e.Reason, e.Message)
		}
	}
	assert.Equal(t, PhaseMigrating, s.status.Phase, "%s", s.status.Reason)
}

// A record's stamp is written only when pushed past the second of its
// time; one that is not is not meshwave's record.
func TestARecordsStampIsReadOnlyPastItsSecond(t *testing.T) {
	base := `{"revision":"1-25","from":"1-26","wave":1,"at":"2026-11-29T12:00:00.3Z","rollback":true,"migration":"1-26@2026-11-29T12:00:00Z"`
	for stamp, ok := range map[string]bool{
		"":                                  true,
		`,"stamp":"2026-11-29T12:00:01Z"`:   true,
		`,"stamp":"2026-11-29T13:00:00Z"`:   true,
		`,"stamp":"2026-11-29T12:00:00Z"`:   false,
		`,"stamp":"2026-11-29T11:59:59Z"`:   false,
		`,"stamp":"0001-01-01T00:00:00Z"`:   false,
		`,"stamp":null`:                     true,
		`,"stamp":"2026-11-29T12:00:01.5Z"`: false,
	} {
		r, read := ReadMoveRecord(map[string]string{AnnotationMove: base + stamp + "}"})
		assert.Equal(t, ok, read, "stamp %s", stamp)
		if read && r.Stamp != nil {
			assert.Equal(t, base+stamp+"}", r.Encode(), "written back as read")
		}
	}
}
