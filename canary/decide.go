package canary

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Input is everything a decision depends on.
type Input struct {
	Snapshot Snapshot
	// Status is the recorded status; nil when there is none or it could not
	// be read.
	Status *Status
	// StatusErr is why the recorded status could not be read (ParseStatus's
	// error): the migration is then adopted from the move records.
	StatusErr error
	// WasOptedIn is true when the namespace carried its target the last
	// time the agent decided on it: a finished migration's target removed
	// since then is recorded as Stopped, so that adding it again retries,
	// while an old status on a namespace nobody opted in takes no write.
	WasOptedIn bool
	// Refused holds the Deployments whose last move patch the apiserver
	// refused (an admission policy's 403 or 422, say), with its answer.
	Refused map[string]string
	// Verdicts are the gate results for WaveToVerify's wave, in chain
	// order; nil when they were not evaluated.
	Verdicts []Verdict
	Now      time.Time
	Config   Config
}

// EventType is a Kubernetes Event type.
type EventType string

const (
	EventNormal  EventType = "Normal"
	EventWarning EventType = "Warning"
)

// Event is a Kubernetes Event to record on the namespace or a workload.
type Event struct {
	// Workload is the ID of the workload the event is about; "" for the
	// namespace.
	Workload string
	Type     EventType
	Reason   string
	Message  string
}

// Move is one workload patch.
type Move struct {
	Workload string
	Record   MoveRecord
	Patch    []byte
	// RecordOnly is a patch that writes the move record back and leaves
	// the template alone: the workload was restarted in this wave, but its
	// record was removed.
	RecordOnly bool
}

// Decision is what to do next. The agent applies it in order: the status
// (with the paused and rollback annotations), the label, the moves, then
// the events.
type Decision struct {
	// Status is the status to write; nil when it did not change.
	Status *Status
	// Label is the istio.io/rev value to set; "" leaves it.
	Label string
	// Moves are the workload patches.
	Moves []Move
	// Evictions replace the pods of OnDelete members, one per workload at
	// a time; they go out after the moves.
	Evictions []Eviction
	// SetPaused adds meshwave.io/paused: "true": meshwave paused the
	// namespace and a person removes the annotation to resume.
	SetPaused bool
	// ClearRollback removes meshwave.io/rollback once it has been acted on.
	ClearRollback bool
	Events        []Event
	// Reverts are meshwave's changes found undone by this decision, for
	// the metric; each is also an Event and a status warning.
	Reverts []RevertSeen
	// RequeueAfter asks for another look after this long; 0 waits for a
	// change in the cluster.
	RequeueAfter time.Duration
}

// soon is the requeue for "look again as soon as the writes are visible".
const soon = 100 * time.Millisecond

// backstop is the requeue of a state that waits for the cluster to change
// (a gate's verdicts, a patch to show up): the change's own event brings
// the namespace back, and this only makes sure nothing is forgotten.
const backstop = 10 * time.Second

// Decide is the phase machine: from the recorded status, the snapshot and
// the gate verdicts it computes the next status and the writes that get
// there. It is pure: the same input gives the same decision.
func Decide(in Input) Decision {
	d := &decider{in: in, cfg: in.Config.WithDefaults(), now: in.Now, snap: in.Snapshot, ns: in.Snapshot.Namespace.Name}
	d.run()
	return d.out
}

type decider struct {
	in       Input
	cfg      Config
	now      time.Time
	snap     Snapshot
	ns       string
	settings NamespaceSettings
	st       *Status
	// inherited is the source label and revision of an unfinished
	// migration this one replaces.
	inherited *[2]string
	// resolved is the revision the target resolves to now; "" when it
	// does not resolve. keeps says whether the status keeps its own
	// revision when that differs (keepsRevision).
	resolved string
	keeps    bool
	// staleOf is the migration of a kept status of another target that
	// the records show older than the new target's migration: the status
	// is read as lost.
	staleOf string
	// rollbackTaken says this decision started the rollback a person
	// asked for.
	rollbackTaken bool
	out           Decision
	// workloads are the snapshot's, each parsed once for this decision.
	workloads workloadSet
	planned   *NamespacePlan
	planKey   string
}

func (d *decider) run() {
	prev := d.in.Status
	settings, errs := ParseNamespace(d.ns, d.snap.Namespace.Annotations)
	d.settings = settings
	if _, opted := d.snap.Namespace.Annotations[AnnotationTargetRevision]; !opted {
		d.optedOut(prev)
		return
	}
	workloads, werrs := parseWorkloads(d.snap.Workloads)
	d.workloads, errs = workloads, append(errs, werrs...)
	errs = append(errs, d.windowsMeet()...)
	d.st = prev.DeepCopy()
	// A rollback under way, or asked of a migration under way, is done
	// before another target is taken up (undoing).
	retarget := rollsBackFirst(d.st, settings)
	if retarget {
		switch newRev, ok := d.snap.Mesh.Resolve(settings.Target); {
		case ok && newRev == d.st.TargetRevision:
			// The same revision named another way: the same migration.
			d.st.Target, retarget = settings.Target, false
		case ok && d.newerOnRecord(newRev, d.st):
			// A stale copy: the new target's migration is under way or
			// done, and its records are what to go by, as if the status
			// were lost (adoptIfNeeded).
			retarget, d.staleOf = false, d.st.MigrationID()
		}
	}
	if d.st == nil || d.st.Target != settings.Target && !retarget || d.st.Phase == PhaseStopped {
		d.st = d.freshStatus(prev, settings.Target)
	}
	// Set again below while a wave waits for its window.
	d.st.NextWindow = nil
	rev, resolved := d.snap.Mesh.Resolve(settings.Target)
	if len(errs) == 0 && !resolved {
		errs = append(errs, unresolvedTarget(d.ns, settings.Target))
	}
	if retarget && d.st.TargetRevision != "" {
		// Its records are of the revision it went to, whatever the
		// namespace's target names now.
		rev = d.st.TargetRevision
		defer func() {
			// Said with each status it writes meanwhile.
			if d.out.Status != nil {
				d.event("", EventNormal, "TargetChangedDuringRollback", fmt.Sprintf("%s is now the target; the rollback of the migration to %s finishes first", settings.Target, d.st.Target))
			}
		}()
	}
	adopted := false
	if resolved {
		keeps := keepsRevision(d.st, d.settings)
		if d.st.TargetRevision != "" && d.st.TargetRevision != rev && !keeps {
			// A tag was repointed mid-way: this is a migration to somewhere else.
			d.event("", EventWarning, "TargetChanged", fmt.Sprintf("%s now resolves to %s instead of %s; starting over", settings.Target, rev, d.st.TargetRevision))
			d.st = d.freshStatus(prev, settings.Target)
		}
		d.resolved, d.keeps = rev, keeps
		if !keeps || d.st.TargetRevision == "" {
			// A migration that ended, or is being undone, keeps the
			// revision it went to: its records are of that revision's
			// migration.
			d.st.TargetRevision = rev
		}
		adopted = d.adoptIfNeeded()
		if d.inherited == nil && d.st.Wave == 0 && d.st.SourceRevision != "" && !d.st.keepsRevision() {
			// The source of an unfinished migration this one replaced,
			// kept while it waited to start (freshStatus).
			d.inherited = &[2]string{d.st.SourceLabel, d.st.SourceRevision}
		}
	}
	if len(errs) > 0 {
		if d.st.Wave > 0 && d.st.Phase == PhaseBlocked {
			// Blocked half-way, meshwave still keeps its label: a
			// revert is counted as outside a block, or the fight with a
			// self-heal would never end.
			d.labelReverted()
		}
		d.blockInvalid(prev, errs)
		d.summarize(prev)
		return
	}
	if adopted {
		d.summarize(prev)
		return
	}
	if d.st.Wave > 0 && d.st.Phase != PhaseBlocked && d.watchReverts() {
		d.summarize(prev)
		return
	}
	if d.st.Phase == PhaseBlocked {
		d.st.Phase = d.st.BlockedPhase
		if d.st.Phase == "" {
			d.st.Phase = PhasePending
		}
		d.st.BlockedPhase, d.st.BlockedKind, d.st.Reason = "", "", ""
	}
	switch d.st.Phase {
	case PhasePending:
		d.pending()
	case PhaseMigrating, PhaseAnalyzing:
		d.migrating()
	case PhasePaused:
		d.paused()
	case PhaseRollingBack:
		d.rollingBack()
	case PhaseCompleted, PhaseRolledBack:
		d.ended()
	}
	d.summarize(prev)
}

