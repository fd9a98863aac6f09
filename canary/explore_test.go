package canary

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Explore, don't sample: from a few seed states, every sequence of events
// (exploredEvents) up to a depth is applied, the states reached are told
// apart by a hash of everything a decision reads (cluster.key), and every
// transition is checked against every invariant (exploredInvariants). A
// violation is reported with the shortest event sequence that leads to it
// from its seed.
//
// MESHWAVE_EXPLORE_DEPTH sets the depth (exploreDepth by default: what
// `make test` runs), MESHWAVE_EXPLORE_SEEDS and MESHWAVE_EXPLORE_CHECKS
// choose seeds and invariants by name (comma-separated), and
// MESHWAVE_EXPLORE_GROUPS narrows each seed's events to some groups
// (groupAgent and the others), to look past a violation that a shorter
// path through another group hides. MESHWAVE_EXPLORE_RESULTS names a file
// (bench/results.md) whose exploration section is written with the
// figures. `make explore` goes deeper and writes it. To run one invariant
// alone: MESHWAVE_EXPLORE_CHECKS=reads-back go test -run
// '^TestEveryEventSequenceKeepsTheInvariants$' ./canary.
func TestEveryEventSequenceKeepsTheInvariants(t *testing.T) {
	if raceDetector {
		t.Skip("the explorer runs without the race detector (make explore-smoke): it decides and hashes states, -race makes that many times slower, and its goroutines share only a locked map")
	}
	depth := exploreDepth
	if v := os.Getenv("MESHWAVE_EXPLORE_DEPTH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("MESHWAVE_EXPLORE_DEPTH=%q is not a depth of 1 or more", v)
		}
		depth = n
	}
	seeds := chosen(t, "MESHWAVE_EXPLORE_SEEDS", exploredSeeds, func(s seed) string { return s.name })
	checks := chosen(t, "MESHWAVE_EXPLORE_CHECKS", exploredInvariants, func(i invariant) string { return i.name })

	start := time.Now()
	var results []*explorer
	for _, s := range seeds {
		e, err := newExplorer(s, checks, depth)
		if err != nil {
			// Its script no longer leads where it did: the decisions
			// changed. The other seeds are explored all the same.
			t.Errorf("seed %s cannot be built: %v", s.name, err)
			continue
		}
		results = append(results, e)
	}
	exploreAll(results)
	took := time.Since(start)
	states, transitions, broken := 0, 0, 0
	for _, e := range results {
		t.Run(e.seed.name, func(t *testing.T) {
			t.Logf("seed %s, depth %d: %d states, %d transitions, %s of work; %s", e.seed.name, depth, e.states, e.transitions, e.work.Round(time.Millisecond), e.verdict())
			for _, name := range e.foundOrder {
				t.Errorf("%s", e.found[name].render(e.initial, e.seed.name))
			}
		})
		states += e.states
		transitions += e.transitions
		broken += len(e.found)
	}
	t.Logf("explored %d seeds to depth %d: %d states, %d transitions in %s on %d cores; %d violations", len(results), depth, states, transitions, took.Round(time.Millisecond), runtime.GOMAXPROCS(0), broken)
	if out := os.Getenv("MESHWAVE_EXPLORE_RESULTS"); out != "" {
		if err := writeExploreResults(out, depth, results, took); err != nil {
			t.Fatal(err)
		}
	}
}

// exploreDepth is the depth `make test` explores to: about 150,000
// transitions over the nine seeds, 8 s of work on two cores (20 s of wall
// time beside other work).
const exploreDepth = 3

