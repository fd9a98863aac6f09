package canary

import (
	"encoding/json"
	"time"
)

// MoveRecord is what meshwave writes on a Deployment each time it moves it,
// in the annotation meshwave.io/move, in the same patch as the restart. A
// restarted agent reads it to know the move happened, so no workload is
// restarted twice for the same wave.
type MoveRecord struct {
	// Revision is the revision the workload was moved to.
	Revision string `json:"revision"`
	// From is the revision it was moved from.
	From string `json:"from,omitempty"`
	// Wave is the 1-based wave of the migration that moved it.
	Wave int `json:"wave"`
	// At is when the restart was requested.
	At time.Time `json:"at"`
	// Rollback marks a move back to the source revision.
	Rollback bool `json:"rollback,omitempty"`
	// Migration identifies the migration that made the move: its target and
	// start time. A record of an earlier migration never counts as a move of
	// this one.
	Migration string `json:"migration"`
}

// MigrationID names a migration by its target and start.
func MigrationID(targetRevision string, startedAt time.Time) string {
	return targetRevision + "@" + startedAt.UTC().Format(time.RFC3339)
}

// ReadMoveRecord returns the record on a Deployment, if any. An unreadable
// record counts as none: meshwave wrote it, and the pods' sidecar status
// remains the truth about where the workload is.
func ReadMoveRecord(annotations map[string]string) (MoveRecord, bool) {
	raw, ok := annotations[AnnotationMove]
	if !ok {
		return MoveRecord{}, false
	}
	var r MoveRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return MoveRecord{}, false
	}
	return r, true
}

// movedIn reports whether w carries a record of a forward move made by the
// given migration.
func movedIn(w Workload, migration string) (MoveRecord, bool) {
	r, ok := ReadMoveRecord(w.Annotations)
	if !ok || migration == "" || r.Rollback || r.Migration != migration {
		return MoveRecord{}, false
	}
	return r, true
}

// rolledBackIn reports whether w carries a record of a rollback made by the
// given migration.
func rolledBackIn(w Workload, migration string) (MoveRecord, bool) {
	r, ok := ReadMoveRecord(w.Annotations)
	if !ok || migration == "" || !r.Rollback || r.Migration != migration {
		return MoveRecord{}, false
	}
	return r, true
}
