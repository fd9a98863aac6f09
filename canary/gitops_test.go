package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwnerOfFindsArgoCDAndFlux(t *testing.T) {
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        GitOpsOwner
		owned       bool
	}{
		{name: "argo cd's tracking label names the application",
			labels: map[string]string{LabelArgoInstance: "shop"}, want: GitOpsOwner{Tool: "argocd", Name: "shop"}, owned: true},
		{name: "argo cd's tracking annotation names the application before its first colon",
			annotations: map[string]string{AnnotationArgoTrackingID: "payments:apps/Deployment:shop/cart"}, want: GitOpsOwner{Tool: "argocd", Name: "payments"}, owned: true},
		{name: "a flux kustomization is named namespace/name",
			labels: map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}, want: GitOpsOwner{Tool: "kustomization", Name: "flux-system/apps"}, owned: true},
		{name: "a flux helmrelease is named namespace/name",
			labels: map[string]string{"helm.toolkit.fluxcd.io/name": "web", "helm.toolkit.fluxcd.io/namespace": "shop"}, want: GitOpsOwner{Tool: "helmrelease", Name: "shop/web"}, owned: true},
		{name: "any flux label marks ownership, even without a name",
			labels: map[string]string{"kustomize.toolkit.fluxcd.io/checksum": "abc"}, want: GitOpsOwner{Tool: "kustomization"}, owned: true},
		{name: "other labels mark nothing",
			labels: map[string]string{"app.kubernetes.io/managed-by": "Helm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, owned := OwnerOf(tc.labels, tc.annotations)
			assert.Equal(t, tc.owned, owned)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Equal(t, "Argo CD application shop", GitOpsOwner{Tool: "argocd", Name: "shop"}.String())
	assert.Equal(t, "kustomization/flux-system/apps", GitOpsOwner{Tool: "kustomization", Name: "flux-system/apps"}.ID())
}

func argoApp(app string) wopt { return label(LabelArgoInstance, app) }

func TestPrecheckWarnsAboutGitOpsOwnersOfTheLabelAndTheTemplates(t *testing.T) {
	s := newSim(t, deploy("a", argoApp("shop")), deploy("b", argoApp("shop")), deploy("c", argoApp("shop")), deploy("d", argoApp("shop")),
		deploy("e", label("helm.toolkit.fluxcd.io/name", "e"), label("helm.toolkit.fluxcd.io/namespace", "shop")), deploy("plain"))
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	d := s.decide(nil)
	assert.Equal(t, []string{
		"namespace shop is applied by Argo CD application platform: if its istio.io/rev label is in git, a sync switches it back to 1-25 after meshwave switches it. " +
			"Hand the label over: set istio.io/rev=1-26 in git and let meshwave run the waves, or add /metadata/labels/istio.io~1rev to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option",
		"Argo CD application shop applies deployment a, deployment b, deployment c and 1 more: each move adds kubectl.kubernetes.io/restartedAt, meshwave.io/move and the persisted sidecar settings to the template, which a sync may take out again (meshwave reports it and does not restart again); " +
			"add those keys to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option",
		"Flux HelmRelease shop/e applies deployment e: each move adds kubectl.kubernetes.io/restartedAt, meshwave.io/move and the persisted sidecar settings to the template, which a sync may take out again (meshwave reports it and does not restart again); " +
			"add those keys to the HelmRelease's spec.driftDetection.ignore",
	}, d.Status.Warnings)
	var warned []string
	for _, e := range s.events {
		if e.Reason == "PrecheckWarning" {
			warned = append(warned, e.Message)
		}
	}
	assert.Equal(t, d.Status.Warnings, warned, "each warning is an Event too")
}

// stamp is the restart stamp a move made at the sim's start writes.
var stamp = t0.Format(time.RFC3339)

func TestATemplateASyncTookBackIsReportedOnceAndNeverRestartedAgain(t *testing.T) {
	s := newSim(t, deploy("a", argoApp("shop")), deploy("b"))
	s.decide(nil)
	require.Equal(t, stamp, s.snap.Workloads[0].TemplateAnnotations[AnnotationRestartedAt])
	s.rollOut("1-26", "a")

	// Argo CD's self-heal puts the template back from git; the record on
	// the Deployment's own metadata stays.
	s.now = s.now.Add(10 * time.Second)
	delete(s.snap.Workloads[0].TemplateAnnotations, AnnotationRestartedAt)
	s.events = nil
	d := s.decide(s.gates())

	assert.Empty(t, d.Moves, "no second restart")
	assert.Equal(t, []RevertSeen{{Kind: RevertTemplate, Owner: "argocd/shop"}}, d.Reverts)
	want := "deployment a's template no longer carries the kubectl.kubernetes.io/restartedAt stamp of its move to 1-26 in wave 1 (2026-11-29T12:00:00Z): " +
		"Argo CD application shop put its template back, and with it took out the persisted sidecar settings. Its pods stay on the revision istio.io/rev gives them; meshwave does not restart it again. " +
		"Add meshwave's keys to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option."
	assert.Equal(t, Event{Workload: "a", Type: EventWarning, Reason: "TemplateReverted", Message: want}, s.events[0])
	assert.Equal(t, []Revert{{Object: "a", Owner: "argocd/shop", Count: 1, At: s.now}}, s.status.Reverts)
	assert.Contains(t, s.status.Warnings, want)
	assert.Equal(t, WavePassed, s.status.WaveState, "the wave is judged as it is: its pods run the target")

	s.now = s.now.Add(10 * time.Second)
	s.events = nil
	d = s.decide(s.gates())
	assert.Empty(t, d.Reverts, "reported once")
	assert.NotContains(t, s.reasons(), "TemplateReverted")

	for i := 0; i < 10 && s.status.Phase != PhaseCompleted; i++ {
		s.now = s.now.Add(time.Minute)
		d = s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	assert.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches, "each workload restarted once")
}

func TestATemplateEditedWithoutAGitOpsOwnerIsNotReported(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	delete(s.snap.Workloads[0].TemplateAnnotations, AnnotationRestartedAt)
	d := s.decide(s.gates())
	assert.Empty(t, d.Reverts)
	assert.Empty(t, d.Moves)
}

func TestAMoveUndoneWholePausesInsteadOfASecondRestartAndMovesAgainOnlyWhenResumed(t *testing.T) {
	s := newSim(t, deploy("a", label("kustomize.toolkit.fluxcd.io/name", "apps"), label("kustomize.toolkit.fluxcd.io/namespace", "flux-system")), deploy("b"))
	s.decide(nil)
	require.Equal(t, 1, s.patches["a"])

	// The object is replaced from git: the template and the record go;
	// the ReplicaSet the move rolled out still carries its stamp.
	s.now = s.now.Add(5 * time.Second)
	w := &s.snap.Workloads[0]
	delete(w.Annotations, AnnotationMove)
	delete(w.TemplateAnnotations, AnnotationRestartedAt)
	w.RolledOutRestart = t0
	s.events = nil
	d := s.decide(nil)

	assert.Empty(t, d.Moves, "not restarted a second time")
	assert.True(t, d.SetPaused)
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Equal(t, "wave 1 paused: the move of deployment a was undone by Flux Kustomization flux-system/apps", s.status.Reason)
	want := "deployment a was restarted in wave 1 (a ReplicaSet carries its stamp 2026-11-29T12:00:00Z), then Flux Kustomization flux-system/apps put its template back and removed its meshwave.io/move record: " +
		"meshwave does not restart it again on its own. Take meshwave's keys out of git, or annotate the object in git with kustomize.toolkit.fluxcd.io/ssa: IfNotPresent; " +
		"then remove meshwave.io/paused to move it again, or set meshwave.io/skip on it"
	assert.Equal(t, Event{Workload: "a", Type: EventWarning, Reason: "TemplateReverted", Message: want}, s.events[0])
	assert.Equal(t, []RevertSeen{{Kind: RevertTemplate, Owner: "kustomization/flux-system/apps"}}, d.Reverts)
	assert.Contains(t, s.status.Warnings, want)

	s.now = s.now.Add(time.Minute)
	d = s.decide(nil)
	assert.Empty(t, d.Moves, "paused: nothing moves")

	// A person hands the template over and resumes: the move is made again,
	// and says so.
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	s.events = nil
	d = s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Contains(t, s.events, Event{Workload: "a", Type: EventNormal, Reason: "Restarted",
		Message: "moving to 1-26 in wave 1 a second time: its first move was undone (reported at 2026-11-29T12:00:05Z) and the namespace was resumed since"})
	assert.Equal(t, 2, s.patches["a"])
}

// A StatefulSet or DaemonSet replaced whole from git mid-wave loses its
// move record and its restart stamp as a Deployment does; its
// ControllerRevision still carries the wave's stamp (RolledOutRestart), so
// it is reported and the wave pauses, and it is not restarted a second
// time, at this decision or the next.
func TestAStatefulSetOrDaemonSetUndoneWholeIsReportedAndNotRestartedAgain(t *testing.T) {
	flux := func(w *Workload) {
		w.Labels["kustomize.toolkit.fluxcd.io/name"] = "apps"
		w.Labels["kustomize.toolkit.fluxcd.io/namespace"] = "flux-system"
	}
	for _, k := range []Kind{KindStatefulSet, KindDaemonSet} {
		t.Run(string(k), func(t *testing.T) {
			s := newSim(t, deploy("db", kind(k), flux), deploy("other", kind(k)))
			id := WorkloadID(k, "db")
			s.decide(nil)
			require.Equal(t, map[string]int{id: 1}, s.patches, "the canary is %s", id)

			s.now = s.now.Add(5 * time.Second)
			w := &s.snap.Workloads[0]
			require.Equal(t, id, w.Name)
			delete(w.Annotations, AnnotationMove)
			delete(w.TemplateAnnotations, AnnotationRestartedAt)
			w.RolledOutRestart = t0 // its ControllerRevision's stamp
			s.events = nil
			d := s.decide(nil)

			assert.Empty(t, d.Moves, "not restarted a second time")
			assert.True(t, d.SetPaused)
			assert.Equal(t, PhasePaused, s.status.Phase)
			described := strings.ToLower(string(k)) + " db"
			assert.Equal(t, "wave 1 paused: the move of "+described+" was undone by Flux Kustomization flux-system/apps", s.status.Reason)
			want := described + " was restarted in wave 1 (a ControllerRevision carries its stamp 2026-11-29T12:00:00Z), then Flux Kustomization flux-system/apps put its template back and removed its meshwave.io/move record: " +
				"meshwave does not restart it again on its own. Take meshwave's keys out of git, or annotate the object in git with kustomize.toolkit.fluxcd.io/ssa: IfNotPresent; " +
				"then remove meshwave.io/paused to move it again, or set meshwave.io/skip on it"
			require.NotEmpty(t, s.events)
			assert.Equal(t, Event{Workload: id, Type: EventWarning, Reason: "TemplateReverted", Message: want}, s.events[0])
			assert.Equal(t, []RevertSeen{{Kind: RevertTemplate, Owner: "kustomization/flux-system/apps"}}, d.Reverts)

			s.now = s.now.Add(time.Minute)
			d = s.decide(nil)
			assert.Empty(t, d.Moves, "paused: nothing moves")
			assert.Equal(t, map[string]int{id: 1}, s.patches)
		})
	}
}

func TestALabelSwitchedBackIsPutBackTwiceThenLeftWithAPause(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	hand := "hand the label over: set istio.io/rev=1-26 in git and let meshwave run the waves, or add /metadata/labels/istio.io~1rev to the application's ignoreDifferences with the RespectIgnoreDifferences=true sync option"
	for n := 1; n <= 2; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25" // self-heal
		s.events = nil
		d := s.decide(nil)
		assert.Equal(t, "1-26", d.Label, "put back")
		assert.Equal(t, []RevertSeen{{Kind: RevertLabel, Owner: "argocd/platform"}}, d.Reverts)
		msg := "namespace shop carries istio.io/rev=1-25 while meshwave owns its label at 1-26; it is applied by Argo CD application platform. " +
			"Put back to 1-26 (" + string(rune('0'+n)) + " of 3 times before meshwave stops and pauses); " + hand
		assert.Equal(t, []Event{{Type: EventWarning, Reason: "LabelReverted", Message: msg}}, s.events)
		assert.Contains(t, s.status.Warnings, msg)
		assert.Empty(t, d.Moves)
	}

	s.now = s.now.Add(time.Second)
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	s.events = nil
	d := s.decide(nil)
	assert.Empty(t, d.Label, "not put back a third time")
	assert.True(t, d.SetPaused)
	reason := "istio.io/rev on namespace shop was switched away from 1-26 3 times by Argo CD application platform: meshwave leaves it at 1-25 rather than fight, and pods created now get that revision; " + hand + ", then remove meshwave.io/paused"
	assert.Equal(t, "wave 1 paused: "+reason, s.status.Reason)
	assert.Equal(t, []string{"LabelReverted", "Paused"}, s.reasons())
	assert.Equal(t, []Revert{{Object: "Namespace/shop", Owner: "argocd/platform", Count: 3, At: s.now}}, s.status.Reverts)
	assert.Equal(t, []string{reason}, s.status.Warnings[len(s.status.Warnings)-1:], "the warning says where it stands, once")

	s.now = s.now.Add(time.Minute)
	s.events = nil
	d = s.decide(nil)
	assert.Empty(t, d.Label)
	assert.Empty(t, s.events, "nothing more to say while it waits")

	// A person hands the label over and resumes: meshwave owns it again.
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d = s.decide(s.gates())
	assert.Equal(t, "1-26", d.Label)
	assert.Empty(t, s.status.Reverts)
	assert.Equal(t, map[string]int{"a": 1}, s.patches, "the label fight restarted nothing")
}

