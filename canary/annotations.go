package canary

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Keys a person writes.
const (
	// Namespace: opts in and names the revision or tag to move to.
	AnnotationTargetRevision = "meshwave.io/target-revision"
	// Namespace: lower values migrate first; default 100.
	AnnotationPriority = "meshwave.io/priority"
	// Namespace: "true" starts no new wave.
	AnnotationPaused = "meshwave.io/paused"
	// Namespace: "wave" or "all" asks for a rollback now.
	AnnotationRollback = "meshwave.io/rollback"
	// Namespace: overrides the configured failure policy.
	AnnotationFailurePolicy = "meshwave.io/failure-policy"
	// Namespace: "true" allows a target whose proxy is older than the
	// source's.
	AnnotationAllowDowngrade = "meshwave.io/allow-downgrade"
	// Namespace: maintenance windows that narrow the configured ones.
	AnnotationMaintenanceWindow = "meshwave.io/maintenance-window"
	// Namespace: "ambient" moves the workloads out of their sidecars into
	// ambient mode; "sidecar", the default, onto the target's sidecar.
	AnnotationTargetMode = "meshwave.io/target-mode"
	// AnnotationWaypoint names the waypoint (a Gateway of class
	// istio-waypoint in the namespace) a move to ambient puts the
	// namespace behind, with istio.io/use-waypoint, before its first wave.
	AnnotationWaypoint = "meshwave.io/waypoint"
	// Deployment: lower values go first; default 100.
	AnnotationWave = "meshwave.io/wave"
	// Deployment: "true" is never touched.
	AnnotationSkip = "meshwave.io/skip"
	// Deployment: overrides the default readiness timeout.
	AnnotationReadinessTimeout = "meshwave.io/readiness-timeout"
)

// Keys the agent writes.
const (
	// Namespace: the migration's status, JSON.
	AnnotationStatus = "meshwave.io/status"
	// Deployment: the record of the last move, JSON.
	AnnotationMove = "meshwave.io/move"
)

// Istio's keys.
const (
	LabelRev              = "istio.io/rev"
	LabelTag              = "istio.io/tag"
	LabelInjection        = "istio-injection"
	AnnotationSidecar     = "sidecar.istio.io/status"
	AnnotationTemplates   = "inject.istio.io/templates"
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
)

// Defaults of the per-object annotations.
const (
	DefaultPriority = 100
	DefaultWave     = 100
)

// InputError is a value a person wrote that meshwave cannot use. Its
// message names the key, the object, the value and what was expected.
type InputError struct {
	Key string
	// Kind is "namespace", or a workload's kind in lower case
	// ("deployment", "statefulset", "daemonset"); Namespace and Name locate
	// it.
	Kind      string
	Namespace string
	Name      string
	// Workload is the workload's ID; "" for a namespace.
	Workload string
	Value    string
	Expected string
}

// Object names the object the way the message does: "namespace shop" or
// "deployment shop/cart".
func (e InputError) Object() string {
	if e.Kind == "namespace" {
		return "namespace " + e.Name
	}
	return e.Kind + " " + e.Namespace + "/" + e.Name
}

func (e InputError) Error() string {
	return fmt.Sprintf("%s on %s: %s is not %s", e.Key, e.Object(), quoteShort(e.Value), e.Expected)
}

// NamespaceSettings are the validated annotations of an opted-in namespace.
type NamespaceSettings struct {
	Target string
	// Mode is what the target's workloads run: a sidecar, or ambient.
	Mode Mode
	// Waypoint is the waypoint a move to ambient puts the namespace
	// behind; "" for none.
	Waypoint      string
	Priority      int
	Paused        bool
	Rollback      RollbackScope
	FailurePolicy FailurePolicy // "" when the namespace does not override it
	// AllowDowngrade opts in to a target whose proxy is older.
	AllowDowngrade bool
	// Windows narrow the configured maintenance windows: a wave starts
	// only when both are open. Nil when the namespace sets none.
	Windows Windows
	// DeleteReplacedPolicies deletes, right after their workloads' restart
	// into ambient, the selector-based L7 AuthorizationPolicies a
	// waypoint policy replaces, as Istio's guide does
	// (replacedpolicies.go).
	DeleteReplacedPolicies bool
}

// RollbackScope is what a manual rollback returns to the source.
type RollbackScope string

const (
	RollbackNone RollbackScope = ""
	RollbackWave RollbackScope = "wave"
	RollbackAll  RollbackScope = "all"
)

// FailurePolicy is what a failed wave leads to.
type FailurePolicy string

const (
	PolicyRollbackWave FailurePolicy = "RollbackWave"
	PolicyPause        FailurePolicy = "Pause"
	PolicyContinue     FailurePolicy = "Continue"
)

// ParseFailurePolicy validates a failure policy name.
func ParseFailurePolicy(s string) (FailurePolicy, bool) {
	switch p := FailurePolicy(s); p {
	case PolicyRollbackWave, PolicyPause, PolicyContinue:
		return p, true
	}
	return "", false
}

