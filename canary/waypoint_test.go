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
	s.decide(nil)
	s.rollOutAmbient("a")
	s.decide(s.gates())
	s.now = s.now.Add(2 * time.Minute)
	s.decide(nil)
	require.Equal(t, 2, s.status.Wave)
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
		{"ambient", "Way_Point", "the name of a Gateway of class istio-waypoint in the namespace (a DNS-1123 label)"},
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
