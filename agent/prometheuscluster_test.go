package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fleet Prometheus's cluster label takes this cluster's value from
// fleet.cluster unless named, and every gate then carries the matcher.
func TestAFleetPrometheusKeepsTheChecksToThisCluster(t *testing.T) {
	cfg, err := ParseConfig([]byte("fleet: {cluster: prod-eu, rings: [{name: all, clusters: [prod-eu]}]}\ngates: {metrics: {prometheus: {url: 'http://thanos:9090', clusterLabel: cluster}}}\n"))
	require.NoError(t, err)
	assert.Equal(t, "prod-eu", cfg.Gates.Metrics.Prometheus.Cluster)
	assert.Equal(t, `,cluster="prod-eu"`, cfg.Gates.Metrics.Prometheus.clusterMatcher())

	cfg, err = ParseConfig([]byte("gates: {metrics: {prometheus: {url: 'http://thanos:9090', clusterLabel: k8s_cluster, cluster: eu-1}}}\n"))
	require.NoError(t, err)
	assert.Equal(t, `,k8s_cluster="eu-1"`, cfg.Gates.Metrics.Prometheus.clusterMatcher())

	cfg, err = ParseConfig([]byte("gates: {metrics: {prometheus: {url: 'http://p:9090'}}}\n"))
	require.NoError(t, err)
	assert.Empty(t, cfg.Gates.Metrics.Prometheus.clusterMatcher())
}

func TestAClusterLabelIsValidatedWithWhatItNeeds(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"a label name PromQL cannot hold unquoted", "gates: {metrics: {prometheus: {url: 'http://p:9090', clusterLabel: k8s.cluster, cluster: eu}}}\n",
			`config key gates.metrics.prometheus.clusterLabel: "k8s.cluster" is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)`},
		{"no value and no fleet.cluster", "gates: {metrics: {prometheus: {url: 'http://p:9090', clusterLabel: cluster}}}\n",
			`config key gates.metrics.prometheus.cluster: empty, with gates.metrics.prometheus.clusterLabel "cluster" set: name this cluster's value of the label, or set fleet.cluster`},
		{"a value without its label", "gates: {metrics: {prometheus: {url: 'http://p:9090', cluster: eu}}}\n",
			`config key gates.metrics.prometheus.cluster: "eu" is set, but gates.metrics.prometheus.clusterLabel is empty: set the label it is a value of`},
		{"a check of one's own that would count every cluster", "gates: {metrics: {prometheus: {url: 'http://p:9090', clusterLabel: cluster, cluster: eu}, checks: [{name: errs, query: 'sum by (destination_workload) (rate(x{ns=\"{{.Namespace}}\"{{.Cluster}}}[{{.Window}}]{{.Offset}}))', requests: 'sum by (destination_workload) (increase(y{ns=\"{{.Namespace}}\"}[{{.Window}}]))', groupBy: destination_workload, threshold: 1}]}}\n",
			`config key gates.metrics.checks[0].requests: "sum by (destination_workload) (increase(y{ns=\"{{.Namespace}}\"}[{{.Window}}]))" has selectors without {{.Cluster}} (y{ns="shop"}), but gates.metrics.prometheus.clusterLabel is set: they would count every cluster's series; put {{.Cluster}} inside each selector's braces`},
		{"a ratio whose denominator counts every cluster", "gates: {metrics: {prometheus: {url: 'http://p:9090', clusterLabel: cluster, cluster: eu}, checks: [{name: errs, " +
			`query: 'sum by (w) (rate(x{ns="{{.Namespace}}",code=~"5.."{{.Cluster}}}[{{.Window}}]{{.Offset}})) / sum by (w) (rate(x{ns="{{.Namespace}}"}[{{.Window}}]{{.Offset}}))', ` +
			`requests: 'sum by (w) (increase(x{ns="{{.Namespace}}"{{.Cluster}}}[{{.Window}}]))', groupBy: w, threshold: 0.05}]}}` + "\n",
			`config key gates.metrics.checks[0].query: "sum by (w) (rate(x{ns=\"{{.Namespace}}\",code=~\"5..\"{{.Cluster}}}[{{.Window}}]{{.Offset}})) / sum by (w) (rate(x{ns=\"{{.Namespace}}\"}[{{.Window}}]{{.Offset}}))" has selectors without {{.Cluster}} (x{ns="shop"}), but gates.metrics.prometheus.clusterLabel is set: they would count every cluster's series; put {{.Cluster}} inside each selector's braces`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
}
