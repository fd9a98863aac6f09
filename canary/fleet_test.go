package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleetSim is namespace shop of cluster prod-eu, in ring prod after ring
// staging (one cluster, a soak of ten minutes), with prod-us beside it.
func fleetSim(t *testing.T, staging PeerCluster) *sim {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 5}
	s.cfg.Fleet = Fleet{Cluster: "prod-eu", Rings: []Ring{
		{Name: "staging", Clusters: []string{"staging"}, Soak: 10 * time.Minute},
		{Name: "prod", Clusters: []string{"prod-eu", "prod-us"}},
	}}
	s.snap.Clusters = map[string]PeerCluster{"staging": staging, "prod-us": {Err: "connection refused"}}
	rev := s.snap.Mesh.Revisions["1-26"]
	rev.Roots = []string{rootA}
	s.snap.Mesh.Revisions["1-26"] = rev
	return s
}

func peerStatus(phase Phase, target string, completedAt time.Time) PeerNamespace {
	st := &Status{Phase: phase, Target: target, TargetRevision: target, Wave: 2, TotalWaves: 2, Roots: []string{rootA}}
	if phase == PhaseCompleted {
		st.CompletedAt = &completedAt
	}
	return PeerNamespace{OptedIn: true, Status: st, Labels: map[string]string{LabelRev: target}}
}

func staged(ns map[string]PeerNamespace) PeerCluster { return PeerCluster{Namespaces: ns} }

func TestTheFirstWaveWaitsForTheRingBeforeToCompleteAndSoak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		staging PeerCluster
		reason  string
		retry   time.Duration
	}{
		{"a cluster of the ring before that cannot be read", PeerCluster{Err: "Get \"https://staging:6443/api/v1/namespaces\": dial tcp: connection refused"},
			"the first wave of 2 waits: cluster staging of ring staging cannot be read: Get \"https://staging:6443/api/v1/namespaces\": dial tcp: connection refused; missing data never advances a ring", backstop},
		{"its namespace still migrating", staged(map[string]PeerNamespace{"shop": {OptedIn: true, Status: &Status{Phase: PhaseMigrating, TargetRevision: "1-26", Wave: 1, TotalWaves: 2, Roots: []string{rootA}}}}),
			"the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: it is Migrating, wave 1/2", backstop},
		{"its namespace opted in, not started", staged(map[string]PeerNamespace{"shop": {OptedIn: true}}),
			"the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: it has not started", backstop},
		{"its namespace there, not opted in", staged(map[string]PeerNamespace{"shop": {}}),
			"the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: it has not opted in (meshwave.io/target-revision)", backstop},
		{"its namespace completed another move", staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-27", t0.Add(-time.Hour))}),
			"the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: its migration to 1-27 is Completed", backstop},
		{"completed four minutes ago, of a soak of ten", staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", t0.Add(-4*time.Minute))}),
			"the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26, and must stay completed until 2026-11-29T12:06:00Z", 6 * time.Minute},
		{"paused there", staged(map[string]PeerNamespace{"shop": {OptedIn: true, Status: &Status{Phase: PhasePaused, TargetRevision: "1-26", Wave: 1, TotalWaves: 2, Roots: []string{rootA}, Reason: "wave 1 failed: error-rate 0.31 > 0.05"}}}),
			"the first wave of 2 waits: held by namespace shop in cluster staging (ring staging), Paused at wave 1: wave 1 failed: error-rate 0.31 > 0.05; every later ring waits until a person resumes it or it completes", backstop},
		{"its status there unreadable", staged(map[string]PeerNamespace{"shop": {OptedIn: true, StatusErr: "invalid character 'x'"}}),
			"the first wave of 2 waits: held by namespace shop in cluster staging (ring staging): its status cannot be read (invalid character 'x')", backstop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fleetSim(t, tc.staging)
			d := s.decide(nil)
			require.NotNil(t, d.Status)
			assert.Equal(t, PhasePending, d.Status.Phase)
			assert.Equal(t, tc.reason, d.Status.Reason)
			assert.Empty(t, d.Moves, "nothing moves")
			assert.Empty(t, d.Label)
			assert.Equal(t, tc.retry, d.RequeueAfter)
			event := "WaitingForRing: " + tc.reason
			if tc.retry == 6*time.Minute {
				event += " (6m0s left)" // the Event tells the time left; the status, the end
			}
			assert.Equal(t, []string{event}, s.reasonsWithMessages())
		})
	}
}

