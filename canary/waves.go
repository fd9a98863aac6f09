package canary

import (
	"fmt"
	"strings"
	"time"
)

// startWave starts the next wave of the plan (or completes the migration
// when none is left): its members go into the status, the label switches
// to the target, and each member is restarted.
func startWave(m *machine) step {
	st, plan := m.st, m.plan()
	if len(plan.Waves) == 0 {
		return complete
	}
	st.Wave++
	st.WaveState = WaveVerifying
	st.Workloads = nil
	var names []string
	for _, p := range plan.Waves[0] {
		st.Workloads = append(st.Workloads, WorkloadState{Name: p.Name, State: StateMoving})
		names = append(names, p.Name)
	}
	st.WaveStartedAt, st.GatesSince = timePtr(recordedStart(m, st)), timePtr(m.now)
	st.NextWaveAt, st.Analysis, st.Verdicts = nil, nil, nil
	st.Phase, st.Reason = PhaseMigrating, ""
	kind := ""
	if st.Wave == 1 {
		kind = " (canary)"
	}
	m.event("", EventNormal, "WaveStarted", fmt.Sprintf("wave %d/%d%s started: %s", st.Wave, st.Wave+len(plan.Waves)-1, kind, strings.Join(names, ", ")))
	ensureLabel(m, st.label())
	useWaypoint(m)
	next, _ := restarts(m)
	return next
}

// recordedStart is when the wave st now starts began: now, or, for a wave
// with moves on record already (a status older than its moves, a
// status edited back), when the first of them was made, as adoption
// dates a wave (adoptLastWave). A restart of such a member whose record
// is removed since, or whose move is undone whole, still shows as one of
// this wave, and it is not restarted a second time.
func recordedStart(m *machine, st *Status) time.Time {
	started := m.now
	for _, p := range m.workloads() {
		// Any move of the wave dates it, a member's or not (one that
		// failed it, or was skipped out of it).
		if r := p.forwardIn(st.MigrationID()); r != nil && r.Wave == st.Wave && r.At.Before(started) {
			started = r.At
		}
	}
	return started
}

// migrating drives the wave in flight: a rollback asked of it, its
// restarts, its verdicts, and the wait after it passed.
func migrating(m *machine) step {
	if m.settings.Rollback != RollbackNone {
		return rollBack(m.settings.Rollback, "requested with "+AnnotationRollback+"="+string(m.settings.Rollback))
	}
	switch m.st.WaveState {
	case WavePassed:
		return betweenWaves
	case WaveVerifying:
		if next, decided := restarts(m); decided {
			return next
		}
		return judge
	}
	return nil
}

