package canary

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Exclusion is a workload the planner leaves out, and why.
type Exclusion struct {
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}

// Planned is a workload in a wave.
type Planned struct {
	Name string
	// Group is its meshwave.io/wave value.
	Group int
	// rank is its kind's place in the default order.
	rank int
}

// place is where a workload goes in the plan, before name order: its
// meshwave.io/wave value, then its kind. It is one number, the value
// times the number of kinds plus the kind's rank (always less than that
// number), so that places order by value, then kind, as integers do, and
// are looked up as integers.
type place int

func (p Planned) place() place { return place(p.Group*kindRanks + p.rank) }

// inPlanOrder orders workloads to move by place, keeping the name order
// they come in within each place. A namespace has a few places and may
// have thousands of workloads: rather than sort them, it numbers the
// places as it meets them, counts the workloads of each, and puts each
// workload after those of the places that go before its own.
func inPlanOrder(todo []Planned) []Planned {
	number := map[place]int{}         // each place's number, in the order met
	var counts []int                  // the workloads of each place, by number
	numbers := make([]int, len(todo)) // each workload's place number
	for i, p := range todo {
		n, met := number[p.place()]
		if !met {
			n = len(counts)
			number[p.place()] = n
			counts = append(counts, 0)
		}
		numbers[i] = n
		counts[n]++
	}
	next := make([]int, len(counts)) // where the next workload of each place goes
	at := 0
	for _, k := range slices.Sorted(maps.Keys(number)) {
		n := number[k]
		next[n], at = at, at+counts[n]
	}
	out := make([]Planned, len(todo))
	for i, p := range todo {
		out[next[numbers[i]]] = p
		next[numbers[i]]++
	}
	return out
}

// NamespacePlan is the plan for one namespace.
type NamespacePlan struct {
	Namespace      string
	Priority       int
	Target         string
	TargetRevision string
	// Ambient is true when the waves move the workloads out of their
	// sidecars into ambient mode; false when onto the target's sidecar.
	// An ambient target whose sidecars must move onto its revision first
	// plans that sidecar step (Istio's HBONE step) first.
	Ambient bool
	// AmbientNext is true when these are the sidecar step's waves, and the
	// move to ambient follows them.
	AmbientNext bool
	// Waypoint is the waypoint the move to ambient puts the namespace
	// behind (meshwave.io/waypoint), "" for none.
	Waypoint string
	// Moved are the workloads already moved to the target in this migration.
	Moved []string
	// Failed are the workloads this migration moved that failed their wave
	// and stay where they are (the Continue policy).
	Failed []string
	// Waves are the waves still to run, in order. The first is the canary
	// when no wave has run yet.
	Waves [][]Planned
	// Excluded are the workloads left out, with the reason.
	Excluded []Exclusion
	// status is the status the namespace's decision goes on from (Read),
	// when it is of a migration under way or ended, not a new one; undoing
	// says that migration is being rolled back, or asked to be, first.
	// firstWave is the number of the plan's first wave.
	status    *Status
	undoing   bool
	firstWave int
}

// FirstWave is the number of the plan's first wave: the one after the
// wave in flight of the migration under way, else 1.
func (p NamespacePlan) FirstWave() int {
	if p.firstWave == 0 {
		return 1
	}
	return p.firstWave
}

// Remaining counts the workloads of the waves still to run.
func (p NamespacePlan) Remaining() int {
	n := 0
	for _, w := range p.Waves {
		n += len(w)
	}
	return n
}

// WaveSizes configures how waves are cut; Config.WithDefaults fills in
// the zero sizes and caps them at MaxWaveSize.
type WaveSizes struct {
	// CanarySize is the size of the first wave.
	CanarySize int
	// BatchSize is the largest size of a later wave.
	BatchSize int
}

// MaxWaveSize is the largest wave: canarySize and batchSize are at most
// this.
const MaxWaveSize = maxMembers

// PlanNamespace plans the waves that remain for a namespace moving to
// targetRevision in the migration named migration ("" before it starts).
// wavesRun is the number of waves the migration already started; while it
// is zero the first wave is the canary.
//
// A workload is left out when it is a gateway, carries meshwave.io/skip,
// is paused, is a StatefulSet with a partition, has no injected pod, or already runs the target on every pod. A workload
// the migration already moved (it carries this migration's move record) is
// counted as moved instead. The rest are ordered by meshwave.io/wave, then
// kind (Deployments, StatefulSets, DaemonSets), then name, and cut into
// waves that never mix two meshwave.io/wave values.
//
// For example, with CanarySize 1, BatchSize 2 and workloads a(0) b(1) c(1)
// d(1) e(100): the waves are [a] [b c] [d] [e].
func PlanNamespace(ns string, deployments []Workload, targetRevision, migration string, wavesRun int, sizes WaveSizes) NamespacePlan {
	set, _ := parseWorkloads(deployments)
	return planNamespace(ns, set, Place{Revision: targetRevision}, migration, wavesRun, Config{Sizes: sizes}.WithDefaults().Sizes)
}

