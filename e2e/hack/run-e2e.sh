#!/usr/bin/env bash
# Runs the e2e module's tests. The scenarios of e2e/tests each boot a world
# of their own and spend most of their time waiting on it (pods starting,
# bake times, scrapes: two at a time kept 1.1 of two cores busy), so they
# run E2E_JOBS at a time (3 by default), the longest first, each in a
# process of its own: worlds share no process-wide state, and the test
# binary is built and linked once. The other packages run as go test runs
# them, beside the scenarios, but e2e/bench, which holds benchmarks only
# (make bench and make bench-smoke run them).
#
#   E2E_JOBS       scenarios at once (3; 1 runs them one after the other)
#   E2E_TIMEOUT    the longest a scenario may take (15m)
#   E2E_RUN        a regular expression of the scenarios to run (all)
#   E2E_LDFLAGS    linker flags (the control plane's stamped version)
set -euo pipefail
e2e=$(cd "$(dirname "$0")/.." && pwd)
jobs=${E2E_JOBS:-3}
timeout=${E2E_TIMEOUT:-15m}
run=${E2E_RUN:-.}
ldflags=${E2E_LDFLAGS:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$e2e"

go test -c -o "$work/tests.test" -ldflags "$ldflags" ./tests
# The other packages build, link and run beside the scenarios.
others=$(go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | grep -v '/e2e/\(tests\|bench\)$' || true)
others_rc=0
if [ -n "$others" ]; then
  # shellcheck disable=SC2086
  go test -count=1 -ldflags "$ldflags" $others > "$work/others.out" 2>&1 &
  others_pid=$!
fi

(cd tests && "$work/tests.test" -test.list "$run") | grep '^Test' > "$work/names" || true
# The longest first, as the last run here measured them (e2e/.cache), else
# as hack/e2e-seconds.txt does; a scenario of neither comes first.
seconds="$e2e/.cache/e2e-seconds.txt"
[ -s "$seconds" ] || seconds="$e2e/hack/e2e-seconds.txt"
awk 'NR == FNR { s[$2] = $1; next } { print ($0 in s ? s[$0] : 1000000), $0 }' "$seconds" "$work/names" |
  sort -k1,1nr -k2,2 | cut -d' ' -f2 > "$work/list"
total=$(wc -l < "$work/list")
echo "e2e/tests: $total scenarios, $jobs at a time"
begin=$(date +%s)

# one scenario: its output in a file of its own, one line when it ends
scenario() {
  local name=$1 start rc=0
  start=$(date +%s)
  (cd "$e2e/tests" && "$work/tests.test" -test.run "^${name}\$" -test.timeout "$timeout" -test.v) \
    > "$work/$name.out" 2>&1 || rc=$?
  local boots
  boots=$(grep -o 'local world booted in [0-9.]*[mµ]*s' "$work/$name.out" | awk '{print $NF}' | paste -sd, - || true)
  if [ "$rc" -eq 0 ]; then
    echo "ok    $name $(( $(date +%s) - start ))s${boots:+ (world booted in $boots)}"
    echo "$(( $(date +%s) - start )) $name" >> "$work/seconds"
  else
    echo "FAIL  $name $(( $(date +%s) - start ))s" | tee -a "$work/failed"
  fi
  return 0
}
export -f scenario
export e2e work timeout
xargs -a "$work/list" -P "$jobs" -I{} bash -c 'scenario "$1"' _ {}

echo "e2e/tests: $total scenarios in $(( $(date +%s) - begin ))s"
if [ -n "$others" ]; then
  wait "$others_pid" || others_rc=$?
  cat "$work/others.out"
fi
if [ "$run" = . ] && [ ! -s "$work/failed" ] && [ -s "$work/seconds" ]; then
  mkdir -p "$e2e/.cache"
  sort -k1,1nr "$work/seconds" > "$e2e/.cache/e2e-seconds.txt"
fi
if [ "$others_rc" -ne 0 ]; then
  echo "FAIL: the e2e packages beside the scenarios"
fi
if [ -s "$work/failed" ]; then
  while read -r _ name _; do
    echo "=== output of $name"
    grep -v '^=== \(RUN\|PAUSE\|CONT\|NAME\)' "$work/$name.out" || true
  done < "$work/failed"
  echo "FAIL: $(wc -l < "$work/failed") of $total scenarios"
  exit 1
fi
[ "$others_rc" -eq 0 ]
