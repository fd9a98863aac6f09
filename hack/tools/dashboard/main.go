// Command dashboard writes meshwave's Grafana dashboard as JSON, built as
// code with the Grafana Foundation SDK. "make dashboard" runs it into the
// chart; CI checks the committed file is what it generates.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

func main() {
	d, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// ns filters by the dashboard's namespace variable.
const ns = `namespace=~"$namespace"`

// leading keeps the series of the replica that leads. Every replica
// reports each namespace's state (the chart runs two), and only the leader
// knows a wave's checks in progress (Analyzing): counting every replica's
// series would count each namespace once per replica, and a one-to-one
// match on namespace would find two series where it expects one.
func leading(selector string) string {
	return `(` + selector + ` and on (instance) (meshwave_leader == 1))`
}

// fleetLeading is leading across a fleet's clusters, whose replicas'
// instances may share an address: the leader of each cluster.
func fleetLeading(selector string) string {
	return `(` + selector + ` and on (cluster, instance) (meshwave_leader == 1))`
}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).LegendFormat(legend)
}

func build() (dashboard.Dashboard, error) {
	datasource := dashboard.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
	b := dashboard.NewDashboardBuilder("meshwave: revision migrations").
		Uid("meshwave").
		Description("Waves of every namespace moving between Istio revisions, paused canaries, the analysis values against their thresholds, rollbacks and the agent's health.").
		Tags([]string{"meshwave", "istio"}).
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("namespace").Label("Namespace").
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(meshwave_namespace_info, namespace)")}).
			Datasource(datasource).Multi(true).IncludeAll(true).AllValue(".*").
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged))

	b = b.WithRow(dashboard.NewRowBuilder("Migrations")).
		WithPanel(stat.NewPanelBuilder().Title("Paused canaries").
			Description("Namespaces whose migration is paused: by a failed or inconclusive check, or by hand. Alerted on after a while; see the README.").
			Datasource(datasource).Height(5).Span(4).
			WithTarget(query(`count(`+leading(`meshwave_namespace_phase{phase="Paused",`+ns+`}`)+` == 1) or vector(0)`, "paused")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"}, {Value: cog.ToPtr(1.0), Color: "orange"},
			}))).
		WithPanel(stat.NewPanelBuilder().Title("Migrating now").
			Datasource(datasource).Height(5).Span(4).
			WithTarget(query(`count(`+leading(`meshwave_namespace_phase{phase=~"Migrating|Analyzing|RollingBack",`+ns+`}`)+` == 1) or vector(0)`, "migrating"))).
		WithPanel(stat.NewPanelBuilder().Title("Blocked by invalid input").
			Description("Namespaces whose meshwave annotations are invalid: the Event on the namespace names the key, the value and what is expected.").
			Datasource(datasource).Height(5).Span(4).
			WithTarget(query(`count(`+leading(`meshwave_namespace_blocked{kind="invalid_input",`+ns+`}`)+` == 1) or vector(0)`, "blocked")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"},
			}))).
		WithPanel(stat.NewPanelBuilder().Title("Rollbacks (24h)").
			Datasource(datasource).Height(5).Span(4).
			WithTarget(query(`sum(increase(meshwave_rollbacks_total{`+ns+`}[24h])) or vector(0)`, "rollbacks"))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Phase of each namespace").
			Description("One row per namespace: its phase over time.").
			Datasource(datasource).Height(8).Span(24).
			WithTarget(query(`max by (namespace, phase) (`+leading(`meshwave_namespace_phase{`+ns+`}`)+` == 1) * 0 + 1`, "{{namespace}} {{phase}}"))).
		WithPanel(timeseries.NewPanelBuilder().Title("Waves of every namespace").
			Description("The current wave of each namespace against its total.").
			Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
			WithTarget(query(`max by (namespace) `+leading(`meshwave_namespace_wave{`+ns+`}`), "{{namespace}} wave")).
			WithTarget(query(`max by (namespace) `+leading(`meshwave_namespace_waves{`+ns+`}`), "{{namespace}} of"))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Data-plane mode of each namespace's waves").
			Description("One row per namespace: what its migration's waves move the workloads into, over time. A move to ambient whose sidecars are on another revision runs a sidecar migration onto the target first, then its ambient waves.").
			Datasource(datasource).Height(6).Span(24).
			WithTarget(query(`max by (namespace, mode) (`+leading(`meshwave_namespace_info{`+ns+`}`)+`) * 0 + 1`, "{{namespace}} {{mode}}"))).
		WithPanel(timeseries.NewPanelBuilder().Title("Workloads by state").
			Datasource(datasource).Height(8).Span(12).Min(0).Decimals(0).
			WithTarget(query(`sum by (state) `+leading(`meshwave_namespace_workloads{`+ns+`}`), "{{state}}"))).
		WithPanel(table.NewPanelBuilder().Title("Paused namespaces").
			Description("How long each paused namespace has spent paused, in seconds.").
			Datasource(datasource).Height(6).Span(24).Unit("s").
			WithTarget(query(`max by (namespace) `+leading(`meshwave_namespace_paused_seconds{`+ns+`} and on (instance, namespace) (meshwave_namespace_phase{phase="Paused"} == 1)`), "{{namespace}}").
				Instant().Format(prometheus.PromQueryFormatTable))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Maintenance windows").
			Description("Whether each namespace's maintenance windows are open: the configured maintenanceWindows, narrowed by meshwave.io/maintenance-window. " +
				"No new wave starts while closed; a wave in flight finishes and a rollback runs. Always open without windows.").
			Datasource(datasource).Height(6).Span(12).
			Mappings([]dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{
				"0": {Text: cog.ToPtr("closed"), Color: cog.ToPtr("orange")},
				"1": {Text: cog.ToPtr("open"), Color: cog.ToPtr("green")},
			}}}}).
			WithTarget(query(`max by (namespace) `+leading(`meshwave_namespace_window_open{`+ns+`}`), "{{namespace}}"))).
		WithPanel(table.NewPanelBuilder().Title("Waiting for a maintenance window").
			Description("Namespaces whose next wave (or first) waits for a maintenance window, and when it opens.").
			Datasource(datasource).Height(6).Span(12).Unit("dateTimeAsIso").
			WithTarget(query(`max by (namespace) `+leading(`meshwave_namespace_next_window_timestamp_seconds{`+ns+`}`)+` * 1000`, "{{namespace}}").
				Instant().Format(prometheus.PromQueryFormatTable)))

	b = b.WithRow(dashboard.NewRowBuilder("Revisions")).
		WithPanel(timeseries.NewPanelBuilder().Title("Pods still on each revision, by reason").
			Description("Every pod a revision injected, cluster-wide, by what meshwave does about it: will_move and moving are on their way; " +
				"cronjob, job, bare_pod, replicaset, not_opted_in, gateway, skip and the other reasons are not moved by meshwave; " +
				"pod_succeeded and pod_failed run no proxy but count as the revision in use for tools that count pods; " +
				"ambient pods run no sidecar, in ambient mode through the revision's ztunnel on their node. " +
				"A revision is empty when it has no line left; meshwave holders <revision> lists the pods.").
			Datasource(datasource).Height(8).Span(24).Min(0).Decimals(0).
			WithTarget(query(`sum by (revision, reason) `+leading(`meshwave_revision_holders`)+` > 0`, "{{revision}} {{reason}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Analysis")).
		WithPanel(timeseries.NewPanelBuilder().Title("Check values against thresholds").
			Description("The last value of each metric check, for the wave's worst workload, and the threshold it is held against.").
			Datasource(datasource).Height(9).Span(12).
			WithTarget(query(`max by (namespace, check) `+leading(`meshwave_analysis_value{`+ns+`}`), "{{namespace}} {{check}} value")).
			WithTarget(query(`max by (namespace, check) `+leading(`meshwave_analysis_threshold{`+ns+`}`), "{{namespace}} {{check}} threshold")).
			WithTarget(query(`max by (namespace, check) `+leading(`meshwave_analysis_baseline{`+ns+`}`), "{{namespace}} {{check}} baseline")).
			OverrideByRegexp(".*threshold", []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}})).
		WithPanel(timeseries.NewPanelBuilder().Title("Sequential evidence against a healthy wave").
			Description("A sequential check's evidence that the wave's worst workload is worse than its control, on a log scale, and the bound (1/α, or 2/α against a history) at which the wave fails. It may be read at every scrape: the chance that a healthy wave ever reaches its bound is at most α.").
			Datasource(datasource).Height(9).Span(12).
			ScaleDistribution(common.NewScaleDistributionConfigBuilder().Type(common.ScaleDistributionLog).Log(10)).
			WithTarget(query(`max by (namespace, check) `+leading(`meshwave_analysis_evidence{`+ns+`}`), "{{namespace}} {{check}} evidence")).
			WithTarget(query(`max by (namespace, check) `+leading(`meshwave_analysis_evidence_bound{`+ns+`}`), "{{namespace}} {{check}} bound")).
			OverrideByRegexp(".*bound", []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}})).
		WithPanel(timeseries.NewPanelBuilder().Title("Verdicts").
			Description("Gate verdicts per check and result.").
			Datasource(datasource).Height(9).Span(12).Min(0).
			WithTarget(query(`sum by (check, result) (increase(meshwave_analysis_verdicts_total{`+ns+`}[$__rate_interval]))`, "{{check}} {{result}}"))).
		WithPanel(timeseries.NewPanelBuilder().Title("Wave duration (p90)").
			Datasource(datasource).Height(7).Span(12).Unit("s").
			WithTarget(query(`histogram_quantile(0.9, sum by (le, outcome) (rate(meshwave_wave_duration_seconds_bucket{`+ns+`}[$__rate_interval])))`, "{{outcome}}"))).
		WithPanel(timeseries.NewPanelBuilder().Title("Restarts and rollbacks").
			Datasource(datasource).Height(7).Span(12).Min(0).
			WithTarget(query(`sum by (namespace, kind) (increase(meshwave_restarts_total{`+ns+`}[$__rate_interval]))`, "{{namespace}} {{kind}}")).
			WithTarget(query(`sum by (namespace, scope) (increase(meshwave_rollbacks_total{`+ns+`}[$__rate_interval]))`, "{{namespace}} rollback {{scope}}")))

	// The fleet: with fleet.cluster set, every series carries cluster,
	// and a Prometheus of the fleet (or Thanos over each cluster's) shows
	// every cluster's agent here.
	b = b.WithRow(dashboard.NewRowBuilder("Fleet")).
		WithPanel(stat.NewPanelBuilder().Title("Clusters that cannot be read").
			Description("Other clusters of the rings that an agent cannot read (no kubeconfig Secret, the apiserver not answering, its namespaces not synced): the later rings wait on them, and nothing advances on missing data.").
			Datasource(datasource).Height(5).Span(6).
			WithTarget(query(`count(count by (peer) (`+fleetLeading(`meshwave_fleet_peer_readable`)+` == 0)) or vector(0)`, "unreadable")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"}, {Value: cog.ToPtr(1.0), Color: "orange"},
			}))).
		WithPanel(stat.NewPanelBuilder().Title("Waiting for the ring before").
			Description("Namespaces whose first wave waits for the ring before their cluster's to complete the same move and soak.").
			Datasource(datasource).Height(5).Span(6).
			WithTarget(query(`count(`+fleetLeading(`meshwave_namespace_waits_for_ring{`+ns+`}`)+` == 1) or vector(0)`, "waiting"))).
		WithPanel(stat.NewPanelBuilder().Title("Holding the fleet").
			Description("Namespaces paused, rolling back or rolled back: each holds every later ring of the fleet until a person resumes it or it completes.").
			Datasource(datasource).Height(5).Span(12).
			WithTarget(query(`count(`+fleetLeading(`meshwave_namespace_phase{phase=~"Paused|RollingBack|RolledBack",`+ns+`}`)+` == 1) or vector(0)`, "holding")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Value: nil, Color: "green"}, {Value: cog.ToPtr(1.0), Color: "red"},
			}))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Phase of each namespace, cluster by cluster").
			Description("One row per cluster and namespace: its phase over time, the rings moving one after the other.").
			Datasource(datasource).Height(8).Span(24).
			WithTarget(query(`max by (cluster, namespace, phase) (`+fleetLeading(`meshwave_namespace_phase{`+ns+`}`)+` == 1) * 0 + 1`, "{{cluster}}/{{namespace}} {{phase}}"))).
		WithPanel(statetimeline.NewPanelBuilder().Title("Peers each agent can read").
			Description("1: the agent of cluster reads peer; 0: it cannot, and its later rings wait.").
			Datasource(datasource).Height(6).Span(24).
			Mappings([]dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{
				"0": {Text: cog.ToPtr("cannot be read"), Color: cog.ToPtr("orange")},
				"1": {Text: cog.ToPtr("read"), Color: cog.ToPtr("green")},
			}}}}).
			WithTarget(query(`max by (cluster, peer) `+fleetLeading(`meshwave_fleet_peer_readable`), "{{cluster}} reads {{peer}}")))

	b = b.WithRow(dashboard.NewRowBuilder("Agent")).
		WithPanel(stat.NewPanelBuilder().Title("Leader").
			Description("Replicas holding the lease: 1 is healthy; 0 means no replica runs the workers.").
			Datasource(datasource).Height(6).Span(4).
			WithTarget(query(`sum(meshwave_leader) or vector(0)`, "leaders")).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Value: nil, Color: "red"}, {Value: cog.ToPtr(1.0), Color: "green"},
			}))).
		WithPanel(timeseries.NewPanelBuilder().Title("Reconcile latency").
			Datasource(datasource).Height(6).Span(10).Unit("s").
			WithTarget(query(`histogram_quantile(0.99, sum by (le) (rate(meshwave_reconcile_duration_seconds_bucket[$__rate_interval])))`, "p99")).
			WithTarget(query(`histogram_quantile(0.5, sum by (le) (rate(meshwave_reconcile_duration_seconds_bucket[$__rate_interval])))`, "p50"))).
		WithPanel(timeseries.NewPanelBuilder().Title("Errors and queue").
			Datasource(datasource).Height(6).Span(10).Min(0).
			WithTarget(query(`sum(rate(meshwave_reconcile_errors_total[$__rate_interval]))`, "reconcile errors/s")).
			WithTarget(query(`sum(meshwave_workqueue_depth)`, "queue depth")).
			WithTarget(query(`sum by (code) (rate(meshwave_kube_requests_total[$__rate_interval]))`, "API {{code}}/s")))
	return b.Build()
}
