package tests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
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
// the token; and the HTTP /debug/syncz fallback on 15014. Over HTTP a NACK
// is still an ERROR, read from the lastError istiod keeps per type. With a
// CA that did not sign istiod's certificate the gate fails closed: it
// cannot tell, so the wave is inconclusive and the namespace pauses.
func TestTheSyncGateSpeaksEveryTransport(t *testing.T) {
	revs := append(world.DefaultRevisions(), mesh.Revision{Name: "1-27", Env: map[string]string{"XDS_AUTH_PLAINTEXT": "true"}})
	f := fixture.New(t, world.Options{NoPrometheus: true, Revisions: revs})
	ports := f.World.Mesh.Ports()
	caFile := rootCAFile(f)
	nack := `ERROR (NACK) on RDS ("simulated NACK: the proxy rejected this configuration")`
	for _, tc := range []struct {
		ns        string
		target    string
		mode      string
		port      int
		plaintext bool
		caFile    string
		fault     statusv3.ConfigStatus
	}{
		{"grpc-tls", "1-26", "grpc", ports.GRPCTLS, false, caFile, 0},
		{"grpc-plain", "1-27", "grpc", ports.GRPCPlain, true, "", 0},
		{"http", "1-26", "http", ports.HTTP, false, "", 0},
		{"http-nack", "1-26", "http", ports.HTTP, false, "", statusv3.ConfigStatus_ERROR},
		{"grpc-nack", "1-26", "grpc", ports.GRPCTLS, false, caFile, statusv3.ConfigStatus_ERROR},
	} {
		t.Run(tc.ns, func(t *testing.T) {
			replicas := int32(2)
			if tc.fault != 0 {
				replicas = 1
				f.World.Mesh.Istiod(tc.target).SetProxyStatus(tc.ns, nil, mesh.TypeRDS, tc.fault)
			}
			f.Given().Namespace(tc.ns, map[string]string{mesh.LabelRev: "1-25"}, map[string]string{canary.AnnotationFailurePolicy: "Pause"}).
				Deployment(tc.ns, "app", fixture.Replicas(replicas)).RolledOut(tc.ns)
			cfg := testConfig(f)
			cfg.Gates.Sync.Mode, cfg.Gates.Sync.Port, cfg.Gates.Sync.Plaintext, cfg.Gates.Sync.CAFile = tc.mode, tc.port, tc.plaintext, tc.caFile
			// istiod wants the token on 15010 too: say so explicitly.
			cfg.Gates.Sync.SendTokenInCleartext = tc.plaintext
			cfg.Gates.Sync.Timeout = agent.Duration(4 * time.Second)
			cfg.Concurrency = 10 // the paused namespaces of earlier cases hold slots
			optIn(f, tc.ns, tc.target, 10)
			a := startAgent(t, f, cfg, newAPICounter(), "agent-"+tc.ns)
			if tc.fault == 0 {
				st := waitForPhase(f, tc.ns, canary.PhaseCompleted, time.Minute)
				a.Kill()
				sync, ok := verdictOf(st, "xds-sync")
				require.True(t, ok)
				// Only istiod's answer can give this reason.
				assert.Equal(t, "2 of 2 proxies SYNCED with istiod "+tc.target, sync.Reason)
				return
			}
			st := waitForPhase(f, tc.ns, canary.PhasePaused, time.Minute)
			a.Kill()
			pods, _, err := f.DeploymentPods(tc.ns, "app")
			require.NoError(t, err)
			require.Len(t, pods, 1)
			replica := f.IstiodPods(tc.target)[0]
			assert.Equal(t, "wave 1 failed: xds-sync fail: 0 of 1 proxies SYNCED with istiod "+tc.target+"; "+
				pods[0].Name+"."+tc.ns+" "+nack+" with "+replica+" after 4s; paused by failure policy Pause", st.Reason)
		})
	}
	t.Run("a CA that did not sign istiod's certificate", func(t *testing.T) {
		const ns = "wrong-ca"
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "app", fixture.Replicas(1)).RolledOut(ns)
		cfg := testConfig(f)
		cfg.Gates.Sync.CAFile = foreignCAFile(t)
		cfg.Concurrency = 10
		optIn(f, ns, "1-26", 10)
		a := startAgent(t, f, cfg, newAPICounter(), "agent-"+ns)
		st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
		a.Kill()
		replica := f.IstiodPods("1-26")[0]
		ip := f.World.Mesh.Istiod("1-26").ReplicaAddrs()[0]
		assert.Regexp(t, "^"+regexp.QuoteMeta("wave 1 paused: xds-sync inconclusive 3 times: 0 of 1 proxies SYNCED with istiod 1-26; could not ask "+
			replica+" ("+ip+"): rpc error: code = Unavailable desc = connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")+
			`.*"$`, st.Reason)
		sync, ok := verdictOf(st, "xds-sync")
		require.True(t, ok)
		assert.Equal(t, canary.ResultInconclusive, sync.Result, "never a pass")
	})
}

// foreignCAFile writes the certificate of a CA that istiod has never
// heard of.
func foreignCAFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not istiod's CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}

// TestAnUnreachableIstiodIsInconclusiveThenResumes freezes the target
// istiod (SIGSTOP) once the canary's pod was injected: its readiness probe
// fails, so there is no Ready istiod to ask and the sync gate cannot tell;
// after the inconclusive limit the namespace pauses. Once istiod is back
// and the pause is lifted, the migration completes.
func TestAnUnreachableIstiodIsInconclusiveThenResumes(t *testing.T) {
	f := fixture.New(t, world.Options{NoPrometheus: true})
	const ns = "dark"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "app", fixture.Replicas(1)).RolledOut(ns)
	hold := holdNew(f, ns, "app")
	defer hold()
	optIn(f, ns, "1-26", 10)
	startAgent(t, f, testConfig(f), newAPICounter(), "agent-1")
	f.Eventually("the canary's pod, injected by 1-26", func() (bool, string) {
		revs, _ := f.PodRevisions(ns, "app")
		for _, r := range revs {
			if r == "1-26" {
				return true, ""
			}
		}
		return false, fmt.Sprint(revs)
	})

	istiod := f.World.Mesh.Istiod("1-26")
	require.NoError(t, istiod.SetUnreachable(true))
	f.WaitForIstiodReady("1-26", false)
	hold()
	st := waitForPhase(f, ns, canary.PhasePaused, time.Minute)
	assert.Equal(t, "wave 1 paused: xds-sync inconclusive 3 times: no Ready istiod pod of revision 1-26 to ask", st.Reason)

	require.NoError(t, istiod.SetUnreachable(false))
	f.WaitForIstiodReady("1-26", true)
	f.When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
	st = waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
	sync, ok := verdictOf(st, "xds-sync")
	require.True(t, ok)
	assert.Equal(t, "1 of 1 proxies SYNCED with istiod 1-26", sync.Reason)
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