// migrateAll runs the sim's migration to its end, rolling out each move.
func migrateAll(t *testing.T, s *sim) {
	t.Helper()
	for i := 0; i < 50 && s.status.Phase != PhaseCompleted; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
}

func TestMoreTemplatesRevertedThanTheStatusRemembersAreReportedOnceAndTheStatusSettles(t *testing.T) {
	var ws []Workload
	for i := 0; i < 12; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 20}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	migrateAll(t, s)

	// Argo CD's self-heal takes every template back from git.
	for i := range s.snap.Workloads {
		delete(s.snap.Workloads[i].TemplateAnnotations, AnnotationRestartedAt)
	}
	s.now = s.now.Add(time.Minute)
	s.events = nil
	d := s.decide(nil)
	assert.Len(t, d.Reverts, maxReverts, "each reverted template the status can remember is reported")
	assert.Len(t, s.status.Reverts, maxReverts)
	assert.Contains(t, s.status.Warnings, templatesUnlistedWarning, "the others together")
	assert.Equal(t, maxReverts+1, len(s.events))

	for i := 0; i < 5; i++ {
		s.now = s.now.Add(time.Second)
		s.events = nil
		d = s.decide(nil)
		assert.Empty(t, d.Reverts, "reported once, not again at decision %d", i)
		assert.Nil(t, d.Status, "nothing new to write at decision %d", i)
		assert.NotContains(t, s.reasons(), "TemplateReverted")
	}
}

