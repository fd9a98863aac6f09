package agent

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/common/model"

	"github.com/meshwave/meshwave/analysis"
	"github.com/meshwave/meshwave/canary"
)

// fleetAlerts reads, from the fleet's Prometheus, the alerts that fired
// for a namespace of another cluster: Prometheus's ALERTS series, firing,
// with the namespace's name and the cluster's value of clusterLabel. The
// fleet's Prometheus (or Thanos Ruler) must evaluate the alerting rules
// for their ALERTS series to be there.
func fleetAlerts(q analysis.Querier, clusterLabel string, timeout time.Duration, now func() time.Time) canary.FleetAlerts {
	return func(cluster, namespace string, since time.Time) (time.Time, string, error) {
		at := now()
		window := at.Sub(since)
		if window <= 0 {
			return time.Time{}, "", nil
		}
		query := alertsQuery(clusterLabel, cluster, namespace, window)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		v, _, _, err := q.Query(ctx, query, at)
		if err != nil {
			return time.Time{}, "", fmt.Errorf("query %s: %w", query, err)
		}
		vec, ok := v.(model.Vector)
		if !ok {
			return time.Time{}, "", fmt.Errorf("query %s: a %s, not a vector", query, v.Type())
		}
		var last time.Time
		name := ""
		for _, s := range vec {
			f := float64(s.Value)
			if math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			t := time.Unix(0, int64(f*float64(time.Second)))
			if t.After(last) || t.Equal(last) && string(s.Metric["alertname"]) < name {
				last, name = t, string(s.Metric["alertname"])
			}
		}
		if last.Before(since) {
			return time.Time{}, "", nil
		}
		return last, name, nil
	}
}

// alertsQuery is the last time, per alert, that one fired for namespace
// of cluster within the window: a subquery of ALERTS's timestamps. Its
// step is at most alertsStep: a firing is seen only by an evaluation
// point before the next evaluation of its rule (which resolves it, or
// marks it stale), so a coarser step would miss a short alert. The window
// is the soak at most (the decision reads no further back), so a week's
// soak evaluates some 40,000 points of one series per alert: milliseconds.
func alertsQuery(clusterLabel, cluster, namespace string, window time.Duration) string {
	step := min(alertsStep, max(time.Second, (window/1000).Truncate(time.Second)))
	return fmt.Sprintf(`max by (alertname) (max_over_time(timestamp(ALERTS{alertstate="firing",%s=%q,namespace=%q})[%s:%s]))`,
		clusterLabel, cluster, namespace, model.Duration(window.Truncate(time.Second)+time.Second), model.Duration(step))
}

// alertsStep is the longest step of the alerts' subquery: shorter than
// the usual rule evaluation intervals (15 s to 1 m), so that an alert
// that fired for one evaluation is seen.
const alertsStep = 15 * time.Second
