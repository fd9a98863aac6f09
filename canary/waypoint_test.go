package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waypointSim is ambientSim asking for the waypoint "waypoint", which
// istiod of 1-26 deployed and reports Programmed, its one pod Ready.
func waypointSim(t *testing.T, ws ...Workload) *sim {
	wp := deploy("waypoint", notInjected(), replicas(1))
	for i := range wp.Pods {
		wp.Pods[i].Labels = map[string]string{LabelGatewayName: "waypoint", LabelDataplaneMode: "none", LabelInject: "false"}
	}
	wp.Labels[LabelGatewayName] = "waypoint"
	wp.TemplateLabels = map[string]string{LabelGatewayName: "waypoint", LabelDataplaneMode: "none", LabelInject: "false"}
	s := ambientSim(t, ws...)
	s.snap.Workloads = append(s.snap.Workloads, wp)
	s.snap.Namespace.Annotations[AnnotationWaypoint] = "waypoint"
	s.snap.Compat.GatewayAPI = true
	s.snap.Compat.Gateways = []Gateway{{Namespace: "shop", Name: "waypoint", Class: WaypointClass, Revision: "1-26", Programmed: true}}
	return s
}

// toSecondWave runs the canary, "a", into ambient and starts wave 2.
func (s *sim) toSecondWave() {
	s.t.Helper()
	s.decide(nil)
	s.rollOutAmbient("a")
	s.decide(s.gates())
	s.now = s.now.Add(2 * time.Minute)
	s.decide(nil)
	require.Equal(s.t, 2, s.status.Wave, s.status.Reason)
}

func TestAMoveToAmbientPutsTheNamespaceBehindItsWaypointBeforeTheFirstWave(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"))
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, "waypoint", d.UseWaypoint, "in the write that starts wave 1")
	assert.Equal(t, "waypoint", d.Status.WaypointSet)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "waypoint", d.Moves[0].Record.Waypoint, "the record says meshwave set it")
	assert.Contains(t, s.reasons(), "WaypointUsed")
	assert.NotContains(t, d.Status.Workloads, WorkloadState{Name: "waypoint", State: StateMoving}, "the waypoint itself is never moved")

	s.playUntil(PhaseCompleted)
	assert.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint], "it stays once the move completed")
	assert.Equal(t, DataplaneAmbient, s.snap.Namespace.Labels[LabelDataplaneMode], "the waypoint's own pods (dataplane-mode=none) do not hold the enrolment back")
}

func TestTheWaypointBlocksTheMoveUntilItCanCarryIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(s *sim)
		reason string
	}{
		{"no Gateway API", func(s *sim) { s.snap.Compat.GatewayAPI, s.snap.Compat.Gateways = false, nil },
			"meshwave.io/waypoint=waypoint needs the Gateway API, and the cluster serves no gateways.gateway.networking.k8s.io: install the Gateway API CRDs"},
		{"no such Gateway", func(s *sim) { s.snap.Compat.Gateways = nil },
			"meshwave.io/waypoint=waypoint: namespace shop has no Gateway waypoint; create one of class istio-waypoint (istioctl waypoint apply -n shop --name waypoint --revision 1-26)"},
		{"another class", func(s *sim) { s.snap.Compat.Gateways[0].Class = "istio" },
			`meshwave.io/waypoint=waypoint: Gateway waypoint is of class "istio", not istio-waypoint: it is no waypoint`},
		{"no revision of its own", func(s *sim) { s.snap.Compat.Gateways[0].Revision = "" },
			"waypoint waypoint carries no istio.io/rev label: label the Gateway istio.io/rev=1-26, so the target's istiod deploys and serves it whatever the namespace's label says"},
		{"the source's revision", func(s *sim) { s.snap.Compat.Gateways[0].Revision = "1-25" },
			"waypoint waypoint carries istio.io/rev=1-25: label the Gateway istio.io/rev=1-26, so the target's istiod deploys and serves it whatever the namespace's label says"},
		{"not Programmed", func(s *sim) {
			s.snap.Compat.Gateways[0].Programmed, s.snap.Compat.Gateways[0].ProgrammedWhy = false, "Pending: Deployment waypoint is not ready"
		}, "waypoint waypoint is not Programmed yet (Pending: Deployment waypoint is not ready)"},
		{"no Ready pod", func(s *sim) { s.snap.Workloads[len(s.snap.Workloads)-1].Pods[0].Ready = false },
			"waypoint waypoint has no Ready pod (1 pods)"},
		{"a person's other waypoint", func(s *sim) { s.snap.Namespace.Labels[LabelUseWaypoint] = "other" },
			"namespace shop is labelled istio.io/use-waypoint=other, but meshwave.io/waypoint names waypoint: remove one of them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := waypointSim(t, deploy("a"), deploy("b"))
			tc.edit(s)
			d := s.decide(nil)
			require.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Contains(t, d.Status.Reason, tc.reason)
			assert.Empty(t, d.Moves)
			assert.Empty(t, d.UseWaypoint)
			assert.Empty(t, d.Label)
		})
	}
}