// planNamespace is PlanNamespace over workloads already parsed, with sizes
// already filled in (Config.WithDefaults): a size of zero would cut empty
// waves forever.
func planNamespace(ns string, set workloadSet, target Place, migration string, wavesRun int, sizes WaveSizes) NamespacePlan {
	plan := NamespacePlan{Namespace: ns, TargetRevision: target.Revision, Ambient: target.Ambient}
	// The workloads to move, in name order, as the set is.
	todo := make([]Planned, 0, len(set))
	// Moves of this migration recorded in a wave after wavesRun were made
	// but never judged (the status is older than they are): they are
	// judged next, wave by wave, before anything else moves.
	recorded := map[int][]Planned{}
	for _, w := range set {
		if r := w.movedIn(migration); r != nil && r.Wave > wavesRun && w.gateway == "" && !w.settings.Skip {
			recorded[r.Wave] = append(recorded[r.Wave], Planned{Name: w.Name, Group: w.settings.Wave})
			continue
		}
		if p, ok := plan.place(w, target, migration); ok {
			todo = append(todo, p)
		}
	}
	for _, wave := range slices.Sorted(maps.Keys(recorded)) {
		for ws := recorded[wave]; len(ws) > 0; {
			n := min(len(ws), MaxWaveSize)
			plan.Waves = append(plan.Waves, ws[:n])
			ws = ws[n:]
		}
	}
	// Within a meshwave.io/wave value, Deployments go first, then
	// StatefulSets, then DaemonSets, each in name order.
	for ordered := inPlanOrder(todo); len(ordered) > 0; {
		size := sizes.BatchSize
		if wavesRun == 0 && len(plan.Waves) == 0 {
			// The canary: the first wave, never one of recorded moves.
			size = sizes.CanarySize
		}
		n := 0
		for n < len(ordered) && n < size && ordered[n].Group == ordered[0].Group {
			n++
		}
		plan.Waves = append(plan.Waves, ordered[:n])
		ordered = ordered[n:]
	}
	return plan
}

// place says where w goes: left out (with the reason), failed or moved by
// this migration, or to move (ok, its place in the plan).
func (plan *NamespacePlan) place(w parsedWorkload, target Place, migration string) (Planned, bool) {
	exclude := func(reason string) (Planned, bool) {
		plan.Excluded = append(plan.Excluded, Exclusion{w.Name, reason})
		return Planned{}, false
	}
	switch {
	case w.gateway != "":
		return exclude(w.gateway)
	case w.settings.Skip:
		return exclude(AnnotationSkip + " is true")
	}
	if r := w.forwardIn(migration); r != nil && r.Outcome == OutcomeFailed {
		// Failed its wave, tolerated: it stays where it is.
		plan.Failed = append(plan.Failed, w.Name)
		return Planned{}, false
	}
	if w.movedIn(migration) != nil {
		plan.Moved = append(plan.Moved, w.Name)
		return Planned{}, false
	}
	switch {
	case w.Paused:
		return exclude("paused (spec.paused): a restart would not roll out")
	case w.Partition > 0:
		return exclude(fmt.Sprintf("statefulset partition %d keeps the pods below ordinal %d on their old template: a restart would not reach them", w.Partition, w.Partition))
	}
	live, injected, onTarget := 0, 0, 0
	for i := range w.Pods {
		p := &w.Pods[i] // a Pod is large: only a few of its fields are read
		if p.Terminating {
			continue
		}
		live++
		if p.Injected() {
			injected++
		}
		if p.At(target) {
			onTarget++
		}
	}
	switch {
	case target.Ambient && w.TemplateLabels[LabelDataplaneMode] == "none":
		return exclude(LabelDataplaneMode + "=none on its pod template: it stays out of ambient")
	case target.Ambient && live > 0 && onTarget == live:
		return exclude("already in ambient")
	case injected == 0:
		return exclude("no injected pod")
	case onTarget == live:
		return exclude("already on " + target.Revision)
	}
	return Planned{Name: w.Name, Group: w.settings.Wave, rank: w.KindOf().rank()}, true
}