func TestAnArgoCDTrackingIDOfAnyLengthKeepsTheStatusReadable(t *testing.T) {
	app := strings.Repeat("x", 100_000)
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationArgoTrackingID] = app + ":/Namespace:shop"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	for n := 1; n <= 3; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25"
		s.decide(nil) // sim.apply requires the status written to read back
	}
	assert.Equal(t, PhasePaused, s.status.Phase, "three reverts pause, whatever the owner's name")
	for _, r := range s.status.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512)
	}
	for _, r := range s.last.Reverts {
		assert.LessOrEqual(t, len(r.Owner), 512, "the metric's owner label is bounded")
	}
}

func TestALabelSwitchedBackWhileBlockedHalfWayIsNotFoughtForEver(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Labels[LabelArgoInstance] = "platform"
	s.decide(nil)
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
	// An invalid annotation blocks the migration half-way.
	s.snap.Workloads[1].Annotations[AnnotationWave] = "abc"
	s.now = s.now.Add(time.Second)
	s.decide(nil)
	require.Equal(t, PhaseBlocked, s.status.Phase)

	putBack := 0
	for n := 0; n < 10; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-25" // self-heal
		if d := s.decide(nil); d.Label != "" {
			putBack++
		}
	}
	assert.Equal(t, labelRevertLimit-1, putBack, "put back twice, as outside a block")
	assert.Equal(t, PhaseBlocked, s.status.Phase)
	assert.Equal(t, PhasePaused, s.status.BlockedPhase, "the migration under the block is paused")
	assert.Equal(t, "true", s.snap.Namespace.Annotations[AnnotationPaused])

	// The annotation is fixed: the migration stays paused, the label where
	// the owner set it, until a person resumes.
	delete(s.snap.Workloads[1].Annotations, AnnotationWave)
	s.now = s.now.Add(time.Second)
	d := s.decide(nil)
	assert.Equal(t, PhasePaused, s.status.Phase)
	assert.Empty(t, d.Label)
	assert.Empty(t, d.Moves)
	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Second)
	d = s.decide(nil)
	assert.Equal(t, "1-26", d.Label, "owned again once resumed")
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestALabelSwitchedBackDuringARollbackIsPutBackTwiceThenLeftWithAPause(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	s.now = s.now.Add(time.Second)
	s.decide(nil)
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	require.Equal(t, "1-25", s.snap.Namespace.Labels[LabelRev])

	putBack := 0
	for n := 0; n < 10; n++ {
		s.now = s.now.Add(time.Second)
		s.snap.Namespace.Labels[LabelRev] = "1-26" // self-heal
		if d := s.decide(nil); d.Label != "" {
			putBack++
		}
	}
	assert.Equal(t, labelRevertLimit-1, putBack)
	assert.Equal(t, PhasePaused, s.status.Phase, "a rollback whose label is left pauses, as a wave does")
	assert.Equal(t, WaveRollingBack, s.status.WaveState)
}

