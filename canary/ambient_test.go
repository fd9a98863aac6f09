package canary

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ambientSim is namespace shop asking for ambient on 1-26, its workloads'
// sidecars on 1-26 already, moved in a canary of one, then waves of two.
func ambientSim(t *testing.T, ws ...Workload) *sim {
	for i := range ws {
		onRevision("1-26")(&ws[i])
	}
	s := newSim(t, ws...)
	s.snap.Namespace.Labels[LabelRev] = "1-26"
	s.snap.Namespace.Annotations[AnnotationTargetMode] = "ambient"
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	return s
}

// templateLabelsOf reads the pod-template labels of a move's patch, null
// for a label it removes.
func templateLabelsOf(t *testing.T, m Move) map[string]*string {
	var p struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Labels map[string]*string `json:"labels"`
				} `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, json.Unmarshal(m.Patch, &p))
	return p.Spec.Template.Metadata.Labels
}

func TestAMoveToAmbientLabelsEachWavesTemplatesAndEnrolsTheNamespaceLast(t *testing.T) {
	s := ambientSim(t, deploy("a", waveAnn("0")), deploy("b"), deploy("c"))
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, ModeAmbient, d.Status.Mode)
	assert.Equal(t, "", d.Label, "the namespace keeps istio.io/rev: waiting workloads' recreated pods keep their sidecar")
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
	inject, mode := "false", "ambient"
	assert.Equal(t, map[string]*string{LabelInject: &inject, LabelDataplaneMode: &mode}, templateLabelsOf(t, d.Moves[0]))
	assert.Equal(t, ModeAmbient, d.Moves[0].Record.Mode)
	assert.False(t, d.EnrolNamespace)

	// The wave's gates expect the new pods in ambient.
	s.rollOutAmbient("a")
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.True(t, w.Ambient)
	assert.Equal(t, "1-26", w.Expect)

	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches, "each workload is restarted once")
	assert.Equal(t, "moved 3 workloads to ambient (1-26) in 2 waves", s.status.Reason)
	assert.True(t, s.status.NamespaceEnrolled)
	assert.True(t, s.last.EnrolNamespace, "the namespace is enrolled in the write that completes")
	assert.Equal(t, map[string]string{LabelDataplaneMode: DataplaneAmbient}, s.snap.Namespace.Labels)
	assert.Contains(t, s.reasons(), "NamespaceEnrolled")

	// Completed and enrolled, it owns no istio.io/rev: nothing puts it back.
	for range 3 {
		s.now = s.now.Add(time.Minute)
		d = s.decide(nil)
		assert.Empty(t, d.Label)
		assert.False(t, d.EnrolNamespace)
		assert.Empty(t, d.Moves)
	}
}

func TestAnAmbientTargetMovesTheSidecarsOntoItsRevisionFirst(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationTargetMode] = "ambient"
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.Equal(t, ModeSidecar, d.Status.Mode, "Istio's step 1: every sidecar on the ambient-capable revision first")
	assert.Equal(t, "1-26", d.Label)
	require.Len(t, d.Moves, 1)
	assert.Nil(t, templateLabelsOf(t, d.Moves[0]), "a sidecar move labels nothing")

	s.playUntil(PhaseCompleted)
	assert.Equal(t, ModeSidecar, s.status.Mode)
	sidecarStart := *s.status.StartedAt

	// The move to ambient follows by itself.
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, ModeAmbient, d.Status.Mode)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.NotEqual(t, sidecarStart, *d.Status.StartedAt)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, ModeAmbient, s.status.Mode)
	assert.Equal(t, map[string]int{"a": 2, "b": 2}, s.patches, "once onto 1-26's sidecar, once into ambient")
	assert.Equal(t, map[string]string{LabelDataplaneMode: DataplaneAmbient}, s.snap.Namespace.Labels)
}

func TestAFailedAmbientWaveRollsBackOntoTheSidecarWithTheLabelsRemoved(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.now = s.now.Add(time.Minute)
	d := s.decide(failRollout("a", "a broke"))
	require.Equal(t, PhaseRollingBack, d.Status.Phase, d.Status.Reason)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, map[string]*string{LabelInject: nil, LabelDataplaneMode: nil}, templateLabelsOf(t, d.Moves[0]))
	assert.True(t, d.Moves[0].Record.Rollback)
	assert.Equal(t, ModeAmbient, d.Moves[0].Record.Mode)
	assert.Equal(t, "1-26", d.Moves[0].Record.Revision, "back onto the sidecar of the revision the namespace keeps")

	s.rollOut("1-26", "a")
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	require.True(t, ok)
	assert.False(t, w.Ambient, "the way back expects a sidecar again")
	assert.Equal(t, "1-26", w.Expect)
	s.playUntil(PhaseRolledBack)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	assert.NotContains(t, s.snap.Namespace.Labels, LabelDataplaneMode)
	assert.Equal(t, map[string]string{"app": "a"}, s.snap.Workloads[0].TemplateLabels)
}

func TestAnInvalidTargetModeBlocksNamingTheKeyAndWritesNothingElse(t *testing.T) {
	s := ambientSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationTargetMode] = "Ambient"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedInvalidInput, d.Status.BlockedKind)
	assert.Contains(t, d.Status.Reason, `meshwave.io/target-mode on namespace shop: "Ambient" is not "sidecar" or "ambient"`)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
	assert.False(t, d.EnrolNamespace)
}

func TestAMoveToAmbientWaitsForEverySidecarOfTheNamespaceOnTheTarget(t *testing.T) {
	s := ambientSim(t, deploy("a"))
	s.snap.Unmovable = []Unmovable{{ID: "Job/migrate", Revisions: map[string]int{"1-25": 1}}}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedPrecheck, d.Status.BlockedKind)
	assert.Contains(t, d.Status.Reason, "1 pods of Job/migrate run 1-25")
	assert.Contains(t, d.Status.Reason, "needs every sidecar of the namespace on 1-26 first")
	assert.Empty(t, d.Moves)

	s.snap.Unmovable = nil
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

func TestACompletedMoveToAmbientKeepsTheNamespaceLabelsWhileAWorkloadKeepsItsSidecar(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("gw", label("istio", "ingressgateway")))
	s.playUntil(PhaseCompleted)
	assert.False(t, s.status.NamespaceEnrolled)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	assert.NotContains(t, s.snap.Namespace.Labels, LabelDataplaneMode)
	require.NotEmpty(t, s.status.Warnings)
	assert.Contains(t, s.status.Warnings[len(s.status.Warnings)-1], "keeps istio.io/rev=1-26 and is not labelled istio.io/dataplane-mode=ambient: deployment gw still run a sidecar")
}

func TestALostStatusMidAmbientWaveIsAdoptedWithoutASecondRestart(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseMigrating)
	for s.status.Wave < 2 {
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches)
	s.status = nil // lost
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, ModeAmbient, d.Status.Mode, "the records say the migration was to ambient")
	assert.Equal(t, 2, d.Status.Wave)
	assert.Contains(t, s.reasons(), "StatusAdopted")
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, s.patches, "no workload restarted twice")
	assert.True(t, s.status.NamespaceEnrolled)
}

func TestL7FeaturesNameWhatZtunnelCannotEnforce(t *testing.T) {
	policy := func(spec string) map[string]any {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(`{"spec":`+spec+`}`), &obj))
		return obj
	}
	assert.Empty(t, L7Features(policy(`{"action":"ALLOW","rules":[{"from":[{"source":{"principals":["cluster.local/ns/a/sa/b"],"namespaces":["a"]}}],"to":[{"operation":{"ports":["8080"]}}],"when":[{"key":"source.ip","values":["10.0.0.0/8"]}]}]}`)))
	assert.Equal(t, []string{"from.source.notRequestPrincipals", "to.operation.methods", "to.operation.paths", "when request.headers[x-user]"},
		L7Features(policy(`{"rules":[{"to":[{"operation":{"methods":["GET"],"paths":["/a"]}}]},{"from":[{"source":{"notRequestPrincipals":["*"]}}],"when":[{"key":"request.headers[x-user]","values":["a"]}]},{"to":[{"operation":{"methods":["POST"]}}]}]}`)))
	assert.Equal(t, []string{"action CUSTOM"}, L7Features(policy(`{"action":"CUSTOM","provider":{"name":"ext"}}`)))
}

func TestPoliciesThatChangeMeaningInAmbientBlockTheMoveByName(t *testing.T) {
	tests := []struct {
		name   string
		compat Compat
		reason string
	}{
		{"a selector AuthorizationPolicy with L7 rules", Compat{AuthorizationPolicies: []AuthorizationPolicy{{Namespace: "shop", Name: "paths", MatchLabels: map[string]string{"app": "a"}, L7: []string{"to.operation.paths"}}}},
			"AuthorizationPolicy shop/paths selects workloads by spec.selector and holds what ztunnel cannot enforce (to.operation.paths): once the pods leave their sidecar, ztunnel denies all their traffic (an ALLOW) or drops its HTTP conditions (a DENY: wider, or void when it has no other); move it to targetRefs on a waypoint first"},
		{"a namespace-wide one", Compat{AuthorizationPolicies: []AuthorizationPolicy{{Namespace: "shop", Name: "all", L7: []string{"action CUSTOM"}}}},
			"AuthorizationPolicy shop/all applies to the whole namespace and holds what ztunnel cannot enforce (action CUSTOM)"},
		{"a mesh-wide one", Compat{AuthorizationPolicies: []AuthorizationPolicy{{Namespace: "istio-system", Name: "mesh", MeshWide: true, L7: []string{"to.operation.methods"}}}},
			"AuthorizationPolicy istio-system/mesh applies to the whole mesh"},
		{"a PeerAuthentication DISABLE of the namespace", Compat{PeerAuthentications: []PeerAuthentication{{Namespace: "shop", Name: "plain", Mode: "DISABLE"}}},
			"PeerAuthentication shop/plain sets mTLS mode DISABLE: ambient always uses mTLS between mesh workloads, and ignores it; remove it, or set PERMISSIVE"},
		{"a PeerAuthentication DISABLE on a port of a workload", Compat{PeerAuthentications: []PeerAuthentication{{Namespace: "shop", Name: "port", MatchLabels: map[string]string{"app": "a"}, DisabledPorts: []string{"9000"}}}},
			"PeerAuthentication shop/port sets mTLS mode DISABLE on port 9000"},
		{"a mesh-wide PeerAuthentication DISABLE", Compat{PeerAuthentications: []PeerAuthentication{{Namespace: "istio-system", Name: "mesh", Mode: "DISABLE", MeshWide: true}}},
			"PeerAuthentication istio-system/mesh sets mTLS mode DISABLE"},
		{"policies that cannot be read", Compat{Unread: []string{"authorizationpolicies: not read yet"}},
			"cannot read authorizationpolicies: not read yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ambientSim(t, deploy("a"), deploy("b"))
			s.snap.Compat = tt.compat
			d := s.decide(nil)
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Equal(t, BlockedPrecheck, d.Status.BlockedKind)
			assert.Contains(t, d.Status.Reason, tt.reason)
			assert.Empty(t, d.Moves, "nothing is written before the first wave")
			assert.Empty(t, d.Label)
		})
	}
	t.Run("what ztunnel can enforce, targetRefs, another workload's selector or PERMISSIVE do not block", func(t *testing.T) {
		s := ambientSim(t, deploy("a"), deploy("b"))
		s.snap.Compat = Compat{
			AuthorizationPolicies: []AuthorizationPolicy{
				{Namespace: "shop", Name: "l4", MatchLabels: map[string]string{"app": "a"}},
				{Namespace: "shop", Name: "waypoint", TargetRefs: true, L7: []string{"to.operation.paths"}},
				{Namespace: "shop", Name: "other", MatchLabels: map[string]string{"app": "elsewhere"}, L7: []string{"to.operation.paths"}},
			},
			PeerAuthentications: []PeerAuthentication{{Namespace: "shop", Name: "permissive", Mode: "PERMISSIVE"}, {Namespace: "other", Name: "off", Mode: "DISABLE"}},
		}
		d := s.decide(nil)
		require.NotNil(t, d.Status)
		assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	})
	t.Run("a sidecar migration is not held by them", func(t *testing.T) {
		s := newSim(t, deploy("a"))
		s.snap.Compat = Compat{PeerAuthentications: []PeerAuthentication{{Namespace: "shop", Name: "plain", Mode: "DISABLE"}}}
		d := s.decide(nil)
		require.NotNil(t, d.Status)
		assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	})
}

func TestAMoveToAmbientWaitsForAReadyZtunnelAndNodeAgentOnEveryNodeOfItsPods(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	for i := range s.snap.Workloads {
		for j := range s.snap.Workloads[i].Pods {
			s.snap.Workloads[i].Pods[j].Node = []string{"n1", "n2"}[j]
		}
	}
	s.snap.Mesh.Ztunnels = map[string]bool{"n1": true, "n2": false}
	s.snap.Mesh.CNINodeAgents = map[string]bool{"n2": true}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, "precheck failed: no Ready ztunnel runs on node n2 (pod a-abc-1): install Istio's ztunnel DaemonSet (pods app=ztunnel in the root namespace); "+
		"no Ready istio-cni node agent runs on node n1 (pod a-abc-0): install Istio's istio-cni chart with ambient enabled (pods k8s-app=istio-cni-node in the root namespace) on every node of the namespace's pods first", d.Status.Reason)
	assert.Empty(t, d.Moves)

	s.snap.Mesh.Ztunnels["n2"] = true
	s.snap.Mesh.CNINodeAgents["n1"] = true
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

func TestAMoveToAmbientWhoseFirstRestartsWereLostStartsAgainNotTheSidecarStep(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationTargetMode] = "ambient"
	s.playUntil(PhaseCompleted)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, ModeAmbient, d.Status.Mode)
	require.Equal(t, 1, d.Status.Wave)
	// The agent stopped between the status and the restarts: the status
	// is of the move to ambient, the only records are the sidecar step's.
	for i := range s.snap.Workloads {
		w := &s.snap.Workloads[i]
		r, _ := ReadMoveRecord(w.Annotations)
		if r.Mode == ModeAmbient {
			delete(w.Annotations, AnnotationMove)
			delete(w.TemplateAnnotations, AnnotationRestartedAt)
			onRevision("1-26")(w)
			w.TemplateLabels = map[string]string{"app": w.Name}
		}
	}
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	assert.NotContains(t, reasonsOf(d.Events), "StatusAdopted")
	require.Len(t, d.Moves, 1, "the wave's restart is sent again")
	assert.Equal(t, ModeAmbient, d.Moves[0].Record.Mode)
	assert.False(t, d.Moves[0].RecordOnly)
	inject, mode := "false", "ambient"
	assert.Equal(t, map[string]*string{LabelInject: &inject, LabelDataplaneMode: &mode}, templateLabelsOf(t, d.Moves[0]))
}

func TestAStatusEditedToAnotherModeIsRebuiltFromTheRecords(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseMigrating)
	s.editStatus(func(m map[string]any) { delete(m, "mode") })
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, ModeAmbient, d.Status.Mode)
	assert.Contains(t, d.Status.Reason, "moving to ambient (1-26), which the status says moves to 1-26")
}

// A member of an ambient wave whose move a GitOps tool undid whole
// (template and record), moved again once a person resumes, must be moved
// into ambient again: its second patch carries the ambient template labels
// and a record of mode ambient, not a plain restart onto its sidecar.
func TestAnAmbientMoveUndoneWholeIsMovedAgainIntoAmbientWhenResumed(t *testing.T) {
	s := ambientSim(t, deploy("a", label("kustomize.toolkit.fluxcd.io/name", "apps"), label("kustomize.toolkit.fluxcd.io/namespace", "flux-system")), deploy("b"))
	d := s.decide(nil)
	require.Equal(t, ModeAmbient, d.Status.Mode)
	require.Equal(t, 1, s.patches["a"])

	s.now = s.now.Add(5 * time.Second)
	w := &s.snap.Workloads[0]
	delete(w.Annotations, AnnotationMove)
	delete(w.TemplateAnnotations, AnnotationRestartedAt)
	w.TemplateLabels = map[string]string{"app": "a"}
	w.RolledOutRestart = t0
	s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, ModeAmbient, d.Moves[0].Record.Mode, "the second move is of the move to ambient")
	inject, mode := "false", "ambient"
	assert.Equal(t, map[string]*string{LabelInject: &inject, LabelDataplaneMode: &mode}, templateLabelsOf(t, d.Moves[0]),
		"the second move labels the template into ambient")

	// With a's record now of no mode, the next reading takes the move to
	// ambient for a sidecar migration.
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	assert.Equal(t, ModeAmbient, s.status.Mode, s.status.Reason)
}

// The agent wrote the status of ambient wave 1 and stopped before a's
// patch; meanwhile a person ran `kubectl rollout restart` on a. Its
// template shows a restart after the wave started, but not onto ambient:
// it carries neither ambient label. a must be moved (with the labels), not
// given a record of a move into ambient it never made.
func TestARestartWithoutTheAmbientLabelsIsNotTakenForTheWavesMove(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	d := s.decide(nil)
	require.Equal(t, ModeAmbient, d.Status.Mode)
	require.Equal(t, 1, s.status.Wave)
	w := &s.snap.Workloads[0]
	delete(w.Annotations, AnnotationMove)
	w.TemplateLabels = map[string]string{"app": "a"}
	w.TemplateAnnotations[AnnotationRestartedAt] = t0.Add(10 * time.Second).Format(time.RFC3339)
	s.now = s.now.Add(20 * time.Second)
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.False(t, d.Moves[0].RecordOnly, "a never left its sidecar: its move into ambient is still to be made")
	inject, mode := "false", "ambient"
	assert.Equal(t, map[string]*string{LabelInject: &inject, LabelDataplaneMode: &mode}, templateLabelsOf(t, d.Moves[0]))
}

// An AuthorizationPolicy in the root namespace with a selector applies to
// the matching workloads of every namespace, in ambient too (istiod's
// buildWorkloadPolicies: nsMatch is the root namespace or the workload's).
// The agent hands the precheck the root namespace's policies beside the
// namespace's own; one that selects a moved workload and holds what
// ztunnel cannot enforce must block the move, as one in the namespace does.
func TestARootNamespaceAuthorizationPolicyThatSelectsAMovedWorkloadBlocksTheMove(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.snap.Compat = Compat{AuthorizationPolicies: []AuthorizationPolicy{
		{Namespace: "istio-system", Name: "paths", MatchLabels: map[string]string{"app": "a"}, L7: []string{"to.operation.paths"}},
	}}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseBlocked, d.Status.Phase, "ztunnel turns its ALLOW into deny-all for a once it leaves its sidecar")
	assert.Contains(t, d.Status.Reason, "AuthorizationPolicy istio-system/paths")
	assert.Equal(t, 0, len(d.Moves), "nothing is written before the first wave")
}

// A move to ambient completed and enrolled the namespace: it carries
// istio.io/dataplane-mode=ambient and no istio.io/rev. Its status is then
// lost and rebuilt from the move records. Rebuilding it must not put
// istio.io/rev back: a pod of the namespace created meanwhile (any
// workload without the template labels) would be injected again.
func TestALostStatusAfterTheNamespaceWasEnrolledNeverPutsTheRevisionLabelBack(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	require.True(t, s.status.NamespaceEnrolled)
	require.Equal(t, map[string]string{LabelDataplaneMode: DataplaneAmbient}, s.snap.Namespace.Labels)

	s.status = nil // lost
	for range 3 {
		s.now = s.now.Add(time.Minute)
		d := s.decide(nil)
		assert.Empty(t, d.Label, "istio.io/rev written onto an enrolled namespace (status %s: %s)", s.status.Phase, s.status.Reason)
	}
	assert.NotContains(t, s.snap.Namespace.Labels, LabelRev)
}

// plain runs outside the mesh (no sidecar): no wave moves it, so the
// precheck never looks at the policies that select it. Enrolling the
// namespace puts its running pods into ambient at once (istio-cni enrols
// every pod of a namespace labelled istio.io/dataplane-mode=ambient that
// runs no sidecar and is not labelled none), where ztunnel turns the L7
// ALLOW that selects it into deny-all. The move must never end by
// enrolling the namespace under such a policy.
func TestEnrollingTheNamespaceNeverPutsAPodUnderAPolicyZtunnelCannotEnforce(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("plain"))
	notInjected()(&s.snap.Workloads[1])
	s.snap.Compat = Compat{AuthorizationPolicies: []AuthorizationPolicy{
		{Namespace: "shop", Name: "plain-paths", MatchLabels: map[string]string{"app": "plain"}, L7: []string{"to.operation.paths"}},
	}}
	for i := 0; i < 40 && (s.status == nil || s.status.Phase != PhaseCompleted && s.status.Phase != PhaseBlocked); i++ {
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	assert.NotEqual(t, DataplaneAmbient, s.snap.Namespace.Labels[LabelDataplaneMode],
		"the namespace was enrolled (status %s: %s): plain's pods enter ambient under AuthorizationPolicy shop/plain-paths", s.status.Phase, s.status.Reason)
}

// a's template carries sidecar.istio.io/inject: "true", as many charts
// write it. The move to ambient overwrites it with "false"; the wave's
// rollback must give the template back as it was, not delete the label a
// person set.
func TestARollbackFromAmbientPutsBackAnInjectLabelThePersonSet(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.snap.Workloads[0].TemplateLabels[LabelInject] = "true"
	s.decide(nil)
	require.Equal(t, "false", s.snap.Workloads[0].TemplateLabels[LabelInject])
	s.rollOutAmbient("a")
	s.now = s.now.Add(time.Minute)
	d := s.decide(failRollout("a", "a broke"))
	require.Equal(t, PhaseRollingBack, d.Status.Phase, d.Status.Reason)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, map[string]string{"app": "a", LabelInject: "true"}, s.snap.Workloads[0].TemplateLabels,
		"the rollback gives the template back as it was before the move")
}

// Istio's opt-out from ambient is the pod label istio.io/dataplane-mode:
// none. A workload whose template carries it was kept out of ambient on
// purpose; the move to ambient must leave it where it is (on its sidecar),
// not overwrite the label with "ambient" and restart it.
func TestAWorkloadOptedOutOfAmbientIsNeverMovedIntoIt(t *testing.T) {
	s := ambientSim(t, deploy("a", waveAnn("0")), deploy("legacy"))
	s.snap.Workloads[1].TemplateLabels[LabelDataplaneMode] = "none"
	s.playUntil(PhaseCompleted)
	assert.Zero(t, s.patches["legacy"], "legacy was restarted into ambient")
	assert.Equal(t, "none", s.snap.Workloads[1].TemplateLabels[LabelDataplaneMode])
}

// L7Features reads any AuthorizationPolicy the agent's informer hands it
// (its transform runs it on every object, before the cache keeps it). A
// field named "not" (or "") under an operation or a source must not panic
// the agent.
func TestL7FeaturesNeverPanicsOnAFieldNamedNot(t *testing.T) {
	for _, field := range []string{"not", ""} {
		obj := map[string]any{"spec": map[string]any{"rules": []any{
			map[string]any{"to": []any{map[string]any{"operation": map[string]any{field: []any{"x"}}}}},
		}}}
		assert.NotPanics(t, func() { L7Features(obj) }, "operation field %q", field)
	}
}

// A person asks for a rollback of everything after the move to ambient
// completed and enrolled the namespace. The status meshwave writes for it
// must be one it reads back: namespaceEnrolled is valid only on a
// completed move, so a RollingBack status that keeps it is unreadable, and
// the next reconcile rebuilds the rollback from the records instead.
func TestARollbackAfterTheNamespaceWasEnrolledWritesAStatusThatReadsBack(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	require.True(t, s.status.NamespaceEnrolled)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := Decide(Input{Snapshot: s.snap, Status: s.status, Now: s.now, Config: s.cfg, WasOptedIn: true})
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	_, _, err = ParseStatus(map[string]string{AnnotationStatus: raw})
	assert.NoError(t, err, "the status written with %d rollback restarts does not read back", len(d.Moves))
	assert.Equal(t, "1-26", d.Label)
	assert.True(t, d.UnenrolNamespace, "the namespace leaves ambient in the write that starts the rollback")

	s.decide(nil)
	s.playUntil(PhaseRolledBack)
	assert.Equal(t, map[string]string{LabelRev: "1-26"}, s.snap.Namespace.Labels)
	for _, w := range s.snap.Workloads {
		assert.Equal(t, map[string]string{"app": w.Name}, w.TemplateLabels, w.Name)
	}
}

func TestAPolicyThatAppearsMidMigrationPausesTheNextAmbientWave(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.snap.Compat = Compat{PeerAuthentications: []PeerAuthentication{{Namespace: "shop", Name: "plain", Mode: "DISABLE"}}}
	for i := 0; i < 5 && s.status.Phase != PhasePaused; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(s.gates())
	}
	require.Equal(t, PhasePaused, s.status.Phase, s.status.Reason)
	assert.Equal(t, "wave 2 not started: PeerAuthentication shop/plain sets mTLS mode DISABLE: ambient always uses mTLS between mesh workloads, and ignores it; remove it, or set PERMISSIVE", s.status.Reason)
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
	assert.Equal(t, "true", s.snap.Namespace.Annotations[AnnotationPaused])

	// Removed, and resumed by a person: the next wave starts.
	s.snap.Compat = Compat{}
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.playUntil(PhaseCompleted)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

// The policy informers of a freshly started agent (a new leader, a
// discovery error at start-up) are not synced for a moment: the kinds
// read as "not read yet". Between two waves of a move to ambient, that
// is no policy that appeared: the move waits and says so (README), and
// goes on by itself once they are read, with no person to lift a pause.
func TestAmbientWaveWaitsWithoutAPauseWhileThePolicyKindsAreNotReadYet(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOutAmbient("a")
	s.now = s.now.Add(time.Minute)
	s.decide(s.gates())
	require.Equal(t, WavePassed, s.status.WaveState, s.status.Reason)

	s.snap.Compat = Compat{Unread: []string{"authorizationpolicies: not read yet"}}
	s.now = s.now.Add(2 * time.Minute)
	d := s.decide(nil)
	assert.False(t, d.SetPaused, "a cache not synced yet pauses the migration until a person resumes it: %s", s.status.Reason)

	s.snap.Compat = Compat{} // synced
	for i := 0; i < 5 && s.patches["b"] == 0; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(s.gates())
	}
	assert.Equal(t, 1, s.patches["b"], "wave 2 never starts once the kinds are read (status %s: %s)", s.status.Phase, s.status.Reason)
}

// legacy opted out of ambient (istio.io/dataplane-mode: none, Istio's
// opt-out) because it runs on a node pool ztunnel does not run on (a
// ztunnel DaemonSet with a nodeSelector, say). It is never moved; a node
// only it runs on must not keep every other workload out of ambient.
func TestAnOptedOutWorkloadOnANodeWithoutZtunnelDoesNotBlockTheMove(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("legacy"))
	s.snap.Workloads[1].TemplateLabels[LabelDataplaneMode] = "none"
	for i := range s.snap.Workloads[0].Pods {
		s.snap.Workloads[0].Pods[i].Node = "n1"
	}
	for i := range s.snap.Workloads[1].Pods {
		s.snap.Workloads[1].Pods[i].Node = "gpu-1"
		s.snap.Workloads[1].Pods[i].Labels[LabelDataplaneMode] = "none"
	}
	s.snap.Mesh.Ztunnels = map[string]bool{"n1": true}
	s.snap.Mesh.CNINodeAgents = map[string]bool{"n1": true}
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
}

// batch runs outside the mesh (its template says sidecar.istio.io/inject:
// "false") and is scaled to zero when the move completes. Enrolling the
// namespace puts every pod it starts later into ambient at once, which
// the enrolment is held back for when its pods run (README, step 4).
func TestAScaledDownWorkloadOutsideTheMeshHoldsTheNamespaceEnrolmentBack(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("batch", replicas(0)))
	s.snap.Workloads[1].TemplateLabels[LabelInject] = "false"
	s.playUntil(PhaseCompleted)
	assert.False(t, s.status.NamespaceEnrolled, "the namespace was enrolled: batch's pods enter ambient as soon as it scales up")
	assert.NotEqual(t, DataplaneAmbient, s.snap.Namespace.Labels[LabelDataplaneMode])
}

// A GitOps tool that keeps the namespace enrolled in ambient while
// meshwave rolls it back is fought as istio.io/rev is: put back twice,
// then left with a pause, never rewritten on every decision.
func TestARollbackFromAnEnrolledNamespaceStopsFightingWhoeverEnrolsItAgain(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.playUntil(PhaseCompleted)
	require.True(t, s.status.NamespaceEnrolled)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase, d.Status.Reason)
	require.Equal(t, "1-26", d.Label)
	require.True(t, d.UnenrolNamespace)

	writes := 1
	for n := 1; n <= 6; n++ {
		// The tool syncs the namespace back to git: enrolled, no revision.
		s.snap.Namespace.Labels[LabelDataplaneMode] = DataplaneAmbient
		delete(s.snap.Namespace.Labels, LabelRev)
		s.now = s.now.Add(time.Second)
		s.events = nil
		d = s.decide(nil)
		if d.Label != "" || d.UnenrolNamespace {
			writes++
			assert.Equal(t, "1-26", d.Label)
			assert.True(t, d.UnenrolNamespace, "put back whole: the revision and out of ambient")
			assert.Equal(t, []string{"LabelReverted"}, s.reasons(), "write %d", writes)
		}
	}
	assert.Equal(t, labelRevertLimit, writes, "the rollback's write and two puts back, then no more")
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Contains(t, s.status.Reason, "istio.io/rev on namespace shop was switched away from 1-26 3 times by Argo CD application platform: meshwave leaves it at istio.io/dataplane-mode=ambient and no istio.io/rev rather than fight, and pods created now come up in ambient")
}

// A tool that puts only istio.io/dataplane-mode back, leaving the revision
// label meshwave wrote, is a revert too.
func TestARollbackFromAnEnrolledNamespaceCountsADataplaneLabelPutBackAsARevert(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	writes := 0
	for n := 1; n <= 5; n++ {
		s.snap.Namespace.Labels[LabelDataplaneMode] = DataplaneAmbient
		s.now = s.now.Add(time.Second)
		if d := s.decide(nil); d.UnenrolNamespace {
			writes++
		}
	}
	assert.Equal(t, labelRevertLimit-1, writes)
	assert.Equal(t, PhasePaused, s.status.Phase)
}

// Istio's guide asks a person to move subset routing to HTTPRoute and a
// Service per version, and to rekey what counts reporter="destination",
// before pods leave their sidecars: meshwave says so before the first
// wave, and moves on.
func TestAMoveToAmbientWarnsOfSubsetRoutingAndOfDestinationReportedTelemetry(t *testing.T) {
	s := ambientSim(t, deploy("a"), deploy("b"))
	s.snap.Compat.SubsetRoutes = []SubsetRoute{
		{Kind: "DestinationRule", Namespace: "shop", Name: "reviews", Subsets: []string{"v1", "v2"}},
		{Kind: "VirtualService", Namespace: "shop", Name: "reviews", Subsets: []string{"v2"}},
	}
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	require.GreaterOrEqual(t, len(d.Status.Warnings), 3)
	assert.Equal(t, []string{
		"DestinationRule shop/reviews defines subsets (v1, v2): a pod in ambient is reached through ztunnel, which applies no subset, and a waypoint applies VirtualServices only in part; move them to an HTTPRoute with a Service per version, as Istio's guide says",
		"VirtualService shop/reviews routes to subsets (v2): a pod in ambient is reached through ztunnel, which applies no subset, and a waypoint applies VirtualServices only in part; move them to an HTTPRoute with a Service per version, as Istio's guide says",
		reporterWarning,
	}, d.Status.Warnings[:3])

	// prechecks.strict blocks on the routing, never on the telemetry note.
	strict := ambientSim(t, deploy("a"), deploy("b"))
	strict.cfg.StrictPrechecks = true
	d = strict.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	strict = ambientSim(t, deploy("a"), deploy("b"))
	strict.cfg.StrictPrechecks = true
	strict.snap.Compat.SubsetRoutes = s.snap.Compat.SubsetRoutes[:1]
	d = strict.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, "prechecks.strict: DestinationRule shop/reviews defines subsets (v1, v2)")
}
