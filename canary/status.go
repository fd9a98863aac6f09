package canary

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
)

// Phase is where a namespace's migration stands.
type Phase string

const (
	// PhasePending: opted in, waiting for its turn.
	PhasePending Phase = "Pending"
	// PhaseBlocked: invalid input or a failed precheck; nothing is written
	// until it is fixed.
	PhaseBlocked Phase = "Blocked"
	// PhaseMigrating: a wave is restarting, rolling out or waiting for the
	// next one.
	PhaseMigrating Phase = "Migrating"
	// PhaseAnalyzing: the wave rolled out and its metrics are being checked.
	PhaseAnalyzing Phase = "Analyzing"
	// PhasePaused: no new wave starts until meshwave.io/paused is removed.
	PhasePaused Phase = "Paused"
	// PhaseRollingBack: workloads are returning to the source revision.
	PhaseRollingBack Phase = "RollingBack"
	// PhaseRolledBack: the rollback finished; nothing more happens.
	PhaseRolledBack Phase = "RolledBack"
	// PhaseCompleted: every workload runs the target revision.
	PhaseCompleted Phase = "Completed"
	// PhaseStopped: meshwave.io/target-revision was removed mid-way.
	PhaseStopped Phase = "Stopped"
)

// Phases lists every phase, for metrics that need a series per phase.
var Phases = []Phase{PhasePending, PhaseBlocked, PhaseMigrating, PhaseAnalyzing, PhasePaused,
	PhaseRollingBack, PhaseRolledBack, PhaseCompleted, PhaseStopped}

// HoldsSlot reports whether a namespace whose status is s counts against
// the concurrency limit: from its first wave until the migration ends,
// paused or blocked included, since it stopped half-way and needs a
// person before anything else moves. A namespace paused or blocked before
// its first wave holds none.
func (s *Status) HoldsSlot() bool {
	if s == nil || s.Wave == 0 {
		return false
	}
	switch s.unblockedPhase() {
	case PhaseMigrating, PhaseAnalyzing, PhasePaused, PhaseRollingBack:
		return true
	}
	return false
}

// keepsRevision reports whether s is of a migration that ended, or is
// being undone (rolled back, or blocked or paused in either), which keeps
// the revision it went to when its target (a tag) is repointed: its
// records are of that revision, a rollback returns what it moved, and
// nothing moves to the tag's new revision until the target is set again.
// A migration going forward to a repointed tag starts over instead.
func (s *Status) keepsRevision() bool {
	p := s.unblockedPhase()
	return terminal(p) || p == PhaseRollingBack || s.WaveState == WaveRollingBack
}

// keepsRevision is Status.keepsRevision, and also holds for a migration
// under way that a person asked to roll back: the rollback is done first,
// on the revision it went to, and the request is not dropped by a start
// over.
func keepsRevision(st *Status, settings NamespaceSettings) bool {
	if followsAuto(st, settings) {
		return false
	}
	return st.keepsRevision() || settings.Rollback != RollbackNone && st.Wave > 0
}

// undoing reports whether s is of a migration being rolled back, or
// paused or blocked in its rollback. Such a status stays, its target
// included, until the rollback ends, whatever target the namespace asks
// for meanwhile: the workloads it has not returned yet must not be left
// on the abandoned revision, nor the next migration take its source from
// pods half-way back.
func (s *Status) undoing() bool {
	p := s.unblockedPhase()
	return !terminal(p) && (p == PhaseRollingBack || s.WaveState == WaveRollingBack)
}

// undoing is Status.undoing, and also holds for a migration under way
// (past its first wave, not ended) that a person asked to roll back: that
// rollback is done first, and the request is not dropped by a new target
// set in the same edit.
func undoing(st *Status, settings NamespaceSettings) bool {
	if st.undoing() {
		return true
	}
	return settings.Rollback != RollbackNone && st.Wave > 0 && !terminal(st.unblockedPhase())
}

// rollsBackFirst reports whether st, of another target than the namespace
// names now, is kept until its rollback ends (undoing) rather than
// replaced by the new target's migration. (A Stopped status is terminal,
// so never undoing.)
func rollsBackFirst(st *Status, settings NamespaceSettings) bool {
	return st != nil && !st.serves(settings) && undoing(st, settings)
}

