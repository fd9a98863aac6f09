package agent

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

var peerReadableDesc = prometheus.NewDesc("meshwave_fleet_peer_readable",
	"1 while another cluster of the fleet's rings can be read (its kubeconfig Secret, its apiserver answering, its namespaces synced); 0 while it cannot, and the later rings wait on it.", []string{"peer"}, nil)

// Describe implements prometheus.Collector.
func (fc *fleetClusters) Describe(ch chan<- *prometheus.Desc) { ch <- peerReadableDesc }

// Collect reports each other cluster of the rings as readable or not,
// by the same rule the decisions read them with.
func (fc *fleetClusters) Collect(ch chan<- prometheus.Metric) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	names := make([]string, 0, len(fc.wanted))
	for c := range fc.wanted {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		r, ok := fc.remotes[c]
		readable := ok && r.err == "" && r.health.broken() == "" && r.informer != nil && r.informer.HasSynced()
		ch <- prometheus.MustNewConstMetric(peerReadableDesc, prometheus.GaugeValue, b2f(readable), c)
	}
}
