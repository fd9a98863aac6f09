package canary

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const adminRules = `[{"to":[{"operation":{"paths":["/admin"]}}]}]`

// selectorPolicy is a's policy of L7 rules, as its sidecar enforces it.
func selectorPolicy(name string, selector map[string]string) AuthorizationPolicy {
	return AuthorizationPolicy{Namespace: "shop", Name: name, UID: "uid-" + name, MatchLabels: selector, L7: []string{"to.operation.paths"},
		Action: "ALLOW", Rules: adminRules,
		Copy: `{"apiVersion":"security.istio.io/v1","kind":"AuthorizationPolicy","metadata":{"name":"` + name + `","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"a"}},"rules":` + adminRules + `}}`}
}

// waypointPolicy is the same rules bound to the waypoint.
func waypointPolicy(name string, refs ...string) AuthorizationPolicy {
	return AuthorizationPolicy{Namespace: "shop", Name: name, UID: "uid-" + name, TargetRefs: true, Refs: refs, L7: []string{"to.operation.paths"},
		Action: "ALLOW", Rules: adminRules}
}

// replacedSim is waypointSim with a's selector policy and its waypoint
// replacement, asking for the guide's order.
func replacedSim(t *testing.T, ws ...Workload) *sim {
	s := waypointSim(t, ws...)
	s.snap.Compat.AuthorizationPolicies = []AuthorizationPolicy{
		selectorPolicy("a-admin", map[string]string{"app": "a"}),
		waypointPolicy("a-admin-waypoint", "Gateway/waypoint"),
	}
	s.snap.Namespace.Annotations[AnnotationDeleteReplacedPolicies] = "true"
	return s
}

func savedOf(t *testing.T, s *sim) []SavedPolicy {
	t.Helper()
	saved, err := ParseReplacedPolicies(s.snap.Namespace.Annotations)
	require.NoError(t, err)
	return saved
}

func TestAReplacedPolicyBlocksUntilTheGuidesOrderIsAskedFor(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	delete(s.snap.Namespace.Annotations, AnnotationDeleteReplacedPolicies)
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, "precheck failed: AuthorizationPolicy shop/a-admin selects workloads by spec.selector and holds what ztunnel cannot enforce (to.operation.paths), and a-admin-waypoint replaces it on the waypoint: "+
		"once the pods leave their sidecar, ztunnel denies all their traffic under it (an ALLOW) or drops its HTTP conditions (a DENY); delete it then, as Istio's guide does, with meshwave.io/delete-replaced-policies=true, which keeps its copy for a rollback", d.Status.Reason)
	assert.Empty(t, d.Moves)
	assert.Nil(t, d.ReplacedPolicies)
	assert.Empty(t, d.DeletePolicies)
}

func TestAReplacedPolicyIsDeletedRightAfterTheRestartOfItsWorkloadsWithItsCopyKept(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Contains(t, d.Status.Warnings, "AuthorizationPolicy shop/a-admin, replaced by a-admin-waypoint, will be deleted right after the restart of the workloads it selects, as meshwave.io/delete-replaced-policies asks; its copy is kept in meshwave.io/replaced-policies, and a rollback puts it back")
	assert.Empty(t, d.DeletePolicies, "not before the restart")
	require.NotNil(t, d.ReplacedPolicies, "the copy goes out in the write that starts the wave, before the restart")
	saved := savedOf(t, s)
	require.Len(t, saved, 1)
	assert.Equal(t, "a-admin", saved[0].Name)
	assert.Equal(t, "uid-a-admin", saved[0].UID)
	assert.Equal(t, d.Status.MigrationID(), saved[0].Migration)
	assert.Equal(t, map[string]string{"app": "a"}, saved[0].MatchLabels)
	assert.JSONEq(t, selectorPolicy("a-admin", nil).Copy, string(saved[0].Object))

	// The next decision sees the restart's write: the policy goes, by its
	// UID, while the new pods start.
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	assert.Nil(t, d.ReplacedPolicies, "the copy is written once")
	assert.Equal(t, []PolicyRef{{Namespace: "shop", Name: "a-admin", UID: "uid-a-admin",
		Why: "every workload it selects (deployment a) left its sidecar, and a-admin-waypoint replaces it on the waypoint: ztunnel would deny all their traffic under it; its copy is kept in meshwave.io/replaced-policies"}}, d.DeletePolicies)
	s.rollOutAmbient("a")
	s.now = s.now.Add(time.Second)
	d = s.decide(s.gates())
	assert.Empty(t, d.DeletePolicies, "deleted once")
	// A delete lost to a crash is sent again: the state calls for it.
	s.snap.Compat.AuthorizationPolicies = append(s.snap.Compat.AuthorizationPolicies, selectorPolicy("a-admin", map[string]string{"app": "a"}))
	s.now = s.now.Add(time.Second)
	d = s.decide(s.gates())
	require.Len(t, d.DeletePolicies, 1)
	assert.Equal(t, "uid-a-admin", d.DeletePolicies[0].UID)
	s.playUntil(PhaseCompleted)
	assert.Len(t, savedOf(t, s), 1, "the copy stays once the move completed: the guide's backup")
	for _, ap := range s.snap.Compat.AuthorizationPolicies {
		assert.NotEqual(t, "a-admin", ap.Name)
	}

	// A person who makes it again is not fought: it is theirs now.
	s.snap.Compat.AuthorizationPolicies = append(s.snap.Compat.AuthorizationPolicies, func() AuthorizationPolicy {
		ap := selectorPolicy("a-admin", map[string]string{"app": "a"})
		ap.UID = "uid-again"
		return ap
	}())
	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	assert.Empty(t, d.DeletePolicies)
	assert.Nil(t, d.ReplacedPolicies)
}

