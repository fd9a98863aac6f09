package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/harness"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// BenchmarkWallTime migrates 100 one-replica Deployments whose pods take
// 20 s to start (6 taking 2 s when small) with meshwave at its default
// gates and delays, at batch sizes 25, 10 and 1, and, beside them in the
// same world, moves as many with a faithful replay of the runbook's loop:
// one workload after another, each followed by `kubectl rollout status`.
// It records each one's wall time, the ratio, and the agent's own
// overhead per wave: from the gates passing to the next wave's first
// patch, less the configured delay between waves (by the agent's clock:
// the status it writes at the pass names the time the next wave may
// start; its client's log says when the patch left).
//
// MESHWAVE_BENCH_BATCHES (e.g. "25,10") runs a subset of the batch sizes:
// at full size the batch of 1 alone takes about 90 minutes.
func BenchmarkWallTime(b *testing.B) {
	workloads, readyDelay := 100, 20*time.Second
	batches := []int{25, 10, 1}
	if small() {
		workloads, readyDelay, batches = 6, 2*time.Second, []int{3, 1}
	}
	if env := os.Getenv("MESHWAVE_BENCH_BATCHES"); env != "" {
		batches = nil
		for _, s := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			require.NoError(b, err, "MESHWAVE_BENCH_BATCHES=%q", env)
			batches = append(batches, n)
		}
	}
	for i := 0; i < b.N; i++ {
		f := fixture.New(b, world.Options{NoPrometheus: true, ReadyDelay: readyDelay})
		namespaces := append([]string{"runbook"}, batchNamespaces(batches)...)
		for _, ns := range namespaces {
			g := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
			for w := 0; w < workloads; w++ {
				g.Deployment(ns, fmt.Sprintf("svc-%03d", w), fixture.Replicas(1))
			}
		}
		for _, ns := range namespaces {
			f.Given().RolledOut(ns)
		}

		// The runbook's loop runs in its own namespace while meshwave
		// migrates the others, one batch size after another: the loop
		// waits on pods starting, not on the machine.
		var rbElapsed time.Duration
		var rbWG sync.WaitGroup
		rbWG.Add(1)
		go func() {
			defer rbWG.Done()
			start := time.Now()
			runbook(b, f, harness.NewCounter(), []string{"runbook"}, "1-26")
			rbElapsed = time.Since(start)
		}()

		cfg := wallTimeConfig(f)
		if small() {
			// Proof that it works, not a figure: shorter waits.
			cfg.DelayBetweenWaves, cfg.Gates.Sync.Interval = agent.Duration(time.Second), agent.Duration(time.Second)
		}
		type leg struct {
			batch, waves int
			elapsed      time.Duration
			own          []time.Duration
		}
		var legs []leg
		var overheads []time.Duration
		for _, batch := range batches {
			ns := batchNamespace(batch)
			cfg.BatchSize = batch
			log := &writeLog{}
			a := harness.Start(f, cfg, harness.NewCounter(), "walltime-"+ns, logWrites(b, f, log))
			start := time.Now()
			target := "1-26"
			f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
			st := waitCompleted(f, ns, 4*time.Hour)
			elapsed := time.Since(start)
			a.Kill()
			require.Equal(b, workloads, st.Counts.Moved, "%s: %s", ns, st.Reason)

			waves := wavesOf(log.snapshot(), ns)
			var own []time.Duration
			for k := 1; k < st.Wave; k++ {
				this, next := waves[k], waves[k+1]
				require.NotNil(b, this, "wave %d of %s in the agent's writes", k, ns)
				require.NotNil(b, next, "wave %d of %s in the agent's writes", k+1, ns)
				require.False(b, this.nextWaveAt.IsZero() || next.firstPatch.IsZero(), "wave %d of %s: next wave at %v, patched %v", k, ns, this.nextWaveAt, next.firstPatch)
				own = append(own, next.firstPatch.Sub(this.nextWaveAt))
			}
			overheads = append(overheads, own...)
			b.ReportMetric(elapsed.Seconds(), fmt.Sprintf("s@batch%d", batch))
			legs = append(legs, leg{batch: batch, waves: st.Wave, elapsed: elapsed, own: own})
		}
		rbWG.Wait()
		require.False(b, b.Failed(), "the runbook's loop failed")
		var rows []string
		for _, l := range legs {
			rows = append(rows, fmt.Sprintf("| meshwave, batch %d | %d | %s | %.1f | %s |",
				l.batch, l.waves, l.elapsed.Round(time.Second), float64(rbElapsed)/float64(l.elapsed), summarize(l.own)))
		}
		b.ReportMetric(rbElapsed.Seconds(), "s@runbook")
		record(b, fmt.Sprintf("Wall time: %d Deployments whose pods take %s to start", workloads, readyDelay),
			append(append([]string{
				"| | waves | wall time | runbook's time ÷ this | agent's own overhead per wave (p50 / p99 / max) |",
				"|---|---|---|---|---|",
				fmt.Sprintf("| runbook loop (one at a time, `rollout status` each) | %d | %s | 1.0 | |", workloads, rbElapsed.Round(time.Second)),
			}, rows...),
				"",
				fmt.Sprintf("meshwave at its default gates and delays (canary %d, delay between waves %s, rollout, injection and xDS sync against the real istiod every %s; no Prometheus address, so no metric checks: the defaults have none), one namespace per batch size, one after another; the runbook's loop in its own namespace at the same time. The agent's own overhead per wave is the time from the gates passing to its first patch of the next wave, less the delay between waves (the pass's status names when the next wave may start; the patch's time is when it left the agent's client); %d waves in all: %s.",
					cfg.CanarySize, cfg.DelayBetweenWaves.D(), cfg.Gates.Sync.Interval.D(), len(overheads), summarize(overheads)))...)
	}
}

// wallTimeConfig is the agent's default configuration, with only what the
// world itself needs: the sync gate's token and port, a short lease.
func wallTimeConfig(f *fixture.Fixture) agent.Config {
	world := harness.Config(f)
	cfg := agent.DefaultConfig()
	cfg.Gates.Sync.TokenFile = world.Gates.Sync.TokenFile
	cfg.Gates.Sync.Port = world.Gates.Sync.Port
	cfg.LeaderElection = world.LeaderElection
	cfg.ResyncPeriod = 0
	return cfg
}

// logWrites gives the agent a client whose writes go into log.
func logWrites(b testing.TB, f *fixture.Fixture, log *writeLog) func(*agent.Options) {
	return func(o *agent.Options) {
		rc := rest.CopyConfig(f.World.Cluster.Config)
		rc.Wrap(log.wrap)
		client, err := kubernetes.NewForConfig(rc)
		require.NoError(b, err)
		md, err := metadata.NewForConfig(rc)
		require.NoError(b, err)
		o.Client, o.Metadata = client, md
	}
}

func batchNamespace(batch int) string { return fmt.Sprintf("batch-%d", batch) }

func batchNamespaces(batches []int) []string {
	var out []string
	for _, n := range batches {
		out = append(out, batchNamespace(n))
	}
	return out
}

// summarize gives the p50, p99 and largest of some durations.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s / %s / %s", r(percentile(ds, 0.5)), r(percentile(ds, 0.99)), r(percentile(ds, 1)))
}

// percentile is the nearest-rank percentile q (0 < q <= 1) of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(len(s)-1, rank))]
}