// passWave marks the wave's members moved, once every member that failed
// (tolerated) or was skipped out of it says so on its record, and goes on
// to the next wave after the delay, or completes the migration.
func passWave(m *machine) step {
	if outcomesPending(m) {
		// A member that failed (and was tolerated) or was skipped out of
		// the wave must say so on its record before the wave is left
		// behind: afterwards only the record remembers it.
		m.requeue(soon)
		return nil
	}
	st := m.st
	var moved []string
	for i, w := range st.Workloads {
		if w.State == StateMoving {
			st.Workloads[i].State, st.Workloads[i].Reason = StateMoved, ""
			moved = append(moved, w.Name)
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
	m.event("", EventNormal, "WavePassed", msg)
	if m.plan().Remaining() == 0 {
		return complete
	}
	st.NextWaveAt = timePtr(m.now.Add(m.cfg.DelayBetweenWaves))
	return betweenWaves
}

// betweenWaves starts the next wave once the delay after the last one is
// over, unless a person paused the namespace, the target lost its control
// plane, or the next wave waits for its maintenance window.
func betweenWaves(m *machine) step {
	st := m.st
	if m.settings.Paused {
		pauseByPerson(m, fmt.Sprintf("paused by %s after wave %d", AnnotationPaused, st.Wave))
		return nil
	}
	if st.NextWaveAt != nil && m.now.Before(*st.NextWaveAt) {
		m.requeue(st.NextWaveAt.Sub(m.now))
		return nil
	}
	if why := noControlPlane(m); why != "" && m.plan().Remaining() > 0 {
		pause(m, fmt.Sprintf("wave %d not started: %s", st.Wave+1, why))
		return nil
	}
	if why := ambientWaveWaits(m); why != "" {
		st.Reason = fmt.Sprintf("wave %d waits: %s", st.Wave+1, why)
		m.requeue(m.cfg.PrecheckRetry)
		return nil
	}
	if why := ambientWaveHeld(m); why != "" {
		pause(m, fmt.Sprintf("wave %d not started: %s", st.Wave+1, why))
		return nil
	}
	if m.plan().Remaining() > 0 && waitForWindow(m, fmt.Sprintf("wave %d", st.Wave+1)) {
		return nil
	}
	if m.plan().Remaining() > 0 && waitForFleet(m, fmt.Sprintf("wave %d", st.Wave+1), false) {
		return nil
	}
	if st.Wave >= maxWaves && m.plan().Remaining() > 0 {
		// A migration adopted from a move record of the last wave a status
		// holds (a record meshwave never wrote: no migration has a million
		// waves) cannot go on, and must not be tried again and again.
		pause(m, fmt.Sprintf("wave %d not started: a status holds at most %d waves, and the move records put this migration at wave %d; check the workloads' %s records", st.Wave+1, maxWaves, st.Wave, AnnotationMove))
		return nil
	}
	// The previous wave is done: its failures stay counted, and the plan
	// no longer needs to leave its members out.
	st.PastFailed += countMembers(st, StateFailed)
	st.Workloads = nil
	return startWave
}

// complete ends the migration: every workload it concerns moved.
func complete(m *machine) step {
	st := m.st
	st.Phase = PhaseCompleted
	st.WaveState, st.NextWaveAt, st.Analysis = "", nil, nil
	st.CompletedAt = timePtr(m.now)
	failed := map[string]bool{}
	for _, w := range st.Workloads {
		if w.State == StateFailed {
			failed[w.Name] = true
		}
	}
	st.Workloads = nil
	p := m.plan()
	for name := range failedOnRecord(m, p) {
		failed[name] = true
	}
	moved := 0
	for _, name := range p.Moved {
		if !failed[name] {
			moved++
		}
	}
	st.PastFailed = len(failed)
	st.Reason = fmt.Sprintf("moved %d workloads to %s in %d waves", moved, st.targetPlace(), st.Wave)
	if st.PastFailed > 0 {
		st.Reason += fmt.Sprintf("; %d failed and stayed where they were", st.PastFailed)
	}
	if st.Mode == ModeAmbient {
		enrolNamespace(m)
	}
	m.event("", EventNormal, "Completed", st.Reason)
	return nil
}

// failedOnRecord are the workloads of earlier waves that failed and stayed
// where they were: their records say so, or will once this decision's
// record patches land.
func failedOnRecord(m *machine, p NamespacePlan) map[string]bool {
	failed := map[string]bool{}
	for _, name := range p.Failed {
		failed[name] = true
	}
	for _, mv := range m.out.Moves {
		if mv.RecordOnly && mv.Record.Outcome == OutcomeFailed {
			failed[mv.Workload] = true
		}
	}
	return failed
}

// noControlPlane says why nothing may move onto the target now, or "": a
// revision whose every istiod is gone or unready would leave the moved
// pods without a control plane (and its injector refuses them).
func noControlPlane(m *machine) string {
	rev, ok := m.snap().Mesh.Revisions[m.st.TargetRevision]
	if !ok {
		return fmt.Sprintf("revision %s is no longer installed", m.st.TargetRevision)
	}
	if rev.ReadyIstiods == 0 {
		return fmt.Sprintf("revision %s has no Ready istiod pod (%d pods): nothing moves onto a revision without a control plane", m.st.TargetRevision, rev.Istiods)
	}
	return ""
}

func ensureLabel(m *machine, value string) {
	enrolled := m.enrolled()
	switch {
	case value == "":
	case enrolled && !m.st.rollingBack():
		// The move to ambient enrolled the namespace: istio.io/rev never
		// comes back onto it going forward (a status rebuilt from the
		// records, say), or the pods of a workload without the template
		// labels would be injected again.
	case enrolled:
		// Rolling back from an enrolled namespace: the revision label
		// back, and the namespace out of ambient, in one write, or the
		// rolled-back pods would come up in ambient again.
		m.out.Label, m.out.UnenrolNamespace = value, true
	case m.snap().Namespace.Labels[LabelRev] != value:
		m.out.Label = value
	}
}

// countMembers counts the wave's members in a state.
func countMembers(st *Status, state string) int {
	n := 0
	for _, w := range st.Workloads {
		if w.State == state {
			n++
		}
	}
	return n
}

// plan is the namespace's plan for the current migration, without the
// workloads of the wave in flight. A decision asks for it several times;
// it is computed again only when the migration, the wave or its members
// changed in between.
func (m *machine) plan() NamespacePlan {
	names := make([]string, 0, len(m.st.Workloads))
	for _, w := range m.st.Workloads {
		names = append(names, w.Name)
	}
	key := fmt.Sprintf("%s|%s|%d|%s", m.st.TargetRevision, m.st.MigrationID(), m.st.Wave, strings.Join(names, ","))
	if m.planned != nil && m.planKey == key {
		return *m.planned
	}
	p := planRemaining(m.ns, m.workloads(), m.st, m.cfg.Sizes)
	m.planned, m.planKey = &p, key
	return p
}
