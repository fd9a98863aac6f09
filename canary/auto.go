package canary

import "fmt"

// TargetAuto is the hands-off target: meshwave.io/target-revision=auto
// follows the revision the mesh itself names as its default, the Sail
// Operator's Istio resource's active revision when Sail is installed, else
// the revision the `default` tag points at. Moving that tag (or Sail's
// revision) starts a new migration of every namespace that completed the
// last one; in a fleet, ring by ring.
const TargetAuto = "auto"

// followsAuto reports whether the status is of a completed migration that
// the namespace's auto target moves on from when it resolves elsewhere:
// the mesh's default moved, and that is the signal to move again. A
// migration that was rolled back, stopped or is being undone keeps its
// revision, as one to a named tag does: a failure waits for a person.
//
// A completed move into ambient that enrolled the namespace does not
// follow either: its pods run no sidecar to move, and its new revision
// reaches them through ztunnel and the waypoint, which are upgraded on
// their own.
func followsAuto(st *Status, settings NamespaceSettings) bool {
	return settings.Target == TargetAuto && st != nil && st.Target == TargetAuto &&
		st.unblockedPhase() == PhaseCompleted && settings.Rollback == RollbackNone && !st.NamespaceEnrolled
}

// label is the istio.io/rev value the migration writes on the namespace:
// the target as the namespace names it, a revision or a tag; for auto, the
// revision it resolved to, so that the mesh's default moving again injects
// no pod until its own migration moves it.
func (s *Status) label() string {
	if s.Target == TargetAuto {
		return s.TargetRevision
	}
	return s.Target
}

// unresolvedAuto is the error of an auto target that names no revision.
func unresolvedAuto(ns string) InputError {
	return InputError{
		Key: AnnotationTargetRevision, Kind: "namespace", Namespace: ns, Name: ns, Value: TargetAuto,
		Expected: fmt.Sprintf("a target that names a revision: %s follows a Sail Operator Istio resource's status.activeRevisionName, else the tag default (MutatingWebhookConfiguration istio-revision-tag-default), and neither exists", TargetAuto),
	}
}

// autoFrom says where the auto target was read, as " (from ...)", or "".
func (r *Reading) autoFrom() string {
	if from := r.Snapshot.Mesh.AutoFrom; from != "" {
		return " (" + from + ")"
	}
	return ""
}
