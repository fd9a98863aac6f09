// Package bench measures what meshwave costs and how fast it goes, on the
// local world: the apiserver requests of a migration beside the runbook's
// loop, the Prometheus queries of an analysis run, the wall time of a
// migration beside the runbook's loop at equal rollouts, and, at the
// scale of 100,000 pods, what listing a pod costs, the agent's start-up
// transfer, its memory and its reaction times. `make bench` runs the
// benchmarks at full size and writes bench/results.md at the repository's
// root; `make test` runs each once, small (MESHWAVE_BENCH_SMALL=1), to
// prove it still works. MESHWAVE_BENCH_NAMESPACES sizes the scale
// benchmark's world (namespaces of 10 Deployments of 5 pods), and
// MESHWAVE_BENCH_PROFILES names a directory for the profiles of the
// benchmark's process and of the agent whose reactions are timed, with
// that agent's log.
package bench
