package canary

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Invariant 8 (never more namespaces migrating than concurrency; admission
// in priority order), as a property: a random walk through what people
// and the cluster do to a namespace (pauses, removed and re-added
// targets, rollback requests, failed waves, lost and restored statuses, a
// tag repointed, windows) never starts a migration without reading the
// peers. Every decision of every sim is checked (decideBothWays); this
// walk reaches the paths the scenario tests do not.
func TestNoMigrationStartsWithoutReadingThePeers(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { walkAdmission(t, seed) })
	}
}

func walkAdmission(t *testing.T, seed int64) {
	rnd := rand.New(rand.NewSource(seed))
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.snap.Mesh.Revisions["1-27"] = Revision{Name: "1-27", Istiods: 1, ReadyIstiods: 1}
	if rnd.Intn(2) == 0 {
		s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	}
	if rnd.Intn(3) == 0 {
		s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	}
	var history []string
	target := s.snap.Namespace.Annotations[AnnotationTargetRevision]
	for step := 0; step < 60; step++ {
		switch rnd.Intn(15) {
		case 0:
			toggle(s.snap.Namespace.Annotations, AnnotationPaused, "true")
		case 1:
			toggle(s.snap.Namespace.Annotations, AnnotationTargetRevision, target)
		case 2:
			s.snap.Namespace.Annotations[AnnotationRollback] = []string{"wave", "all"}[rnd.Intn(2)]
		case 3:
			s.status, s.raw = nil, nil // the status annotation removed
		case 4:
			if len(history) > 0 {
				raw := history[rnd.Intn(len(history))] // an older status restored
				s.raw, s.status = &raw, nil
			}
		case 5:
			s.snap.Mesh.Tags["canary"] = []string{"1-26", "1-27"}[rnd.Intn(2)]
		case 6:
			s.snap.Peers = nil // the namespace holding the slot finished
		case 8:
			if _, opted := s.snap.Namespace.Annotations[AnnotationTargetRevision]; opted {
				// Another target, or the same one named another way.
				target = []string{"canary", "1-26", "1-27"}[rnd.Intn(3)]
				s.snap.Namespace.Annotations[AnnotationTargetRevision] = target
			}
		case 7:
			if w, ok := WaveToVerify(s.snap, s.status, s.cfg); ok && len(w.Workloads) > 0 {
				s.step(failRollout(w.Workloads[rnd.Intn(len(w.Workloads))].Name, "did not roll out"))
				requireNoPhantomSlot(t, s)
			}
		default:
			s.now = s.now.Add(time.Duration(rnd.Intn(90)) * time.Second)
			s.step(s.gates())
			requireNoPhantomSlot(t, s)
		}
		if s.status != nil {
			raw, err := s.status.Encode()
			require.NoError(t, err)
			history = append(history, raw)
		}
	}
}

// requireNoPhantomSlot fails t when the namespace's peers read it as
// holding a slot its status does not hold once a decision has run: such a
// hold (PeerOf, for a status its records contradict) lasts only until the
// namespace's own decision adopts the records, and a hold no decision
// ends would keep every other namespace waiting.
func requireNoPhantomSlot(t *testing.T, s *sim) {
	t.Helper()
	if s.raw != nil || s.status == nil || s.status.HoldsSlot() {
		return // not decided since it was edited, or the status says so
	}
	in := Input{Snapshot: s.snap, Status: s.status}
	if peerOf(in).HoldsSlot {
		t.Fatalf("after a decision, %s at wave %d holds no slot, but its peers read it as holding one", s.status.Phase, s.status.Wave)
	}
}

// step decides and rolls out the moves it made.
func (s *sim) step(verdicts []Verdict) {
	d := s.decide(verdicts)
	for _, m := range d.Moves {
		if !m.RecordOnly && s.patches[m.Workload] > 0 {
			s.rollOut(m.Record.Revision, m.Workload)
		}
	}
}

func toggle(m map[string]string, k, v string) {
	if _, ok := m[k]; ok {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// The status a retry left while it waited for its turn (Pending, with
// retriedAt) is restored after the retry started its own migration. That
// migration is continued from its records, and keeps the retriedAt of the
// Pending status: a time before its own start, which Validate refuses, so
// meshwave writes a status it cannot read back.
func TestAMigrationContinuedFromItsRecordsWritesAStatusThatReadsBack(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	s.decide(nil)
	s.decide(failRollout("a", "a did not roll out"))
	s.rollOut("1-25", "a")
	s.decide(s.gates())
	require.Equal(t, PhaseRolledBack, s.status.Phase)
	delete(s.snap.Namespace.Annotations, AnnotationTargetRevision)
	s.decide(nil)
	s.now = s.now.Add(time.Hour)
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "1-26"
	s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
	s.decide(nil)
	require.Equal(t, PhasePending, s.status.Phase)
	require.NotNil(t, s.status.RetriedAt)
	waiting, err := s.status.Encode()
	require.NoError(t, err)
	s.snap.Peers = nil
	s.now = s.now.Add(time.Hour)
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave)
	s.raw, s.status = &waiting, nil
	s.now = s.now.Add(time.Minute)
	s.decide(s.gates()) // fails inside when the status written does not read back
	require.Equal(t, 1, s.status.Wave)
}
