package canary

import (
	"encoding/json"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
)

// MoveRecord is what meshwave writes on a Deployment each time it moves it,
// in the annotation meshwave.io/move, in the same patch as the restart. A
// restarted agent reads it to know the move happened, so no workload is
// restarted twice for the same wave; an agent that lost the namespace's
// status adopts the migration from these records.
type MoveRecord struct {
	// Revision is the revision the workload was moved to.
	Revision string `json:"revision"`
	// From is the revision it was moved from.
	From string `json:"from,omitempty"`
	// SourceLabel is the migration's source as the istio.io/rev value a
	// rollback puts back (a tag, say), when it is not the source revision's
	// own name.
	SourceLabel string `json:"sourceLabel,omitempty"`
	// Wave is the 1-based wave of the migration that moved it.
	Wave int `json:"wave"`
	// At is when the restart was requested.
	At time.Time `json:"at"`
	// Rollback marks a move back to the source revision; Scope is the
	// rollback's scope, "all" for a rollback of everything (a record
	// without one is of a wave rollback).
	Rollback bool          `json:"rollback,omitempty"`
	Scope    RollbackScope `json:"scope,omitempty"`
	// Outcome is set on a forward move that did not pass its wave: Failed
	// (tolerated by the Continue policy; it stays where it is) or Skipped
	// (meshwave.io/skip was set during its wave). Such a move does not
	// count as moved: a skipped workload is planned again once its skip is
	// removed.
	Outcome string `json:"outcome,omitempty"`
	// Migration identifies the migration that made the move: its target and
	// start time. A record of an earlier migration never counts as a move of
	// this one.
	Migration string `json:"migration"`
	// Stamp is the kubectl.kubernetes.io/restartedAt the move wrote, when
	// it is not At's own second: a stamp that would equal the template's
	// is pushed a second past it (restartStamp), and so can name a second
	// a later wave starts in. Nil for a record-only patch.
	Stamp *time.Time `json:"stamp,omitempty"`
	// Mode is "ambient" for a move of a migration to ambient: forward, the
	// template was labelled out of the sidecars; rolling back, the labels
	// were taken off again.
	Mode Mode `json:"mode,omitempty"`
	// PriorInject is the template's sidecar.istio.io/inject label before a
	// move to ambient set it to "false": its rollback puts it back. Empty
	// when the template had none.
	PriorInject string `json:"priorInject,omitempty"`
	// Waypoint is the istio.io/use-waypoint value meshwave had put on the
	// namespace when it made a move to ambient: a status lost since is
	// rebuilt knowing the label is meshwave's to take off.
	Waypoint string `json:"waypoint,omitempty"`
}

// restartSecond is the restart stamp r accounts for: its Stamp, or the
// second of At.
func (r MoveRecord) restartSecond() time.Time {
	if r.Stamp != nil {
		return r.Stamp.UTC()
	}
	return r.At.UTC().Truncate(time.Second)
}

// explainsStamp reports whether w's own move record wrote the restart
// stamp at: that restart is the record's, not a later wave's whose record
// was lost or reverted.
func explainsStamp(w Workload, at time.Time) bool {
	r, ok := ReadMoveRecord(w.Annotations)
	return ok && r.restartSecond().Equal(at.UTC())
}

// explainsTemplateStamp reports whether w's template carries the restart
// stamp its own move record wrote.
func explainsTemplateStamp(w Workload) bool {
	at, err := time.Parse(time.RFC3339, w.TemplateAnnotations[AnnotationRestartedAt])
	return err == nil && explainsStamp(w, at)
}

// Outcomes of a forward move that did not pass its wave.
const (
	OutcomeFailed  = "Failed"
	OutcomeSkipped = "Skipped"
)

// MigrationID names a migration by its target and start.
func MigrationID(targetRevision string, startedAt time.Time) string {
	return targetRevision + "@" + startedAt.UTC().Format(time.RFC3339)
}

// ParseMigrationID splits a migration ID into its target revision and
// start time.
func ParseMigrationID(id string) (string, time.Time, bool) {
	i := strings.LastIndex(id, "@")
	if i <= 0 {
		return "", time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, id[i+1:])
	if err != nil {
		return "", time.Time{}, false
	}
	return id[:i], at, true
}

// ReadMoveRecord returns the record on a Deployment, if any. A record that
// is not exactly what meshwave writes counts as none: the pods' sidecar
// status remains the truth about where the workload is, and a workload
// whose pods all run the target is never planned again.
func ReadMoveRecord(annotations map[string]string) (MoveRecord, bool) {
	if r := readMoveRecord(annotations); r != nil {
		return *r, true
	}
	return MoveRecord{}, false
}

// readMoveRecord is ReadMoveRecord's record, or nil when there is none.
func readMoveRecord(annotations map[string]string) *MoveRecord {
	raw, ok := annotations[AnnotationMove]
	if !ok {
		return nil
	}
	return decodeMoveRecord(raw)
}

// decodeMoveRecord reads the value of meshwave.io/move; nil when it is
// not exactly what meshwave writes.
func decodeMoveRecord(raw string) *MoveRecord {
	r := new(MoveRecord)
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), r)
	if err != nil || len(strict) > 0 || !r.valid() {
		return nil
	}
	return r
}

func (r MoveRecord) valid() bool {
	rev, _, ok := ParseMigrationID(r.Migration)
	if !ok || r.Wave < 1 || r.Wave > maxWaves || r.At.IsZero() {
		return false
	}
	if r.Stamp != nil && (!r.Stamp.Equal(r.Stamp.Truncate(time.Second)) || !r.Stamp.After(r.At.UTC().Truncate(time.Second))) {
		return false // a whole second, written only when pushed past At's
	}
	for _, v := range []string{r.Revision, r.From, r.SourceLabel, rev} {
		if len(validation.IsValidLabelValue(v)) > 0 {
			return false
		}
	}
	switch {
	case r.Scope != RollbackNone && (!r.Rollback || (r.Scope != RollbackWave && r.Scope != RollbackAll)):
		return false
	case r.Outcome != "" && (r.Rollback || (r.Outcome != OutcomeFailed && r.Outcome != OutcomeSkipped)):
		return false
	case r.Mode != ModeSidecar && r.Mode != ModeAmbient:
		return false
	case r.PriorInject != "" && (r.Mode != ModeAmbient || len(validation.IsValidLabelValue(r.PriorInject)) > 0):
		return false
	case r.Waypoint != "" && (r.Mode != ModeAmbient || len(validation.IsDNS1123Label(r.Waypoint)) > 0):
		return false
	}
	// A forward move goes to the migration's target; a rollback comes from it.
	if r.Rollback {
		return r.From == rev && r.Revision != ""
	}
	return r.Revision == rev
}

// Encode renders the record as the annotation value.
func (r MoveRecord) Encode() string {
	raw, _ := json.Marshal(r)
	return string(raw)
}
