package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestTheSyncGateSpeaksEveryTransport moves one namespace per transport the
// xDS gate supports, against Istio's real istiod: gRPC over TLS on 15012,
// with istiod's certificate verified against its root and the revision's
// service name; plaintext gRPC on 15010, which istiod answers only when it
// runs with XDS_AUTH_PLAINTEXT=true (revision 1-27 here), and then with
// the token; and the HTTP /debug/syncz fallback on 15014.
func TestTheSyncGateSpeaksEveryTransport(t *testing.T) {
	revs := append(world.DefaultRevisions(), mesh.Revision{Name: "1-27", Env: map[string]string{"XDS_AUTH_PLAINTEXT": "true"}})
	f := fixture.New(t, world.Options{NoPrometheus: true, RealIstiod: true, Revisions: revs})
	ports := f.World.Mesh.Ports()
	caFile := rootCAFile(f)
	for _, tc := range []struct {
		ns        string
		target    string
		mode      string
		port      int
		plaintext bool
		caFile    string
	}{
		{"grpc-tls", "1-26", "grpc", ports.GRPCTLS, false, caFile},
		{"grpc-plain", "1-27", "grpc", ports.GRPCPlain, true, ""},
		{"http", "1-26", "http", ports.HTTP, false, ""},
	} {
		t.Run(tc.ns, func(t *testing.T) {
			f.Given().Namespace(tc.ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(tc.ns, "app").RolledOut(tc.ns)
			cfg := testConfig(f)
			cfg.Gates.Sync.Mode, cfg.Gates.Sync.Port, cfg.Gates.Sync.Plaintext, cfg.Gates.Sync.CAFile = tc.mode, tc.port, tc.plaintext, tc.caFile
			optIn(f, tc.ns, tc.target, 10)
			a := startAgent(t, f, cfg, newAPICounter(), "agent-"+tc.ns)
			st := waitForPhase(f, tc.ns, canary.PhaseCompleted, time.Minute)
			a.Kill()
			sync, ok := verdictOf(st, "xds-sync")
			require.True(t, ok)
			// Only istiod's answer can give this reason.
			assert.Equal(t, "2 of 2 proxies SYNCED with istiod "+tc.target, sync.Reason)
		})
	}
}

// TestAnUnreachableIstiodIsInconclusiveThenResumes closes the target
// istiod's ports: the sync gate cannot tell, so after the inconclusive
// limit the namespace pauses; once istiod is back and the pause is lifted,
// the migration completes.
func TestAnUnreachableIstiodIsInconclusiveThenResumes(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "dark"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "app", fixture.Replicas(1)).RolledOut(ns)
	istiod := f.World.Mesh.Istiod("1-26")
	require.NoError(t, istiod.SetUnreachable(true))
	optIn(f, ns, "1-26", 10)
	startAgent(t, f, testConfig(f), newAPICounter(), "agent-1")

	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.True(t, strings.HasPrefix(st.Reason, "wave 1 paused: xds-sync inconclusive 3 times: 0 of 1 proxies SYNCED with istiod 1-26; istiod-1-26-"), st.Reason)
	assert.Contains(t, st.Reason, "did not answer")
	require.NoError(t, istiod.SetUnreachable(false))
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
}

// TestACrashLoopingWorkloadFailsItsRolloutWithTheReason crash-loops the new
// pods of a workload through the fake kubelet: the rollout gate names the
// pod and CrashLoopBackOff, and the default policy rolls the wave back.
func TestACrashLoopingWorkloadFailsItsRolloutWithTheReason(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "crashy"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "api", fixture.Replicas(1), fixture.Annotations(map[string]string{canary.AnnotationReadinessTimeout: "5s"})).
		RolledOut(ns)
	release := f.World.Cluster.Kubelet.CrashLoop(cluster.PodSelector{Namespace: ns, Labels: fixture.PodSelector(map[string]string{"app": "api"}), OnlyNew: true})
	defer release()
	cfg := testConfig(f)
	optIn(f, ns, "1-26", 10)
	startAgent(t, f, cfg, newAPICounter(), "agent-1")

	f.Eventually("a crash-looping pod", func() (bool, string) {
		pods, _, err := f.DeploymentPods(ns, "api")
		require.NoError(t, err)
		for _, p := range pods {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" && cs.RestartCount >= 1 {
					return true, ""
				}
			}
		}
		return false, fmt.Sprint(len(pods), " pods")
	})
	// The rollback's pods are new too: let them start once it begins.
	waitForPhase(f, ns, canary.PhaseRollingBack, time.Minute)
	release()
	st := waitForPhase(f, ns, canary.PhaseRolledBack, time.Minute)
	assert.Regexp(t, `^rolled back 1 workloads to 1-25: wave 1 failed: rollout fail: api did not roll out within 5s: 0 of 1 new pods ready; pod api-[a-z0-9]+-[a-z0-9]+ not ready \(CrashLoopBackOff\)$`, st.Reason)
	f.Then().PodsOnRevision(ns, "api", "1-25")
}