// A status edited to say the label was given up (put back as often as
// meshwave puts it back) while the wave goes on, with the label switched
// away: no wave moves on without the label, whether meshwave pauses or owns
// the label again.
func TestAnEditedStatusThatGaveTheLabelUpMidWaveDoesNotMoveOnWithoutIt(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	require.Equal(t, PhaseMigrating, s.status.Phase)
	// Someone edits the status: the label was given up three times, yet
	// the wave goes on; and switches the label.
	edited := s.status.DeepCopy()
	edited.Reverts = []Revert{{Object: "Namespace/shop", Count: labelRevertLimit, At: s.now}}
	raw, err := edited.Encode()
	require.NoError(t, err)
	s.raw = &raw
	s.snap.Namespace.Labels[LabelRev] = "1-25"
	s.rollOut("1-26", "a")
	for i := 0; i < 5; i++ {
		s.now = s.now.Add(time.Minute)
		d := s.decide(s.gates())
		if moved := forwardMoves(d); len(moved) > 0 {
			assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev], "decision %d restarts %v without the label", i, moved)
		}
		for _, m := range d.Moves {
			s.rollOut("1-26", m.Workload)
		}
	}
	if s.status.Phase != PhasePaused {
		assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev], "a wave that goes on has its label")
	}
}