func TestAWaypointThatStopsServingBetweenWavesHoldsTheNextOne(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"), deploy("d"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.decide(s.gates())
	require.Equal(t, 1, s.status.Wave)
	// Its pod goes unready: the next wave waits, without a pause.
	s.snap.Workloads[len(s.snap.Workloads)-1].Pods[0].Ready = false
	s.now = s.now.Add(2 * time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, "wave 2 waits: waypoint waypoint has no Ready pod (1 pods)", s.status.Reason)
	assert.NotEqual(t, PhasePaused, s.status.Phase)
	// Its Gateway deleted: paused, for a person.
	s.snap.Compat.Gateways = nil
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Contains(t, s.status.Reason, "wave 2 not started: meshwave.io/waypoint=waypoint: namespace shop has no Gateway waypoint")
}

func TestAWaypointLabelAPersonSetIsNeverTakenOff(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.snap.Namespace.Labels[LabelUseWaypoint] = "waypoint"
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Empty(t, d.UseWaypoint)
	assert.Empty(t, d.Status.WaypointSet)
	s.playUntil(PhaseCompleted)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	s.playUntil(PhaseRolledBack)
	s.decide(nil)
	assert.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint])
}

func TestARollbackOfEverythingTakesOffTheWaypointLabelMeshwaveSet(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	require.Equal(t, "waypoint", s.status.WaypointSet)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.False(t, d.RemoveWaypoint, "not while a pod still runs in ambient behind it")
	s.playUntil(PhaseRolledBack)
	_, has := s.snap.Namespace.Labels[LabelUseWaypoint]
	assert.False(t, has, "taken off once every pod is back on its sidecar")
	assert.Empty(t, s.status.WaypointSet)
	assert.Contains(t, s.reasons(), "WaypointReleased")
}

func TestAWaveRollbackKeepsTheWaypointWhileEarlierWavesStayInAmbient(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.toSecondWave()
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.decide(nil)
	s.playUntil(PhaseRolledBack)
	s.decide(nil)
	assert.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint], "wave 1 still runs in ambient behind it")
	assert.Equal(t, "waypoint", s.status.WaypointSet)
}

func TestALostStatusRemembersTheWaypointMeshwaveSetFromTheMoveRecords(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.status = nil
	delete(s.snap.Namespace.Annotations, AnnotationStatus)
	s.now = s.now.Add(time.Second)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "waypoint", d.Status.WaypointSet)
	assert.Equal(t, 1, s.patches["a"], "a is not restarted again")
}

