// Package bench measures what meshwave costs and how fast it goes, on the
// local world: the apiserver requests of a migration beside the runbook's
// loop, the Prometheus queries of an analysis run. `make bench` runs the
// benchmarks at full size and writes bench/results.md at the repository's
// root; `make test` runs each once, small (MESHWAVE_BENCH_SMALL=1), to
// prove it still works.
package bench
