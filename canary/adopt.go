package canary

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// adopt rebuilds the status of a migration from its move records: a
// rollback in progress when any workload's last record is a rollback (of
// the last wave only, or of everything), else the last wave, judged again
// with fresh timers. Earlier waves count as moved: a wave is only ever
// started once the one before it passed.
func (r *Reading) adopt(m migrationOnRecord, typ EventType, reason, why string) {
	r.Status = r.rebuilt(r.Status, m)
	r.Status.Reason = fmt.Sprintf("adopted from the Deployments' move records: %s", why)
	r.Standing = StandingAdopted
	r.event(typ, reason, fmt.Sprintf("%s; continuing migration %s at wave %d (%s)", why, m.ID, r.Status.Wave, strings.ToLower(string(r.Status.Phase))))
}

// rebuilt is the status of migration m to from's target, from its records.
func (r *Reading) rebuilt(from *Status, m migrationOnRecord) *Status {
	st := &Status{
		Target: from.Target, TargetRevision: from.TargetRevision, Mode: m.Mode, WaypointSet: m.Waypoint,
		StartedAt: timePtr(m.StartedAt), Wave: m.LastWave, GatesSince: timePtr(r.now),
	}
	st.SourceLabel, st.SourceRevision = r.sourceOnRecord(m, from.TargetRevision)
	if len(m.Back) == 0 {
		st.Phase, st.WaveState = PhaseMigrating, WaveVerifying
		adoptLastWave(st, m)
		return st
	}
	st.Phase, st.WaveState, st.Rollback = PhaseRollingBack, WaveRollingBack, RollbackWave
	// The scope is what the records say (a record without one is of a
	// wave rollback); a wave rollback returns its wave and any moves
	// recorded after it, so it starts at the lowest wave on record.
	low := m.LastWave
	for _, rec := range m.Back {
		if rec.Scope == RollbackAll {
			st.Rollback = RollbackAll
		}
		low = min(low, rec.Wave)
	}
	if st.Rollback == RollbackWave {
		st.Wave = low
	}
	return st
}

// adoptLastWave puts the last forward wave of m back under test.
func adoptLastWave(st *Status, m migrationOnRecord) {
	var started time.Time
	for _, name := range slices.Sorted(maps.Keys(m.Forward)) {
		r := m.Forward[name]
		if r.Wave != st.Wave || r.Outcome != "" {
			continue
		}
		if len(st.Workloads) == maxMembers {
			// More records of one wave than a wave holds: not all of
			// them are meshwave's. The status lists what it can.
			break
		}
		st.Workloads = append(st.Workloads, WorkloadState{Name: name, State: StateMoving})
		if started.IsZero() || r.At.Before(started) {
			started = r.At
		}
	}
	st.WaveStartedAt = timePtr(started)
}

// sourceOnRecord is the source a migration's records name: the label and
// revision most of its moves came from (or rollbacks went to), else the
// namespace's label, else the revision most pods off the target run.
func (r *Reading) sourceOnRecord(m migrationOnRecord, targetRevision string) (string, string) {
	votes := map[[2]string]int{}
	for _, rec := range m.Forward {
		votes[[2]string{rec.SourceLabel, rec.From}]++
	}
	for _, rec := range m.Back {
		votes[[2]string{rec.SourceLabel, rec.Revision}]++
	}
	var best [2]string
	for k, n := range votes {
		if k[1] == "" {
			continue
		}
		if best[1] == "" || n > votes[best] || (n == votes[best] && k[1]+k[0] < best[1]+best[0]) {
			best = k
		}
	}
	if best[1] != "" {
		if best[0] == "" {
			best[0] = best[1]
		}
		return best[0], best[1]
	}
	snap := r.Snapshot
	label := snap.Namespace.Labels[LabelRev]
	if rev, ok := snap.Mesh.Resolve(label); ok && rev != targetRevision {
		return label, rev
	}
	rev := podSourceRevision(snap.Workloads, targetRevision)
	return rev, rev
}

// podSourceRevision is the revision most injected pods run, other than the
// target.
func podSourceRevision(ws []Workload, targetRevision string) string {
	count := map[string]int{}
	for _, w := range ws {
		for _, p := range w.Pods {
			if p.Injected() && p.Revision != targetRevision {
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

// Continuation is a migration on record that a new migration to the same
// target continues instead of starting afresh, once admitted: the status
// it goes on from, and the Event that says so. Resumed is true when it
// resumes the migration's moves (the new status's warnings and time
// paused carry over); false when a rollback on record goes on instead.
type Continuation struct {
	Status  *Status
	Event   Event
	Resumed bool
}

// continuation finds, for st (a new migration's status, about to take its
// first wave), a migration to the same target whose forward moves are on
// record: the one a removed and re-added target, or a retry after a
// rollback, left behind. Its last wave is judged again; the workloads it
// rolled back are planned again. A rollback on record that no retry made
// history goes on instead: the status is older than it. ok is false when
// there is none.
func (r *Reading) continuation(st *Status) (Continuation, bool) {
	for _, m := range migrationsOnRecord(r.records(), st.TargetRevision) {
		if len(m.Forward) == 0 || m.Mode != st.Mode {
			// A move to ambient never continues the sidecar step before
			// it, nor a sidecar migration a move to ambient.
			continue
		}
		if cur := m.current(st.RetriedAt); len(cur.Back) > 0 {
			// Taken once admitted, from Pending (after a resume or an
			// unblock too).
			why := fmt.Sprintf("the status (%s) does not know the rollback on record of migration %s", PhasePending, m.ID)
			return r.continueWith(st, cur, EventWarning, "StatusAdopted", why), true
		}
		m.Back = nil
		lastForward := 0
		for _, rec := range m.Forward {
			lastForward = max(lastForward, rec.Wave)
		}
		m.LastWave = lastForward
		c := r.continueWith(st, m, EventNormal, "MigrationResumed", fmt.Sprintf("the Deployments carry moves of migration %s to %s", m.ID, st.TargetRevision))
		c.Resumed = true
		c.Status.Warnings, c.Status.PausedSeconds, c.Status.RetriedAt = st.Warnings, st.PausedSeconds, st.RetriedAt
		if st.RetriedAt != nil && st.RetriedAt.Before(m.StartedAt) {
			// A migration that started after the retry is the retry's
			// own (a status from before it was restored): none of its
			// rollbacks are from before the retry, and a retriedAt before
			// startedAt is not a status meshwave reads back.
			c.Status.RetriedAt = nil
		}
		return c, true
	}
	return Continuation{}, false
}

// continueWith is the continuation of st with migration m.
func (r *Reading) continueWith(st *Status, m migrationOnRecord, typ EventType, reason, why string) Continuation {
	next := r.rebuilt(st, m)
	next.Reason = fmt.Sprintf("adopted from the Deployments' move records: %s", why)
	ev := Event{Type: typ, Reason: reason, Message: cut(fmt.Sprintf("%s; continuing migration %s at wave %d (%s)", why, m.ID, next.Wave, strings.ToLower(string(next.Phase))), maxEventMessage)}
	return Continuation{Status: next, Event: ev}
}
