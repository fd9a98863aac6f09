package canary

import (
	"fmt"
	"strings"
	"time"
)

// restarts issues the patch of every member of the wave that has no record
// of this move yet: after a restart of the agent between the status write
// and the patches, exactly the missing ones are sent. A member that now
// carries meshwave.io/skip is left where it is; one that is paused, or
// whose patch the apiserver refused, fails the wave at once. It returns
// the step that follows, and whether it decided anything (a restart
// issued counts).
func restarts(m *machine) (step, bool) {
	st := m.st
	if deferWave(m) {
		return nil, true
	}
	var t restartPass
	kept := st.Workloads[:0]
	for _, w := range st.Workloads {
		p, ok := m.workloads().find(w.Name)
		if !ok {
			m.event("", EventWarning, "WorkloadGone", fmt.Sprintf("%s left wave %d: it no longer exists", describe(w.Name), st.Wave))
			continue
		}
		if (w.State == StateMoving || w.State == StateFailed) && p.settings.Skip {
			w.State, w.Reason = StateSkipped, AnnotationSkip+" was set during wave "+fmt.Sprint(st.Wave)+": left where it is"
			m.event(p.Name, EventNormal, "Skipped", w.Reason)
			markOutcome(m, p, OutcomeSkipped)
		}
		if w.State == StateMoving {
			w = outcomeOnRecord(st, p, w)
		}
		kept = append(kept, w)
		if w.State == StateFailed && policy(m) == PolicyContinue {
			markOutcome(m, p, OutcomeFailed) // once; again if the last one did not land
		}
		if w.State == StateMoving {
			restartMember(m, p, &t)
		}
	}
	st.Workloads = kept
	return t.next(m)
}

// outcomeOnRecord is the member w as its record says, when the record
// says its move did not pass its wave: failed and tolerated (it stays
// where it is, and is never restarted again), or skipped out of this wave.
// The record outranks a status that says it is still moving (a stale copy
// restored, a paused wave resumed).
func outcomeOnRecord(st *Status, p parsedWorkload, w WorkloadState) WorkloadState {
	r := p.forwardIn(st.MigrationID())
	switch {
	case r == nil:
	case r.Outcome == OutcomeFailed:
		w.State, w.Reason = StateFailed, fmt.Sprintf("failed wave %d and stays where it is, as its %s record says", r.Wave, AnnotationMove)
	case r.Outcome == OutcomeSkipped && r.Wave == st.Wave:
		w.State, w.Reason = StateSkipped, fmt.Sprintf("taken out of wave %d, as its %s record says", r.Wave, AnnotationMove)
	}
	return w
}

// restartPass is what the restarts of one decision found.
type restartPass struct {
	issued, held bool
	failed       []WorkloadState
	reasons      []string
	// reverted are the reports of members whose move was undone whole.
	reverted []string
}

func (t *restartPass) fail(name, why string) {
	t.failed = append(t.failed, WorkloadState{Name: name, State: StateFailed, Reason: why})
	t.reasons = append(t.reasons, why)
}

// restartMember restarts one member still moving, unless a forward move
// of this migration is on record (in whatever wave: a move is never made
// twice), writes its record back, or reports its move undone.
func restartMember(m *machine, p parsedWorkload, t *restartPass) {
	st, w := m.st, *p.Workload
	moved := p.movedIn(st.MigrationID()) != nil
	switch answer, refused := m.in.Refused[w.Name]; {
	case w.Paused:
		t.fail(w.Name, fmt.Sprintf("%s is paused (spec.paused): it does not roll out", w.Name))
	case refused && !moved:
		t.fail(w.Name, fmt.Sprintf("the apiserver refused to restart %s: %s", w.Name, answer))
	case moved:
	case noControlPlane(m) != "":
		t.held = true
	case restartedSince(w, st.WaveStartedAt) && !recordSince(w, st.WaveStartedAt) && !explainsTemplateStamp(w) && carriesMove(w, st):
		// Its record is gone, but its template shows a restart after the
		// wave started, onto the label the wave set: the record is
		// written back; the workload is not restarted again.
		restoreRecord(m, w)
		t.issued = true
	case memberReverted(w, st.WaveStartedAt):
		if again, ok := moveAgain(m, w); ok {
			t.issued = t.issued || again
			return
		}
		t.reverted = append(t.reverted, memberRevertReported(m, w))
	default:
		addMove(m, w, moveRecord(st, m.now), fmt.Sprintf("moving to %s in wave %d", st.TargetRevision, st.Wave))
		t.issued = true
	}
}