// planRemaining plans what a migration in status st has left: every
// workload not yet moved by it, in waves, without the members of the wave
// in flight. Both the engine and `meshwave plan` use it; sizes are filled
// in (Config.WithDefaults).
func planRemaining(ns string, set workloadSet, st *Status, sizes WaveSizes) NamespacePlan {
	p := planNamespace(ns, set, st.targetPlace(), st.MigrationID(), st.Wave, sizes)
	// A planned workload can be a member only if its meshwave.io/wave
	// value is a member's: comparing the values first spares hashing the
	// name of every workload of a large plan.
	members, values := map[string]bool{}, map[int]bool{}
	add := func(w parsedWorkload) {
		members[w.Name], values[w.settings.Wave] = true, true
	}
	for _, m := range st.Workloads {
		if w, ok := set.find(m.Name); ok {
			add(w)
		}
	}
	if st.rollingBack() {
		// What a rollback returns is on its way back, not waiting for a
		// wave, whether the status lists it (at most maxListed) or not.
		for _, w := range rollbackMembers(set, st) {
			add(w)
		}
	}
	if len(members) == 0 {
		return p
	}
	member := func(x Planned) bool { return values[x.Group] && members[x.Name] }
	var waves [][]Planned
	for _, w := range p.Waves {
		// Only a wave that holds members is copied, without them.
		if slices.ContainsFunc(w, member) {
			w = slices.DeleteFunc(slices.Clone(w), member)
		}
		if len(w) > 0 {
			waves = append(waves, w)
		}
	}
	p.Waves = waves
	return p
}

// PlanInput is one opted-in namespace for PlanWaves.
type PlanInput struct {
	Snapshot Snapshot
	// Status is the namespace's recorded status, if any; StatusErr why it
	// could not be read.
	Status    *Status
	StatusErr error
	// Reading, when set, is Read of the above, as the caller's decisions
	// read it (with its configuration and clock): the plan is made from
	// it. Nil: PlanWaves reads them with the wave sizes it is given.
	Reading *Reading
}

// PlanWaves plans every opted-in namespace, in the order they migrate:
// meshwave.io/priority, then name, with the engine's own planner and the
// engine's own reading of each migration (Read): what the migration under
// way has left, without the wave in flight, or all of a new one.
// Namespaces whose input is invalid or whose target resolves to nothing
// get a plan with no waves and the problem as an exclusion of the whole
// namespace.
func PlanWaves(inputs []PlanInput, sizes WaveSizes) []NamespacePlan {
	sizes = Config{Sizes: sizes}.WithDefaults().Sizes
	var plans []NamespacePlan
	for _, in := range inputs {
		r := in.Reading
		if r == nil {
			read := Read(in.Snapshot, in.Status, in.StatusErr, Config{Sizes: sizes}, time.Time{})
			r = &read
		}
		plans = append(plans, planOf(r, sizes))
	}
	sort.SliceStable(plans, func(i, j int) bool {
		if plans[i].Priority != plans[j].Priority {
			return plans[i].Priority < plans[j].Priority
		}
		return plans[i].Namespace < plans[j].Namespace
	})
	return plans
}

// planOf plans one namespace from its reading.
func planOf(r *Reading, sizes WaveSizes) NamespacePlan {
	ns, settings := r.Snapshot.Namespace.Name, r.Settings
	plan := NamespacePlan{Namespace: ns, Priority: settings.Priority, Target: settings.Target, firstWave: 1}
	if r.Standing != StandingNew {
		plan.status, plan.undoing = r.Status, r.Undoing
	}
	if len(r.Errors) > 0 {
		plan.Excluded = []Exclusion{{Workload: "*", Reason: r.Errors[0].Error()}}
		return plan
	}
	st := &Status{Target: settings.Target, TargetRevision: r.Revision, Mode: r.modeOf(settings.Mode, r.Revision)}
	if rs := r.Status; !r.Retargeted && rs.serves(settings) && rs.TargetRevision == r.Revision && !terminal(rs.Phase) {
		st = rs
	}
	if c := r.Continuation; c != nil && st.Wave == 0 {
		// Admitted, the namespace continues the migration on record.
		st = c.Status
	}
	p := planRemaining(ns, r.records(), st, sizes)
	p.TargetRevision = r.Revision
	p.Priority, p.Target = settings.Priority, settings.Target
	p.AmbientNext = settings.Mode == ModeAmbient && !p.Ambient
	p.Waypoint = settings.Waypoint
	p.status, p.undoing, p.firstWave = plan.status, plan.undoing, 1
	if st.Wave > 0 {
		p.firstWave = st.Wave + 1
	}
	return p
}

func unresolvedTarget(ns, target string) InputError {
	if target == TargetAuto {
		return unresolvedAuto(ns)
	}
	return InputError{
		Key: AnnotationTargetRevision, Kind: "namespace", Namespace: ns, Name: ns, Value: target,
		Expected: fmt.Sprintf("an installed revision or tag (no MutatingWebhookConfiguration istio-sidecar-injector-%s or istio-revision-tag-%s exists)", target, target),
	}
}
