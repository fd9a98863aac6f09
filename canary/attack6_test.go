package canary

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