// rollingBack reports whether s is of a rollback under way, or paused or
// blocked in one.
func (s *Status) rollingBack() bool {
	return s.unblockedPhase() == PhaseRollingBack || s.WaveState == WaveRollingBack
}

// unblockedPhase is the phase the status is in, or was in when it was
// blocked.
func (s *Status) unblockedPhase() Phase {
	if s.Phase == PhaseBlocked {
		return s.BlockedPhase
	}
	return s.Phase
}

// TakesSlot reports whether writing next over prev starts a migration.
func TakesSlot(prev, next *Status) bool {
	return !prev.HoldsSlot() && next.HoldsSlot()
}

// Terminal reports whether a phase ends the migration.
func Terminal(p Phase) bool { return terminal(p) }

// terminal reports whether a phase ends the migration.
func terminal(p Phase) bool {
	return p == PhaseCompleted || p == PhaseRolledBack || p == PhaseStopped
}

// BlockedKind is why a namespace is Blocked.
type BlockedKind string

const (
	// BlockedInvalidInput: an annotation value is invalid; a person must
	// fix it.
	BlockedInvalidInput BlockedKind = "InvalidInput"
	// BlockedPrecheck: a precheck failed; some fix themselves (an istiod
	// becoming Ready), some need a person.
	BlockedPrecheck BlockedKind = "Precheck"
)

// WaveState is where the current wave stands.
type WaveState string

const (
	// WaveVerifying: the wave's workloads are being restarted and checked.
	WaveVerifying WaveState = "Verifying"
	// WavePassed: every gate passed; the next wave waits for its delay.
	WavePassed WaveState = "Passed"
	// WaveFailed: the wave did not pass and the namespace paused: a gate
	// failed under the Pause policy (or over maxFailedPercent under
	// Continue), or a gate was inconclusive inconclusiveLimit times in a
	// row.
	WaveFailed WaveState = "Failed"
	// WaveRollingBack: the wave's workloads are returning to the source.
	WaveRollingBack WaveState = "RollingBack"
)

// Workload states in the status and in metrics.
const (
	StatePending    = "Pending"
	StateMoving     = "Moving"
	StateMoved      = "Moved"
	StateFailed     = "Failed"
	StateSkipped    = "Skipped"
	StateRolledBack = "RolledBack"
)

// WorkloadState is one workload of the current wave.
type WorkloadState struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// Counts count the namespace's workloads by state.
type Counts struct {
	Total      int `json:"total"`
	Pending    int `json:"pending"`
	Moving     int `json:"moving"`
	Moved      int `json:"moved"`
	Failed     int `json:"failed"`
	Skipped    int `json:"skipped"`
	RolledBack int `json:"rolledBack,omitempty"`
}