func chosen[T any](t *testing.T, env string, all []T, name func(T) string) []T {
	v := os.Getenv(env)
	if v == "" {
		return all
	}
	var out []T
	for _, want := range strings.Split(v, ",") {
		i := slices.IndexFunc(all, func(x T) bool { return name(x) == strings.TrimSpace(want) })
		if i < 0 {
			var names []string
			for _, x := range all {
				names = append(names, name(x))
			}
			t.Fatalf("%s=%q: %q is not one of %s", env, v, want, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out
}

// explorer walks one seed's states depth first, on as many goroutines as
// there are cores, each from its own successors of the seed. A state is
// expanded again when it is reached by a shorter path than before, so that
// every state is expanded at the smallest depth it can be reached at, and
// the shortest counterexample of each invariant is the one kept.
type explorer struct {
	x         *exploration
	seed      seed
	checks    []invariant
	depth     int
	seedState *cluster
	// initial is the world the seed's script starts from, and script the
	// transitions it made: they are checked too, and begin every
	// counterexample.
	initial *cluster
	script  []transition

	mu sync.Mutex
	// seen holds, for each state reached, the smallest depth it was
	// reached at.
	seen        map[[16]byte]int
	states      int
	transitions int
	// work is the time the goroutines spent on this seed.
	work       time.Duration
	found      map[string]*counterexample
	foundOrder []string
}

// counterexample is the shortest path found that breaks an invariant.
type counterexample struct {
	invariant string
	why       string
	path      []transition
}

func newExplorer(s seed, checks []invariant, depth int) (*explorer, error) {
	x, initial := s.build()
	x.settled = map[[16]byte]string{}
	x.compareFacts = slices.ContainsFunc(checks, func(i invariant) bool { return i.name == "facts-agree" })
	script, err := x.play(initial, s.script)
	if err != nil {
		return nil, err
	}
	c := initial
	if len(script) > 0 {
		c = script[len(script)-1].to
	}
	groups := s.groups
	if v := os.Getenv("MESHWAVE_EXPLORE_GROUPS"); v != "" {
		groups = strings.Split(v, ",")
	}
	x.events = slices.DeleteFunc(slices.Clone(exploredEvents), func(e event) bool { return !slices.Contains(s.groups, e.group) || !slices.Contains(groups, e.group) })
	e := &explorer{x: x, seed: s, checks: checks, depth: depth, seedState: c, initial: initial, script: script,
		seen: map[[16]byte]int{c.key(true): 0}, states: 1, found: map[string]*counterexample{}}
	from := initial
	for i, tr := range script {
		for _, inv := range checks {
			if why := inv.check(x, from, tr); why != "" {
				e.report(inv.name, why, script[:i+1])
			}
		}
		from = tr.to
	}
	return e, nil
}

// exploreAll explores every seed: the seeds' first transitions are the
// tasks, shared by one goroutine per core.
func exploreAll(es []*explorer) {
	type task struct {
		e  *explorer
		tr transition
	}
	tasks := make(chan task)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				start := time.Now()
				t.e.step(slices.Clip(t.e.script), t.e.seedState, t.tr, 0)
				t.e.mu.Lock()
				t.e.work += time.Since(start)
				t.e.mu.Unlock()
			}
		}()
	}
	for _, e := range es {
		if e.depth == 0 {
			continue
		}
		for _, ev := range e.x.events {
			ev.successors(e.x, e.seedState, func(tr transition) { tasks <- task{e, tr} })
		}
	}
	close(tasks)
	wg.Wait()
}

// step checks the transition tr from c, reached by path at depth, and
// expands the state it leads to unless that was reached at a smaller
// depth already.
func (e *explorer) step(path []transition, c *cluster, tr transition, depth int) {
	path = append(path, tr)
	var broken []string
	for _, inv := range e.checks {
		if why := inv.check(e.x, c, tr); why != "" {
			broken = append(broken, inv.name, why)
		}
	}
	k := tr.to.key(true)
	e.mu.Lock()
	e.transitions++
	for i := 0; i < len(broken); i += 2 {
		e.report(broken[i], broken[i+1], path)
	}
	d, ok := e.seen[k]
	expand := !ok || depth+1 < d
	if expand {
		if !ok {
			e.states++
		}
		e.seen[k] = depth + 1
	}
	e.mu.Unlock()
	if !expand || depth+1 == e.depth {
		return
	}
	for _, ev := range e.x.events {
		ev.successors(e.x, tr.to, func(next transition) { e.step(path, tr.to, next, depth+1) })
	}
}

// report keeps the path (from the initial world, the seed's script
// included) as the invariant's counterexample when it is the shortest yet
// (e.mu held).
func (e *explorer) report(invariant, why string, path []transition) {
	prev, ok := e.found[invariant]
	if ok && len(prev.path) <= len(path) {
		return
	}
	if !ok {
		e.foundOrder = append(e.foundOrder, invariant)
	}
	e.found[invariant] = &counterexample{invariant: invariant, why: why, path: slices.Clone(path)}
}

