package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// meshV1Pod is a pod as the Mesh v1 webhook leaves it.
func meshV1Pod(w *Workload) {
	for i := range w.Pods {
		w.Pods[i].Labels = map[string]string{"app": w.Name, "msname": w.Name, "asm.cpaas.io/msname": w.Name}
		w.Pods[i].Annotations = map[string]string{
			AnnotationSidecar:                               `{"revision":"1-25"}`,
			"sidecar.istio.io/inject":                       "true",
			"sidecar.istio.io/proxyCPU":                     "50m",
			"traffic.sidecar.istio.io/excludeOutboundPorts": "12345",
			"prometheus.io/scrape":                          "true",
		}
	}
}

func TestPersistedSettings(t *testing.T) {
	tests := []struct {
		name string
		w    Workload
		want TemplateChanges
	}{
		{
			name: "allow-listed pod annotations missing from the template are copied, others are not",
			w:    deploy("backend", meshV1Pod),
			want: TemplateChanges{Labels: map[string]string{}, Annotations: map[string]string{
				"sidecar.istio.io/inject": "true", "sidecar.istio.io/proxyCPU": "50m", "traffic.sidecar.istio.io/excludeOutboundPorts": "12345",
			}},
		},
		{
			name: "keys already in the template, as annotation or as label, are left alone",
			w: deploy("backend", meshV1Pod, func(w *Workload) {
				w.TemplateAnnotations["sidecar.istio.io/proxyCPU"] = "200m"
				w.TemplateLabels["sidecar.istio.io/inject"] = "true"
			}),
			want: TemplateChanges{Labels: map[string]string{}, Annotations: map[string]string{"traffic.sidecar.istio.io/excludeOutboundPorts": "12345"}},
		},
		{
			name: "an app label is added when the template lacks one, and msname labels never are",
			w: deploy("backend", meshV1Pod, func(w *Workload) {
				delete(w.TemplateLabels, "app")
			}),
			want: TemplateChanges{Labels: map[string]string{"app": "backend"}, Annotations: map[string]string{
				"sidecar.istio.io/inject": "true", "sidecar.istio.io/proxyCPU": "50m", "traffic.sidecar.istio.io/excludeOutboundPorts": "12345",
			}},
		},
		{
			name: "a workload without an injected pod gets nothing",
			w:    deploy("plain", notInjected()),
			want: TemplateChanges{Labels: map[string]string{}, Annotations: map[string]string{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, PersistedSettings(tt.w, DefaultPersistAnnotations))
		})
	}
}

func TestMovePatchIsOneMergePatchWithSettingsRestartAndRecord(t *testing.T) {
	w := deploy("backend", meshV1Pod, func(w *Workload) { delete(w.TemplateLabels, "app") })
	rec := MoveRecord{Revision: "1-26", From: "1-25", SourceLabel: "stable", Wave: 2, At: t0, Migration: "1-26@2026-11-29T11:00:00Z"}
	patch := MovePatch(w, PersistedSettings(w, DefaultPersistAnnotations), rec)
	assert.JSONEq(t, `{
	  "metadata": {
	    "resourceVersion": "100",
	    "annotations": {"meshwave.io/move": "{\"revision\":\"1-26\",\"from\":\"1-25\",\"sourceLabel\":\"stable\",\"wave\":2,\"at\":\"2026-11-29T12:00:00Z\",\"migration\":\"1-26@2026-11-29T11:00:00Z\"}"}
	  },
	  "spec": {"template": {"metadata": {
	    "labels": {"app": "backend"},
	    "annotations": {
	      "kubectl.kubernetes.io/restartedAt": "2026-11-29T12:00:00Z",
	      "sidecar.istio.io/inject": "true",
	      "sidecar.istio.io/proxyCPU": "50m",
	      "traffic.sidecar.istio.io/excludeOutboundPorts": "12345"
	    }
	  }}}
	}`, string(patch))
}

func TestRestartStampAlwaysChangesTheTemplate(t *testing.T) {
	w := deploy("a", func(w *Workload) { w.TemplateAnnotations[AnnotationRestartedAt] = "2026-11-29T12:00:00Z" })
	assert.Equal(t, "2026-11-29T12:00:01Z", restartStamp(w, t0.Add(300e6)).Format(time.RFC3339))
	assert.Equal(t, "2026-11-29T12:00:05Z", restartStamp(w, t0.Add(5e9)).Format(time.RFC3339))
}
