package canary

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// migrationOnRecord is what the Deployments' move records say about one
// migration to a revision. The records are written in the same patch as
// each restart, so they hold even when the namespace's status is lost,
// edited, or older than the moves.
type migrationOnRecord struct {
	ID        string
	StartedAt time.Time
	// Forward and Back hold the workloads whose last record is a move of
	// this migration to the target, or a rollback of one. The records are
	// the workloads' own (parsedWorkload.record), never changed.
	Forward, Back map[string]*MoveRecord
	// LastWave is the highest wave of any of those records.
	LastWave int
	// Mode is the migration's, as its records say.
	Mode Mode
	// Waypoint is the istio.io/use-waypoint meshwave set for it, as its
	// latest record (of a move or a rollback) says; waypointAt is that
	// record's time.
	Waypoint   string
	waypointAt time.Time
}

// migrationsOnRecord groups the namespace's move records by the migration
// to targetRevision that wrote them, newest first.
func migrationsOnRecord(set workloadSet, targetRevision string) []migrationOnRecord {
	// byID holds each migration on record, nil for one to another target:
	// an ID is parsed once, however many records name it.
	byID := map[string]*migrationOnRecord{}
	for _, w := range set {
		r := w.record
		if r == nil {
			continue
		}
		m, seen := byID[r.Migration]
		if !seen {
			if rev, at, _ := ParseMigrationID(r.Migration); rev == targetRevision {
				m = &migrationOnRecord{ID: r.Migration, StartedAt: at, Forward: map[string]*MoveRecord{}, Back: map[string]*MoveRecord{}}
			}
			byID[r.Migration] = m
		}
		if m == nil {
			continue
		}
		if r.Mode == ModeAmbient {
			m.Mode = ModeAmbient
		}
		if r.Rollback {
			m.Back[w.Name] = r
		} else {
			m.Forward[w.Name] = r
		}
		if r.At.After(m.waypointAt) || m.waypointAt.IsZero() {
			// The label meshwave set last, as the latest record says.
			m.Waypoint, m.waypointAt = r.Waypoint, r.At
		}
		m.LastWave = max(m.LastWave, r.Wave)
	}
	out := make([]migrationOnRecord, 0, len(byID))
	for _, m := range byID {
		if m != nil {
			out = append(out, *m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	return out
}

// revisionsOnRecord are the revisions the namespace's move records name a
// migration to, in name order.
func revisionsOnRecord(set workloadSet) []string {
	seen := map[string]bool{}
	for _, w := range set {
		if r := w.record; r != nil {
			if rev, _, ok := ParseMigrationID(r.Migration); ok {
				seen[rev] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// recordConflict says why a status that started a migration cannot be
// decided from, or "" when the records agree with it. The records win
// when they show:
//   - a newer migration to the same target;
//   - forward moves of an older one while the status's own migration has
//     none (a migration only ever starts fresh when there are none: it
//     adopts them instead; once it has moves of its own, the older
//     records are history);
//   - a rollback the status does not know of (a status older than the
//     rollback would send its members forward again).
//
// A rollback written before the status's retriedAt is history: the
// workloads it returned are planned again by the retry. Forward moves of
// the status's migration in a wave beyond the status's do not contradict
// it: the plan judges them next (PlanNamespace), so a status that
// regressed never lets them skip judgment.
//
// rev is the revision the namespace's target resolves to now ("" reads
// st.TargetRevision). A status that ended (or is being undone) keeps the
// revision its migration went to (keeps, from keepsRevision); when its
// target (a tag) resolves elsewhere now, the status is about another
// revision's migration and says nothing of this one's
// records but when it started: only a migration to rev on record newer
// than that contradicts it. Older records of rev (say, of a workload
// skipped by the migrations since) are history, and adopting them would
// start a migration nobody asked for, without admission.
func recordConflict(set workloadSet, st *Status, rev string, keeps bool) (migrationOnRecord, string) {
	if st == nil || st.MigrationID() == "" || st.Phase == PhaseStopped {
		return migrationOnRecord{}, ""
	}
	if rev != "" && rev != st.TargetRevision {
		if !keeps {
			return migrationOnRecord{}, "" // a migration to elsewhere starts over (TargetChanged)
		}
		for _, m := range migrationsOnRecord(set, rev) {
			if m.StartedAt.After(*st.StartedAt) {
				return m, fmt.Sprintf("the move records show migration %s, newer than the status's %s", m.ID, st.MigrationID())
			}
		}
		return migrationOnRecord{}, ""
	}
	ms := migrationsOnRecord(set, st.TargetRevision)
	own := slices.ContainsFunc(ms, func(m migrationOnRecord) bool { return m.ID == st.MigrationID() })
	for _, m := range ms {
		switch {
		case m.ID == st.MigrationID() && len(m.Forward)+len(m.Back) > 0 && m.Mode != st.Mode:
			return m, fmt.Sprintf("the move records show migration %s moving to %s, which the status says moves to %s", m.ID, Place{Revision: st.TargetRevision, Ambient: m.Mode == ModeAmbient}, st.targetPlace())
		case m.ID == st.MigrationID():
			m = m.current(st.RetriedAt)
			if st.Phase == PhaseRolledBack {
				for _, w := range rollbackMembers(set, st) {
					if w.forwardIn(st.MigrationID()) != nil {
						return m, fmt.Sprintf("the move records show %s moved forward by migration %s, which the status says was rolled back", w.Name, m.ID)
					}
				}
			}
			if len(m.Back) > 0 && !st.knowsRollback() {
				return m, fmt.Sprintf("the move records show a rollback of %s in migration %s, which the status (%s) does not know", strings.Join(slices.Sorted(maps.Keys(m.Back)), ", "), m.ID, st.Phase)
			}
		case m.StartedAt.After(*st.StartedAt):
			return m, fmt.Sprintf("the move records show migration %s, newer than the status's %s", m.ID, st.MigrationID())
		case len(m.Forward) > 0 && !own && m.Mode == st.Mode:
			// (A move to ambient starts fresh after the sidecar step to
			// the same revision, whose records it never adopts.)
			return m, fmt.Sprintf("the move records show moves of migration %s, which the status's %s does not know", m.ID, st.MigrationID())
		}
	}
	return migrationOnRecord{}, ""
}

// current drops the rollbacks on record that a retry made history: those
// from before retriedAt (when a person set the target again after the
// migration ended), and those older than a forward move of the same
// migration, which only a retry can have made after them. LastWave is that
// of what is left.
func (m migrationOnRecord) current(retriedAt *time.Time) migrationOnRecord {
	var newestForward time.Time
	for _, r := range m.Forward {
		if r.At.After(newestForward) {
			newestForward = r.At
		}
	}
	out := m
	out.Back, out.LastWave = map[string]*MoveRecord{}, 0
	for name, r := range m.Back {
		if (retriedAt == nil || r.At.After(*retriedAt)) && !r.At.Before(newestForward) {
			out.Back[name] = r
			out.LastWave = max(out.LastWave, r.Wave)
		}
	}
	for _, r := range m.Forward {
		out.LastWave = max(out.LastWave, r.Wave)
	}
	return out
}