func TestTheFirstWaveStartsOnceTheRingBeforeSoaked(t *testing.T) {
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", t0.Add(-4*time.Minute))}))
	d := s.decide(nil)
	require.Empty(t, d.Moves)
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	assert.Nil(t, d.Status, "a look that finds the soak unchanged writes nothing")
	assert.Equal(t, "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26, and must stay completed until 2026-11-29T12:06:00Z", s.status.Reason)
	assert.Equal(t, 5*time.Minute, d.RequeueAfter, "it looks again when the soak ends")
	assert.Len(t, s.reasonsWithMessages(), 1, "one Event for the soak, not one a look")
	s.now = t0.Add(6 * time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	require.Len(t, d.Moves, 1)
}

func TestANamespaceTheRingBeforeDoesNotHaveWaitsForNothing(t *testing.T) {
	s := fleetSim(t, staged(map[string]PeerNamespace{"other": {OptedIn: true, Status: &Status{Phase: PhaseMigrating, TargetRevision: "1-26"}}}))
	d := s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)

	// With the whole ring awaited, staging's other namespace holds it.
	s = fleetSim(t, staged(map[string]PeerNamespace{"other": {OptedIn: true, Status: &Status{Phase: PhaseMigrating, TargetRevision: "1-26", Wave: 1, TotalWaves: 3, Roots: []string{rootA}}}}))
	s.cfg.Fleet.WholeRing = true
	d = s.decide(nil)
	assert.Equal(t, "the first wave of 2 waits: waiting for namespace other in cluster staging (ring staging) to complete the move to 1-26: it is Migrating, wave 1/3", d.Status.Reason)
}

func TestTheFirstRingAndAClusterAloneNeverWait(t *testing.T) {
	s := fleetSim(t, PeerCluster{Err: "down"})
	s.cfg.Fleet.Cluster = "staging"
	d := s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)

	s = fleetSim(t, PeerCluster{Err: "down"})
	s.cfg.Fleet = Fleet{}
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

func TestARollbackInAnEarlierRingHoldsTheNextWaveOfALaterOne(t *testing.T) {
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour))}))
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.snap.Clusters["staging"] = staged(map[string]PeerNamespace{"shop": {OptedIn: true, Status: &Status{Phase: PhaseRollingBack, TargetRevision: "1-26", Wave: 2, Roots: []string{rootA}, Reason: "rollback asked with meshwave.io/rollback=all"}}})
	s.now = s.now.Add(2 * time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "wave 2 waits: held by namespace shop in cluster staging (ring staging), RollingBack at wave 2: rollback asked with meshwave.io/rollback=all; every later ring waits until a person resumes it or it completes", d.Status.Reason)
	assert.Empty(t, d.Moves)

	// Completed again there: the hold ends, without a soak for later waves.
	s.snap.Clusters["staging"] = staged(map[string]PeerNamespace{"shop": peerStatus(PhaseCompleted, "1-26", s.now)})
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
}

// reasonsWithMessages are the Events so far, as "Reason: message".
func (s *sim) reasonsWithMessages() []string {
	var out []string
	for _, e := range s.events {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

// A person who writes Completed into the status of a namespace of the
// ring before, over one its agent never switched, does not start the
// later ring: the namespace's labels contradict it. Once they agree, the
// ring goes on.
func TestACompletedStatusItsNamespaceContradictsIsNotTakenAsDone(t *testing.T) {
	forged := peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour))
	forged.Labels = map[string]string{LabelRev: "1-25"}
	s := fleetSim(t, staged(map[string]PeerNamespace{"shop": forged}))
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, "the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: its status says Completed, but its istio.io/rev is not 1-26 (istio.io/rev=1-25); a status its namespace contradicts is not taken as done", d.Status.Reason)
	assert.Empty(t, d.Moves)

	s.snap.Clusters["staging"].Namespaces["shop"] = peerStatus(PhaseCompleted, "1-26", t0.Add(-time.Hour))
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// The labels that agree with a completed status: the target as named (the
// resolved revision for auto), or an enrolled ambient namespace with no
// istio.io/rev.
func TestThePeerLabelsThatAgreeWithACompletedStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     Status
		labels map[string]string
		why    string
	}{
		{"a tag", Status{Target: "prod-stable", TargetRevision: "1-26"}, map[string]string{LabelRev: "prod-stable"}, ""},
		{"a tag's revision is not the tag", Status{Target: "prod-stable", TargetRevision: "1-26"}, map[string]string{LabelRev: "1-26"}, "its istio.io/rev is not prod-stable (istio.io/rev=1-26)"},
		{"auto", Status{Target: TargetAuto, TargetRevision: "1-26"}, map[string]string{LabelRev: "1-26"}, ""},
		{"no label", Status{Target: "1-26", TargetRevision: "1-26"}, map[string]string{}, "its istio.io/rev is not 1-26 (neither istio.io/rev nor istio.io/dataplane-mode)"},
		{"enrolled", Status{Target: "1-26", TargetRevision: "1-26", Mode: ModeAmbient, NamespaceEnrolled: true}, map[string]string{LabelDataplaneMode: DataplaneAmbient}, ""},
		{"enrolled, but the revision label is back", Status{Target: "1-26", TargetRevision: "1-26", Mode: ModeAmbient, NamespaceEnrolled: true},
			map[string]string{LabelDataplaneMode: DataplaneAmbient, LabelRev: "1-25"}, "the namespace is not labelled istio.io/dataplane-mode=ambient alone (istio.io/rev=1-25, istio.io/dataplane-mode=ambient)"},
		{"ambient, not enrolled", Status{Target: "1-26", TargetRevision: "1-26", Mode: ModeAmbient}, map[string]string{LabelRev: "1-25"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			st.Phase = PhaseCompleted
			assert.Equal(t, tc.why, contradicted(PeerNamespace{Status: &st, Labels: tc.labels}))
		})
	}
}
