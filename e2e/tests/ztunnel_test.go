package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestASimulatedZtunnelIsServedByTheRealIstiod installs Istio's ztunnel
// chart: the DaemonSet's pod is served by the world's simulated ztunnel,
// connected to Istio's own istiod, run with ambient on, as a real ztunnel
// connects: istiod sends it every pod of the cluster as an
// Address, by the uid ztunnel keys workloads with, and its syncz lists the
// ztunnel SYNCED on both types it subscribed to. A ztunnel that NACKs
// shows as ERROR there, one that stops answering as STALE: the faults the
// ztunnel-sync gate will read.
func TestASimulatedZtunnelIsServedByTheRealIstiod(t *testing.T) {
	f := ambientWorld(t)
	const ns = "ambient"
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-26"}, nil).Deployment(ns, "app").RolledOut(ns)

	z := installZtunnel(f, "1-26")[0]

	pods, _, err := f.DeploymentPods(ns, "app")
	require.NoError(t, err)
	var want []string
	for _, p := range pods {
		want = append(want, "Kubernetes//Pod/"+ns+"/"+p.Name)
	}
	f.Eventually("the ztunnel to hold every pod of "+ns+" as an Address", func() (bool, string) {
		held := map[string]bool{}
		for _, n := range z.Resources(mesh.TypeAddress) {
			held[n] = true
		}
		for _, w := range want {
			if !held[w] {
				return false, fmt.Sprintf("connected %v (%v), holds %v", z.Connected(), z.Err(), z.Resources(mesh.TypeAddress))
			}
		}
		return true, ""
	})

	token := f.IstioCAToken("meshwave")
	client := analysis.GRPCSyncz{Port: f.World.Mesh.Ports().GRPCTLS, TokenFile: tokenFile(f, token), CAFile: rootCAFile(f),
		RootNamespace: f.World.Mesh.RootNamespace(), PodName: "meshwave-6d4f9-x2x7q", PodIP: "127.0.0.1", Timeout: 10 * time.Second}
	istiod := f.World.Mesh.Istiod("1-26")
	statusOf := func() (map[string]statusv3.ConfigStatus, string) {
		for i, ip := range istiod.ReplicaAddrs() {
			proxies, err := client.Syncz(f.Ctx, analysis.Istiod{Pod: fmt.Sprint("replica-", i), IP: ip, Revision: "1-26"}, "")
			if err != nil {
				return nil, err.Error()
			}
			var ids []string
			for _, p := range proxies {
				if p.ID == z.ID() {
					return p.Status, ""
				}
				ids = append(ids, p.ID)
			}
			return nil, "listed " + strings.Join(ids, ",")
		}
		return nil, "no replica"
	}
	for _, tc := range []struct {
		name   string
		fault  statusv3.ConfigStatus
		expect statusv3.ConfigStatus
	}{
		{"a ztunnel that ACKs is SYNCED", statusv3.ConfigStatus_SYNCED, statusv3.ConfigStatus_SYNCED},
		{"a ztunnel that NACKs its addresses is ERROR", statusv3.ConfigStatus_ERROR, statusv3.ConfigStatus_ERROR},
		{"a ztunnel that stops answering is STALE", statusv3.ConfigStatus_STALE, statusv3.ConfigStatus_STALE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z.SetStatus(mesh.TypeAddress, tc.fault)
			f.Eventually("istiod's syncz to list the ztunnel "+tc.expect.String()+" on Address", func() (bool, string) {
				st, why := statusOf()
				if st == nil {
					return false, why
				}
				return st[mesh.TypeAddress] == tc.expect && st[mesh.TypeAuthorization] == statusv3.ConfigStatus_SYNCED, fmt.Sprint(st)
			})
		})
	}
	assert.Positive(t, z.Nacked(mesh.TypeAddress))
}

// installZtunnel installs Istio's ztunnel chart for rev and returns the
// simulated ztunnels of its pods, one a node, once each is connected.
func installZtunnel(f *fixture.Fixture, rev string) []*mesh.Ztunnel {
	f.T.Helper()
	require.NoError(f.T, f.World.Mesh.InstallZtunnel(f.Ctx, rev))
	var zs []*mesh.Ztunnel
	f.Eventually("every ztunnel pod to run, served by a simulated ztunnel", func() (bool, string) {
		nodes, err := f.Client.CoreV1().Nodes().List(f.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods := f.Pods(f.World.Mesh.RootNamespace(), map[string]string{"app": "ztunnel"})
		if len(pods) != len(nodes.Items) {
			return false, fmt.Sprintf("%d ztunnel pods for %d nodes", len(pods), len(nodes.Items))
		}
		zs = zs[:0]
		for _, p := range pods {
			z := f.World.Mesh.Ztunnel(p.Name)
			if z == nil || !z.Connected() {
				return false, p.Name + " is not served yet: " + string(p.Status.Phase)
			}
			zs = append(zs, z)
		}
		return true, ""
	})
	return zs
}

// installCNI applies Istio's istio-cni chart and waits for its node
// agent's pod to be Ready on every node.
func installCNI(f *fixture.Fixture) {
	f.T.Helper()
	require.NoError(f.T, f.World.Mesh.InstallCNI(f.Ctx))
	f.Eventually("an istio-cni node agent Ready on every node", func() (bool, string) {
		nodes, err := f.Client.CoreV1().Nodes().List(f.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range f.Pods(f.World.Mesh.RootNamespace(), map[string]string{"k8s-app": "istio-cni-node"}) {
			if fixture.PodReady(p) {
				ready++
			}
		}
		return ready == len(nodes.Items), fmt.Sprintf("%d of %d nodes", ready, len(nodes.Items))
	})
}

// ambientWorld boots a world whose revision 1-26 serves ambient
// (PILOT_ENABLE_AMBIENT=true, without which istiod refuses a ztunnel) beside
// the sidecar revision 1-25.
func ambientWorld(t *testing.T) *fixture.Fixture {
	return fixture.New(t, world.Options{NoPrometheus: true, Revisions: []mesh.Revision{
		{Name: "1-25"}, {Name: "1-26", Env: map[string]string{"PILOT_ENABLE_AMBIENT": "true"}},
	}})
}