// argoAppsAtWave2 is namespace shop of n workloads that the Argo CD
// application shop applies, moved in a canary of one and then waves of
// batch, played until wave 2 started.
func argoAppsAtWave2(t *testing.T, n, batch int) *sim {
	var ws []Workload
	for i := 0; i < n; i++ {
		ws = append(ws, deploy(fmt.Sprintf("w%02d", i), argoApp("shop")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: batch}
	s.decide(nil)
	s.rollOut("1-26", "w00")
	for i := 0; i < 5 && s.status.Wave < 2; i++ {
		s.now = s.now.Add(time.Minute)
		s.decide(s.gates())
	}
	require.Equal(t, 2, s.status.Wave)
	return s
}

// undoneWholeAtWave2 is argoAppsAtWave2 whose wave 2 was undone whole by
// a self-heal five seconds after it started, and the decision that found
// it, which paused the namespace.
func undoneWholeAtWave2(t *testing.T, n, batch int) (*sim, Decision) {
	s := argoAppsAtWave2(t, n, batch)
	s.now = s.now.Add(5 * time.Second)
	s.undoWhole(*s.status.WaveStartedAt)
	d := s.decide(nil)
	require.Equal(t, PhasePaused, s.status.Phase)
	return s, d
}

// undoWhole replaces every workload but the canary from git, as a
// self-heal does: its move record and restart stamp are gone, and the
// ReplicaSet it rolled out carries the stamp at.
func (s *sim) undoWhole(at time.Time) {
	for i := 1; i < len(s.snap.Workloads); i++ {
		w := &s.snap.Workloads[i]
		delete(w.Annotations, AnnotationMove)
		delete(w.TemplateAnnotations, AnnotationRestartedAt)
		w.RolledOutRestart = at
	}
}

func TestAWaveOfMoreMembersUndoneWholeThanTheRevertsListMovesAgainAfterOneResume(t *testing.T) {
	s, _ := undoneWholeAtWave2(t, 13, 20)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	assert.Len(t, d.Moves, 12, "every member undone is moved again once a person resumed")
	assert.NotEqual(t, PhasePaused, s.status.Phase, "one resume is enough")
}

// A member moved a second time after a resume, then undone whole again by
// the same self-heal, is reported again and waits for a person: a
// self-heal is never answered with one restart after another.
func TestAMemberUndoneWholeAgainAfterItsSecondMoveWaitsForAPersonAgain(t *testing.T) {
	s, _ := undoneWholeAtWave2(t, 3, 5)

	delete(s.snap.Namespace.Annotations, AnnotationPaused)
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Len(t, d.Moves, 2, "moved a second time once a person resumed")
	second := s.now

	// The self-heal undoes the second moves too.
	s.now = s.now.Add(10 * time.Second)
	s.undoWhole(second)
	d = s.decide(nil)
	assert.Empty(t, d.Moves, "no third restart on its own")
	assert.Equal(t, PhasePaused, s.status.Phase, "reported again, waiting for a person")
}

// Members of one wave undone whole by the same self-heal are each reported,
// by name, in the decision that finds them.
func TestEveryMemberUndoneWholeInOneDecisionIsReported(t *testing.T) {
	s, d := undoneWholeAtWave2(t, 3, 5)
	var reported []string
	for _, e := range d.Events {
		if e.Reason == "TemplateReverted" {
			reported = append(reported, e.Workload)
		}
	}
	assert.Equal(t, []string{"w01", "w02"}, reported)
	assert.Contains(t, s.status.Reason, "the move of deployment w01 was undone by Argo CD application shop")
	assert.Contains(t, s.status.Reason, "the move of deployment w02 was undone by Argo CD application shop")
	assert.Empty(t, d.Moves)
}