// newerOnRecord reports whether the workloads' records show a migration
// to rev that started after st's.
func (d *decider) newerOnRecord(rev string, st *Status) bool {
	if st.StartedAt == nil {
		return false
	}
	for _, m := range migrationsOnRecord(d.workloads, rev) {
		if m.StartedAt.After(*st.StartedAt) {
			return true
		}
	}
	return false
}

// freshStart is the start time of a new migration: now, or a second later
// when a migration on record to the same target started in the same
// second, so that no two migrations share an ID.
func (d *decider) freshStart() time.Time {
	now := d.now.UTC().Truncate(time.Second)
	for _, m := range migrationsOnRecord(d.workloads, d.st.TargetRevision) {
		if m.StartedAt.Equal(now) {
			return now.Add(time.Second)
		}
	}
	return d.now
}

// freshStatus starts a new migration's status. One that replaces an
// unfinished migration to another target keeps that migration's source:
// the workloads it had not moved yet still run it, and a rollback must
// send them to a revision they ran, not to the abandoned target.
func (d *decider) freshStatus(prev *Status, target string) *Status {
	st := &Status{Phase: PhasePending, Target: target}
	if prev != nil && terminal(prev.Phase) && prev.Target == target {
		// The target was set again after the migration ended: a retry.
		// Rollbacks on record from before now are history.
		st.RetriedAt = timePtr(d.now)
	}
	if prev != nil && !prev.keepsRevision() && prev.SourceRevision != "" {
		// Half-way, or changed again before it started: the same source,
		// kept in the status until the migration starts, so that one that
		// waits first (paused, blocked, for its turn) never guesses it
		// from pods that ran the abandoned target.
		d.inherited = &[2]string{prev.SourceLabel, prev.SourceRevision}
		st.SourceLabel, st.SourceRevision = prev.SourceLabel, prev.SourceRevision
	}
	return st
}

// adoptIfNeeded replaces a status that cannot be decided from: one that
// could not be read, or one the move records contradict. It reports
// whether it did.
func (d *decider) adoptIfNeeded() bool {
	if err := d.in.StatusErr; err != nil && d.in.Status == nil {
		d.event("", EventWarning, "StatusUnreadable", err.Error()+"; rebuilding it from the Deployments' move records")
		ms := migrationsOnRecord(d.workloads, d.st.TargetRevision)
		if len(ms) == 0 {
			return false
		}
		d.adoptRecords(ms[0].current(nil), EventWarning, "StatusAdopted", "the status could not be read")
		return true
	}
	if d.in.Status == nil && d.in.StatusErr == nil || d.staleOf != "" {
		// No status at all (lost, or never written), or one of a migration
		// older than the new target's on record (newerOnRecord). Records
		// of a migration to this target mean it was under way.
		if ms := migrationsOnRecord(d.workloads, d.st.TargetRevision); len(ms) > 0 {
			why := "the namespace has no status"
			if d.staleOf != "" {
				why = fmt.Sprintf("the status is of migration %s, older than migration %s on record", d.staleOf, ms[0].ID)
			}
			d.adoptRecords(ms[0].current(nil), EventWarning, "StatusAdopted", why)
			return true
		}
		return false
	}
	if m, why := recordConflict(d.workloads, d.st, d.resolved, d.keeps); why != "" {
		d.st.TargetRevision = d.resolved
		d.adoptRecords(m, EventWarning, "StatusAdopted", "the status disagrees with the Deployments' move records: "+why)
		return true
	}
	return false
}

// optedOut handles a namespace whose target annotation is gone: an
// unfinished migration stops where it is; nothing is undone.
func (d *decider) optedOut(prev *Status) {
	if prev == nil || prev.Phase == PhaseStopped {
		return
	}
	d.st = prev.DeepCopy()
	if terminal(prev.Phase) {
		if !d.in.WasOptedIn {
			// A finished migration's status on a namespace that was not
			// opted in when meshwave last looked: an old one, left alone.
			return
		}
		// The target of a finished migration was just removed: the next
		// opt-in starts again (a retry after a rollback).
		d.st.Phase = PhaseStopped
		d.st.Reason = fmt.Sprintf("%s was removed after the migration ended %s: %s", AnnotationTargetRevision, prev.Phase, prev.Reason)
		d.event("", EventNormal, "Stopped", d.st.Reason)
		d.out.Status = d.st
		return
	}
	d.st.Phase = PhaseStopped
	d.st.BlockedPhase = ""
	d.st.NextWaveAt = nil
	if d.st.Wave == 0 {
		d.st.Reason = AnnotationTargetRevision + " was removed before the first wave; nothing was changed"
	} else {
		d.st.Reason = fmt.Sprintf("%s was removed: the migration stopped at wave %d of %d and nothing was undone", AnnotationTargetRevision, d.st.Wave, d.st.TotalWaves)
	}
	d.event("", EventNormal, "Stopped", d.st.Reason)
	d.out.Status = d.st
}

func (d *decider) blockInvalid(prev *Status, errs []InputError) {
	st := d.st
	if st.Phase != PhaseBlocked && st.Phase != PhasePending {
		st.BlockedPhase = st.Phase
	}
	st.Phase, st.BlockedKind = PhaseBlocked, BlockedInvalidInput
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	st.Reason = cut("invalid input: "+strings.Join(msgs, "; "), maxReason)
	if prev != nil && prev.Phase == PhaseBlocked && prev.Reason == st.Reason {
		return
	}
	for _, e := range errs {
		d.event(e.Workload, EventWarning, "InvalidAnnotation", e.Error())
	}
	if len(errs) > 0 && errs[0].Workload != "" {
		d.event("", EventWarning, "InvalidAnnotation", st.Reason)
	}
}

func (d *decider) blockPrecheck(reason string, retry bool) {
	st := d.st
	st.Phase, st.BlockedKind = PhaseBlocked, BlockedPrecheck
	st.Reason = "precheck failed: " + reason
	if d.in.Status == nil || d.in.Status.Reason != st.Reason {
		d.event("", EventWarning, "PrecheckFailed", reason)
	}
	if retry {
		d.requeue(d.cfg.PrecheckRetry)
	}
}

// pending runs the precheck, waits for the namespace's turn, and starts
// the first wave.
func (d *decider) pending() {
	st := d.st
	if d.settings.Rollback != RollbackNone {
		d.out.ClearRollback = true
		why := "nothing to roll back: no wave has started"
		if prev := d.in.Status; prev != nil && prev.Target != st.Target && terminal(prev.Phase) && prev.Wave > 0 {
			why = fmt.Sprintf("nothing to roll back: the migration to %s is %s, and no wave to %s has started", prev.Target, prev.Phase, st.Target)
		}
		d.event("", EventNormal, "RollbackIgnored", why)
	}
	reason, retry, source, sourceRev := d.precheck()
	if reason != "" {
		d.blockPrecheck(reason, retry)
		return
	}
	plan := d.plan()
	if plan.Remaining() == 0 && len(plan.Moved) == 0 {
		// Every injected workload already runs the target.
		d.ensureLabel(st.Target)
		st.Phase, st.Reason = PhaseCompleted, fmt.Sprintf("every injected workload already runs %s", st.TargetRevision)
		st.CompletedAt = timePtr(d.now)
		d.event("", EventNormal, "Completed", st.Reason)
		return
	}
	compat := d.compatWarnings(plan, sourceRev)
	if d.cfg.StrictPrechecks && len(compat) > 0 {
		st.Warnings = boundWarnings(compat)
		reason := "prechecks.strict: " + compat[0]
		if len(compat) > 1 {
			reason += fmt.Sprintf(" (and %d more in the status's warnings)", len(compat)-1)
		}
		d.blockPrecheck(reason, false)
		return
	}
	st.Warnings = nil
	if d.settings.Paused {
		// Paused before its first wave, it takes no slot and holds no one up.
		st.Phase, st.Reason = PhasePaused, "paused by "+AnnotationPaused+" before the first wave"
		st.PausedAt = timePtr(d.now)
		d.event("", EventNormal, "Paused", st.Reason)
		return
	}
	peers := d.snap.Peers
	if d.snap.ReadPeers != nil {
		peers = d.snap.ReadPeers()
	}
	if ok, why := Admit(Peer{Name: d.ns, Priority: d.settings.Priority, Phase: PhasePending}, peers, d.cfg.Concurrency); !ok {
		st.Phase, st.Reason = PhasePending, why
		return
	}
	if d.continueOnRecord() {
		return
	}
	if d.waitForWindow(fmt.Sprintf("the first wave of %d", len(plan.Waves))) {
		return
	}
	st.Phase, st.Reason = PhaseMigrating, ""
	st.SourceLabel, st.SourceRevision = source, sourceRev
	st.StartedAt, st.RetriedAt = timePtr(d.freshStart()), nil
	st.Warnings = d.warnings(plan, sourceRev, compat)
	d.event("", EventNormal, "MigrationStarted", fmt.Sprintf("moving %d workloads from %s to %s in %d waves", plan.Remaining(), sourceRev, st.TargetRevision, len(plan.Waves)))
	for _, w := range st.Warnings {
		d.event("", EventWarning, "PrecheckWarning", w)
	}
	for _, x := range plan.Excluded {
		if strings.HasPrefix(x.Reason, "gateway") {
			d.event(x.Workload, EventNormal, "Skipped", x.Reason+": never restarted by meshwave; migrate it after its namespace")
		}
	}
	d.startWave(d.plan())
}

