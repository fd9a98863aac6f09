package canary

import (
	"encoding/json"
	"time"
)

// DefaultPersistAnnotations are the pod-only settings the runbook's "Persist
// the Mesh v1 pod settings" section copies into a workload's template:
// whether to inject, the proxy's resources and log level, and what traffic
// capture excludes.
var DefaultPersistAnnotations = []string{
	"sidecar.istio.io/inject",
	"sidecar.istio.io/proxyCPU",
	"sidecar.istio.io/proxyMemory",
	"sidecar.istio.io/proxyCPULimit",
	"sidecar.istio.io/proxyMemoryLimit",
	"sidecar.istio.io/logLevel",
	"traffic.sidecar.istio.io/excludeInboundPorts",
	"traffic.sidecar.istio.io/excludeOutboundPorts",
	"traffic.sidecar.istio.io/excludeOutboundIPRanges",
}

// TemplateChanges is what a move writes into a Deployment's pod template.
type TemplateChanges struct {
	// Labels to add: only app, and only when the template has none.
	Labels map[string]string
	// Annotations to add: the persisted settings and the restart stamp.
	Annotations map[string]string
}

// PersistedSettings computes, as the runbook's jq does, the settings that
// exist on w's running pods but not in its template. It reads the first
// injected pod by name. An annotation is copied only when it is in allow
// and the template has neither an annotation nor a label of that key;
// sidecar.istio.io/inject therefore stays an annotation, as Mesh v1 writes
// it. An app label is added when the template lacks one and the pod has one.
// The msname labels are never copied: a template carrying app, msname and
// asm.cpaas.io/msname together is treated as a legacy workload by Mesh v1.
func PersistedSettings(w Workload, allow []string) TemplateChanges {
	out := TemplateChanges{Labels: map[string]string{}, Annotations: map[string]string{}}
	// The first by name of the injected pods that are not being deleted.
	var pod *Pod
	for i := range w.Pods {
		p := &w.Pods[i]
		if !p.Terminating && p.Injected() && (pod == nil || p.Name < pod.Name) {
			pod = p
		}
	}
	if pod == nil {
		return out
	}
	if _, ok := w.TemplateLabels["app"]; !ok {
		if app, ok := pod.Labels["app"]; ok {
			out.Labels["app"] = app
		}
	}
	for _, key := range allow {
		v, ok := pod.Annotations[key]
		if !ok {
			continue
		}
		if _, inTemplate := w.TemplateAnnotations[key]; inTemplate {
			continue
		}
		if _, asLabel := w.TemplateLabels[key]; asLabel {
			continue
		}
		out.Annotations[key] = v
	}
	return out
}

// IntoAmbient is c as a move into ambient mode writes it: with the two
// pod-template labels that take the pods out of the sidecars and enrol
// them (templateLabels).
func IntoAmbient(c TemplateChanges) TemplateChanges {
	labels := make(map[string]string, len(c.Labels)+2)
	for k, v := range c.Labels {
		labels[k] = v
	}
	labels[LabelInject], labels[LabelDataplaneMode] = "false", DataplaneAmbient
	c.Labels = labels
	return c
}

// MovePatch is the one merge patch that moves a workload: it persists the
// pod-only settings, stamps kubectl.kubernetes.io/restartedAt so the
// Deployment rolls, and records the move on the Deployment. It carries the
// resourceVersion the settings were computed from, so a concurrent change
// makes it fail with a conflict instead of writing stale settings.
func MovePatch(w Workload, changes TemplateChanges, record MoveRecord) []byte {
	annotations := make(map[string]string, len(changes.Annotations)+1)
	for k, v := range changes.Annotations {
		annotations[k] = v
	}
	annotations[AnnotationRestartedAt] = restartStamp(w, record.At).Format(time.RFC3339)
	var p movePatch
	p.Metadata = recordMeta(w, record)
	p.Spec.Template.Metadata = templateMeta{Annotations: annotations, Labels: templateLabels(changes.Labels, record)}
	// Maps of strings always marshal.
	patch, _ := json.Marshal(p)
	return patch
}

