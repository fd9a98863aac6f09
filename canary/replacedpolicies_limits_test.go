package canary

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policyExists reports whether the sim's namespace holds a policy of name.
func (s *sim) policyExists(name string) bool {
	return slices.ContainsFunc(s.snap.Compat.AuthorizationPolicies, func(ap AuthorizationPolicy) bool { return ap.Name == name })
}

// templateAmbient reports whether workload name's template is in ambient.
func (s *sim) templateAmbient(name string) bool {
	for _, w := range s.snap.Workloads {
		if w.Name == name {
			return templateInAmbient(w)
		}
	}
	return false
}

// A selector policy whose copy does not fit in what meshwave keeps on the
// namespace (a long list of paths, a big last-applied-configuration)
// cannot be put back by a rollback: it blocks the move, and its workload
// never enters ambient under it, where ztunnel would turn its L7 ALLOW
// into deny-all.
func TestAPolicyTooLargeToCopyNeverGoesIntoAmbientWithItsWorkloads(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	ap := &s.snap.Compat.AuthorizationPolicies[0]
	ap.Copy = `{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"name":"a-admin","namespace":"shop","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"` +
		strings.Repeat("x", 70<<10) + `"}},"spec":{"selector":{"matchLabels":{"app":"a"}},"rules":` + adminRules + `}}`

	for i := 0; i < 6; i++ {
		d := s.decide(s.gates())
		s.rollOutAmbient("a")
		s.now = s.now.Add(time.Minute)
		if s.templateAmbient("a") && s.policyExists("a-admin") && i > 0 {
			t.Fatalf("decision %d: deployment a runs in ambient while AuthorizationPolicy a-admin (L7, ALLOW) still selects it: ztunnel denies all its traffic (phase %s, warnings %q, copy written: %v)",
				i, d.Status.Phase, d.Status.Warnings, d.ReplacedPolicies != nil)
		}
	}
}

// A policy bound to a Service holds that Service's traffic only: b's
// Service policy, of the same rules, does not replace a's selector policy,
// which keeps blocking a's move.
func TestAPolicyIsNotReplacedByAnotherWorkloadsServicePolicy(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	bService := waypointPolicy("b-admin-service", "Service/b")
	s.snap.Compat.AuthorizationPolicies = []AuthorizationPolicy{
		selectorPolicy("a-admin", map[string]string{"app": "a"}),
		bService,
	}
	for i := 0; i < 6; i++ {
		d := s.decide(s.gates())
		for _, p := range d.DeletePolicies {
			assert.NotEqual(t, "a-admin", p.Name, "a-admin is deleted as replaced by %s, a policy of Service b: %s", bService.Name, p.Why)
		}
		for _, w := range d.Moves {
			assert.NotEqual(t, "a", w.Workload, "a moves into ambient under a-admin, which nothing replaces for a")
		}
		s.rollOutAmbient("a")
		s.now = s.now.Add(time.Minute)
	}
	assert.True(t, s.policyExists("a-admin"))
}

// A rollback whose own gate fails (or that a person pauses) leaves the
// migration Paused with its workloads back on their sidecars: the copy is
// put back once nothing it selects is in ambient, whatever the phase, so
// the sidecars are not left without their L7 ALLOW policy while paused.
func TestAPausedRollbackPutsTheDeletedPolicyBackOnceItsWorkloadsAreOnTheirSidecars(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.decide(nil) // wave 1: a's copy, a's restart
	s.now = s.now.Add(time.Second)
	d := s.decide(nil) // a-admin deleted
	require.Len(t, d.DeletePolicies, 1)
	require.False(t, s.policyExists("a-admin"))
	s.rollOutAmbient("a")
	s.now = s.now.Add(time.Second)

	d = s.decide(failRollout("a", "a is failing"))
	require.Equal(t, PhaseRollingBack, d.Status.Phase, d.Status.Reason)
	s.rollOut("1-26", "a") // a's pods back on their sidecars
	require.False(t, s.templateAmbient("a"))
	s.now = s.now.Add(time.Second)

	// The rollback's gate fails: the migration pauses, a on its sidecar.
	d = s.decide(failRollout("a", "a's sidecars are not ready"))
	require.Equal(t, PhasePaused, d.Status.Phase, d.Status.Reason)
	for i := 0; i < 3; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(nil)
	}
	assert.True(t, s.policyExists("a-admin"), "deployment a runs its sidecars again, and its L7 ALLOW policy is still deleted (phase %s: %s)", s.status.Phase, s.status.Reason)
}