func TestARollbackPutsADeletedPolicyBackOnceNothingItSelectsIsInAmbient(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	require.Len(t, savedOf(t, s), 1)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Empty(t, d.RestorePolicies, "not while a's pods run in ambient: ztunnel would deny all their traffic under it")
	s.playUntil(PhaseRolledBack)
	var restored []string
	for _, ap := range s.snap.Compat.AuthorizationPolicies {
		restored = append(restored, ap.Name+" "+ap.UID)
	}
	assert.Contains(t, restored, "a-admin uid-a-admin-restored", "created again from its copy")
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	assert.Empty(t, savedOf(t, s), "the copy has served")
	_, kept := s.snap.Namespace.Annotations[AnnotationReplacedPolicies]
	assert.False(t, kept)
}

func TestAReplacedPolicyThatWouldOutliveItsWorkloadsSidecarsBlocksByName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(s *sim)
		reason string
	}{
		{"its workloads move in two waves", func(s *sim) {
			s.snap.Compat.AuthorizationPolicies[0].MatchLabels = map[string]string{"tier": "web"}
			for i := range s.snap.Workloads {
				if s.snap.Workloads[i].Name != "waypoint" {
					s.snap.Workloads[i].TemplateLabels["tier"] = "web"
				}
			}
		}, "AuthorizationPolicy shop/a-admin selects workloads of more than one wave (deployment a in wave 1; deployment b in wave 2): meshwave deletes it right after the restart that moves them, so they must move together; split it into a policy a wave, or put them in one wave"},
		{"it selects a workload left out", func(s *sim) {
			s.snap.Compat.AuthorizationPolicies[0].MatchLabels = map[string]string{"tier": "web"}
			for i := range s.snap.Workloads {
				if s.snap.Workloads[i].Name == "a" || s.snap.Workloads[i].Name == "b" {
					s.snap.Workloads[i].TemplateLabels["tier"] = "web"
				}
				if s.snap.Workloads[i].Name == "b" {
					s.snap.Workloads[i].Annotations[AnnotationSkip] = "true"
				}
			}
		}, "AuthorizationPolicy shop/a-admin also selects deployment b, which this migration does not move: deleted, it would no longer hold their sidecars; narrow its selector"},
		{"its replacement holds other rules", func(s *sim) {
			s.snap.Compat.AuthorizationPolicies[1].Rules = `[{"to":[{"operation":{"paths":["/"]}}]}]`
		}, "AuthorizationPolicy shop/a-admin selects workloads by spec.selector and holds what ztunnel cannot enforce (to.operation.paths): once the pods leave their sidecar, ztunnel denies all their traffic (an ALLOW) or drops its HTTP conditions (a DENY: wider, or void when it has no other); move it to targetRefs on a waypoint first"},
		{"its replacement is bound to another waypoint", func(s *sim) {
			s.snap.Compat.AuthorizationPolicies[1].Refs = []string{"Gateway/elsewhere"}
		}, "AuthorizationPolicy shop/a-admin selects workloads by spec.selector and holds what ztunnel cannot enforce (to.operation.paths): once the pods leave their sidecar, ztunnel denies all their traffic (an ALLOW) or drops its HTTP conditions (a DENY: wider, or void when it has no other); move it to targetRefs on a waypoint first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := replacedSim(t, deploy("a"), deploy("b"))
			tc.edit(s)
			d := s.decide(nil)
			require.Equal(t, PhaseBlocked, d.Status.Phase)
			assert.Equal(t, "precheck failed: "+tc.reason, d.Status.Reason)
			assert.Empty(t, d.Moves)
			assert.Nil(t, d.ReplacedPolicies)
		})
	}
}

