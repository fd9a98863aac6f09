package agent

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cannedProm is a Prometheus that answers every query with v, and keeps the
// queries.
type cannedProm struct {
	v       model.Value
	err     error
	queries []string
}

func (a *cannedProm) Query(_ context.Context, q string, _ time.Time, _ ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	a.queries = append(a.queries, q)
	return a.v, nil, nil, a.err
}

func TestTheFleetsAlertsAreTheLastFiringOfANamespaceOfACluster(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	since := now.Add(-90 * time.Minute)
	q := &cannedProm{v: model.Vector{
		{Metric: model.Metric{"alertname": "HighErrorRate"}, Value: model.SampleValue(float64(now.Add(-20 * time.Minute).Unix()))},
		{Metric: model.Metric{"alertname": "MeshwaveRollback"}, Value: model.SampleValue(float64(now.Add(-5 * time.Minute).Unix()))},
	}}
	read := fleetAlerts(q, "cluster", time.Second, func() time.Time { return now })
	last, name, err := read("staging", "shop", since)
	require.NoError(t, err)
	assert.Equal(t, now.Add(-5*time.Minute), last.UTC())
	assert.Equal(t, "MeshwaveRollback", name)
	assert.Equal(t, []string{`max by (alertname) (max_over_time(timestamp(ALERTS{alertstate="firing",cluster="staging",namespace="shop"})[1h30m1s:5s]))`}, q.queries,
		"a subquery over the time since the completion, its step a thousandth of it")

	q.v = model.Vector{}
	last, _, err = read("staging", "shop", since)
	require.NoError(t, err)
	assert.True(t, last.IsZero(), "no alert since")

	q.err = errors.New("connection refused")
	_, _, err = read("staging", "shop", since)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connection refused")
}

func TestASoakWithNoAlertIsValidatedWithWhatItNeeds(t *testing.T) {
	for _, tc := range []struct{ name, yaml, err string }{
		{"without rings", "fleet: {soakAlerts: true}\n", "config key fleet.soakAlerts: true without fleet.rings: there is no ring to soak"},
		{"without a Prometheus", "fleet: {cluster: a, rings: [{name: r, clusters: [a]}], soakAlerts: true}\n",
			"config key fleet.soakAlerts: true, but gates.metrics.prometheus.url is empty: the alerts are read from the fleet's Prometheus"},
		{"without the cluster label", "fleet: {cluster: a, rings: [{name: r, clusters: [a]}], soakAlerts: true}\ngates: {metrics: {prometheus: {url: 'http://p:9090'}}}\n",
			"config key fleet.soakAlerts: true, but gates.metrics.prometheus.clusterLabel is empty: the alerts of another cluster's namespace are told apart by it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.yaml))
			require.Error(t, err)
			assert.Equal(t, tc.err, err.Error())
		})
	}
	_, err := ParseConfig([]byte("fleet: {cluster: a, rings: [{name: r, clusters: [a]}], soakAlerts: true}\ngates: {metrics: {prometheus: {url: 'http://p:9090', clusterLabel: cluster}}}\n"))
	assert.NoError(t, err)
}

// seenBySubquery evaluates `max_over_time(timestamp(ALERTS{...})[rng:step])`
// at `at` the way Prometheus does: evaluation points aligned to multiples
// of step within (at-rng, at], each instant selector taking the newest
// sample before it that is not stale. A rule group evaluated every
// interval writes an ALERTS sample at each evaluation while the alert
// fires, and a stale marker at the first one after: each sample is seen
// by the points in [sample, sample+interval). It reports whether one is.
func seenBySubquery(samples []time.Time, at time.Time, rng, step, interval time.Duration) bool {
	startMs, stepMs := at.UnixMilli()-rng.Milliseconds(), step.Milliseconds()
	for _, s := range samples {
		ms := s.UnixMilli()
		if ms <= startMs {
			continue
		}
		// The first evaluation point at or after the sample.
		t := stepMs * ((ms + stepMs - 1) / stepMs)
		if t <= at.UnixMilli() && t < ms+interval.Milliseconds() {
			return true
		}
	}
	return false
}

// A soak with no alert sees every alert that fired for the namespace in
// its window, however long the soak: an alert that fired for a single
// evaluation of its rule (30 s apart), anywhere in the last day of a
// week's soak, is seen.
func TestAnAlertOfOneEvaluationDuringAWeeksSoakIsSeen(t *testing.T) {
	at := time.Date(2026, 12, 9, 12, 0, 7, 0, time.UTC)
	since := at.Add(-7 * 24 * time.Hour)
	query := alertsQuery("cluster", "staging", "shop", at.Sub(since))
	m := regexp.MustCompile(`\[([^:\]]+):([^\]]+)\]`).FindStringSubmatch(query)
	require.Len(t, m, 3, query)
	rng, err := model.ParseDuration(m[1])
	require.NoError(t, err)
	step, err := model.ParseDuration(m[2])
	require.NoError(t, err)

	var missed []string
	for fired := at.Add(-24 * time.Hour); fired.Before(at.Add(-10 * time.Minute)); fired = fired.Add(7 * time.Second) {
		if !seenBySubquery([]time.Time{fired}, at, time.Duration(rng), time.Duration(step), 30*time.Second) {
			missed = append(missed, fired.Format(time.RFC3339))
		}
	}
	assert.Empty(t, missed, "alerts of one evaluation the soak never sees (query %s, step %s); %d missed", query, time.Duration(step), len(missed))
}
