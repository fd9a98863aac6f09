package canary

import (
	"encoding/json"
	"fmt"
	"time"
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

// holdsSlot reports whether a namespace in phase p counts against the
// concurrency limit. A paused migration holds its slot: it stopped half-way
// and needs a person before anything else moves.
func holdsSlot(p Phase) bool {
	switch p {
	case PhaseMigrating, PhaseAnalyzing, PhasePaused, PhaseRollingBack:
		return true
	}
	return false
}

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
	// WaveFailed: a gate failed and the namespace paused.
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
	// PastFailed counts workloads that failed in earlier waves and stayed
	// where they were (the Continue policy).
	PastFailed int         `json:"pastFailed,omitempty"`
	Failures   []Failure   `json:"failures,omitempty"`
	Skipped    []Exclusion `json:"skipped,omitempty"`
	Warnings   []string    `json:"warnings,omitempty"`
	Verdicts   []Verdict   `json:"verdicts,omitempty"`
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

	StartedAt     *time.Time `json:"startedAt,omitempty"`
	WaveStartedAt *time.Time `json:"waveStartedAt,omitempty"`
	// GatesSince is when the current wave's gate timeouts started counting:
	// the wave's start, or the moment a pause was lifted.
	GatesSince  *time.Time `json:"gatesSince,omitempty"`
	NextWaveAt  *time.Time `json:"nextWaveAt,omitempty"`
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
func ParseStatus(annotations map[string]string) (*Status, bool, error) {
	raw, ok := annotations[AnnotationStatus]
	if !ok {
		return nil, false, nil
	}
	var s Status
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, true, fmt.Errorf("%s is not meshwave's status JSON: %w", AnnotationStatus, err)
	}
	return &s, true, nil
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

// PausedFor is how long the namespace has been paused in total.
func (s *Status) PausedFor(now time.Time) time.Duration {
	d := time.Duration(s.PausedSeconds * float64(time.Second))
	if s.Phase == PhasePaused && s.PausedAt != nil {
		d += now.Sub(*s.PausedAt)
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