func TestAReplacementNamedOnTheWaypointReplacesAPolicyOfOtherRules(t *testing.T) {
	named := waypointPolicy("a-admin-waypoint", "Gateway/waypoint")
	named.Rules, named.Replaces = `[{"to":[{"operation":{"paths":["/admin/*"]}}]}]`, []string{"a-admin"}
	s := replacedSim(t, deploy("a"), deploy("b"))
	s.snap.Compat.AuthorizationPolicies[1] = named
	d := s.decide(nil)
	require.Equal(t, PhaseMigrating, d.Status.Phase, d.Status.Reason)
	assert.NotNil(t, d.ReplacedPolicies)

	for _, tc := range []struct {
		name string
		edit func(r *AuthorizationPolicy)
	}{
		{"bound to a Service: it holds that Service's traffic only", func(r *AuthorizationPolicy) { r.Refs = []string{"Service/a"} }},
		{"a DENY naming an ALLOW", func(r *AuthorizationPolicy) { r.Action = "DENY" }},
		{"a dry run", func(r *AuthorizationPolicy) { r.DryRun = true }},
	} {
		s := replacedSim(t, deploy("a"), deploy("b"))
		r := named
		tc.edit(&r)
		s.snap.Compat.AuthorizationPolicies[1] = r
		d := s.decide(nil)
		assert.Equal(t, PhaseBlocked, d.Status.Phase, "%s: %s", tc.name, d.Status.Reason)
		assert.Nil(t, d.ReplacedPolicies, tc.name)
	}
}

func TestACopyOfAnotherMigrationOrAnUnreadableOneIsNeverRestored(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.playUntil(PhaseCompleted)
	saved := savedOf(t, s)
	require.Len(t, saved, 1)
	saved[0].Migration = "an-older-migration"
	raw, err := json.Marshal(saved)
	require.NoError(t, err)
	s.snap.Namespace.Annotations[AnnotationReplacedPolicies] = string(raw)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	s.now = s.now.Add(time.Minute)
	s.playUntil(PhaseRolledBack)
	for _, ap := range s.snap.Compat.AuthorizationPolicies {
		assert.NotEqual(t, "a-admin", ap.Name, "another migration's copy is not this rollback's to restore")
	}

	s.snap.Namespace.Annotations[AnnotationReplacedPolicies] = "[{"
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Empty(t, d.RestorePolicies)
	assert.Nil(t, d.ReplacedPolicies, "an unreadable list is not overwritten")
}

func TestDeleteReplacedPoliciesIsValidated(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		expected    string
	}{
		{map[string]string{AnnotationTargetMode: "ambient", AnnotationWaypoint: "waypoint", AnnotationDeleteReplacedPolicies: "yes"}, `"true" or "false"`},
		{map[string]string{AnnotationTargetMode: "ambient", AnnotationDeleteReplacedPolicies: "true"}, "set only with meshwave.io/target-mode=ambient and a meshwave.io/waypoint: the replacements are the waypoint's policies"},
		{map[string]string{AnnotationDeleteReplacedPolicies: "true"}, "set only with meshwave.io/target-mode=ambient and a meshwave.io/waypoint: the replacements are the waypoint's policies"},
	} {
		tc.annotations[AnnotationTargetRevision] = "1-26"
		_, errs := ParseNamespace("shop", tc.annotations)
		require.Len(t, errs, 1, "%v", tc.annotations)
		assert.Equal(t, AnnotationDeleteReplacedPolicies, errs[0].Key)
		assert.Equal(t, tc.annotations[AnnotationDeleteReplacedPolicies], errs[0].Value)
		assert.Equal(t, tc.expected, errs[0].Expected)
	}
	s, errs := ParseNamespace("shop", map[string]string{AnnotationTargetRevision: "1-26", AnnotationTargetMode: "ambient", AnnotationWaypoint: "waypoint", AnnotationDeleteReplacedPolicies: "false"})
	assert.Empty(t, errs)
	assert.False(t, s.DeleteReplacedPolicies)
}

func TestAReplacesThatNamesNoPolicyBlocksNamingTheKeyAndTheValue(t *testing.T) {
	s := replacedSim(t, deploy("a"), deploy("b"))
	s.snap.Compat.AuthorizationPolicies[1].Replaces = []string{"a-admin", "A Admin"}
	d := s.decide(nil)
	require.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, `precheck failed: AuthorizationPolicy shop/a-admin-waypoint: meshwave.io/replaces "a-admin,A Admin" is not a comma-separated list of AuthorizationPolicy names of the namespace ("A Admin" is not a name)`, d.Status.Reason)
	assert.Empty(t, d.Moves)
	assert.Nil(t, d.ReplacedPolicies)
}
