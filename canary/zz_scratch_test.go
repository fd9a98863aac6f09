package canary

import (
	"testing"
	"time"
)

func TestScratchMoveAgainThenNext(t *testing.T) {
	s := ambientSim(t, deploy("a", label("kustomize.toolkit.fluxcd.io/name", "apps"), label("kustomize.toolkit.fluxcd.io/namespace", "flux-system")), deploy("b"))
	s.decide(nil)
	s.now = s.now.Add(5 * time.Second)
	w := &s.snap.Workloads[0]
	delete(w.Annotations, AnnotationMove)
	delete(w.TemplateAnnotations, AnnotationRestartedAt)
	w.TemplateLabels = map[string]string{"app": "a"}
	w.RolledOutRestart = t0
	s.decide(nil)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	s.decide(nil)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	t.Logf("mode=%q phase=%s reason=%s events=%v", s.status.Mode, s.status.Phase, s.status.Reason, reasonsOf(d.Events))
}