func TestAnInvalidWaypointIsRefusedNamingTheKey(t *testing.T) {
	for _, tc := range []struct{ mode, value, expected string }{
		{"ambient", "Way_Point", "the name of a Gateway of class istio-waypoint in the namespace (a DNS-1123 label other than none, which opts out of waypoints)"},
		{"sidecar", "waypoint", "set only with meshwave.io/target-mode=ambient: a waypoint serves pods in ambient"},
	} {
		_, errs := ParseNamespace("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationTargetMode: tc.mode, AnnotationWaypoint: tc.value})
		require.Len(t, errs, 1, tc.value)
		assert.Equal(t, InputError{Key: AnnotationWaypoint, Kind: "namespace", Namespace: "shop", Name: "shop", Value: tc.value, Expected: tc.expected}, errs[0])
	}
	s := waypointSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationWaypoint] = "Way_Point"
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, "meshwave.io/waypoint")
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.UseWaypoint)
}

func TestAWaveBehindAWaypointIsVerifiedWithTheWaypointsPods(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOutAmbient("a")
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.Equal(t, "waypoint", w.Waypoint)
	require.Len(t, w.WaypointPods, 1)
	assert.Equal(t, "waypoint-abc-0", w.WaypointPods[0].Name)
}

// A status lost once every workload of a rollback of everything carries
// its rollback record (the records of the way back say nothing of the
// waypoint) still knows the waypoint label is meshwave's: the rollback
// ends with it taken off.
func TestAStatusLostMidRollbackStillTakesOffTheWaypointLabelMeshwaveSet(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	require.Equal(t, "waypoint", s.status.WaypointSet)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 3, "every moved workload is restarted back at once")

	s.status = nil // lost
	delete(s.snap.Namespace.Annotations, AnnotationStatus)
	s.now = s.now.Add(time.Second)
	s.playUntil(PhaseRolledBack)
	s.decide(nil)
	_, has := s.snap.Namespace.Labels[LabelUseWaypoint]
	assert.False(t, has, "meshwave set it, and no pod of the namespace runs in ambient any more")
}

// A namespace whose istio.io/use-waypoint-namespace sends it to a
// waypoint of another namespace is not behind the Gateway meshwave
// checked: the move blocks until one of them goes.
func TestAWaypointOfAnotherNamespaceBlocksTheMove(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Labels["istio.io/use-waypoint-namespace"] = "media"
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase, d.Status.Reason)
	assert.Zero(t, len(d.Moves), "no workload leaves its sidecar")
	assert.Empty(t, d.UseWaypoint)
}

// A wave's rollback that ends while an earlier wave's workload has no
// pod (scaled to zero) keeps the waypoint: its template still runs it in
// ambient, and its next pods would come up outside the waypoint.
func TestAWaveRollbackKeepsTheWaypointForAnEarlierWaveScaledToZero(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.toSecondWave()
	// a, moved into ambient by wave 1, is scaled to zero.
	s.snap.Workloads[0].Replicas, s.snap.Workloads[0].Pods = 0, nil
	s.snap.Workloads[0].Status = RolloutStatus{ObservedGeneration: 1}
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.decide(nil)
	s.playUntil(PhaseRolledBack)
	s.decide(nil)
	assert.Equal(t, DataplaneAmbient, s.snap.Workloads[0].TemplateLabels[LabelDataplaneMode], "a's template stays in ambient")
	assert.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint], "a scales up behind its waypoint")
}

// A namespace labelled istio.io/use-waypoint=none opts out of any
// waypoint: a wave into ambient there is judged as one without a
// waypoint, not as one behind a waypoint named "none".
func TestAWaveIntoAmbientOfANamespaceThatOptsOutOfWaypointsIsJudgedWithoutOne(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Labels[LabelUseWaypoint] = "none"
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	s.rollOutAmbient("a")
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	require.True(t, w.Ambient)
	assert.Empty(t, w.Waypoint)
}

// A status edited to say meshwave set the waypoint label, when every move
// record of the migration says it did not, never takes a person's label
// off.
func TestAStatusEditedToClaimThePersonsWaypointLabelNeverTakesItOff(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.snap.Namespace.Labels[LabelUseWaypoint] = "waypoint"
	s.playUntil(PhaseCompleted)
	require.Empty(t, s.status.WaypointSet)
	s.editStatus(func(m map[string]any) { m["waypointSet"] = "waypoint" })
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	s.playUntil(PhaseRolledBack)
	s.decide(nil)
	assert.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint], "the person's label stays")
}