// templateLabels are the pod-template labels a move writes: the ones the
// settings add, and for a move to ambient the two that take its pods out
// of the sidecars (no injector is called for sidecar.istio.io/inject
// "false") and enrol them (istio.io/dataplane-mode: ambient), whatever the
// namespace's labels say. Its rollback removes both (a null in the merge
// patch): the namespace's istio.io/rev, which stays until the last wave
// passed, injects them again.
func templateLabels(add map[string]string, record MoveRecord) map[string]*string {
	if len(add) == 0 && record.Mode != ModeAmbient {
		return nil
	}
	out := make(map[string]*string, len(add)+2)
	for k, v := range add {
		out[k] = &v
	}
	if record.Mode == ModeAmbient {
		inject, mode := "false", DataplaneAmbient
		if record.Rollback {
			out[LabelInject], out[LabelDataplaneMode] = nil, nil
			if prior := record.PriorInject; prior != "" {
				out[LabelInject] = &prior
			}
		} else {
			out[LabelInject], out[LabelDataplaneMode] = &inject, &mode
		}
	}
	return out
}

// RecordPatch writes only the move record, fenced with the resourceVersion
// it was decided from: it changes no template, so nothing restarts.
func RecordPatch(w Workload, record MoveRecord) []byte {
	patch, _ := json.Marshal(recordPatch{Metadata: recordMeta(w, record)})
	return patch
}

// The patches are typed rather than built of maps, which encode slower.
// Each struct's fields are in the order of their JSON names, the order a
// map's keys encode in, so a patch reads the same as before.
type (
	movePatch struct {
		Metadata objectMeta `json:"metadata"`
		Spec     struct {
			Template struct {
				Metadata templateMeta `json:"metadata"`
			} `json:"template"`
		} `json:"spec"`
	}
	recordPatch struct {
		Metadata objectMeta `json:"metadata"`
	}
	objectMeta struct {
		Annotations     map[string]string `json:"annotations"`
		ResourceVersion string            `json:"resourceVersion,omitempty"`
	}
	templateMeta struct {
		Annotations map[string]string  `json:"annotations"`
		Labels      map[string]*string `json:"labels,omitempty"`
	}
)

// recordMeta is the metadata of a patch that records a move on w: the
// record, and w's resourceVersion as the fence.
func recordMeta(w Workload, record MoveRecord) objectMeta {
	return objectMeta{Annotations: map[string]string{AnnotationMove: record.Encode()}, ResourceVersion: w.ResourceVersion}
}

// recordSince reports whether w carries a readable record written at or
// after since (to the second): then its template's restart stamp is that
// record's, not a restart in the wave that started at since. A record
// that is gone, unreadable, or older says nothing about the wave.
func recordSince(w Workload, since *time.Time) bool {
	r, ok := ReadMoveRecord(w.Annotations)
	return ok && since != nil && !r.At.Before(since.UTC().Truncate(time.Second))
}

// restartedSince reports whether w's template carries a restart stamp at
// or after since (to the second, as stamps are written).
func restartedSince(w Workload, since *time.Time) bool {
	if since == nil {
		return false
	}
	at, err := time.Parse(time.RFC3339, w.TemplateAnnotations[AnnotationRestartedAt])
	return err == nil && !at.Before(since.UTC().Truncate(time.Second))
}

// restartStamp formats at as kubectl rollout restart does. A stamp equal to
// the template's current one would not roll the Deployment (a rollback in
// the same second as the move, say), so it is then pushed a second later.
func restartStamp(w Workload, at time.Time) time.Time {
	at = at.UTC().Truncate(time.Second)
	if prev, err := time.Parse(time.RFC3339, w.TemplateAnnotations[AnnotationRestartedAt]); err == nil && !at.After(prev) {
		at = prev.Add(time.Second).UTC()
	}
	return at
}

// withStamp is rec as a move of w writes it: with the stamp its restart
// writes, when that is pushed past the second of rec.At (restartStamp).
func withStamp(w Workload, rec MoveRecord) MoveRecord {
	// A stamp past year 9999 (pushed past a template's absurd one) has no
	// JSON form: the record then goes without it.
	if stamp := restartStamp(w, rec.At); !stamp.Equal(rec.At.UTC().Truncate(time.Second)) && stamp.Year() <= 9999 {
		rec.Stamp = &stamp
	}
	return rec
}
