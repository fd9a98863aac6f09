package canary

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sim is an in-memory namespace that applies decisions the way the agent
// does, so whole migrations can be played through Decide.
type sim struct {
	t       *testing.T
	snap    Snapshot
	status  *Status
	now     time.Time
	cfg     Config
	patches map[string]int
	events  []Event
	last    Decision
	// raw, when set, is the status annotation as a person or an older
	// writer left it, read back as the agent reads it.
	raw *string
	// refused are the move patches the apiserver refuses, with its answer;
	// answers are the refusals of the last decision's patches, which the
	// next decision is told about, as the agent does.
	refused, answers map[string]string
	// restored counts the patches that only wrote a move record back.
	restored map[string]int
	// optedIn is whether the namespace carried its target at the last
	// decision, as the agent remembers it.
	optedIn bool
	// deletedPolicies are the policies a decision deleted, by UID.
	deletedPolicies map[string]AuthorizationPolicy
}

func newSim(t *testing.T, ws ...Workload) *sim {
	return &sim{t: t, snap: snap(ws...), now: t0, cfg: Config{DelayBetweenWaves: time.Minute}, patches: map[string]int{}}
}

// decide runs one decision with the given verdicts and applies it.
func (s *sim) decide(verdicts []Verdict) Decision {
	s.t.Helper()
	in := Input{Snapshot: s.snap, Status: s.status, Verdicts: verdicts, Now: s.now, Config: s.cfg, WasOptedIn: s.optedIn}
	if s.raw != nil {
		in.Status, _, in.StatusErr = ParseStatus(map[string]string{AnnotationStatus: *s.raw})
	}
	in.Refused, s.answers = s.answers, nil
	d := decideBothWays(s.t, in)
	_, s.optedIn = s.snap.Namespace.Annotations[AnnotationTargetRevision]
	s.apply(d)
	s.last = d
	return d
}

// apply writes a decision as the agent does: the status read back, the
// namespace's annotations and label, and each move's patch unless the
// apiserver refuses it.
func (s *sim) apply(d Decision) {
	if d.Status != nil {
		// Every status meshwave writes is one it reads back as valid.
		raw, err := d.Status.Encode()
		require.NoError(s.t, err)
		back, _, err := ParseStatus(map[string]string{AnnotationStatus: raw})
		require.NoError(s.t, err, "the status written reads back: %s", raw)
		s.status, s.raw = back, nil
	}
	if d.SetPaused {
		s.snap.Namespace.Annotations[AnnotationPaused] = "true"
	}
	if d.ClearRollback {
		delete(s.snap.Namespace.Annotations, AnnotationRollback)
	}
	if d.Label != "" {
		s.snap.Namespace.Labels[LabelRev] = d.Label
	}
	if d.UnenrolNamespace {
		delete(s.snap.Namespace.Labels, LabelDataplaneMode)
	}
	if d.UseWaypoint != "" {
		s.snap.Namespace.Labels[LabelUseWaypoint] = d.UseWaypoint
	}
	if d.RemoveWaypoint {
		delete(s.snap.Namespace.Labels, LabelUseWaypoint)
	}
	if d.ReplacedPolicies != nil {
		if *d.ReplacedPolicies == "" {
			delete(s.snap.Namespace.Annotations, AnnotationReplacedPolicies)
		} else {
			s.snap.Namespace.Annotations[AnnotationReplacedPolicies] = *d.ReplacedPolicies
		}
	}
	if d.EnrolNamespace {
		s.snap.Namespace.Labels[LabelDataplaneMode] = DataplaneAmbient
		delete(s.snap.Namespace.Labels, LabelRev)
		delete(s.snap.Namespace.Labels, LabelInjection)
	}
	for _, m := range d.Moves {
		if answer, ok := s.refused[m.Workload]; ok {
			if s.answers == nil {
				s.answers = map[string]string{}
			}
			s.answers[m.Workload] = answer
			continue
		}
		if m.RecordOnly {
			if s.restored == nil {
				s.restored = map[string]int{}
			}
			s.restored[m.Workload]++
		} else {
			s.patches[m.Workload]++
		}
		for i := range s.snap.Workloads {
			w := &s.snap.Workloads[i]
			if w.Name != m.Workload {
				continue
			}
			var p struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					Template struct {
						Metadata struct {
							Annotations map[string]string  `json:"annotations"`
							Labels      map[string]*string `json:"labels"`
						} `json:"metadata"`
					} `json:"template"`
				} `json:"spec"`
			}
			require.NoError(s.t, json.Unmarshal(m.Patch, &p))
			for k, v := range p.Metadata.Annotations {
				w.Annotations[k] = v
			}
			for k, v := range p.Spec.Template.Metadata.Annotations {
				w.TemplateAnnotations[k] = v
			}
			for k, v := range p.Spec.Template.Metadata.Labels {
				if v == nil {
					delete(w.TemplateLabels, k)
				} else {
					w.TemplateLabels[k] = *v
				}
			}
		}
	}
	// The policies, after the moves, as the agent sends them: a delete by
	// UID, a restore from the copy (a new UID; the copy's object is the
	// policy the sim kept when it was deleted).
	for _, ref := range d.DeletePolicies {
		s.snap.Compat.AuthorizationPolicies = slices.DeleteFunc(s.snap.Compat.AuthorizationPolicies, func(ap AuthorizationPolicy) bool {
			if ap.Name == ref.Name && ap.UID == ref.UID {
				if s.deletedPolicies == nil {
					s.deletedPolicies = map[string]AuthorizationPolicy{}
				}
				s.deletedPolicies[ap.UID] = ap
				return true
			}
			return false
		})
	}
	for _, saved := range d.RestorePolicies {
		if slices.ContainsFunc(s.snap.Compat.AuthorizationPolicies, func(ap AuthorizationPolicy) bool { return ap.Name == saved.Name }) {
			continue // AlreadyExists
		}
		ap := s.deletedPolicies[saved.UID]
		ap.UID = saved.UID + "-restored"
		s.snap.Compat.AuthorizationPolicies = append(s.snap.Compat.AuthorizationPolicies, ap)
	}
	s.events = append(s.events, d.Events...)
}

