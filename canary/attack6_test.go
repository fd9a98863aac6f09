package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// staleRollbackOver1_27 plays toWave2Passed (shop on canary = 1-26, waves
// 1 and 2 passed), asks rollback=all, and keeps a copy of the RollingBack
// status; then sets the target to 1-27: the rollback ends first, and the
// migration to 1-27 starts and runs until until() holds.
func staleRollbackOver1_27(t *testing.T, until func(s *sim) bool) (*sim, string) {
	s := toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.step3(s.gates)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	stale := encoded(t, s.status)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-27"
	for i := 0; i < 20 && !until(s); i++ {
		s.step3(s.gates)
	}
	require.True(t, until(s), "%s %s w%d: %s", s.status.Target, s.status.Phase, s.status.Wave, s.status.Reason)
	return s, stale
}

// Break 1 (d963d32, newerOnRecord). The migration to 1-27 is half-way
// (wave 1 passed: a runs 1-27). A sync restores the status annotation as
// it was during the earlier rollback (RollingBack, target canary), and a
// person, seeing it, asks meshwave.io/rollback=all. newerOnRecord sees the
// newer 1-27 migration on record and drops the stale status ("its records
// are what to go by"), but what replaces it is a fresh Pending status with
// no migration ID: recordConflict has nothing to compare, nothing is
// adopted, and pending() clears the request with "RollbackIgnored: nothing
// to roll back: no wave has started". After admission continueOnRecord
// resumes the 1-27 migration and moves b, c and d forward to Completed:
// the opposite of what was asked.
// The same request with the status simply lost (subtest "lost") is adopted
// from the records and rolls a back to 1-25.
// Promise: a rollback asked of a migration under way is done (README,
// 97f7b10: "the request is not dropped"); a stale copy's records are what
// to go by.
func TestAttack6ARollbackAskedOverAStaleRollbackStatusIsDroppedAndTheMigrationGoesForward(t *testing.T) {
	for _, how := range []string{"lost", "stale copy"} {
		t.Run(how, func(t *testing.T) {
			s, stale := staleRollbackOver1_27(t, func(s *sim) bool {
				return s.status.Target == "1-27" && s.status.Wave == 1 && s.status.WaveState == WavePassed
			})
			require.Equal(t, "1-27", s.snap.Namespace.Labels[LabelRev])
			s.events = nil
			s.raw, s.status = nil, nil
			if how == "stale copy" {
				s.raw = &stale
			}
			s.snap.Namespace.Annotations[AnnotationRollback] = "all"
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.NotContains(t, s.reasons(), "RollbackIgnored", "a wave of 1-27 had passed: a runs 1-27")
			assert.Empty(t, forwardMovesTo(played, "1-27"), "the rollback asked is done, nothing moves forward: %v", movesInOrder(played))
			assert.Equal(t, map[string]int{"a": 1}, backMoves(played), "a, moved by the 1-27 migration, goes back")
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
		})
	}
}

// Break 2 (d963d32, newerOnRecord). The migration to 1-27 failed its first
// wave and ended RolledBack (a back on 1-25). A sync restores the status
// annotation as it was during the earlier rollback of canary. newerOnRecord
// sees the newer 1-27 migration on record and drops the stale status, but
// the fresh Pending status it starts is not compared with the records (no
// migration ID), continueOnRecord skips a migration whose records are all
// rollbacks, and a brand-new migration to 1-27 starts and moves every
// workload to the revision whose canary just failed. Nobody set the target
// again (a retry is a target removed and set again); with the status lost
// instead (subtest "lost"), the records are adopted and it stays RolledBack.
// Promise: a stale copy restored over a newer migration is replaced by what
// the records say (design.md: "a kept status the records show a newer
// migration ... over is not kept"; "its records are what to go by"); a
// migration that ended RolledBack moves nothing until the target is set
// again.
func TestAttack6AStaleRollbackStatusRestoredAfterTheNewTargetRolledBackStartsItAgain(t *testing.T) {
	for _, how := range []string{"lost", "stale copy"} {
		t.Run(how, func(t *testing.T) {
			s, stale := staleRollbackOver1_27(t, func(s *sim) bool { return s.status.Target == "1-27" && s.status.Wave == 1 })
			require.Equal(t, []WorkloadState{{Name: "a", State: StateMoving}}, s.status.Workloads)
			s.now = s.now.Add(time.Minute)
			s.decide(failRollout("a", "a did not roll out"))
			for i := 0; i < 6 && s.status.Phase != PhaseRolledBack; i++ {
				s.step3(s.gates)
			}
			require.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
			require.Equal(t, "1-27", s.status.Target)
			s.events = nil
			s.raw, s.status = nil, nil
			if how == "stale copy" {
				s.raw = &stale
			}
			var played []Decision
			for i := 0; i < 8; i++ {
				played = append(played, s.step3(s.gates))
			}
			assert.Empty(t, forwardMovesTo(played, "1-27"), "the 1-27 migration ended RolledBack and nobody set its target again: %v %v", movesInOrder(played), s.reasons())
			assert.NotContains(t, s.reasons(), "MigrationStarted")
			assert.Equal(t, PhaseRolledBack, s.status.Phase, "%s", s.status.Reason)
		})
	}
}

// Break 3 (6c753f8 kept by d963d32, withStamp). A template whose
// kubectl.kubernetes.io/restartedAt is the last second json can write
// (9999-12-31T23:59:59Z, set by hand or by a broken clock) is rolled back:
// restartStamp pushes the stamp to 10000-01-01T00:00:00Z and withStamp
// puts it in the record; json.Marshal refuses a year past 9999, Encode
// swallows the error, and the patch writes meshwave.io/move: "" while it
// restarts the workload. The rollback's record is lost (a is no longer a
// member of the rollback, its counts and history are gone). Before
// 6c753f8 the record carried the move's own time and encoded.
// Promise: each Deployment patch also writes the move record (design.md).
func TestAttack6ARollbackPastAStampOfYear9999WritesAnEmptyRecord(t *testing.T) {
	s := toWave2Passed(t)
	s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt] = "9999-12-31T23:59:59Z"
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.step3(s.gates)
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, backMoves([]Decision{d}))
	for _, m := range d.Moves {
		if m.Workload != "a" {
			continue
		}
		raw := m.Record.Encode()
		_, ok := ReadMoveRecord(map[string]string{AnnotationMove: raw})
		assert.True(t, ok, "a's rollback patch writes a record meshwave reads back, not %q (patch %s)", raw, m.Patch)
	}
	_, ok := ReadMoveRecord(s.snap.Workloads[0].Annotations)
	assert.True(t, ok, "a carries its rollback record: %q", s.snap.Workloads[0].Annotations[AnnotationMove])
}
