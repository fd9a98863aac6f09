package analysis

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selectors are the label matchers of every vector selector in a query.
var selectors = regexp.MustCompile(`\{[^{}]*\}`)

// With a fleet Prometheus, every selector of every built-in check, in
// every form (sidecars, through a waypoint, ztunnel's L4 series), keeps
// to this cluster's series; with a Prometheus of one cluster, none
// carries the label.
func TestEveryBuiltInSelectorKeepsToThisClustersSeries(t *testing.T) {
	for _, c := range []Check{ErrorRateCheck(0.05, 1, 50), LatencyP99Check(1000, 0.5, 50), OutboundErrorRateCheck(0.05, 1, 20)} {
		for _, cluster := range []string{ClusterMatcher("cluster", `prod-"eu"`), ""} {
			texts := []string{c.Query, c.Requests}
			for _, f := range []*CheckForm{c.Waypoint, c.Ztunnel} {
				if f != nil {
					texts = append(texts, f.Query, f.Requests)
				}
			}
			for _, text := range texts {
				tmpl, _, err := ParseQueryTemplate(c.Name, text)
				require.NoError(t, err)
				unscoped, err := UnscopedSelectors(text)
				require.NoError(t, err)
				assert.Empty(t, unscoped, "%s: %s", c.Name, text)
				p := sampleParams
				p.Cluster = cluster
				q, err := render(tmpl, p)
				require.NoError(t, err)
				sels := selectors.FindAllString(q, -1)
				require.NotEmpty(t, sels, q)
				for _, sel := range sels {
					if cluster == "" {
						assert.NotContains(t, sel, "cluster=", "%s: %s", c.Name, q)
					} else {
						assert.Contains(t, sel, `",cluster="prod-\"eu\""`, "%s: selector %s of %s", c.Name, sel, q)
					}
				}
			}
		}
	}
}

func TestTheGatesRenderTheirClusterMatcher(t *testing.T) {
	g, err := NewMetricGate(ErrorRateCheck(0.05, 1, 50), &fakeProm{}, time.Minute, time.Second, time.Minute, 0)
	require.NoError(t, err)
	g.Cluster = ClusterMatcher("cluster", "prod-eu")
	q, err := g.Query(wave(member("web", pod("w", "1-26"))), t0.Add(2*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, 3+1+3, strings.Count(q, `,cluster="prod-eu"`), "value and baseline, each of three selectors, and the requests: %s", q)

	s := newSequentialGate(t, nil)
	s.Cluster = ClusterMatcher("cluster", "prod-eu")
	assert.Equal(t, `istio_requests_total{reporter="destination",destination_workload_namespace="shop",cluster="prod-eu"}`, s.Query(wave(member("web", pod("w", "1-26")))))
}

func TestASelectorACheckDoesNotKeepToTheClusterIsNamed(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`sum(rate(x{a="{{.Namespace}}"{{.Cluster}}}[{{.Window}}]{{.Offset}})) by (app)`, nil},
		{`sum by (app, code) (rate(x{a="b"{{ .Cluster }}}[5m])) / on (app) group_left (code) sum(rate(y{a="}{"{{.Cluster}}}[1m] offset 1h))`, nil},
		{`sum(rate(x{a="{{.Namespace}}"{{.Cluster}}}[5m])) / sum(rate(x{a="{{.Namespace}}"}[5m]))`, []string{`x{a="shop"}`}},
		{`rate(errors_total[5m]) > bool 0.5 and up{job="x"{{.Cluster}}}`, []string{"errors_total"}},
		{`{__name__="x"} unless count(y)`, []string{`{__name__="x"}`, "y"}},
		{`sum(x{a="b"}{{.Cluster}})`, []string{`x{a="b"}`, "{{.Cluster}} outside a selector's braces"}},
		{`histogram_quantile(0.99, sum by (le) (rate(z_bucket{a="1e3"{{.Cluster}}}[5m]))) > 1e3`, nil},
	} {
		got, err := UnscopedSelectors(tc.query)
		require.NoError(t, err, tc.query)
		assert.Equal(t, tc.want, got, tc.query)
	}
	_, err := UnscopedSelectors(`{{`)
	assert.Error(t, err)
}

// A PromQL line comment (# to the end of the line) is no string: an
// apostrophe in it must not hide the selectors of the lines after it.
// Prometheus reads `y` below as a selector of every cluster's series.
func TestASelectorAfterACommentIsStillNamedUnscoped(t *testing.T) {
	q := "sum(rate(x{a=\"b\"{{.Cluster}}}[5m])) # 5xx's share\n/ sum(rate(y[5m]))"
	got, err := UnscopedSelectors(q)
	require.NoError(t, err)
	assert.Equal(t, []string{"y"}, got, q)
}

// What a comment says is not a selector: a valid, scoped query that
// shows an example in a comment is not refused.
func TestASelectorInACommentIsNotNamed(t *testing.T) {
	q := "sum(rate(x{a=\"b\"{{.Cluster}}}[5m])) # e.g. x{a=\"b\"}"
	got, err := UnscopedSelectors(q)
	require.NoError(t, err)
	assert.Empty(t, got, q)
}

// Space between a metric name and its braces is valid PromQL (one
// selector): the name is not named as a selector of its own.
func TestAMetricNameSpacedFromItsBracesIsOneScopedSelector(t *testing.T) {
	q := `sum(rate(x {a="b"{{.Cluster}}}[5m]))`
	got, err := UnscopedSelectors(q)
	require.NoError(t, err)
	assert.Empty(t, got, q)
}

// PromQL's keywords are also metric names (its grammar's
// metric_identifier): a bare `count` or `group` selects every cluster's
// series of that metric.
func TestAKeywordUsedAsAMetricNameIsNamedUnscoped(t *testing.T) {
	for _, q := range []string{
		`sum(rate(x{a="b"{{.Cluster}}}[5m])) / count`,
		`x{a="b"{{.Cluster}}} / group`,
		`rate(count[5m])`,
	} {
		got, err := UnscopedSelectors(q)
		require.NoError(t, err)
		assert.NotEmpty(t, got, q)
	}
}
