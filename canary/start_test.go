package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A person (or a restored backup) sets sourceLabel 1-25 and sourceRevision
// 9-99, which no injector serves, on a namespace paused before its first
// wave. The source a waiting status carries is checked before the start:
// the namespace is blocked, or starts from its real source 1-25; it never
// starts with every move record saying From 9-99 and a rollback whose
// gates expect pods on 9-99 (label 1-25 injects 1-25), which never pass.
func TestAnEditedSourceRevisionOnAWaitingStatusIsNotTrusted(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)
	require.Equal(t, 0, s.status.Wave)
	s.editStatus(func(m map[string]any) {
		m["sourceLabel"], m["sourceRevision"] = "1-25", "9-99"
	})
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	if s.status.Wave == 0 {
		assert.Equal(t, PhaseBlocked, s.status.Phase, "refused, or started with the real source")
		return
	}
	assert.Equal(t, "1-25", s.status.SourceRevision, "started from an uninstalled source revision")
	for _, m := range d.Moves {
		assert.Equal(t, "1-25", m.Record.From, m.Workload)
	}
}
