package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