// Failure is a workload that failed a gate.
type Failure struct {
	Workload string    `json:"workload"`
	Wave     int       `json:"wave"`
	Gate     string    `json:"gate"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

// Bounds that keep the status annotation small whatever the namespace
// holds: annotations share 256 KiB per object.
const (
	maxFailures = 10
	maxSkipped  = 20
	maxWarnings = 10
)

// Status is the migration's state, kept in the namespace annotation
// meshwave.io/status. Everything the agent needs to continue after a
// restart is here or in the Deployments' move records.
type Status struct {
	Phase  Phase  `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// Target is meshwave.io/target-revision as written (a revision or tag);
	// TargetRevision is the revision it resolved to.
	Target         string `json:"target"`
	TargetRevision string `json:"targetRevision,omitempty"`
	// Mode is "ambient" for a move out of the sidecars into ambient mode;
	// empty for a move onto the target's sidecar.
	Mode Mode `json:"mode,omitempty"`
	// NamespaceEnrolled is set once a completed move to ambient labelled
	// the namespace istio.io/dataplane-mode=ambient and took its injection
	// labels off: meshwave then owns no istio.io/rev.
	NamespaceEnrolled bool `json:"namespaceEnrolled,omitempty"`
	// WaypointSet is the istio.io/use-waypoint value meshwave put on the
	// namespace for a move to ambient; the way back takes it off. Empty
	// when meshwave set none (a person's label is never removed).
	WaypointSet string `json:"waypointSet,omitempty"`
	// SourceLabel is the istio.io/rev value before the switch, which a
	// rollback puts back; SourceRevision is the revision it stood for.
	SourceLabel    string `json:"sourceLabel,omitempty"`
	SourceRevision string `json:"sourceRevision,omitempty"`
	// Wave is the 1-based number of the current wave; 0 before the first.
	Wave       int       `json:"wave"`
	TotalWaves int       `json:"totalWaves"`
	WaveState  WaveState `json:"waveState,omitempty"`
	// Workloads are the current wave's.
	Workloads []WorkloadState `json:"workloads,omitempty"`
	Counts    Counts          `json:"counts"`
	// Kinds counts each kind apart, once the namespace holds a workload
	// other than a Deployment.
	Kinds map[Kind]Counts `json:"kinds,omitempty"`
	// PastFailed counts workloads that failed in earlier waves and stayed
	// where they were (the Continue policy).
	PastFailed int         `json:"pastFailed,omitempty"`
	Failures   []Failure   `json:"failures,omitempty"`
	Skipped    []Exclusion `json:"skipped,omitempty"`
	// Unmovable lists the workloads meshwave never restarts whose running
	// pods still carry a proxy of another revision than the target, and
	// why they stay: a Job finishes where it started, a bare pod needs a
	// person.
	Unmovable []Exclusion `json:"unmovable,omitempty"`
	Warnings  []string    `json:"warnings,omitempty"`
	// Reverts are meshwave's changes someone undid (the label, a
	// template), each reported once and counted.
	Reverts  []Revert  `json:"reverts,omitempty"`
	Verdicts []Verdict `json:"verdicts,omitempty"`
	// Analysis is the state of the wave's checks across reconciles.
	Analysis *AnalysisState `json:"analysis,omitempty"`
	// Rollback is what a rollback in progress returns: "wave" or "all".
	Rollback RollbackScope `json:"rollback,omitempty"`
	// BlockedKind says why the namespace is Blocked.
	BlockedKind BlockedKind `json:"blockedKind,omitempty"`
	// BlockedPhase is the phase to return to once invalid input is fixed.
	BlockedPhase Phase `json:"blockedPhase,omitempty"`
	// PausedByAgent is set when meshwave itself paused the namespace.
	PausedByAgent bool `json:"pausedByAgent,omitempty"`
	// Roots are the fingerprints (sha256:<hex> of each certificate) of
	// the root of trust the target revision distributes in this cluster,
	// published before the first wave for the fleet's other clusters to
	// compare (rootoftrust.go); only in a fleet.
	Roots []string `json:"roots,omitempty"`
	// WaitsForRing is set while a migration waits before its first wave
	// for the ring before its own (fleet.go): it takes no turn from the
	// namespaces of its cluster that may start.
	WaitsForRing bool `json:"waitsForRing,omitempty"`

	StartedAt     *time.Time `json:"startedAt,omitempty"`
	WaveStartedAt *time.Time `json:"waveStartedAt,omitempty"`
	// GatesSince is when the current wave's gate timeouts started counting:
	// the wave's start, or the moment a pause was lifted.
	GatesSince *time.Time `json:"gatesSince,omitempty"`
	NextWaveAt *time.Time `json:"nextWaveAt,omitempty"`
	// NextWindow is when the maintenance window the next wave waits for
	// opens; set only while one waits (the first wave while Pending, a
	// later one while Migrating between waves).
	NextWindow *time.Time `json:"nextWindow,omitempty"`
	// RetriedAt is when the migration was resumed after a rollback (its
	// target removed and set again): the rollbacks on record from before
	// it are history, and their workloads are planned again.
	RetriedAt   *time.Time `json:"retriedAt,omitempty"`
	PausedAt    *time.Time `json:"pausedAt,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
	// PausedSeconds is the time spent paused before the current pause.
	PausedSeconds float64 `json:"pausedSeconds,omitempty"`
}

// AnalysisState carries the gates' progress between reconciles.
type AnalysisState struct {
	// ReadyAt is when the wave first passed every gate before the metric
	// checks; the bake time counts from it.
	ReadyAt *time.Time `json:"readyAt,omitempty"`
	// ConsecutivePasses of the metric checks.
	ConsecutivePasses int `json:"consecutivePasses,omitempty"`
	// Inconclusive counts inconclusive results in a row.
	Inconclusive int `json:"inconclusive,omitempty"`
	// Checked is when each gate that asks an outside system last asked.
	Checked map[string]time.Time `json:"checked,omitempty"`
	// Started is when each gate was first reached in this wave; its
	// timeout counts from then.
	Started map[string]time.Time `json:"started,omitempty"`
}

// ParseStatus reads the status annotation; ok is false when there is none.
// The status is input like any other: a person may have edited it, or an
// older writer left it. It must be meshwave's JSON with its keys spelt
// exactly (no unknown, misspelt or duplicate key) and values that make
// sense (Validate). An error means the status cannot be trusted: the
// reading then rebuilds the migration from the Deployments' move records.
func ParseStatus(annotations map[string]string) (*Status, bool, error) {
	raw, ok := annotations[AnnotationStatus]
	if !ok {
		return nil, false, nil
	}
	var s Status
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), &s)
	if err != nil {
		return nil, true, fmt.Errorf("%s is not meshwave's status JSON: %w", AnnotationStatus, err)
	}
	if len(strict) > 0 {
		return nil, true, fmt.Errorf("%s is not meshwave's status JSON: %w", AnnotationStatus, errors.Join(strict...))
	}
	if err := s.Validate(); err != nil {
		return nil, true, fmt.Errorf("%s: %w", AnnotationStatus, err)
	}
	return &s, true, nil
}

// Bounds of the numbers a status may hold.
const (
	maxWaves     = 1_000_000
	maxWorkloads = 1_000_000
	// maxMembers bounds a wave's member list (MaxWaveSize).
	maxMembers = 500
)

var waveStates = []WaveState{"", WaveVerifying, WavePassed, WaveFailed, WaveRollingBack}

var workloadStates = []string{StatePending, StateMoving, StateMoved, StateFailed, StateSkipped, StateRolledBack}

var results = []Result{ResultPass, ResultFail, ResultInconclusive, ResultPending}

// Validate checks that a status read back is one meshwave could have
// written: every enumerated value from its set, names and revisions valid
// label values, numbers in range, and the fields each phase relies on.
func (s *Status) Validate() error {
	v := &statusErrors{}
	validateEnums(s, v)
	validateNames(s, v)
	validateCounts(s, v)
	validateEntries(s, v)
	validateTimes(s, v)
	validatePhase(s, v)
	return errors.Join(v.errs...)
}

// statusErrors collects what is wrong with a status.
type statusErrors struct{ errs []error }

func (v *statusErrors) bad(field string, value any, expected string) {
	v.errs = append(v.errs, fmt.Errorf("%s %v is not %s", field, value, expected))
}

func validateEnums(s *Status, v *statusErrors) {
	if !slices.Contains(Phases, s.Phase) {
		v.bad("phase", fmt.Sprintf("%q", s.Phase), "a phase meshwave writes")
	}
	if !slices.Contains(waveStates, s.WaveState) {
		v.bad("waveState", fmt.Sprintf("%q", s.WaveState), "Verifying, Passed, Failed, RollingBack or empty")
	}
	switch s.BlockedKind {
	case "", BlockedInvalidInput, BlockedPrecheck:
	default:
		v.bad("blockedKind", fmt.Sprintf("%q", s.BlockedKind), "InvalidInput, Precheck or empty")
	}
	if s.BlockedPhase != "" && (!slices.Contains(Phases, s.BlockedPhase) || s.BlockedPhase == PhaseBlocked) {
		v.bad("blockedPhase", fmt.Sprintf("%q", s.BlockedPhase), "a phase other than Blocked")
	}
	switch s.Rollback {
	case RollbackNone, RollbackWave, RollbackAll:
	default:
		v.bad("rollback", fmt.Sprintf("%q", s.Rollback), `"wave", "all" or empty`)
	}
	switch {
	case s.Mode != ModeSidecar && s.Mode != ModeAmbient:
		v.bad("mode", fmt.Sprintf("%q", s.Mode), `"ambient" or empty`)
	case s.NamespaceEnrolled && (s.Mode != ModeAmbient || s.Phase != PhaseCompleted):
		v.bad("namespaceEnrolled", true, "set only on a completed move to ambient")
	case s.WaypointSet != "" && (s.Mode != ModeAmbient || len(validation.IsDNS1123Label(s.WaypointSet)) > 0):
		v.bad("waypointSet", fmt.Sprintf("%q", s.WaypointSet), "a waypoint's name, on a move to ambient")
	}
}

// validateNames checks the target and revisions. A status names no target
// only when the namespace's target annotation is not a name at all and no
// migration had started: it is blocked for that before its first wave, or
// stopped there once the annotation was removed.
func validateNames(s *Status, v *statusErrors) {
	noTarget := s.Target == "" && s.Wave == 0 && (s.Phase == PhaseBlocked && s.BlockedKind == BlockedInvalidInput || s.Phase == PhaseStopped)
	if !noTarget && (s.Target == "" || len(validation.IsValidLabelValue(s.Target)) > 0) {
		v.bad("target", fmt.Sprintf("%q", s.Target), "a revision or tag name")
	}
	if s.WaitsForRing && s.Phase != PhasePending {
		v.bad("waitsForRing", true, "set only on a Pending status")
	}
	if len(s.Roots) > maxRoots {
		v.bad("roots", fmt.Sprintf("(%d entries)", len(s.Roots)), fmt.Sprintf("at most %d entries", maxRoots))
	}
	for i, r := range s.Roots {
		if !rootFingerprint.MatchString(r) {
			v.bad(fmt.Sprintf("roots[%d]", i), fmt.Sprintf("%q", r), "sha256: and 64 lowercase hex digits")
		}
	}
	for field, value := range map[string]string{"targetRevision": s.TargetRevision, "sourceLabel": s.SourceLabel, "sourceRevision": s.SourceRevision} {
		if len(validation.IsValidLabelValue(value)) > 0 {
			v.bad(field, fmt.Sprintf("%q", value), "a valid label value")
		}
	}
}

// validateCounts checks the wave numbers, the counts and the list of
// what never moves.
func validateCounts(s *Status, v *statusErrors) {
	if s.Wave < 0 || s.Wave > maxWaves {
		v.bad("wave", s.Wave, fmt.Sprintf("from 0 to %d", maxWaves))
	}
	if s.TotalWaves < s.Wave || s.TotalWaves > maxWaves {
		v.bad("totalWaves", s.TotalWaves, fmt.Sprintf("from wave (%d) to %d", s.Wave, maxWaves))
	}
	c := s.Counts
	for field, n := range map[string]int{"counts.total": c.Total, "counts.pending": c.Pending, "counts.moving": c.Moving, "counts.moved": c.Moved,
		"counts.failed": c.Failed, "counts.skipped": c.Skipped, "counts.rolledBack": c.RolledBack, "pastFailed": s.PastFailed} {
		if n < 0 || n > maxWorkloads {
			v.bad(field, n, fmt.Sprintf("from 0 to %d", maxWorkloads))
		}
	}
	if len(s.Unmovable) > maxSkipped {
		v.bad("unmovable", fmt.Sprintf("(%d entries)", len(s.Unmovable)), fmt.Sprintf("at most %d entries", maxSkipped))
	}
	for k, c := range s.Kinds {
		if k != KindDeployment && k != KindStatefulSet && k != KindDaemonSet {
			v.bad("kinds", fmt.Sprintf("%q", k), "Deployment, StatefulSet or DaemonSet")
			continue
		}
		for field, n := range map[string]int{"total": c.Total, "pending": c.Pending, "moving": c.Moving, "moved": c.Moved,
			"failed": c.Failed, "skipped": c.Skipped, "rolledBack": c.RolledBack} {
			if n < 0 || n > maxWorkloads {
				v.bad("kinds."+string(k)+"."+field, n, fmt.Sprintf("from 0 to %d", maxWorkloads))
			}
		}
	}
}

// validateEntries checks the wave's members, the verdicts, the analysis
// state, the reverts and the time paused.
func validateEntries(s *Status, v *statusErrors) {
	if len(s.Workloads) > maxMembers {
		v.bad("workloads", fmt.Sprintf("(%d entries)", len(s.Workloads)), fmt.Sprintf("at most %d entries", maxMembers))
	}
	seen := map[string]bool{}
	for i, w := range s.Workloads {
		if _, _, ok := SplitWorkloadID(w.Name); !ok || seen[w.Name] {
			v.bad(fmt.Sprintf("workloads[%d].name", i), fmt.Sprintf("%q", w.Name), "a workload (a Deployment's name, or StatefulSet/<name> or DaemonSet/<name>) listed once")
		}
		seen[w.Name] = true
		if !slices.Contains(workloadStates, w.State) {
			v.bad(fmt.Sprintf("workloads[%d].state", i), fmt.Sprintf("%q", w.State), "a workload state")
		}
	}
	gates := map[string]bool{}
	for i, vd := range s.Verdicts {
		if vd.Gate == "" || !slices.Contains(results, vd.Result) || gates[vd.Gate] {
			v.bad(fmt.Sprintf("verdicts[%d]", i), fmt.Sprintf("%q %q", vd.Gate, vd.Result), "a named gate with a result, each gate once")
		}
		gates[vd.Gate] = true
	}
	if a := s.Analysis; a != nil && (a.ConsecutivePasses < 0 || a.Inconclusive < 0) {
		v.bad("analysis", fmt.Sprintf("passes %d, inconclusive %d", a.ConsecutivePasses, a.Inconclusive), "non-negative counts")
	}
	if err := validReverts(s.Reverts); err != nil {
		v.errs = append(v.errs, err)
	}
	if s.PausedSeconds < 0 || s.PausedSeconds != s.PausedSeconds {
		v.bad("pausedSeconds", s.PausedSeconds, "a non-negative number")
	}
}

// validateTimes checks the times each phase relies on.
func validateTimes(s *Status, v *statusErrors) {
	if s.Wave > 0 && s.StartedAt == nil {
		v.bad("startedAt", "null", "set once a wave has started")
	}
	if s.Wave > 0 && s.SourceRevision == "" {
		v.bad("sourceRevision", `""`, "set once a wave has started")
	}
	if s.RetriedAt != nil && s.StartedAt != nil && s.RetriedAt.Before(*s.StartedAt) {
		v.bad("retriedAt", s.RetriedAt.UTC().Format(time.RFC3339), "a time after startedAt")
	}
	if (s.WaveState == WaveVerifying || s.WaveState == WaveRollingBack) && s.GatesSince == nil {
		v.bad("gatesSince", "null", "set while a wave is verified or rolled back")
	}
	if s.NextWindow != nil {
		waiting := (s.Phase == PhasePending && s.Wave == 0) || (s.Phase == PhaseMigrating && s.WaveState == WavePassed)
		if !waiting {
			v.bad("nextWindow", s.NextWindow.UTC().Format(time.RFC3339), fmt.Sprintf("set while %s at wave %d (only a wave that waits for its window: Pending before the first, Migrating after one Passed)", s.Phase, s.Wave))
		}
		if s.WaveStartedAt != nil && !s.NextWindow.After(*s.WaveStartedAt) {
			v.bad("nextWindow", s.NextWindow.UTC().Format(time.RFC3339), "a time after waveStartedAt")
		}
	}
}

// validatePhase checks what each phase relies on. A blocked status is
// checked as the phase it goes back to once unblocked, too: a decision
// takes it there.
func validatePhase(s *Status, v *statusErrors) {
	phase := s.Phase
	switch {
	case s.Phase == PhaseBlocked:
		validateBlocked(s, v)
		if s.BlockedPhase != "" {
			phase = s.BlockedPhase
		}
	case s.BlockedPhase != "":
		v.bad("blockedPhase", fmt.Sprintf("%q while %s", s.BlockedPhase, s.Phase), "empty unless Blocked")
	}
	switch phase {
	case PhaseMigrating, PhaseAnalyzing:
		if s.Wave == 0 || (s.WaveState != WaveVerifying && s.WaveState != WavePassed) {
			v.bad("waveState", fmt.Sprintf("%q at wave %d", s.WaveState, s.Wave), "Verifying or Passed at a wave of 1 or more while "+string(phase))
		}
	case PhaseRollingBack:
		if s.Wave == 0 || s.WaveState != WaveRollingBack || s.Rollback == RollbackNone {
			v.bad("waveState", fmt.Sprintf("%q, rollback %q at wave %d", s.WaveState, s.Rollback, s.Wave), "RollingBack with a scope at a wave of 1 or more while RollingBack")
		}
	case PhasePaused:
		// Resumed, a migration under way goes on where its wave stood.
		if s.Wave > 0 && s.WaveState == "" {
			v.bad("waveState", `""`, "set while Paused at a wave of 1 or more")
		}
	case PhasePending:
		// Pending is before the first wave; at a later one it would start
		// again from pending(), which pauses it at that wave, holding a
		// slot it never asked for.
		if s.Wave > 0 {
			v.bad("wave", s.Wave, "0 while Pending")
		}
	}
}

// validateBlocked checks what a blocked status relies on.
func validateBlocked(s *Status, v *statusErrors) {
	if s.BlockedKind == "" {
		v.bad("blockedKind", `""`, "set while Blocked")
	}
	if (s.BlockedPhase == "" || s.BlockedPhase == PhasePending) && s.Wave > 0 {
		// Unblocked, it would go on as Pending (see above).
		v.bad("blockedPhase", fmt.Sprintf("%q", s.BlockedPhase), "a phase of a migration under way while Blocked at a wave of 1 or more")
	}
	// Unblocked, it goes on in blockedPhase: one of a migration under
	// way before the first wave would start a wave without admission
	// (it holds no slot, and only Pending asks for one).
	switch s.BlockedPhase {
	case PhaseMigrating, PhaseAnalyzing, PhaseRollingBack:
		if s.Wave == 0 {
			v.bad("blockedPhase", fmt.Sprintf("%q at wave 0", s.BlockedPhase), "a phase of a migration under way only at a wave of 1 or more")
		}
	}
}

// Encode renders the status as the annotation value.
func (s *Status) Encode() (string, error) {
	raw, err := json.Marshal(s)
	return string(raw), err
}

// DeepCopy copies the status.
func (s *Status) DeepCopy() *Status {
	if s == nil {
		return nil
	}
	raw, _ := json.Marshal(s)
	var out Status
	_ = json.Unmarshal(raw, &out)
	return &out
}

// Equal compares two statuses by their encoding.
func (s *Status) Equal(o *Status) bool {
	if s == nil || o == nil {
		return s == o
	}
	a, _ := s.Encode()
	b, _ := o.Encode()
	return a == b
}

// MigrationID names the migration this status describes; "" before it
// starts.
func (s *Status) MigrationID() string {
	if s == nil || s.StartedAt == nil {
		return ""
	}
	return MigrationID(s.TargetRevision, *s.StartedAt)
}

// sourceLabelOnRecord is the source label a move record carries: only
// when it is not the source revision's own name.
func (s *Status) sourceLabelOnRecord() string {
	if s.SourceLabel == s.SourceRevision {
		return ""
	}
	return s.SourceLabel
}

// knowsRollback reports whether the status is of a rollback: in progress,
// finished, or in progress when it paused or was blocked.
func (s *Status) knowsRollback() bool {
	return s.Phase == PhaseRollingBack || s.Phase == PhaseRolledBack || s.BlockedPhase == PhaseRollingBack ||
		s.WaveState == WaveRollingBack || s.Rollback != RollbackNone
}

// PausedFor is how long the namespace has been paused in total.
func (s *Status) PausedFor(now time.Time) time.Duration {
	d := time.Duration(s.PausedSeconds * float64(time.Second))
	if s.Phase == PhasePaused && s.PausedAt != nil {
		d += max(0, now.Sub(*s.PausedAt))
	}
	return d
}

func (s *Status) addFailure(f Failure) {
	s.Failures = append(s.Failures, f)
	if len(s.Failures) > maxFailures {
		s.Failures = s.Failures[len(s.Failures)-maxFailures:]
	}
}

func timePtr(t time.Time) *time.Time { return &t }

// OnlyProgress reports whether next differs from prev only in the progress
// of the wave under test: the gates' state (analysis), the verdicts so
// far, and Migrating turning Analyzing. Such a change need not be written:
// an agent that loses it (a restart, a new leader) checks the wave again
// with fresh timers, which only ever takes longer. What a person or a
// rollback needs (a wave started, passed or failed, a pause, a reason)
// is never progress.
func OnlyProgress(prev, next *Status) bool {
	if prev == nil || next == nil || prev.WaveState != WaveVerifying || next.WaveState != WaveVerifying {
		return false
	}
	strip := func(s *Status) *Status {
		c := s.DeepCopy()
		c.Analysis, c.Verdicts = nil, nil
		// What meshwave never restarts rides on the next real write.
		c.Unmovable = nil
		if c.Phase == PhaseAnalyzing {
			c.Phase = PhaseMigrating
		}
		return c
	}
	p, n := strip(prev), strip(next)
	if p.Phase != PhaseMigrating || n.Phase != PhaseMigrating {
		return false
	}
	return p.Equal(n)
}
