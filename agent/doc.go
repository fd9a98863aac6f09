// Package agent runs meshwave's controller: it gathers a snapshot of opted-in
// namespaces from shared informers, asks package canary what to do next, and
// acts on the cluster with merge patches, status annotations and Events.
//
// # Metrics
//
// Built by NewMetrics from an injected prometheus.Registerer. The state of
// each namespace that carries meshwave.io/target-revision is read from the
// informer cache at scrape time; a status that cannot be read is skipped,
// and a series it would hold twice is reported once, so that no status can
// fail the scrape:
//
//	meshwave_namespace_phase{namespace,phase}           1 for the current phase, 0 for every other
//	meshwave_namespace_info{namespace,source_revision,target,target_revision,mode}  always 1
//	meshwave_namespace_wave{namespace}                  the current wave, 1-based; 0 before the first
//	meshwave_namespace_waves{namespace}                 the total number of waves
//	meshwave_namespace_workloads{namespace,state}       pending, moving, moved, failed, skipped, rolled_back
//	meshwave_namespace_paused_seconds{namespace}        time spent paused, the current pause included
//	meshwave_namespace_wave_age_seconds{namespace}      time since the wave in progress started
//	meshwave_namespace_blocked{namespace,kind}          1 when Blocked: invalid_input or precheck
//	meshwave_namespace_window_open{namespace}           1 while its maintenance windows are open (always without windows)
//	meshwave_namespace_next_window_timestamp_seconds{namespace}  when the window its next wave waits for opens (only while one waits)
//	meshwave_analysis_value{namespace,check}            a check's last value, for the worst workload
//	meshwave_analysis_threshold{namespace,check}        the threshold it is held against
//	meshwave_analysis_baseline{namespace,check}         the value before the wave's restart
//	meshwave_analysis_result{namespace,check,result}    1 for the check's last result
//
// The pods of every revision, cluster-wide, are classified from the caches
// (canary.ClassifyHolders, as meshwave holders does) and counted by
// namespace: a scrape classifies again only the namespaces whose objects
// changed since the one before (holderTally), every namespace after a
// change to the mesh's revisions, about 0.2 ms at 100,000 pods when
// nothing changed:
//
//	meshwave_revision_holders{revision,reason}          pods by reason code (canary.HolderReasons), 0 included
//
// Counted as they happen:
//
//	meshwave_analysis_verdicts_total{namespace,check,result}
//	meshwave_restarts_total{namespace,kind}             kind: move or rollback
//	meshwave_rollbacks_total{namespace,scope}           scope: wave or all
//	meshwave_gitops_reverts_total{namespace,kind,owner} kind: label or template; owner: argocd/<app>, kustomization/<ns>/<name>, helmrelease/<ns>/<name> or none
//	meshwave_wave_duration_seconds{namespace,outcome}   histogram; outcome: passed or failed
//	meshwave_reconcile_duration_seconds                 histogram
//	meshwave_reconcile_errors_total
//	meshwave_leader                                     1 while this replica leads
//
// RegisterClientMetrics adds client-go's meshwave_kube_request_duration_seconds{verb}
// and meshwave_kube_requests_total{method,code},
// meshwave_kube_received_bytes_total (counted on the connections of the
// clients CountReceived was given), and the workqueue's
// meshwave_workqueue_{depth,adds_total,queue_duration_seconds,work_duration_seconds,
// unfinished_work_seconds,longest_running_processor_seconds,retries_total}{queue}.
// No label ever names a pod.
//
// # Traces
//
// NewTracerProvider follows the OTEL_* variables and exports nothing when
// none is set. Each migration is one trace rooted at a "migration <ns>"
// span; each wave is a "wave <k>" span under it; patches ("restart <w>",
// "roll back <w>", "switch istio.io/rev"), gates that really evaluated
// ("gate <name>") and PromQL queries ("promql <check>") are their children.
package agent