// ParseNamespace validates a namespace's meshwave annotations. It returns
// every problem, not only the first, so one Event can name them all.
func ParseNamespace(name string, annotations map[string]string) (NamespaceSettings, []InputError) {
	s := NamespaceSettings{Priority: DefaultPriority}
	var errs []InputError
	bad := func(key, value, expected string) {
		errs = append(errs, InputError{Key: key, Kind: "namespace", Namespace: name, Name: name, Value: value, Expected: expected})
	}
	if v, ok := annotations[AnnotationTargetRevision]; ok {
		// The value becomes the istio.io/rev label, so it must be a valid
		// label value; an empty one would leave the namespace unlabelled.
		if v == "" || len(validation.IsValidLabelValue(v)) > 0 {
			bad(AnnotationTargetRevision, v, "a revision or tag name (a non-empty label value)")
		}
		s.Target = v
	}
	if v, ok := annotations[AnnotationTargetMode]; ok {
		mode, valid := ParseMode(v)
		if !valid {
			bad(AnnotationTargetMode, v, `"sidecar" or "ambient"`)
		}
		s.Mode = mode
	}
	if v, ok := annotations[AnnotationWaypoint]; ok {
		// The name becomes the istio.io/use-waypoint label: a Gateway's
		// name that is also a label value.
		switch {
		case len(validation.IsDNS1123Label(v)) > 0 || v == NoWaypoint:
			bad(AnnotationWaypoint, v, "the name of a Gateway of class istio-waypoint in the namespace (a DNS-1123 label other than none, which opts out of waypoints)")
		case s.Mode != ModeAmbient:
			bad(AnnotationWaypoint, v, "set only with "+AnnotationTargetMode+"=ambient: a waypoint serves pods in ambient")
		default:
			s.Waypoint = v
		}
	}
	if v, ok := annotations[AnnotationDeleteReplacedPolicies]; ok {
		switch {
		case v != "true" && v != "false":
			bad(AnnotationDeleteReplacedPolicies, v, `"true" or "false"`)
		case v == "true" && (s.Mode != ModeAmbient || s.Waypoint == ""):
			bad(AnnotationDeleteReplacedPolicies, v, "set only with "+AnnotationTargetMode+"=ambient and a "+AnnotationWaypoint+": the replacements are the waypoint's policies")
		default:
			s.DeleteReplacedPolicies = v == "true"
		}
	}
	if v, ok := annotations[AnnotationPriority]; ok {
		p, err := strconv.Atoi(v)
		if err != nil || p < -1_000_000 || p > 1_000_000 {
			bad(AnnotationPriority, v, "an integer between -1000000 and 1000000")
		} else {
			s.Priority = p
		}
	}
	if v, ok := annotations[AnnotationPaused]; ok {
		switch v {
		case "true":
			s.Paused = true
		case "false":
		default:
			bad(AnnotationPaused, v, `"true" or "false"`)
		}
	}
	if v, ok := annotations[AnnotationRollback]; ok {
		switch RollbackScope(v) {
		case RollbackWave, RollbackAll:
			s.Rollback = RollbackScope(v)
		default:
			bad(AnnotationRollback, v, `"wave" or "all"`)
		}
	}
	if v, ok := annotations[AnnotationFailurePolicy]; ok {
		p, valid := ParseFailurePolicy(v)
		if !valid {
			bad(AnnotationFailurePolicy, v, `one of "RollbackWave", "Pause" or "Continue"`)
		}
		s.FailurePolicy = p
	}
	if v, ok := annotations[AnnotationAllowDowngrade]; ok {
		switch v {
		case "true":
			s.AllowDowngrade = true
		case "false":
		default:
			bad(AnnotationAllowDowngrade, v, `"true" or "false"`)
		}
	}
	if v, ok := annotations[AnnotationMaintenanceWindow]; ok {
		ws, expected := parseWindowAnnotation(v)
		if expected != "" {
			bad(AnnotationMaintenanceWindow, v, expected)
		}
		s.Windows = ws
	}
	return s, errs
}

// WorkloadSettings are the validated annotations of a workload.
type WorkloadSettings struct {
	Wave             int
	Skip             bool
	ReadinessTimeout time.Duration // 0 means the configured default
}

// ParseWorkload validates a workload's meshwave annotations; id is its
// WorkloadID.
func ParseWorkload(namespace, id string, annotations map[string]string) (WorkloadSettings, []InputError) {
	s := WorkloadSettings{Wave: DefaultWave}
	var errs []InputError
	// The kind and object name are worked out only for an error: most
	// workloads have none, and a decision parses every one.
	bad := func(key, value, expected string) {
		kind, name := kindOfID(id), id[strings.Index(id, "/")+1:]
		errs = append(errs, InputError{Key: key, Kind: strings.ToLower(string(kind)), Namespace: namespace, Name: name, Workload: id, Value: value, Expected: expected})
	}
	if v, ok := annotations[AnnotationWave]; ok {
		w, err := strconv.Atoi(v)
		if err != nil || w < 0 || w > 1_000_000 {
			bad(AnnotationWave, v, "a non-negative integer")
		} else {
			s.Wave = w
		}
	}
	if v, ok := annotations[AnnotationSkip]; ok {
		switch v {
		case "true":
			s.Skip = true
		case "false":
		default:
			bad(AnnotationSkip, v, `"true" or "false"`)
		}
	}
	if v, ok := annotations[AnnotationReadinessTimeout]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad(AnnotationReadinessTimeout, v, `a positive Go duration such as "90s" or "10m"`)
		} else {
			s.ReadinessTimeout = d
		}
	}
	return s, errs
}

// maxQuoted bounds how much of a bad value a message repeats: enough to
// recognise it, never enough to crowd the status or an Event.
const maxQuoted = 64

// quoteShort quotes v, cut to maxQuoted bytes with its full length noted.
func quoteShort(v string) string {
	if len(v) <= maxQuoted {
		return fmt.Sprintf("%q", v)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", v[:cut], len(v))
}