// next is the step after the restarts: a pause when a move was undone or
// the target has no control plane, the failure policy when a member
// failed, the wave passed when no member is left moving.
func (t *restartPass) next(m *machine) (step, bool) {
	st := m.st
	if len(t.failed) == 0 && (len(t.reverted) > 0 || t.held) {
		m.out.Moves, m.out.Events = nil, withoutRestarts(m.out.Events)
		why := fmt.Sprintf("wave %d paused: %s", st.Wave, strings.Join(t.reverted, "; "))
		if len(t.reverted) == 0 {
			why = fmt.Sprintf("wave %d held before its restarts: %s", st.Wave, noControlPlane(m))
		}
		pause(m, why)
		return nil, true
	}
	if len(t.failed) > 0 {
		m.out.Moves, m.out.Events = nil, withoutRestarts(m.out.Events)
		return failWave(Verdict{Gate: gateRestart, Result: ResultFail, Reason: strings.Join(t.reasons, "; "), Failed: t.failed, At: m.now}), true
	}
	if countMembers(st, StateMoving) == 0 && st.WaveState == WaveVerifying {
		return passWave, true
	}
	return nil, t.issued
}

// moveRecord is the record of a forward move in the wave in flight, made
// at.
func moveRecord(st *Status, at time.Time) MoveRecord {
	return MoveRecord{Revision: st.TargetRevision, From: st.SourceRevision, SourceLabel: st.sourceLabelOnRecord(), Wave: st.Wave, At: at, Migration: st.MigrationID(), Mode: st.Mode, Waypoint: st.WaypointSet}
}

// restoreRecord writes back the record of a member restarted in the wave
// in flight whose record was removed, with a patch that changes no
// template.
func restoreRecord(m *machine, w Workload) {
	st := m.st
	stamp := w.TemplateAnnotations[AnnotationRestartedAt]
	at, _ := time.Parse(time.RFC3339, stamp)
	rec := moveRecord(st, at)
	m.out.Moves = append(m.out.Moves, Move{Workload: w.Name, Record: rec, Patch: RecordPatch(w, rec), RecordOnly: true})
	m.event(w.Name, EventWarning, "MoveRecordRestored", fmt.Sprintf("%s had no readable %s record of wave %d, but its template was restarted at %s, after the wave started: the record is written back, and %s is not restarted again", w.Name, AnnotationMove, st.Wave, stamp, w.Name))
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

func addMove(m *machine, w Workload, rec MoveRecord, message string) {
	rec = withStamp(w, rec)
	if rec.Mode == ModeAmbient && !rec.Rollback {
		if v := w.TemplateLabels[LabelInject]; v != "false" {
			rec.PriorInject = v
		}
	}
	patch := MovePatch(w, PersistedSettings(w, m.cfg.PersistAnnotations), rec)
	m.out.Moves = append(m.out.Moves, Move{Workload: w.Name, Record: rec, Patch: patch})
	m.event(w.Name, EventNormal, "Restarted", message)
}

// outcomesPending sends the outcome of every member that failed (under
// Continue) or was skipped out of the wave whose record does not carry it
// yet, and reports whether there was any.
func outcomesPending(m *machine) bool {
	pending := false
	for _, w := range m.st.Workloads {
		p, ok := m.workloads().find(w.Name)
		if !ok {
			continue
		}
		outcome := ""
		switch {
		case w.State == StateFailed && policy(m) == PolicyContinue:
			outcome = OutcomeFailed
		case w.State == StateSkipped:
			outcome = OutcomeSkipped
		default:
			continue
		}
		if r := p.forwardIn(m.st.MigrationID()); r != nil && r.Outcome == "" {
			markOutcome(m, p, outcome)
			pending = true
		}
	}
	return pending
}

// markOutcome writes on w's forward record of this migration that it did
// not pass its wave (Failed, Skipped), in a patch that restarts nothing,
// so that what is counted as moved never rests on the status alone.
func markOutcome(m *machine, w parsedWorkload, outcome string) {
	fwd := w.forwardIn(m.st.MigrationID())
	if fwd == nil || fwd.Outcome != "" {
		return
	}
	for _, mv := range m.out.Moves {
		if mv.Workload == w.Name {
			return
		}
	}
	r := *fwd
	r.Outcome = outcome
	m.out.Moves = append(m.out.Moves, Move{Workload: w.Name, Record: r, Patch: RecordPatch(*w.Workload, r), RecordOnly: true})
}

// moving are the wave's members still moving that the snapshot holds, in
// status order: not those that failed or were skipped out of the wave.
func moving(m *machine) []parsedWorkload {
	var out []parsedWorkload
	for _, w := range m.st.Workloads {
		if p, ok := m.workloads().find(w.Name); ok && w.State == StateMoving {
			out = append(out, p)
		}
	}
	return out
}
