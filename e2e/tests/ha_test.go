package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestHighAvailability runs two replicas of the agent against one world.
// Every write is attributed to the replica that sent it (its user agent,
// through its own link) and checked against who held the Lease at the
// time, as the apiserver's Lease object shows it.
func TestHighAvailability(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true})

	t.Run("the other replica takes over from a leader killed mid-wave, and the migration completes", func(t *testing.T) {
		f := shared.For(t)
		const ns = "failover"
		cfg, leases := haScenario(f, ns)
		log := &writeLog{}
		release := holdNew(f, ns, "b")
		optIn(f, ns, "1-26", 10)
		replicas := map[string]*replica{
			"agent-a": startReplica(t, f, cfg, "agent-a", log),
			"agent-b": startReplica(t, f, cfg, "agent-b", log),
		}
		leader := currentLeader(f, leases)
		follower := otherReplica(replicas, leader)
		assertServes(t, replicas[leader], 1)
		assertServes(t, follower, 0)

		waitForMove(f, ns, "c", 2)
		// The crash cancels requests still in flight: one the apiserver
		// applied but whose answer had not come back would be missing
		// from the log. The leader dies once wave 2's patches are answered.
		f.Eventually("the answers to wave 2's patches", func() (bool, string) {
			p := log.patches("deployments " + ns)
			return p["deployments failover/b"] == 1 && p["deployments failover/c"] == 1, fmt.Sprint(p)
		})
		crashed := time.Now()
		replicas[leader].crash()
		f.Eventually(follower.name+" to take the lease", func() (bool, string) {
			ts := leases.snapshot()
			last := ts[len(ts)-1]
			return last.holder == follower.name, last.holder
		})
		ts := leases.snapshot()
		takeover := ts[len(ts)-1].from.Sub(crashed)
		t.Logf("takeover %s after the leader was killed (lease duration %s)", takeover.Round(time.Millisecond), cfg.LeaderElection.LeaseDuration.D())
		assert.Less(t, takeover, cfg.LeaderElection.LeaseDuration.D()+cfg.LeaderElection.RetryPeriod.D()+time.Second)
		assertServes(t, follower, 1)

		release()
		st := waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 3 workloads to 1-26 in 2 waves", st.Reason)
		assert.Equal(t, map[string]int{"deployments failover/a": 1, "deployments failover/b": 1, "deployments failover/c": 1}, log.patches("deployments "+ns))
		assertWritesOnlyByTheLeaseHolder(t, log, leases.snapshot())
	})

	t.Run("a leader cut off from its lease stops writing before another takes over", func(t *testing.T) {
		f := shared.For(t)
		const ns = "deposed"
		cfg, leases := haScenario(f, ns)
		log := &writeLog{}
		release := holdNew(f, ns, "b")
		optIn(f, ns, "1-26", 10)
		replicas := map[string]*replica{
			"agent-c": startReplica(t, f, cfg, "agent-c", log),
			"agent-d": startReplica(t, f, cfg, "agent-d", log),
		}
		leader := currentLeader(f, leases)
		follower := otherReplica(replicas, leader)
		waitForMove(f, ns, "c", 2)
		// The leader can reach everything but its Lease. Once it knows it
		// lost it, wave 2 becomes ready: a replica still reconciling would
		// write the wave's outcome, and must not.
		replicas[leader].link.cutLease.Store(true)
		assertServes(t, replicas[leader], 0)
		release()
		f.Eventually(follower.name+" to take the lease", func() (bool, string) {
			ts := leases.snapshot()
			last := ts[len(ts)-1]
			return last.holder == follower.name, last.holder
		})
		waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assertWritesOnlyByTheLeaseHolder(t, log, leases.snapshot())
		assert.Equal(t, map[string]int{"deployments deposed/a": 1, "deployments deposed/b": 1, "deployments deposed/c": 1}, log.patches("deployments "+ns))
		for _, w := range log.matching("") {
			if w.agent == leader && !strings.HasPrefix(w.object, "leases ") {
				assert.True(t, heldBy(leases.snapshot(), leader, w.at, 0), "%s sent %s %s at %s, after it lost the lease; tenures %+v", leader, w.verb, w.object, w.at.Format("15:04:05.000"), leases.snapshot())
			}
		}
		assertServes(t, replicas[leader], 0)
	})
}

// haScenario creates a namespace of three single-replica workloads, moved
// in a canary of one and a wave of two, and watches the agent's Lease.
func haScenario(f *fixture.Fixture, ns string) (agent.Config, *leaseWatch) {
	f.T.Helper()
	threeWorkloads(f, ns)
	cfg := testConfig(f)
	cfg.BatchSize = 2
	return cfg, watchLease(f.T, f, f.World.Mesh.RootNamespace(), cfg.LeaderElection.LeaseName)
}

func currentLeader(f *fixture.Fixture, leases *leaseWatch) string {
	f.T.Helper()
	var leader string
	f.Eventually("a leader", func() (bool, string) {
		ts := leases.snapshot()
		if len(ts) == 0 {
			return false, "nobody holds the lease"
		}
		leader = ts[len(ts)-1].holder
		return true, ""
	})
	return leader
}

func otherReplica(replicas map[string]*replica, leader string) *replica {
	for name, r := range replicas {
		if name != leader {
			return r
		}
	}
	return nil
}

// assertServes checks that a replica answers /healthz, /readyz and
// /metrics, and reports meshwave_leader as want.
func assertServes(t *testing.T, r *replica, want int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, _, err := r.get(path); err != nil || code != http.StatusOK {
				return false
			}
		}
		_, body, err := r.get("/metrics")
		return err == nil && strings.Contains(body, fmt.Sprintf("\nmeshwave_leader %d\n", want))
	}, 10*time.Second, 100*time.Millisecond, "%s serves health and meshwave_leader %d", r.name, want)
}

// assertWritesOnlyByTheLeaseHolder checks every accepted write but the
// lease's own against who held the lease when it was sent. The slack
// covers the watch's delivery delay.
func assertWritesOnlyByTheLeaseHolder(t *testing.T, log *writeLog, tenures []tenure) {
	t.Helper()
	var outside []string
	n := 0
	for _, w := range log.matching("") {
		if strings.HasPrefix(w.object, "leases ") {
			continue
		}
		n++
		if !heldBy(tenures, w.agent, w.at, 250*time.Millisecond) {
			outside = append(outside, fmt.Sprintf("%s %s %s at %s", w.agent, w.verb, w.object, w.at.Format("15:04:05.000")))
		}
	}
	t.Logf("%d writes, each checked against %d lease tenures", n, len(tenures))
	assert.Empty(t, outside, "writes by a replica that did not hold the lease; tenures %+v", tenures)
}
