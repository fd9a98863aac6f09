package analysis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// instantDumps answers every ztunnel at once, from no shared state.
type instantDumps struct{}

func (instantDumps) Workloads(_ context.Context, z ZtunnelPod) ([]ZtunnelWorkload, error) {
	return []ZtunnelWorkload{{Name: "web-" + z.Pod, Namespace: "shop", Protocol: "HBONE"}}, nil
}

// a wave whose pods are spread over many nodes (a DaemonSet's
// wave: one pod a node), with ztunnels that answer fast (or a
// port-forward refused at once). readDumps writes its result map from the
// calling goroutine (out[z] = DumpAnswer{...}, and reads it for the
// "once" check) while the readers already started write the same map
// under a mutex the caller does not take: a data race on a Go map, which
// the runtime may end with "fatal error: concurrent map writes", taking
// the whole agent down in the middle of a migration. Run with -race to see
// it every time.
func TestTheZtunnelDumpsOfAWaveAreReadWithoutARace(t *testing.T) {
	const nodes = 400
	var pods []canary.Pod
	byNode := map[string][]ZtunnelPod{}
	for i := 0; i < nodes; i++ {
		node := fmt.Sprintf("n%d", i)
		pods = append(pods, ambientPod(fmt.Sprintf("web-%d", i), node, true))
		byNode[node] = []ZtunnelPod{{Pod: fmt.Sprintf("ztunnel-%d", i), Namespace: "istio-system", Ready: true}}
	}
	g := SyncGate{Dumps: instantDumps{}, Ztunnels: func(node string) []ZtunnelPod { return byNode[node] }}
	w := ambientWave(member("web", pods...))
	held := g.podsToHold(w)
	require.Len(t, held, nodes)
	for round := 0; round < 50; round++ {
		got := g.readDumps(context.Background(), held)
		require.Len(t, got, nodes)
		for z, a := range got {
			assert.NoError(t, a.Err)
			assert.Len(t, a.Workloads, 1, "%s", z.Pod)
		}
	}
}

// slowDumps counts the reads in flight at once.
type slowDumps struct {
	mu            sync.Mutex
	inFlight, max int
}

func (s *slowDumps) Workloads(_ context.Context, z ZtunnelPod) ([]ZtunnelWorkload, error) {
	s.mu.Lock()
	s.inFlight++
	s.max = max(s.max, s.inFlight)
	s.mu.Unlock()
	time.Sleep(50 * time.Millisecond)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return []ZtunnelWorkload{{Name: "web-" + z.Pod, Namespace: "shop", Protocol: "HBONE"}}, nil
}

// a DaemonSet's wave into ambient in a cluster of 300 nodes. Each
// ztunnel's config dump lists every workload of the mesh (not only its
// node's), up to MaxZtunnelDump (256 MiB) each, and decoding one holds
// it some five times over (a 120 MiB dump allocates about 680 MiB): the
// gate opens a port-forward through the apiserver to every ztunnel at
// once, every interval, and decodes them all side by side, in an agent
// whose chart limit is 512 MiB. It needs a bound on the reads in flight
// (and on what one keeps: only the wave's namespace).
func TestTheZtunnelDumpsOfAWaveAreReadAFewAtATime(t *testing.T) {
	const nodes = 300
	var pods []canary.Pod
	byNode := map[string][]ZtunnelPod{}
	for i := 0; i < nodes; i++ {
		node := fmt.Sprintf("n%d", i)
		pods = append(pods, ambientPod(fmt.Sprintf("agent-%d", i), node, true))
		byNode[node] = []ZtunnelPod{{Pod: fmt.Sprintf("ztunnel-%d", i), Namespace: "istio-system", Ready: true}}
	}
	dumps := &slowDumps{}
	g := SyncGate{Dumps: dumps, Ztunnels: func(node string) []ZtunnelPod { return byNode[node] }}
	w := ambientWave(member("DaemonSet/agent", pods...))
	got := g.readDumps(context.Background(), g.podsToHold(w))
	require.Len(t, got, nodes)
	assert.LessOrEqual(t, dumps.max, 16, "config dumps read at once")
}