// rollOut makes every pod of the named workloads run rev.
func (s *sim) rollOut(rev string, names ...string) {
	for _, n := range names {
		for i := range s.snap.Workloads {
			if s.snap.Workloads[i].Name == n {
				onRevision(rev)(&s.snap.Workloads[i])
			}
		}
	}
}

// rollOutRecord makes w's pods run where its last record sent it: a
// sidecar of its revision, or ambient for a forward move to ambient.
func (s *sim) rollOutRecord(w Workload) {
	r, ok := ReadMoveRecord(w.Annotations)
	switch {
	case !ok:
	case r.Mode == ModeAmbient && !r.Rollback:
		s.rollOutAmbient(w.Name)
	default:
		s.rollOut(r.Revision, w.Name)
	}
}

// rollOutAmbient makes every pod of the named workloads run without a
// sidecar, enrolled in ambient by its label.
func (s *sim) rollOutAmbient(names ...string) {
	for _, n := range names {
		for i := range s.snap.Workloads {
			if s.snap.Workloads[i].Name == n {
				inAmbient()(&s.snap.Workloads[i])
			}
		}
	}
}

// gates evaluates a stand-in chain: each wave member passes when its pods
// run the expected revision, else it is pending.
func (s *sim) gates() []Verdict {
	w, ok := waveToVerify(s.snap, s.status, s.cfg)
	if !ok {
		return nil
	}
	expect := Place{Revision: w.Expect, Ambient: w.Ambient}
	for _, m := range w.Workloads {
		for _, p := range m.Pods {
			if !p.At(expect) {
				return []Verdict{{Gate: "rollout", Result: ResultPending, Reason: m.Name + " rolling out", RetryAfter: 5 * time.Second}}
			}
		}
	}
	return []Verdict{{Gate: "rollout", Result: ResultPass, Reason: "all rolled out"}}
}

// reasons lists the reasons of the events the sim's decisions emitted.
func (s *sim) reasons() []string {
	var out []string
	for _, e := range s.events {
		out = append(out, e.Reason)
	}
	return out
}

// pass is a verdict of gate that passed.
func pass(gate string) Verdict { return Verdict{Gate: gate, Result: ResultPass, Reason: "ok"} }

// failRollout is the rollout gate failing the wave for the named workload.
func failRollout(name, reason string) []Verdict {
	return []Verdict{{Gate: "rollout", Result: ResultFail, Reason: reason, Failed: []WorkloadState{{Name: name, State: StateFailed, Reason: reason}}}}
}

// playUntil decides, rolling out every patched workload and passing the
// stand-in gates, until the status reaches phase (or 40 decisions pass).
func (s *sim) playUntil(phase Phase) {
	s.t.Helper()
	for i := 0; i < 40 && (s.status == nil || s.status.Phase != phase); i++ {
		for _, w := range s.snap.Workloads {
			s.rollOutRecord(w)
		}
		s.decide(s.gates())
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(s.t, phase, s.status.Phase, s.status.Reason)
}

// editStatus rewrites the status JSON as a person would.
func (s *sim) editStatus(edit func(map[string]any)) {
	raw, err := s.status.Encode()
	require.NoError(s.t, err)
	var m map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(raw), &m))
	edit(m)
	out, err := json.Marshal(m)
	require.NoError(s.t, err)
	str := string(out)
	s.raw, s.status = &str, nil
}

