package canary

import (
	"fmt"
	"time"
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
	// Reading, when set, is Read of the same snapshot, status, error,
	// configuration and time, read once for this reconcile (the agent
	// reads it to pick the wave to verify): the decision does not read
	// them again. Nil: the decision reads them.
	Reading *Reading
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
	// EnrolNamespace labels the namespace istio.io/dataplane-mode=ambient
	// and removes istio.io/rev and istio-injection, in the same write as
	// the status: a move to ambient completed.
	EnrolNamespace bool
	// UnenrolNamespace removes istio.io/dataplane-mode from the namespace
	// as Label is set: a rollback of a move to ambient that had enrolled
	// it.
	UnenrolNamespace bool
	// UseWaypoint labels the namespace istio.io/use-waypoint with the
	// waypoint's name, in the same write as the status, before a move to
	// ambient's first wave; RemoveWaypoint takes that label off again,
	// once a rollback returned every pod to a sidecar.
	UseWaypoint    string
	RemoveWaypoint bool
	// ReplacedPolicies is the namespace's meshwave.io/replaced-policies
	// to write, in the same write as the status ("" removes it); nil
	// leaves it. DeletePolicies go out after the moves, each by its UID;
	// RestorePolicies are created again from their copies.
	ReplacedPolicies *string
	DeletePolicies   []PolicyRef
	RestorePolicies  []SavedPolicy
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
//
// It reads the migration once (Read), stops a namespace that opted out,
// blocks one whose input is invalid, takes a status rebuilt from the move
// records as this decision's outcome, and otherwise runs the phase
// machine: each step is a rule that writes and says which step follows
// (docs/design.md has the table). Then it summarizes the counts.
func Decide(in Input) Decision {
	r := in.Reading
	if r == nil {
		read := Read(in.Snapshot, in.Status, in.StatusErr, in.Config, in.Now)
		r = &read
	}
	m := newMachine(r, in)
	if !r.OptedIn {
		stop(m)
		return m.out
	}
	m.out.Events = append(m.out.Events, r.Events...)
	if r.Adopted() {
		m.requeue(soon)
	}
	switch {
	case block(m):
	case r.Adopted():
	case watchReverts(m):
	default:
		m.run(unblock(m))
	}
	summarize(m)
	if r.announceRetarget && m.out.Status != nil {
		// Said with each status it writes meanwhile.
		m.event("", EventNormal, "TargetChangedDuringRollback", fmt.Sprintf("%s is now the target; the rollback of the migration to %s finishes first", r.Settings.Target, m.st.Target))
	}
	return m.out
}

// step is one rule of the phase machine: it writes what the rule decides
// into the decision under way and returns the step that follows in the
// same decision, or nil when the decision is made. Steps never call one
// another: run does.
type step func(m *machine) step

// maxSteps bounds the steps of one decision; the longest path (a resume
// that rolls a failed wave back) takes five.
const maxSteps = 16

// run runs the steps from first until one ends the decision.
func (m *machine) run(first step) {
	for s, n := first, 0; s != nil && n < maxSteps; n++ {
		s = s(m)
	}
}

// unblock takes a status blocked by input that is now valid back to the
// phase it was blocked in, and returns that phase's step.
func unblock(m *machine) step {
	st := m.st
	if st.Phase == PhaseBlocked {
		st.Phase = st.BlockedPhase
		if st.Phase == "" {
			st.Phase = PhasePending
		}
		st.BlockedPhase, st.BlockedKind, st.Reason = "", "", ""
	}
	return phaseStep(st.Phase)
}

// phaseStep is the step that decides for a status in phase p.
func phaseStep(p Phase) step {
	switch p {
	case PhasePending:
		return pending
	case PhaseMigrating, PhaseAnalyzing:
		return migrating
	case PhasePaused:
		return paused
	case PhaseRollingBack:
		return rollingBack
	case PhaseCompleted, PhaseRolledBack:
		return ended
	}
	return nil
}

// machine is one decision under way: the reading it decides from, and
// what it writes: the status, and the rest of the decision.
type machine struct {
	r        *Reading
	in       Input
	cfg      Config
	now      time.Time
	ns       string
	settings NamespaceSettings
	// st is the status being written: a copy of the reading's.
	st  *Status
	out Decision
	// rollbackTaken says this decision started the rollback a person
	// asked for.
	rollbackTaken bool
	planned       *NamespacePlan
	planKey       string
}

func newMachine(r *Reading, in Input) *machine {
	m := &machine{r: r, in: in, cfg: in.Config.WithDefaults(), now: in.Now, ns: r.Snapshot.Namespace.Name, settings: r.Settings}
	m.st = r.Status.DeepCopy()
	if m.st != nil && r.OptedIn {
		// Set again while a wave waits for its window.
		m.st.NextWindow = nil
	}
	return m
}

func (m *machine) event(workload string, typ EventType, reason, message string) {
	m.out.Events = append(m.out.Events, Event{Workload: workload, Type: typ, Reason: reason, Message: cut(message, maxEventMessage)})
}

func (m *machine) requeue(after time.Duration) {
	if after <= 0 {
		after = soon
	}
	if m.out.RequeueAfter == 0 || after < m.out.RequeueAfter {
		m.out.RequeueAfter = after
	}
}

// snap is the snapshot decided on.
func (m *machine) snap() *Snapshot { return &m.r.Snapshot }

// workloads are the snapshot's workloads, each parsed once.
func (m *machine) workloads() workloadSet { return m.r.records() }