// The namespace's istio.io/rev goes when it is enrolled: a waypoint
// Gateway that lost its own istio.io/rev label after the last wave
// started would then move to another revision's istiod. The namespace
// keeps its revision label until the waypoint names its own again.
func TestTheNamespaceIsNotEnrolledWhileItsWaypointNamesNoRevisionOfItsOwn(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"))
	s.toSecondWave()
	// While the last wave runs, the Gateway loses its own label: istiod
	// 1-26 still deploys it by the namespace's.
	s.snap.Compat.Gateways[0].Revision = ""
	for i := 0; i < 20 && s.status.Phase != PhaseCompleted && s.status.Phase != PhasePaused; i++ {
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev], "the namespace's label is what keeps the waypoint on 1-26 (%s: %s)", s.status.Phase, s.status.Reason)
}

// "none" is no waypoint's name to Istio: istio.io/use-waypoint=none opts
// the namespace out of any waypoint.
func TestAWaypointNamedNoneIsRefused(t *testing.T) {
	_, errs := ParseNamespace("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationTargetMode: "ambient", AnnotationWaypoint: "none"})
	require.Len(t, errs, 1)
	assert.Equal(t, AnnotationWaypoint, errs[0].Key)
}

// A retarget asked together with a rollback of everything rolls the move
// to ambient back first: once no pod is left in ambient, the waypoint
// label meshwave set comes off before the new target's migration starts.
func TestARollbackBeforeANewTargetTakesOffTheWaypointLabelMeshwaveSet(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.toSecondWave()
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.snap.Namespace.Annotations[AnnotationTargetMode] = "sidecar"
	delete(s.snap.Namespace.Annotations, AnnotationWaypoint)
	for i := 0; i < 30; i++ {
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	_, has := s.snap.Namespace.Labels[LabelUseWaypoint]
	assert.False(t, has, "reasons: %v; phase %s: %s", s.reasons(), s.status.Phase, s.status.Reason)
}

// The waypoint is changed mid-way (meshwave.io/waypoint names another,
// and the label is taken off as the block asks): the later waves put the
// namespace behind the new one. A status lost then is rebuilt knowing the
// label meshwave set last, and the rollback takes that one off.
func TestALostStatusRemembersTheWaypointMeshwaveSetLast(t *testing.T) {
	s := waypointSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.decide(s.gates())
	require.Equal(t, "waypoint", s.snap.Namespace.Labels[LabelUseWaypoint])
	// A second waypoint, and the namespace asks for it.
	other := deploy("other", notInjected(), replicas(1))
	other.Pods[0].Labels = map[string]string{LabelGatewayName: "other", LabelDataplaneMode: "none", LabelInject: "false"}
	other.Labels[LabelGatewayName] = "other"
	other.TemplateLabels = map[string]string{LabelGatewayName: "other", LabelDataplaneMode: "none", LabelInject: "false"}
	s.snap.Workloads = append(s.snap.Workloads, other)
	s.snap.Compat.Gateways = append(s.snap.Compat.Gateways, Gateway{Namespace: "shop", Name: "other", Class: WaypointClass, Revision: "1-26", Programmed: true})
	s.snap.Namespace.Annotations[AnnotationWaypoint] = "other"
	delete(s.snap.Namespace.Labels, LabelUseWaypoint)
	s.now = s.now.Add(2 * time.Minute)
	d := s.decide(nil)
	require.Equal(t, 2, s.status.Wave, s.status.Reason)
	require.Equal(t, "other", d.UseWaypoint)
	require.Equal(t, "other", s.status.WaypointSet)

	s.status = nil // lost
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, "other", d.Status.WaypointSet, "the label on the namespace is the one meshwave set last")
}