// precheck returns why the migration cannot start ("" when it can),
// whether that may fix itself, and the source label and revision.
func (d *decider) precheck() (reason string, retry bool, source, sourceRev string) {
	ns := d.snap.Namespace
	if v, ok := ns.Labels[LabelInjection]; ok {
		return fmt.Sprintf("namespace carries %s=%s, which takes precedence over %s, so switching %s would move nothing; move it to %s first", LabelInjection, v, LabelRev, LabelRev, LabelRev), false, "", ""
	}
	label, ok := ns.Labels[LabelRev]
	if !ok {
		return fmt.Sprintf("namespace has no %s label; meshwave moves namespaces that select their revision with %s", LabelRev, LabelRev), false, "", ""
	}
	labelRev, ok := d.snap.Mesh.Resolve(label)
	if !ok && d.inherited == nil {
		return fmt.Sprintf("its source revision %s=%s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", LabelRev, label), true, "", ""
	}
	source, sourceRev = d.source(label, labelRev)
	if _, ok := d.snap.Mesh.Resolve(source); !ok {
		return fmt.Sprintf("its source revision %s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", source), true, "", ""
	}
	if _, ok := d.snap.Mesh.Revisions[sourceRev]; !ok {
		return fmt.Sprintf("its source revision %s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", sourceRev), true, "", ""
	}
	if rev, ok := d.snap.Mesh.Revisions[d.st.TargetRevision]; !ok || rev.ReadyIstiods == 0 {
		return fmt.Sprintf("revision %s has no Ready istiod pod (%d pods)", d.st.TargetRevision, rev.Istiods), true, "", ""
	}
	if why, _ := d.downgrade(sourceRev); why != "" {
		return why, false, "", ""
	}
	injected := false
	for _, w := range d.snap.Workloads {
		for _, p := range w.Pods {
			if p.Injected() && !p.Terminating {
				injected = true
			}
		}
	}
	if !injected {
		return fmt.Sprintf("nothing to migrate: no workload has an injected pod; %s stays %s", LabelRev, label), false, "", ""
	}
	return "", false, source, sourceRev
}

// source is what a rollback returns the namespace to: the source of an
// unfinished migration this one replaces; else the revision most pods not
// on the target run, when the label says otherwise and that revision is
// installed (the label was switched by hand, or by a migration that was
// abandoned); else the label.
func (d *decider) source(label, labelRev string) (string, string) {
	if d.inherited != nil && d.inherited[1] != d.st.TargetRevision {
		// Not when the target is now where the replaced migration came
		// from (its tag repointed back): a rollback must not go to the
		// target itself.
		return d.inherited[0], d.inherited[1]
	}
	if rev := d.podSourceRevision(); rev != "" && rev != labelRev {
		if _, ok := d.snap.Mesh.Revisions[rev]; ok {
			return rev, rev
		}
	}
	return label, labelRev
}

// podSourceRevision is the revision most injected pods run, other than the
// target.
func (d *decider) podSourceRevision() string {
	count := map[string]int{}
	for _, w := range d.snap.Workloads {
		for _, p := range w.Pods {
			if p.Injected() && p.Revision != d.st.TargetRevision {
				count[p.Revision]++
			}
		}
	}
	best := ""
	for _, rev := range slices.Sorted(maps.Keys(count)) {
		if best == "" || count[rev] > count[best] {
			best = rev
		}
	}
	return best
}

// warnings are the risks the precheck reports without blocking: the
// compatibility warnings first, then an allowed downgrade, GitOps owners,
// single replicas and gateways.
func (d *decider) warnings(plan NamespacePlan, sourceRev string, compat []string) []string {
	out := slices.Clone(compat)
	if _, note := d.downgrade(sourceRev); note != "" {
		out = append(out, note)
	}
	out = append(out, d.gitopsWarnings(plan)...)
	inPlan := map[string]bool{}
	for _, w := range plan.Waves {
		for _, p := range w {
			inPlan[p.Name] = true
		}
	}
	for _, w := range d.workloads {
		if inPlan[w.Name] && w.Replicas == 1 && !w.HasPDB {
			out = append(out, fmt.Sprintf("%s has one replica and no PodDisruptionBudget: it is unavailable while it restarts", describe(w.Name)))
		}
	}
	for _, x := range plan.Excluded {
		if strings.HasPrefix(x.Reason, "gateway") {
			out = append(out, fmt.Sprintf("%s is a %s and is skipped: once %s switches, a restarted gateway pod is injected by %s", describe(x.Workload), x.Reason, LabelRev, d.st.TargetRevision))
		}
	}
	return boundWarnings(out)
}

// boundWarnings keeps the status's warnings to maxWarnings, the last one
// counting those left out.
func boundWarnings(out []string) []string {
	if len(out) > maxWarnings {
		out = append(out[:maxWarnings-1:maxWarnings-1], fmt.Sprintf("and %d more", len(out)-maxWarnings+1))
	}
	return out
}

// plan is the namespace's plan for the current migration, without the
// workloads of the wave in flight. A decision asks for it several times;
// it is computed again only when the migration, the wave or its members
// changed in between.
func (d *decider) plan() NamespacePlan {
	names := make([]string, 0, len(d.st.Workloads))
	for _, m := range d.st.Workloads {
		names = append(names, m.Name)
	}
	key := fmt.Sprintf("%s|%s|%d|%s", d.st.TargetRevision, d.st.MigrationID(), d.st.Wave, strings.Join(names, ","))
	if d.planned != nil && d.planKey == key {
		return *d.planned
	}
	p := planRemaining(d.ns, d.workloads, d.st, d.cfg.Sizes)
	d.planned, d.planKey = &p, key
	return p
}

