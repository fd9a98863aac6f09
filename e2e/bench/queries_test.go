package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/harness"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// queryCounter counts the PromQL queries of each analysis run: the
// queries of one run share its evaluation time.
type queryCounter struct {
	next promv1.API
	mu   sync.Mutex
	runs map[time.Time]int
}

func (c *queryCounter) Query(ctx context.Context, q string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	c.mu.Lock()
	c.runs[ts]++
	c.mu.Unlock()
	return c.next.Query(ctx, q, ts, opts...)
}

// perRun lists the queries of each run, in time order.
func (c *queryCounter) perRun() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := make([]time.Time, 0, len(c.runs))
	for t := range c.runs {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	out := make([]int, 0, len(ts))
	for _, t := range ts {
		out = append(out, c.runs[t])
	}
	return out
}

// BenchmarkAnalysisQueries counts the PromQL queries of each analysis run
// of a canary wave of 1, 10 and 100 workloads (1 and 3 when small), with
// the default checks
// against the world's Prometheus.
func BenchmarkAnalysisQueries(b *testing.B) {
	sizes := []int{1, 10, 100}
	if small() {
		sizes = []int{1, 3}
	}
	for i := 0; i < b.N; i++ {
		f := fixture.New(b, world.Options{})
		var rows []string
		for _, n := range sizes {
			ns := fmt.Sprintf("wave-of-%d", n)
			g := f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil)
			for w := 0; w < n; w++ {
				g.Deployment(ns, fmt.Sprintf("svc-%03d", w), fixture.Replicas(1))
			}
			g.RolledOut(ns)
			q := fmt.Sprintf(`count(sum by (destination_workload) (increase(istio_requests_total{reporter="destination",destination_workload_namespace=%q}[10s])) > 50)`, ns)
			f.EventuallyWithin("traffic for "+ns, 2*time.Minute, func() (bool, string) {
				v, err := f.World.Prometheus.Query(f.Ctx, q)
				if err != nil || len(v) == 0 {
					return false, fmt.Sprint(err)
				}
				return int(v[0].Value) == n, fmt.Sprintf("%s workloads with traffic", v[0].Value)
			})

			cfg := harness.Config(f)
			cfg.CanarySize = n
			m := &cfg.Gates.Metrics
			m.Prometheus.URL = f.World.Prometheus.URL
			m.Window, m.BakeTime, m.Interval = agent.Duration(10*time.Second), agent.Duration(10*time.Second), agent.Duration(2*time.Second)
			m.RequiredPasses, m.QueryTimeout = 2, agent.Duration(10*time.Second)
			api, err := promapi.NewClient(promapi.Config{Address: f.World.Prometheus.URL})
			require.NoError(b, err)
			counter := &queryCounter{next: promv1.NewAPI(api), runs: map[time.Time]int{}}
			a := harness.Start(f, cfg, harness.NewCounter(), "bench-"+ns, func(o *agent.Options) { o.GateDeps = agent.GateDeps{Prometheus: counter} })
			target := "1-26"
			f.When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, &target)
			st := waitCompleted(f, ns, 5*time.Minute)
			a.Kill()
			runs := counter.perRun()
			b.ReportMetric(float64(slices.Max(runs)), fmt.Sprintf("queries/run@%d", n))
			rows = append(rows, fmt.Sprintf("| %d | %d | %v | %d | %s |", n, len(runs), runs, slices.Max(runs), st.Reason))
		}
		record(b, "Prometheus queries per analysis run (the default checks, one query each)",
			append([]string{"| wave size | runs | queries per run | most in one run | outcome |", "|---|---|---|---|---|"}, rows...)...)
	}
}