// A copy edited on the namespace (its matchLabels say b, its object selects
// nothing: a namespace-wide L7 ALLOW) is never created over workloads in
// ambient: a copy is put back only if its object is an AuthorizationPolicy
// of its name that selects what the copy says.
func TestARestoredCopyNeverSelectsAWorkloadInAmbient(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	// Wave 1 (a) passes and a-admin is deleted; wave 2 (b, c) starts.
	s.toSecondWave()
	require.False(t, s.policyExists("a-admin"))
	saved := savedOf(t, s)
	require.Len(t, saved, 1)
	// The copy is edited: it claims to select b (which the rollback
	// returns to its sidecars), and its object selects nothing.
	saved[0].MatchLabels = map[string]string{"app": "b"}
	saved[0].Object = json.RawMessage(`{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"name":"a-admin","namespace":"shop"},"spec":{"rules":` + adminRules + `}}`)
	raw, err := json.Marshal(saved)
	require.NoError(t, err)
	s.snap.Namespace.Annotations[AnnotationReplacedPolicies] = string(raw)

	// Wave 2 fails and is rolled back; a stays in ambient.
	s.rollOutAmbient("b", "c")
	s.now = s.now.Add(time.Second)
	s.decide(failRollout("b", "b is failing"))
	require.Equal(t, PhaseRollingBack, s.status.Phase, s.status.Reason)
	s.rollOut("1-26", "b", "c")
	for i := 0; i < 4; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		for _, r := range d.RestorePolicies {
			var obj struct {
				Spec struct {
					Selector *struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"selector"`
				} `json:"spec"`
			}
			require.NoError(t, json.Unmarshal(r.Object, &obj))
			var sel map[string]string
			if obj.Spec.Selector != nil {
				sel = obj.Spec.Selector.MatchLabels
			}
			for _, w := range s.snap.Workloads {
				if templateInAmbient(w) && subset(sel, w.TemplateLabels) {
					t.Errorf("the rollback creates AuthorizationPolicy %s (selector %v) over deployment %s, in ambient: ztunnel denies all its traffic", r.Name, sel, w.Name)
				}
			}
		}
	}
}

// A replaced policy applied by Argo CD (or Flux) would be created again
// from git right after meshwave deleted it, over its workloads in
// ambient, where ztunnel denies all their traffic under it: it blocks,
// naming its application, and is never deleted.
func TestAPolicyGitOpsAppliesIsNeverDeleted(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	ap := &s.snap.Compat.AuthorizationPolicies[0]
	ap.Copy = `{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"labels":{"argocd.argoproj.io/instance":"shop"},"name":"a-admin","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"a"}},"rules":` + adminRules + `}}`
	for i := 0; i < 4; i++ {
		d := s.decide(s.gates())
		for _, p := range d.DeletePolicies {
			t.Errorf("decision %d deletes AuthorizationPolicy %s, which Argo CD application shop applies and puts back over a in ambient", i, p.Name)
		}
		s.rollOutAmbient("a")
		s.now = s.now.Add(time.Minute)
	}
}

// A workload the deleted policy selects that appears after the delete (a
// Deployment a-v2 of a blue/green release, labelled app=a) runs sidecars
// without that policy while the namespace still injects: the status says
// so, by name.
func TestASidecarTheDeletedPolicyWouldSelectIsNotLeftUnprotectedUnremarked(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.toSecondWave()
	require.False(t, s.policyExists("a-admin"))
	v2 := deploy("a-v2", onRevision("1-26"))
	v2.TemplateLabels["app"] = "a"
	for i := range v2.Pods {
		v2.Pods[i].Labels["app"] = "a"
	}
	s.snap.Workloads = append(s.snap.Workloads, v2)
	s.now = s.now.Add(time.Second)
	d := s.decide(nil)
	said := d.Status.Reason + " " + strings.Join(d.Status.Warnings, " ")
	assert.Contains(t, said, "a-v2", "deployment a-v2 runs sidecars that AuthorizationPolicy a-admin selected, deleted by this migration; phase %s", d.Status.Phase)
}

// A Job (or a bare pod) runs a sidecar of the target revision, and
// meshwave does not read its pods' labels: the policy may select them, so
// it is not deleted while such a sidecar runs; the move blocks instead.
func TestAPolicyIsNotDeletedWhileASidecarItMaySelectRunsOutsideTheMove(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	s.snap.Unmovable = []Unmovable{{ID: "Job/a-reindex", Revisions: map[string]int{"1-26": 1}}}
	for i := 0; i < 4; i++ {
		d := s.decide(s.gates())
		for _, p := range d.DeletePolicies {
			t.Errorf("decision %d deletes AuthorizationPolicy %s while Job/a-reindex runs a sidecar it may select", i, p.Name)
		}
		s.rollOutAmbient("a")
		s.now = s.now.Add(time.Minute)
	}
}

// meshwave.io/replaces is written on the replacement, by whoever may
// create policies in the namespace. An ALLOW of everything that names a
// platform team's DENY of /admin (bound to a Service, of another action)
// replaces nothing: the DENY is never deleted for it.
func TestAReplacementNamedOnlyByItselfNeverDeletesADenyPolicy(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	deny := selectorPolicy("platform-deny-admin", map[string]string{"app": "a"})
	deny.Action = "DENY"
	allowAll := waypointPolicy("tenant-allow-all", "Service/a")
	allowAll.Rules, allowAll.L7, allowAll.Replaces = `[{}]`, nil, []string{"platform-deny-admin"}
	s.snap.Compat.AuthorizationPolicies = []AuthorizationPolicy{deny, allowAll}
	for i := 0; i < 4; i++ {
		d := s.decide(s.gates())
		for _, p := range d.DeletePolicies {
			t.Errorf("decision %d deletes %s (a DENY of /admin) as replaced by %s, an ALLOW of everything that names it", i, p.Name, allowAll.Name)
		}
		s.rollOutAmbient("a")
		s.now = s.now.Add(time.Minute)
	}
}
