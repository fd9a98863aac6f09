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

// A wave whose pods are spread over many nodes (a DaemonSet's: one pod a
// node), with ztunnels that answer at once: the dumps are gathered without
// a data race (run with -race), which would end the agent with
// "concurrent map writes" in the middle of a migration.
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

// A DaemonSet's wave into ambient in a cluster of 300 nodes: each
// ztunnel's dump lists every workload of the mesh, up to MaxZtunnelDump,
// and decoding one holds it some five times over. The reads in flight are
// bounded, so the gate never opens 300 port-forwards and decodes them all
// side by side in an agent of 512 MiB.
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
