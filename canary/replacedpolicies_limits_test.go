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

// a selector policy whose copy does not fit in the 64 KiB meshwave
// keeps on the namespace (a long list of paths, a big
// last-applied-configuration annotation). The precheck lets the move go
// (the policy is replaced and delete-replaced-policies is on), but the
// decision that moves its workload finds the copy too large, warns, and
// neither writes the copy nor ever deletes the policy: the workload is
// moved into ambient anyway, where ztunnel turns the L7 ALLOW into
// deny-all for it. A policy meshwave cannot keep a copy of must block the
// move, as it did before delete-replaced-policies.
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

// the replacement is told by its rules alone when it is bound to
// any Service ("Service/" prefix), whichever workloads that Service
// fronts. A namespace with a common rule set (here: /admin only) on two
// apps, b's already moved to targetRefs on Service b, has a's selector
// policy taken as "replaced" by b's Service policy: a-admin is deleted
// after a's restart, and nothing holds a's /admin any more (b-admin-service
// applies to traffic for Service b only).
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

// a wave into ambient fails, its rollback returns the workloads to
// their sidecars, and the rollback's own gate then fails (or a person
// pauses it): the migration is Paused with its wave rolling back. The
// copy is restored only in the phases RollingBack and RolledBack, so while
// paused the sidecars run without the L7 ALLOW policy meshwave deleted
// (no policy = everything allowed), for as long as the pause lasts,
// although nothing it selects is in ambient.
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

// a rollback creates the copy's Object as it reads, but judges
// whether it is safe to create (nothing it selects in ambient, where
// ztunnel would make an ALLOW of L7 rules deny-all) from the copy's
// separate matchLabels. A copy whose object selects something else (an
// annotation edited by a person who may edit the namespace but not create
// AuthorizationPolicies) is created over workloads
// still in ambient: here a namespace-wide L7 ALLOW (no selector), which
// makes ztunnel deny all traffic of every workload the earlier wave left in
// ambient.
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

// a replaced policy applied by Argo CD (or Flux). meshwave deletes
// it right after a's restart; Argo CD's self-heal creates it again from
// git a moment later, with a new UID, over a in ambient, where ztunnel
// turns its L7 ALLOW into deny-all for a. meshwave leaves a policy made
// again alone ("a person's"), so nothing says why a's traffic is denied.
// meshwave knows GitOps owners for workloads (gitops.go); a policy git
// puts back must not be deleted: it blocks, naming its application, until
// it is removed from git.
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

// a workload the deleted policy selects appears after the delete
// (a Deployment a-v2 of a blue/green release, labelled app=a), while the
// namespace still injects sidecars (istio.io/rev stays until the last
// wave). Its sidecars start without the L7 ALLOW policy meshwave deleted:
// every request to a-v2, /admin included, is allowed until its own wave,
// and nothing says so. The copy says what the policy selected: meshwave
// should see a sidecar it would have held and stop (or warn), as it blocks
// a policy that selects a workload it does not move.
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

// a Job (or a bare pod) whose pods carry the labels the policy
// selects runs a sidecar of the target revision, which the move to
// ambient admits (hboneNotDone only refuses other revisions). The one-wave
// and "does not move" checks read only the Deployments, StatefulSets and
// DaemonSets (selectedBy): the policy is deleted after a's restart while
// the Job's sidecar still enforces it. meshwave does not read those pods'
// labels (Unmovable has none), so it cannot tell that the policy does not
// select them: it must not delete it while such a sidecar runs.
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

// meshwave.io/replaces is read from the replacement, which anyone
// who may create a policy in the namespace writes. A namespace owner who
// may not delete a policy kept in their namespace (a platform team's DENY
// of /admin, RBAC by resourceNames) creates an ALLOW-everything targetRefs
// policy naming it in meshwave.io/replaces, and meshwave deletes the DENY
// for them after a's restart: /admin is open through the waypoint. A
// replacement of another action (or one that denies nothing where the
// replaced one denied) holds none of the replaced policy's decisions, and
// the consent to delete a policy should come from the policy deleted (an
// annotation on it), not from a policy written next to it.
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