// planRemaining plans what a migration in status st has left: every
// workload not yet moved by it, in waves, without the members of the wave
// in flight. Both the engine and `meshwave plan` use it; sizes are filled
// in (Config.WithDefaults).
func planRemaining(ns string, set workloadSet, st *Status, sizes WaveSizes) NamespacePlan {
	p := planNamespace(ns, set, st.TargetRevision, st.MigrationID(), st.Wave, sizes)
	if len(st.Workloads) == 0 {
		return p
	}
	// A planned workload can be a member only if its meshwave.io/wave
	// value is a member's: comparing the values first spares hashing the
	// name of every workload of a large plan.
	members, values := map[string]bool{}, map[int]bool{}
	for _, m := range st.Workloads {
		members[m.Name] = true
		if w, ok := set.find(m.Name); ok {
			values[w.settings.Wave] = true
		}
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

func (d *decider) startWave(plan NamespacePlan) {
	st := d.st
	if len(plan.Waves) == 0 {
		d.markCompleted()
		return
	}
	st.Wave++
	st.WaveState = WaveVerifying
	st.Workloads = nil
	var names []string
	for _, p := range plan.Waves[0] {
		st.Workloads = append(st.Workloads, WorkloadState{Name: p.Name, State: StateMoving})
		names = append(names, p.Name)
	}
	st.WaveStartedAt, st.GatesSince = timePtr(d.now), timePtr(d.now)
	st.NextWaveAt, st.Analysis, st.Verdicts = nil, nil, nil
	st.Phase, st.Reason = PhaseMigrating, ""
	kind := ""
	if st.Wave == 1 {
		kind = " (canary)"
	}
	d.event("", EventNormal, "WaveStarted", fmt.Sprintf("wave %d/%d%s started: %s", st.Wave, st.Wave+len(plan.Waves)-1, kind, strings.Join(names, ", ")))
	d.ensureLabel(st.Target)
	d.ensureMoves()
}

// migrating drives the wave in flight.
func (d *decider) migrating() {
	st := d.st
	if d.settings.Rollback != RollbackNone {
		d.startRollback(d.settings.Rollback, "requested with "+AnnotationRollback+"="+string(d.settings.Rollback))
		return
	}
	switch st.WaveState {
	case WavePassed:
		d.betweenWaves()
	case WaveVerifying:
		if d.ensureMoves() {
			return
		}
		d.judge()
	}
}

func (d *decider) ensureLabel(value string) {
	if value != "" && d.snap.Namespace.Labels[LabelRev] != value {
		d.out.Label = value
	}
}

// ensureMoves issues the patch of every member of the wave that has no
// record of this move yet: after a restart of the agent between the status
// write and the patches, exactly the missing ones are sent. A member that
// now carries meshwave.io/skip is left where it is; one that is paused, or
// whose patch the apiserver refused, fails the wave at once. It reports
// whether it decided anything.
func (d *decider) ensureMoves() bool {
	st := d.st
	kept := st.Workloads[:0]
	issued, held := false, false
	var failed []WorkloadState
	var reasons, reverted []string
	for _, m := range st.Workloads {
		p, ok := d.workloads.find(m.Name)
		if !ok {
			d.event("", EventWarning, "WorkloadGone", fmt.Sprintf("%s left wave %d: it no longer exists", describe(m.Name), st.Wave))
			continue
		}
		w := *p.Workload
		if m.State == StateMoving || m.State == StateFailed {
			if p.settings.Skip {
				m.State, m.Reason = StateSkipped, AnnotationSkip+" was set during wave "+fmt.Sprint(st.Wave)+": left where it is"
				d.event(w.Name, EventNormal, "Skipped", m.Reason)
				d.markOutcome(p, OutcomeSkipped)
			}
		}
		kept = append(kept, m)
		if m.State == StateFailed && d.policy() == PolicyContinue {
			d.markOutcome(p, OutcomeFailed) // once; again if the last one did not land
		}
		if m.State != StateMoving {
			continue
		}
		// A forward move of this migration, in whatever wave its record
		// names, is never made twice.
		moved := p.movedIn(st.MigrationID()) != nil
		switch answer, refused := d.in.Refused[w.Name]; {
		case w.Paused:
			why := fmt.Sprintf("%s is paused (spec.paused): it does not roll out", w.Name)
			failed, reasons = append(failed, WorkloadState{Name: w.Name, State: StateFailed, Reason: why}), append(reasons, why)
		case refused && !moved:
			why := fmt.Sprintf("the apiserver refused to restart %s: %s", w.Name, answer)
			failed, reasons = append(failed, WorkloadState{Name: w.Name, State: StateFailed, Reason: why}), append(reasons, why)
		case !moved && d.noControlPlane() != "":
			held = true
		case !moved && restartedSince(w, st.WaveStartedAt) && !recordSince(w, st.WaveStartedAt) && !explainsTemplateStamp(w):
			// Its record is gone, but its template shows a restart after
			// the wave started, onto the label the wave set: the record is
			// written back; the workload is not restarted again.
			stamp := w.TemplateAnnotations[AnnotationRestartedAt]
			at, _ := time.Parse(time.RFC3339, stamp)
			rec := MoveRecord{Revision: st.TargetRevision, From: st.SourceRevision, SourceLabel: st.sourceLabelOnRecord(), Wave: st.Wave, At: at, Migration: st.MigrationID()}
			d.out.Moves = append(d.out.Moves, Move{Workload: w.Name, Record: rec, Patch: RecordPatch(w, rec), RecordOnly: true})
			d.event(w.Name, EventWarning, "MoveRecordRestored", fmt.Sprintf("%s had no readable %s record of wave %d, but its template was restarted at %s, after the wave started: the record is written back, and %s is not restarted again", w.Name, AnnotationMove, st.Wave, stamp, w.Name))
			issued = true
		case !moved && memberReverted(w, st.WaveStartedAt):
			if again, ok := d.moveAgain(w); ok {
				issued = issued || again
				continue
			}
			reverted = append(reverted, d.memberRevertReported(w))
		case !moved:
			rec := MoveRecord{Revision: st.TargetRevision, From: st.SourceRevision, SourceLabel: st.sourceLabelOnRecord(), Wave: st.Wave, At: d.now, Migration: st.MigrationID()}
			d.addMove(w, rec, fmt.Sprintf("moving to %s in wave %d", st.TargetRevision, st.Wave))
			issued = true
		}
	}
	st.Workloads = kept
	if len(reverted) > 0 && len(failed) == 0 {
		d.out.Moves, d.out.Events = nil, withoutRestarts(d.out.Events)
		d.pause(fmt.Sprintf("wave %d paused: %s", st.Wave, strings.Join(reverted, "; ")))
		return true
	}
	if held && len(failed) == 0 {
		d.out.Moves, d.out.Events = nil, withoutRestarts(d.out.Events)
		d.pause(fmt.Sprintf("wave %d held before its restarts: %s", st.Wave, d.noControlPlane()))
		return true
	}
	if len(failed) > 0 {
		d.out.Moves, d.out.Events = nil, withoutRestarts(d.out.Events)
		d.waveFailed(Verdict{Gate: gateRestart, Result: ResultFail, Reason: strings.Join(reasons, "; "), Failed: failed, At: d.now})
		return true
	}
	if d.countMembers(StateMoving) == 0 && st.WaveState == WaveVerifying {
		d.wavePassed()
		return true
	}
	return issued
}

// gateRestart names the step that restarts a wave's workloads, in the
// verdicts and failures it causes.
const gateRestart = "restart"

// withoutRestarts drops the events of moves that are not sent.
func withoutRestarts(events []Event) []Event {
	var out []Event
	for _, e := range events {
		if e.Reason != "Restarted" && e.Reason != "MoveRecordRestored" {
			out = append(out, e)
		}
	}
	return out
}

// outcomesPending sends the outcome of every member that failed (under
// Continue) or was skipped out of the wave whose record does not carry it
// yet, and reports whether there was any.
func (d *decider) outcomesPending() bool {
	pending := false
	for _, m := range d.st.Workloads {
		w, ok := d.workloads.find(m.Name)
		if !ok {
			continue
		}
		outcome := ""
		switch {
		case m.State == StateFailed && d.policy() == PolicyContinue:
			outcome = OutcomeFailed
		case m.State == StateSkipped:
			outcome = OutcomeSkipped
		default:
			continue
		}
		if r := w.forwardIn(d.st.MigrationID()); r != nil && r.Outcome == "" {
			d.markOutcome(w, outcome)
			pending = true
		}
	}
	return pending
}

// markOutcome writes on w's forward record of this migration that it did
// not pass its wave (Failed, Skipped), in a patch that restarts nothing,
// so that what is counted as moved never rests on the status alone.
func (d *decider) markOutcome(w parsedWorkload, outcome string) {
	fwd := w.forwardIn(d.st.MigrationID())
	if fwd == nil || fwd.Outcome != "" {
		return
	}
	for _, m := range d.out.Moves {
		if m.Workload == w.Name {
			return
		}
	}
	r := *fwd
	r.Outcome = outcome
	d.out.Moves = append(d.out.Moves, Move{Workload: w.Name, Record: r, Patch: RecordPatch(*w.Workload, r), RecordOnly: true})
}

func (d *decider) addMove(w Workload, rec MoveRecord, message string) {
	rec = withStamp(w, rec)
	patch := MovePatch(w, PersistedSettings(w, d.cfg.PersistAnnotations), rec)
	d.out.Moves = append(d.out.Moves, Move{Workload: w.Name, Record: rec, Patch: patch})
	d.event(w.Name, EventNormal, "Restarted", message)
}

// moving are the wave's members still moving that the snapshot holds, in
// status order: not those that failed or were skipped out of the wave.
func (d *decider) moving() []parsedWorkload {
	var out []parsedWorkload
	for _, m := range d.st.Workloads {
		if w, ok := d.workloads.find(m.Name); ok && m.State == StateMoving {
			out = append(out, w)
		}
	}
	return out
}

// judge applies the gate verdicts to the wave.
func (d *decider) judge() {
	st := d.st
	verdicts := d.in.Verdicts
	if verdicts == nil {
		d.requeue(backstop)
		return
	}
	v, notPassed := FirstNotPassed(verdicts)
	if !notPassed || v.Analysis {
		// Every gate before the metric checks passed: the wave is up, and
		// its bake time counts from the first time that is seen. Those
		// gates' verdicts are kept, with their numbers.
		if a := d.analysisState(); a.ReadyAt == nil {
			a.ReadyAt = timePtr(d.now)
			var ready []Verdict
			for _, x := range verdicts {
				if !x.Analysis {
					ready = append(ready, x)
				}
			}
			st.Verdicts = trimVerdicts(ready)
		}
	}
	if st.Analysis != nil && st.Analysis.ReadyAt != nil {
		st.Phase = PhaseAnalyzing
	} else {
		st.Phase = PhaseMigrating
	}
	verdicts = carryForward(verdicts, st.Verdicts)
	d.recordChecks(verdicts)
	if notPassed && v.Result == ResultPending && !v.Checked {
		// Progress (a rollout under way, a bake time running) is not
		// written: it would cost a status write per pod that becomes
		// ready, and the outcome is what people read. An OnDelete member
		// rolls out only as its pods are evicted.
		d.evictions(d.moving(), st.TargetRevision, false)
		d.requeue(v.RetryAfter)
		return
	}
	st.Verdicts = trimVerdicts(verdicts)
	if !notPassed {
		d.resetInconclusive()
		if hasAnalysis(verdicts) {
			a := d.analysisState()
			a.ConsecutivePasses++
			if a.ConsecutivePasses < d.cfg.RequiredPasses {
				d.requeue(d.cfg.AnalysisInterval)
				return
			}
		}
		d.wavePassed()
		return
	}
	if v.Analysis && v.Result != ResultPending {
		d.analysisState().ConsecutivePasses = 0
	}
	switch v.Result {
	case ResultPending:
		d.requeue(v.RetryAfter)
	case ResultInconclusive:
		a := d.analysisState()
		a.Inconclusive++
		if a.Inconclusive >= d.cfg.InconclusiveLimit {
			st.WaveState = WaveFailed
			d.pause(fmt.Sprintf("wave %d paused: %s inconclusive %d times: %s", st.Wave, v.Gate, a.Inconclusive, v.Reason))
			return
		}
		d.requeue(v.RetryAfter)
	case ResultFail:
		d.resetInconclusive()
		d.waveFailed(v)
	}
}

// recordChecks remembers when each gate was first reached and when each
// outside system was last asked.
func (d *decider) recordChecks(verdicts []Verdict) {
	for _, v := range verdicts {
		a := d.analysisState()
		if _, ok := a.Started[v.Gate]; !ok && !v.Deferred {
			if a.Started == nil {
				a.Started = map[string]time.Time{}
			}
			a.Started[v.Gate] = d.now
		}
		if !v.Checked {
			continue
		}
		if a.Checked == nil {
			a.Checked = map[string]time.Time{}
		}
		a.Checked[v.Gate] = d.now
	}
}

// carryForward replaces a deferred pass (a gate not asked again) with the
// verdict it gave when it was asked, so the status keeps its numbers.
func carryForward(verdicts, previous []Verdict) []Verdict {
	out := make([]Verdict, len(verdicts))
	for i, v := range verdicts {
		out[i] = v
		if v.Result != ResultPass || !v.Deferred {
			continue
		}
		for _, p := range previous {
			if p.Gate == v.Gate && p.Result == ResultPass {
				out[i] = p
			}
		}
	}
	return out
}

func hasAnalysis(vs []Verdict) bool {
	for _, v := range vs {
		if v.Analysis {
			return true
		}
	}
	return false
}

func (d *decider) analysisState() *AnalysisState {
	if d.st.Analysis == nil {
		d.st.Analysis = &AnalysisState{}
	}
	return d.st.Analysis
}

func (d *decider) resetInconclusive() {
	if d.st.Analysis != nil {
		d.st.Analysis.Inconclusive = 0
	}
}

func (d *decider) policy() FailurePolicy {
	if d.settings.FailurePolicy != "" {
		return d.settings.FailurePolicy
	}
	return d.cfg.FailurePolicy
}

// waveFailed records the failed workloads and applies the failure policy.
func (d *decider) waveFailed(v Verdict) {
	st := d.st
	failed := map[string]string{}
	for _, f := range v.Failed {
		failed[f.Name] = f.Reason
	}
	if len(failed) == 0 {
		for _, m := range st.Workloads {
			if m.State == StateMoving {
				failed[m.Name] = v.Reason
			}
		}
	}
	for i, m := range st.Workloads {
		reason, ok := failed[m.Name]
		if !ok || m.State != StateMoving {
			continue
		}
		st.Workloads[i].State, st.Workloads[i].Reason = StateFailed, reason
		st.addFailure(Failure{Workload: m.Name, Wave: st.Wave, Gate: v.Gate, Reason: reason, At: d.now})
		d.event(m.Name, EventWarning, "WorkloadFailed", fmt.Sprintf("wave %d, %s: %s", st.Wave, v.Gate, reason))
	}
	summary := fmt.Sprintf("wave %d failed: %s", st.Wave, v)
	switch d.policy() {
	case PolicyRollbackWave:
		d.startRollback(RollbackWave, summary)
	case PolicyPause:
		st.WaveState = WaveFailed
		d.pause(summary + "; paused by failure policy Pause")
	case PolicyContinue:
		total := d.eligible()
		nFailed := st.PastFailed + d.countMembers(StateFailed)
		pct := 100 * float64(nFailed) / float64(max(total, 1))
		if pct > d.cfg.MaxFailedPercent {
			st.WaveState = WaveFailed
			d.pause(fmt.Sprintf("%s; %d of %d workloads failed (%.0f%%), over maxFailedPercent %g", summary, nFailed, total, pct, d.cfg.MaxFailedPercent))
			return
		}
		d.event("", EventWarning, "FailureTolerated", fmt.Sprintf("%s; %d of %d workloads failed (%.0f%%), within maxFailedPercent %g: continuing", summary, nFailed, total, pct, d.cfg.MaxFailedPercent))
		for _, m := range st.Workloads {
			if w, ok := d.workloads.find(m.Name); ok && m.State == StateFailed {
				d.markOutcome(w, OutcomeFailed)
			}
		}
		if d.countMembers(StateMoving) == 0 {
			d.wavePassed()
			return
		}
		d.requeue(soon)
	}
}

func (d *decider) countMembers(state string) int {
	n := 0
	for _, m := range d.st.Workloads {
		if m.State == state {
			n++
		}
	}
	return n
}

// eligible counts the workloads the migration concerns: those moved or to
// move, and the wave's members not yet recorded as moved.
func (d *decider) eligible() int {
	p := d.plan()
	n := p.Remaining() + len(p.Moved) + len(p.Failed)
	moved := map[string]bool{}
	for _, name := range append(p.Moved, p.Failed...) {
		moved[name] = true
	}
	for _, m := range d.st.Workloads {
		if !moved[m.Name] {
			n++
		}
	}
	return n
}

func (d *decider) wavePassed() {
	if d.outcomesPending() {
		// A member that failed (and was tolerated) or was skipped out of
		// the wave must say so on its record before the wave is left
		// behind: afterwards only the record remembers it.
		d.requeue(soon)
		return
	}
	st := d.st
	var moved []string
	for i, m := range st.Workloads {
		if m.State == StateMoving {
			st.Workloads[i].State, st.Workloads[i].Reason = StateMoved, ""
			moved = append(moved, m.Name)
		}
	}
	st.WaveState = WavePassed
	st.Phase = PhaseMigrating
	gates := make([]string, 0, len(st.Verdicts))
	for _, v := range st.Verdicts {
		gates = append(gates, v.Gate)
	}
	msg := fmt.Sprintf("wave %d passed", st.Wave)
	if len(gates) > 0 {
		msg += " (" + strings.Join(gates, ", ") + ")"
	}
	if len(moved) > 0 {
		msg += ": moved " + strings.Join(moved, ", ")
	}
	d.event("", EventNormal, "WavePassed", msg)
	if d.plan().Remaining() == 0 {
		d.markCompleted()
		return
	}
	st.NextWaveAt = timePtr(d.now.Add(d.cfg.DelayBetweenWaves))
	d.betweenWaves()
}

func (d *decider) betweenWaves() {
	st := d.st
	if d.settings.Paused {
		d.pauseByPerson(fmt.Sprintf("paused by %s after wave %d", AnnotationPaused, st.Wave))
		return
	}
	if st.NextWaveAt != nil && d.now.Before(*st.NextWaveAt) {
		d.requeue(st.NextWaveAt.Sub(d.now))
		return
	}
	if why := d.noControlPlane(); why != "" && d.plan().Remaining() > 0 {
		d.pause(fmt.Sprintf("wave %d not started: %s", st.Wave+1, why))
		return
	}
	if d.plan().Remaining() > 0 && d.waitForWindow(fmt.Sprintf("wave %d", st.Wave+1)) {
		return
	}
	if st.Wave >= maxWaves && d.plan().Remaining() > 0 {
		// A migration adopted from a move record of the last wave a status
		// holds (a record meshwave never wrote: no migration has a million
		// waves) cannot go on, and must not be tried again and again.
		d.pause(fmt.Sprintf("wave %d not started: a status holds at most %d waves, and the move records put this migration at wave %d; check the workloads' %s records", st.Wave+1, maxWaves, st.Wave, AnnotationMove))
		return
	}
	// The previous wave is done: its failures stay counted, and the plan
	// no longer needs to leave its members out.
	st.PastFailed += d.countMembers(StateFailed)
	st.Workloads = nil
	d.startWave(d.plan())
}

// waitForWindow reports whether the next wave must wait for a maintenance
// window, and if so says until when: in the reason, in nextWindow, and as
// the requeue, so that the namespace is looked at again when it opens
// rather than polled. Only the start of a wave waits: a wave in flight
// finishes its gates, and a rollback runs whenever it is needed.
func (d *decider) waitForWindow(what string) bool {
	opening, ok := NextOpening(d.now, d.cfg.MaintenanceWindows, d.settings.Windows)
	if ok && !opening.After(d.now) {
		return false
	}
	st := d.st
	if !ok {
		// Only the configuration can get here: a namespace's windows that
		// never meet it are invalid input (windowsMeet).
		st.Reason = fmt.Sprintf("%s waits: no maintenance window opens within a year", what)
		d.requeue(time.Hour)
		return true
	}
	opening = opening.UTC()
	st.Reason = fmt.Sprintf("%s is waiting for the maintenance window opening at %s", what, opening.Format(time.RFC3339))
	st.NextWindow = &opening
	if prev := d.in.Status; prev == nil || prev.Reason != st.Reason {
		d.event("", EventNormal, "WaitingForWindow", st.Reason)
	}
	d.requeue(opening.Sub(d.now))
	return true
}

// windowsMeet checks that the namespace's maintenance windows meet the
// configured ones within a year: windows that narrow them to nothing
// would hold the namespace forever without saying why.
func (d *decider) windowsMeet() []InputError {
	ns := d.settings.Windows
	if len(ns) == 0 {
		return nil
	}
	if _, ok := NextOpening(d.now, d.cfg.MaintenanceWindows, ns); ok {
		return nil
	}
	expected := "windows that open within a year"
	if len(d.cfg.MaintenanceWindows) > 0 {
		expected = "windows that meet the agent's maintenanceWindows within a year (a namespace narrows them, never widens them)"
	}
	return []InputError{{Key: AnnotationMaintenanceWindow, Kind: "namespace", Namespace: d.ns, Name: d.ns,
		Value: d.snap.Namespace.Annotations[AnnotationMaintenanceWindow], Expected: expected}}
}

// noControlPlane says why nothing may move onto the target now, or "": a
// revision whose every istiod is gone or unready would leave the moved
// pods without a control plane (and its injector refuses them).
func (d *decider) noControlPlane() string {
	rev, ok := d.snap.Mesh.Revisions[d.st.TargetRevision]
	if !ok {
		return fmt.Sprintf("revision %s is no longer installed", d.st.TargetRevision)
	}
	if rev.ReadyIstiods == 0 {
		return fmt.Sprintf("revision %s has no Ready istiod pod (%d pods): nothing moves onto a revision without a control plane", d.st.TargetRevision, rev.Istiods)
	}
	return ""
}

// markCompleted ends the migration: every workload it concerns moved.
func (d *decider) markCompleted() {
	st := d.st
	st.Phase = PhaseCompleted
	st.WaveState, st.NextWaveAt, st.Analysis = "", nil, nil
	st.CompletedAt = timePtr(d.now)
	failed := map[string]bool{}
	for _, m := range st.Workloads {
		if m.State == StateFailed {
			failed[m.Name] = true
		}
	}
	st.Workloads = nil
	p := d.plan()
	for _, name := range p.Failed {
		failed[name] = true
	}
	for _, m := range d.out.Moves {
		if m.RecordOnly && m.Record.Outcome == OutcomeFailed {
			failed[m.Workload] = true
		}
	}
	moved := 0
	for _, name := range p.Moved {
		if !failed[name] {
			moved++
		}
	}
	st.PastFailed = len(failed)
	st.Reason = fmt.Sprintf("moved %d workloads to %s in %d waves", moved, st.TargetRevision, st.Wave)
	if st.PastFailed > 0 {
		st.Reason += fmt.Sprintf("; %d failed and stayed where they were", st.PastFailed)
	}
	d.event("", EventNormal, "Completed", st.Reason)
}

// pause stops the migration for a reason of meshwave's own, and sets
// meshwave.io/paused so that a person resumes it by removing that.
func (d *decider) pause(reason string) {
	st := d.st
	st.Phase, st.Reason = PhasePaused, reason
	st.PausedAt = timePtr(d.now)
	st.NextWaveAt = nil
	if !d.settings.Paused {
		d.out.SetPaused = true
		st.PausedByAgent = true
	}
	d.event("", EventWarning, "Paused", reason+"; remove "+AnnotationPaused+" to resume")
}

func (d *decider) pauseByPerson(reason string) {
	st := d.st
	st.Phase, st.Reason = PhasePaused, reason
	st.PausedAt = timePtr(d.now)
	st.NextWaveAt = nil
	d.event("", EventNormal, "Paused", reason)
}

// paused waits for meshwave.io/paused to go, then resumes: a failed wave
// is checked again with fresh timers.
func (d *decider) paused() {
	st := d.st
	if d.settings.Rollback != RollbackNone && st.Wave > 0 {
		d.resumeClock()
		scope := d.settings.Rollback
		if st.WaveState == WaveRollingBack && st.Rollback == RollbackAll {
			scope = RollbackAll // a rollback is widened, never narrowed
		}
		d.startRollback(scope, "requested with "+AnnotationRollback+"="+string(d.settings.Rollback))
		return
	}
	if d.settings.Paused {
		return
	}
	d.resumeClock()
	st.resumeLabel()
	d.event("", EventNormal, "Resumed", fmt.Sprintf("%s was removed; resuming at wave %d", AnnotationPaused, st.Wave))
	st.Reason, st.PausedByAgent = "", false
	if st.Wave == 0 {
		st.Phase = PhasePending
		d.pending()
		return
	}
	switch st.WaveState {
	case WaveFailed:
		for i, m := range st.Workloads {
			if m.State == StateFailed {
				st.Workloads[i].State, st.Workloads[i].Reason = StateMoving, ""
			}
		}
		st.WaveState = WaveVerifying
		st.GatesSince, st.Analysis = timePtr(d.now), nil
	case WaveVerifying:
		// Paused before its restarts were all made (held, or a move
		// undone): its timers start again, and a move undone and
		// reported before now may be made again.
		st.GatesSince = timePtr(d.now)
	case WaveRollingBack:
		st.Phase = PhaseRollingBack
		st.GatesSince, st.Analysis = timePtr(d.now), nil
		d.rollingBack()
		return
	case WavePassed:
		st.NextWaveAt = timePtr(d.now)
	}
	st.Phase = PhaseMigrating
	d.migrating()
}

func (d *decider) resumeClock() {
	st := d.st
	if st.PausedAt != nil {
		// A pausedAt after now (an edited status, a clock that moved) adds
		// nothing rather than a negative time.
		st.PausedSeconds += max(0, d.now.Sub(*st.PausedAt).Seconds())
		st.PausedAt = nil
	}
}

// startRollback returns the wave (or every moved workload) to the source.
func (d *decider) startRollback(scope RollbackScope, why string) {
	st := d.st
	d.out.ClearRollback = d.settings.Rollback != RollbackNone
	d.rollbackTaken = d.out.ClearRollback
	st.Phase, st.Rollback, st.WaveState = PhaseRollingBack, scope, WaveRollingBack
	st.Reason = why
	st.GatesSince, st.NextWaveAt, st.Analysis = timePtr(d.now), nil, nil
	what := fmt.Sprintf("wave %d", st.Wave)
	if scope == RollbackAll {
		what = "every moved workload"
	}
	d.event("", EventWarning, "RollingBack", fmt.Sprintf("rolling back %s to %s: %s", what, st.SourceLabel, why))
	d.rollingBack()
}

// rollbackMembers are the workloads a rollback returns: with scope wave,
// those moved in the current wave; with scope all, every workload this
// migration moved. Both come from the Deployments' records, so the list
// needs no room in the status.
func (d *decider) rollbackMembers() []parsedWorkload {
	return rollbackMembers(d.workloads, d.st)
}

// RollbackMembers lists the workloads a rollback in progress returns, in
// name order. A workload that carries meshwave.io/skip, or is paused, is
// left where it is: meshwave never touches the one, and the other would
// not roll.
func RollbackMembers(snap Snapshot, st *Status) []Workload {
	set, _ := parseWorkloads(snap.Workloads)
	var out []Workload
	for _, w := range rollbackMembers(set, st) {
		out = append(out, *w.Workload)
	}
	return out
}

// rollbackMembers is RollbackMembers over workloads already parsed.
func rollbackMembers(set workloadSet, st *Status) []parsedWorkload {
	var out []parsedWorkload
	id := st.MigrationID()
	for _, w := range set {
		r := w.record
		if r == nil || r.Migration != id || id == "" {
			continue
		}
		if w.settings.Skip || w.Paused {
			continue
		}
		// A wave's rollback also returns moves recorded in later waves:
		// none of them was judged.
		if st.Rollback == RollbackAll || r.Wave >= st.Wave {
			out = append(out, w)
		}
	}
	return out
}

func (d *decider) rollingBack() {
	st := d.st
	if req := d.settings.Rollback; req != RollbackNone && !d.rollbackTaken {
		// A request made while a rollback runs is taken at once: one for
		// everything widens a wave's rollback; any other is already done.
		d.out.ClearRollback = true
		if req == RollbackAll && st.Rollback == RollbackWave {
			st.Rollback = RollbackAll
			st.Reason = "requested with " + AnnotationRollback + "=all during a rollback of wave " + fmt.Sprint(st.Wave) + ": " + st.Reason
			d.event("", EventWarning, "RollingBack", fmt.Sprintf("rolling back every moved workload to %s: requested with %s=all", st.SourceLabel, AnnotationRollback))
		} else {
			d.event("", EventNormal, "RollbackIgnored", fmt.Sprintf("a rollback of %s is already in progress", st.Rollback))
		}
	}
	members := d.rollbackMembers()
	issued := false
	// A member's reason says how far the eviction of its pods got.
	progress := map[string]string{}
	for _, m := range st.Workloads {
		progress[m.Name] = m.Reason
	}
	st.Workloads = nil
	var refused []string
	for _, w := range members {
		if len(st.Workloads) < maxListed {
			st.Workloads = append(st.Workloads, WorkloadState{Name: w.Name, State: StateRolledBack, Reason: progress[w.Name]})
		}
		fwd := w.forwardIn(st.MigrationID())
		if fwd == nil {
			continue // already rolled back
		}
		if answer, ok := d.in.Refused[w.Name]; ok {
			refused = append(refused, fmt.Sprintf("the apiserver refused to restart %s: %s", w.Name, answer))
			continue
		}
		rec := MoveRecord{Revision: st.SourceRevision, From: st.TargetRevision, SourceLabel: st.sourceLabelOnRecord(), Wave: fwd.Wave, At: d.now, Rollback: true, Migration: st.MigrationID()}
		if st.Rollback == RollbackAll {
			rec.Scope = RollbackAll
		}
		d.addMove(*w.Workload, rec, fmt.Sprintf("rolling back to %s", st.SourceRevision))
		issued = true
	}
	if len(refused) > 0 {
		d.pause(fmt.Sprintf("rollback to %s did not complete: %s", st.SourceRevision, strings.Join(refused, "; ")))
		return
	}
	if issued {
		return
	}
	if len(members) == 0 {
		// Nothing of this migration is left to return: every member is
		// gone, skipped or paused.
		st.Phase, st.WaveState = PhaseRolledBack, ""
		st.CompletedAt = timePtr(d.now)
		st.Reason = fmt.Sprintf("rolled back 0 workloads to %s (none of this migration's workloads is left to return): %s", st.SourceRevision, st.Reason)
		d.event("", EventWarning, "RolledBack", st.Reason)
		return
	}
	verdicts := d.in.Verdicts
	if verdicts == nil {
		d.requeue(backstop)
		return
	}
	v, notPassed := FirstNotPassed(verdicts)
	if notPassed && v.Result == ResultPending {
		d.evictions(members, st.SourceRevision, true)
		d.requeue(v.RetryAfter)
		return
	}
	// The status keeps the verdicts that led to the rollback; the
	// rollback's own checks show only when they fail.
	if notPassed {
		st.Verdicts = trimVerdicts(verdicts)
	}
	if !notPassed {
		st.Phase = PhaseRolledBack
		st.WaveState = ""
		for i := range st.Workloads {
			st.Workloads[i].Reason = ""
		}
		st.CompletedAt = timePtr(d.now)
		st.Reason = fmt.Sprintf("rolled back %d workloads to %s: %s", len(members), st.SourceRevision, st.Reason)
		d.event("", EventWarning, "RolledBack", st.Reason)
		return
	}
	switch v.Result {
	case ResultFail:
		d.pause(fmt.Sprintf("rollback to %s did not complete: %s", st.SourceRevision, v))
	case ResultInconclusive:
		a := d.analysisState()
		a.Inconclusive++
		if a.Inconclusive >= d.cfg.InconclusiveLimit {
			d.pause(fmt.Sprintf("rollback paused: %s inconclusive %d times: %s", v.Gate, a.Inconclusive, v.Reason))
			return
		}
		d.requeue(v.RetryAfter)
	default:
		d.requeue(v.RetryAfter)
	}
}

// ended handles the terminal phases: a rollback can still be asked of a
// completed migration.
func (d *decider) ended() {
	if d.settings.Rollback == RollbackNone {
		return
	}
	if d.st.Phase == PhaseCompleted && d.st.Wave > 0 {
		d.startRollback(d.settings.Rollback, "requested with "+AnnotationRollback+"="+string(d.settings.Rollback)+" after completion")
		return
	}
	if d.st.Phase == PhaseRolledBack && d.st.Rollback != RollbackAll && d.settings.Rollback == RollbackAll && d.anyMoved() {
		// A wave's rollback left the earlier waves on the target: all
		// returns them too.
		d.startRollback(RollbackAll, "requested with "+AnnotationRollback+"=all after a rollback of wave "+fmt.Sprint(d.st.Wave))
		return
	}
	d.out.ClearRollback = true
	d.event("", EventNormal, "RollbackIgnored", "nothing to roll back: the namespace is "+string(d.st.Phase))
}

// anyMoved reports whether any workload still carries a forward move of
// this migration.
func (d *decider) anyMoved() bool {
	for _, w := range d.workloads {
		if w.forwardIn(d.st.MigrationID()) != nil {
			return true
		}
	}
	return false
}

// maxListed bounds the workload list of a rollback of everything.
const maxListed = 20

// ownedLabel is the istio.io/rev value the namespace must carry while
// meshwave owns it, or "" when it owns no label: before the first wave,
// while blocked before it, and once opted out. A label a person removed or changed
// is put back.
func (s *Status) ownedLabel() string {
	if s.Phase == PhaseBlocked && s.BlockedPhase != "" && s.BlockedPhase != PhaseBlocked {
		// Blocked half-way: the migration still owns what it owned.
		held := *s
		held.Phase = s.BlockedPhase
		return held.ownedLabel()
	}
	switch {
	case s.Phase == PhaseRollingBack || s.Phase == PhaseRolledBack || (s.Phase == PhasePaused && s.WaveState == WaveRollingBack):
		return s.SourceLabel
	case s.Phase == PhaseCompleted:
		return s.Target
	case s.Wave > 0 && (s.Phase == PhaseMigrating || s.Phase == PhaseAnalyzing || s.Phase == PhasePaused):
		return s.Target
	}
	return ""
}

// summarize fills in the counts and totals and decides whether the status
// changed.
func (d *decider) summarize(prev *Status) {
	st := d.st
	st.boundText()
	if !st.labelHeld() {
		d.ensureLabel(st.ownedLabel())
	}
	p := d.plan()
	var c Counts
	kinds := map[Kind]*Counts{}
	// count adds one workload to the namespace's counts and its kind's.
	count := func(id string, field func(*Counts) *int) {
		*field(&c)++
		k := kindOfID(id)
		kc := kinds[k]
		if kc == nil {
			kc = &Counts{}
			kinds[k] = kc
		}
		*field(kc)++
	}
	pending := func(c *Counts) *int { return &c.Pending }
	moving := func(c *Counts) *int { return &c.Moving }
	moved := func(c *Counts) *int { return &c.Moved }
	failedOnes := func(c *Counts) *int { return &c.Failed }
	skipped := func(c *Counts) *int { return &c.Skipped }
	rolledBack := func(c *Counts) *int { return &c.RolledBack }
	for _, x := range p.Excluded {
		count(x.Workload, skipped)
	}
	for _, w := range p.Waves {
		for _, m := range w {
			count(m.Name, pending)
		}
	}
	inWave := map[string]bool{}
	if st.Phase != PhaseRollingBack && st.Phase != PhaseRolledBack {
		for _, m := range st.Workloads {
			inWave[m.Name] = true
			switch m.State {
			case StateMoving:
				count(m.Name, moving)
			case StateMoved:
				count(m.Name, moved)
			case StateFailed:
				count(m.Name, failedOnes)
			}
		}
	}
	// Earlier waves' failures: their records say so, or will once this
	// decision's record patches land.
	failed := map[string]bool{}
	for _, name := range p.Failed {
		failed[name] = true
	}
	for _, m := range d.out.Moves {
		if m.RecordOnly && m.Record.Outcome == OutcomeFailed {
			failed[m.Workload] = true
		}
	}
	returning := map[string]bool{}
	if st.Phase == PhaseRollingBack || (st.Phase == PhasePaused && st.WaveState == WaveRollingBack) {
		for _, w := range d.rollbackMembers() {
			if w.forwardIn(st.MigrationID()) != nil {
				returning[w.Name] = true
				count(w.Name, moving) // on its way back
			}
		}
	}
	for _, name := range p.Moved {
		if !inWave[name] && !failed[name] && !returning[name] {
			count(name, moved)
		}
	}
	if st.Phase != PhaseCompleted {
		st.PastFailed = 0
		for name := range failed {
			if !inWave[name] {
				st.PastFailed++
				count(name, failedOnes)
			}
		}
	} else {
		c.Failed += st.PastFailed
	}
	if st.Phase == PhaseRollingBack || st.Phase == PhaseRolledBack {
		for _, w := range d.workloads {
			if w.rolledBackIn(st.MigrationID()) != nil {
				count(w.Name, rolledBack)
			}
		}
	}
	c.Total = c.Pending + c.Moving + c.Moved + c.Failed + c.Skipped + c.RolledBack
	st.Kinds = nil
	if len(kinds) > 1 || kinds[KindDeployment] == nil && len(kinds) == 1 {
		st.Kinds = map[Kind]Counts{}
		for k, kc := range kinds {
			kc.Total = kc.Pending + kc.Moving + kc.Moved + kc.Failed + kc.Skipped + kc.RolledBack
			st.Kinds[k] = *kc
		}
	}
	st.Counts = c
	st.Skipped = p.Excluded
	if len(st.Skipped) > maxSkipped {
		st.Skipped = st.Skipped[:maxSkipped]
	}
	// What meshwave never restarts is brought up to date whenever the
	// status is written, and never causes a write of its own: a CronJob
	// that runs every minute must not cost a status write each time.
	fresh := unmovable(d.snap.Unmovable, st.TargetRevision, d.snap.Namespace.Labels[LabelRev])
	st.Unmovable = nil
	if prev != nil {
		st.Unmovable = prev.Unmovable
	}
	switch {
	case st.Wave == 0:
		st.TotalWaves = len(p.Waves)
	case st.Phase == PhaseCompleted || st.Phase == PhaseRolledBack || st.Phase == PhaseStopped:
		st.TotalWaves = st.Wave
	default:
		// Never past the bound a status reads back within: only a record
		// meshwave did not write names a wave near it (betweenWaves).
		st.TotalWaves = min(st.Wave+len(p.Waves), maxWaves)
	}
	if !st.Equal(prev) {
		st.Unmovable = fresh
		d.out.Status = st
	}
	sort.SliceStable(d.out.Moves, func(i, j int) bool { return d.out.Moves[i].Workload < d.out.Moves[j].Workload })
}

func (d *decider) event(deployment string, typ EventType, reason, message string) {
	d.out.Events = append(d.out.Events, Event{Workload: deployment, Type: typ, Reason: reason, Message: cut(message, maxEventMessage)})
}

// Bounds of the text meshwave writes: an Event's message, and the status
// reason (annotations share 256 KiB per object).
const (
	maxEventMessage = 1024
	maxReason       = 4096
)

// Bounds of the other free text in the status: a wave of maxMembers
// members with its failures, verdicts, exclusions and warnings stays well
// under the 256 KiB an object's annotations share, whatever the apiserver
// or a check answered.
const (
	maxItemReason = 200
	maxNote       = 512
)

// boundText cuts every free-text field of the status to its bound.
func (s *Status) boundText() {
	s.Reason = cut(s.Reason, maxReason)
	for i := range s.Workloads {
		s.Workloads[i].Reason = cut(s.Workloads[i].Reason, maxItemReason)
	}
	for i := range s.Failures {
		s.Failures[i].Reason = cut(s.Failures[i].Reason, maxNote)
	}
	for i := range s.Skipped {
		s.Skipped[i].Reason = cut(s.Skipped[i].Reason, maxItemReason)
	}
	for i := range s.Unmovable {
		s.Unmovable[i].Reason = cut(s.Unmovable[i].Reason, maxItemReason)
	}
	for i := range s.Warnings {
		s.Warnings[i] = cut(s.Warnings[i], maxNote)
	}
	for i := range s.Verdicts {
		v := &s.Verdicts[i]
		v.Reason = cut(v.Reason, maxNote)
		v.Failed = append([]WorkloadState(nil), v.Failed...) // the gates' own verdicts stay whole
		for j := range v.Failed {
			v.Failed[j].Reason = cut(v.Failed[j].Reason, maxItemReason)
		}
	}
}

// cut shortens s to at most n bytes, on a rune boundary, saying how long it
// was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := fmt.Sprintf("… (%d bytes)", len(s))
	end := n - len(note)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + note
}

func (d *decider) requeue(after time.Duration) {
	if after <= 0 {
		after = soon
	}
	if d.out.RequeueAfter == 0 || after < d.out.RequeueAfter {
		d.out.RequeueAfter = after
	}
}

// Admit decides whether a namespace may start migrating now: fewer than
// concurrency namespaces hold a slot, and no pending namespace that comes
// first by priority and name is waiting for the same slot.
func Admit(self Peer, peers []Peer, concurrency int) (bool, string) {
	var active, ahead []string
	for _, p := range peers {
		if p.Name == self.Name {
			continue
		}
		if p.HoldsSlot {
			active = append(active, p.Name)
			continue
		}
		if (p.Phase == PhasePending || p.Phase == "") && (p.Priority < self.Priority || (p.Priority == self.Priority && p.Name < self.Name)) {
			ahead = append(ahead, fmt.Sprintf("%s (priority %d)", p.Name, p.Priority))
		}
	}
	sort.Strings(active)
	free := concurrency - len(active)
	if free <= 0 {
		return false, fmt.Sprintf("waiting for a free slot: %d of %d in use by %s", len(active), concurrency, strings.Join(active, ", "))
	}
	if len(ahead) >= free {
		return false, fmt.Sprintf("waiting for its turn: %s go first", strings.Join(ahead, ", "))
	}
	return true, ""
}

// trimVerdicts keeps the status small: at most five measurements per
// verdict, the worst first as the gates order them.
func trimVerdicts(vs []Verdict) []Verdict {
	out := make([]Verdict, len(vs))
	for i, v := range vs {
		if len(v.Measurements) > 5 {
			v.Measurements = v.Measurements[:5]
		}
		if len(v.Failed) > 5 {
			v.Failed = v.Failed[:5]
		}
		out[i] = v
	}
	return out
}