// step3 rolls out every workload to its last record, lets two minutes pass
// and decides with the verdicts given.
func (s *sim) step3(verdicts func() []Verdict) Decision {
	for _, w := range s.snap.Workloads {
		if r, ok := ReadMoveRecord(w.Annotations); ok {
			s.rollOut(r.Revision, w.Name)
		}
	}
	s.now = s.now.Add(2 * time.Minute)
	return s.decide(verdicts())
}

// batchedSim is namespace shop of the named workloads, moved in a canary
// of one and then waves of two.
func batchedSim(t *testing.T, names ...string) *sim {
	var ws []Workload
	for _, n := range names {
		ws = append(ws, deploy(n))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	return s
}

// install adds ready control planes of the revisions to the mesh.
func (s *sim) install(revs ...string) {
	for _, rev := range revs {
		s.snap.Mesh.Revisions[rev] = Revision{Name: rev, Istiods: 1, ReadyIstiods: 1}
	}
}

// toWave2 plays a, then b and c: wave 2 is patched, not rolled out.
func toWave2(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	d := s.decide(nil)
	require.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 2)
	return s
}

// onTag4 is shop (a, b, c, d) migrating to the tag canary (1-26), with
// 1-27 installed; canary 1, batches of 2.
func onTag4(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c", "d")
	s.install("1-27")
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	return s
}

// toWave2Passed plays onTag4 until wave 2 (b, c) passed: a, b, c on 1-26.
func toWave2Passed(t *testing.T) *sim {
	s := onTag4(t)
	for i := 0; i < 20 && (s.status == nil || s.status.Wave < 2 || s.status.WaveState != WavePassed); i++ {
		s.step3(s.gates)
	}
	require.Equal(t, 2, s.status.Wave)
	require.Equal(t, WavePassed, s.status.WaveState)
	return s
}

// midRollback plays toWave2Passed into a rollback of everything asked by
// a person, left as how says: "rolling back", "paused rolling back" (a
// rollback restart failed) or "blocked rolling back" (an invalid
// annotation). release lifts the pause or the block.
func midRollback(t *testing.T, how string) (s *sim, played []Decision, release func()) {
	t.Helper()
	s = toWave2Passed(t)
	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	played = append(played, s.step3(s.gates))
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	switch how {
	case "paused rolling back":
		s.now = s.now.Add(time.Minute)
		played = append(played, s.decide(failRollout("a", "bad")))
		require.Equal(t, PhasePaused, s.status.Phase)
		require.Equal(t, WaveRollingBack, s.status.WaveState)
	case "blocked rolling back":
		s.snap.Workloads[3].Annotations[AnnotationWave] = "-1"
		played = append(played, s.decide(nil))
		require.Equal(t, PhaseBlocked, s.status.Phase)
	}
	return s, played, func() {
		switch how {
		case "paused rolling back":
			delete(s.snap.Namespace.Annotations, AnnotationPaused)
		case "blocked rolling back":
			delete(s.snap.Workloads[3].Annotations, AnnotationWave)
		}
	}
}

// completedOnTag plays shop to Completed on the tag canary (1-26), then
// repoints canary to 1-27.
func completedOnTag(t *testing.T) *sim {
	s := batchedSim(t, "a", "b", "c")
	s.install("1-27")
	s.snap.Namespace.Annotations[AnnotationTargetRevision] = "canary"
	s.playUntil(PhaseCompleted)
	require.Equal(t, "1-26", s.status.TargetRevision)
	s.now = s.now.Add(time.Hour)
	s.snap.Mesh.Tags["canary"] = "1-27"
	s.decide(nil)
	require.Equal(t, PhaseCompleted, s.status.Phase)
	require.Equal(t, "1-26", s.status.TargetRevision, "an ended status keeps its revision")
	return s
}

func TestAWholeMigrationMovesEveryWaveInOrderAndCompletes(t *testing.T) {
	s := newSim(t, deploy("a", waveAnn("0")), deploy("b", waveAnn("1")), deploy("c", waveAnn("1")), deploy("d"),
		deploy("gw", label("istio", "ingressgateway")))
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 2}
	var order [][]string
	for i := 0; i < 40 && (s.status == nil || s.status.Phase != PhaseCompleted); i++ {
		d := s.decide(s.gates())
		if len(d.Moves) > 0 {
			var names []string
			for _, m := range d.Moves {
				names = append(names, m.Workload)
			}
			order = append(order, names)
			s.rollOut("1-26", names...)
		}
		s.now = s.now.Add(time.Minute)
	}
	require.Equal(t, PhaseCompleted, s.status.Phase)
	assert.Equal(t, [][]string{{"a"}, {"b", "c"}, {"d"}}, order)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, s.patches, "each workload is patched exactly once; the gateway never")
	assert.Equal(t, "moved 4 workloads to 1-26 in 3 waves", s.status.Reason)
	assert.Equal(t, Counts{Total: 5, Moved: 4, Skipped: 1}, s.status.Counts)
	assert.Equal(t, 3, s.status.TotalWaves)
	assert.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])
}