func (e *explorer) verdict() string {
	if len(e.found) == 0 {
		return "no invariant broken"
	}
	var parts []string
	for _, name := range e.foundOrder {
		n := len(e.found[name].path)
		if k := len(e.script); k > 0 {
			parts = append(parts, fmt.Sprintf("%s broken in %d steps (%d of them the seed's script)", name, n, min(n, k)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s broken in %d steps", name, n))
	}
	return strings.Join(parts, ", ")
}

// render is the counterexample as a person reads it: the seed, then each
// event and where it left the world.
func (ce *counterexample) render(from *cluster, seedName string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s broken: %s\n  seed %s, from: %s\n", ce.invariant, ce.why, seedName, from.describe())
	for i, tr := range ce.path {
		fmt.Fprintf(&b, "  %d. %s\n     -> %s\n", i+1, tr.label, tr.to.describe())
	}
	return b.String()
}

// play applies a script of events to c, each one the successor whose label
// is the script's line, and returns the transitions made.
func (x *exploration) play(c *cluster, script []string) ([]transition, error) {
	var out []transition
	for n, want := range script {
		var next *transition
		var labels []string
		for _, ev := range exploredEvents {
			ev.successors(x, c, func(tr transition) {
				labels = append(labels, tr.label)
				if tr.label == want && next == nil {
					next = &tr
				}
			})
		}
		if next == nil {
			return nil, fmt.Errorf("step %d %q is not one of the events that may happen: %q", n+1, want, labels)
		}
		out = append(out, *next)
		c = next.to
	}
	return out, nil
}

// --- seeds ---

// seed is a state the exploration starts from: a world built, then a
// script of events played through the same machinery, so that it is a
// state the agent reaches.
type seed struct {
	name string
	// groups are the events explored from it.
	groups []string
	build  func() (*exploration, *cluster)
	script []string
}

var allGroups = []string{groupAgent, groupTempo, groupStatus, groupRecords, groupMesh, groupPerson, groupGitOps, groupClock, groupInvalid}

var exploredSeeds = []seed{
	{
		name: "fresh", groups: allGroups,
		build: func() (*exploration, *cluster) { return oneNamespace("canary") },
	},
	{
		name: "mid-wave", groups: allGroups,
		build:  func() (*exploration, *cluster) { return oneNamespace("canary") },
		script: []string{"reconcile", "reconcile, gates pass", "reconcile"},
	},
	{
		name: "mid-rollback", groups: allGroups,
		build:  func() (*exploration, *cluster) { return oneNamespace("1-26") },
		script: []string{"reconcile", "reconcile, gates pass", "reconcile", "reconcile, gates fail"},
	},
	{
		name: "paused", groups: allGroups,
		build:  func() (*exploration, *cluster) { return oneNamespace("canary") },
		script: []string{"reconcile", "paused", "reconcile, gates pass"},
	},
	{
		name: "completed", groups: allGroups,
		build:  func() (*exploration, *cluster) { return oneNamespace("canary") },
		script: []string{"reconcile", "reconcile, gates pass", "reconcile", "reconcile, gates pass"},
	},
	{
		name: "rolled-back", groups: allGroups,
		build:  func() (*exploration, *cluster) { return oneNamespace("1-26") },
		script: []string{"reconcile", "reconcile, gates pass", "reconcile", "reconcile, gates fail", "reconcile, gates pass"},
	},
	{
		// The namespace's failure policy Pause: a failed wave pauses,
		// and a person's resume judges it again.
		name: "failed-paused", groups: allGroups,
		build: func() (*exploration, *cluster) {
			x, c := oneNamespace("1-26")
			c.namespaces[0].Annotations[AnnotationFailurePolicy] = string(PolicyPause)
			return x, c
		},
		script: []string{"reconcile", "reconcile, gates fail"},
	},
	{
		// The failure policy Continue, up to half the workloads: a
		// member that failed stays where it is, and its record says so.
		name: "failure-tolerated", groups: allGroups,
		build: func() (*exploration, *cluster) {
			x, c := oneNamespace("1-26")
			x.cfg.FailurePolicy, x.cfg.MaxFailedPercent = PolicyContinue, 50
			return x, c
		},
		script: []string{"reconcile", "reconcile, gates pass", "reconcile", "reconcile, gates fail"},
	},
	{
		name:   "two-namespaces",
		groups: []string{groupAgent, groupTempo, groupStatus, groupRecords, groupMesh, groupPerson, groupPeers},
		build:  twoNamespaces,
		script: []string{"shop: reconcile", "blog: reconcile"},
	},
}

// exploredConfig is the agent's configuration: a canary of one, then
// batches of two; one namespace at a time; a minute between waves; a
// maintenance window from noon to one, every day.
func exploredConfig() Config {
	window, err := NewWindow("0 12 * * *", time.Hour, "UTC")
	if err != nil {
		panic(err)
	}
	return Config{
		Sizes:              WaveSizes{CanarySize: 1, BatchSize: 2},
		Concurrency:        1,
		DelayBetweenWaves:  time.Minute,
		MaintenanceWindows: Windows{window},
	}
}

// exploredNamespace is a namespace on 1-25, applied by Argo CD, opted in
// to target, with one-replica Deployments of the given names; the last is
// applied by Argo CD too.
func exploredNamespace(name, target string, workloads ...string) (*clusterNamespace, map[string]Workload) {
	ns := &clusterNamespace{
		Namespace: Namespace{
			Name:        name,
			Labels:      map[string]string{LabelRev: "1-25", LabelArgoInstance: name},
			Annotations: map[string]string{AnnotationTargetRevision: target},
		},
		restarts: map[string]restartLedger{},
		passed:   map[string]bool{},
	}
	git := map[string]Workload{}
	for i, w := range workloads {
		d := deploy(w, replicas(1))
		d.Namespace = name
		d.Pods[0].Name = w + "-0"
		d.Pods[0].Annotations = sidecarAnnotations["1-25"]
		if i == len(workloads)-1 {
			d.Labels[LabelArgoInstance] = name
			git[d.Name] = d
		}
		ns.workloads = append(ns.workloads, d)
	}
	return ns, git
}

func oneNamespace(target string) (*exploration, *cluster) {
	ns, git := exploredNamespace("shop", target, "a", "b", "c")
	x := &exploration{
		cfg: exploredConfig(), step: time.Minute, gitLabel: "1-25",
		targets:      map[string]string{"shop": target},
		gitWorkloads: map[string]map[string]Workload{"shop": git},
	}
	return x, &cluster{now: t0, tags: map[string]string{"canary": "1-26"}, namespaces: []*clusterNamespace{ns}}
}

// twoNamespaces is shop and blog, both opted in to 1-26, for one slot.
func twoNamespaces() (*exploration, *cluster) {
	shop, _ := exploredNamespace("shop", "1-26", "a", "b")
	blog, _ := exploredNamespace("blog", "1-26", "p", "q")
	x := &exploration{
		cfg: exploredConfig(), step: time.Minute, gitLabel: "1-25",
		targets: map[string]string{"shop": "1-26", "blog": "1-26"},
	}
	return x, &cluster{now: t0, tags: map[string]string{"canary": "1-26"}, namespaces: []*clusterNamespace{shop, blog}}
}

// --- results ---

// exploreSection heads the exploration's section of bench/results.md.
const exploreSection = "## Exhaustive exploration of the decisions (canary, `make explore`)"

// writeExploreResults writes the figures into path's exploration section,
// in place of the one there, or at the end; the other sections stay.
func writeExploreResults(path string, depth int, results []*explorer, took time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", exploreSection)
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- machine: %s/%s, %d cores; %s\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	if commit := os.Getenv("MESHWAVE_EXPLORE_COMMIT"); commit != "" {
		fmt.Fprintf(&b, "- commit: %s\n", commit)
	}
	fmt.Fprintf(&b, "- depth %d: %s in all, on %d goroutines (one per core); a seed's time is the work spent on it\n\n", depth, took.Round(time.Millisecond), runtime.GOMAXPROCS(0))
	b.WriteString("| seed | depth | states | transitions | time | found |\n|---|---|---|---|---|---|\n")
	for _, e := range results {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s |\n", e.seed.name, depth, e.states, e.transitions, e.work.Round(time.Millisecond), e.verdict())
	}
	// Each invariant broken, by its shortest counterexample over the seeds.
	for _, inv := range exploredInvariants {
		var best *explorer
		for _, e := range results {
			if ce, ok := e.found[inv.name]; ok && (best == nil || len(ce.path) < len(best.found[inv.name].path)) {
				best = e
			}
		}
		if best != nil {
			fmt.Fprintf(&b, "\n```\n%s```\n", best.found[inv.name].render(best.initial, best.seed.name))
		}
	}
	section := b.String()

	raw, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text := string(raw)
	if i := strings.Index(text, exploreSection); i >= 0 {
		end := len(text)
		if j := strings.Index(text[i+len(exploreSection):], "\n## "); j >= 0 {
			end = i + len(exploreSection) + j + 1
		}
		text = text[:i] + section + "\n" + text[end:]
	} else {
		if text != "" && !strings.HasSuffix(text, "\n\n") {
			text = strings.TrimRight(text, "\n") + "\n\n"
		}
		text += section
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
