package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validStatus is a status meshwave writes mid-migration, as JSON.
const validStatus = `{"phase":"Migrating","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25",` +
	`"wave":1,"totalWaves":2,"waveState":"Verifying","workloads":[{"name":"a","state":"Moving"}],` +
	`"counts":{"total":3,"pending":2,"moving":1,"moved":0,"failed":0,"skipped":0},` +
	`"startedAt":"2026-11-29T12:00:00Z","waveStartedAt":"2026-11-29T12:00:00Z","gatesSince":"2026-11-29T12:00:00Z"}`

func TestParseStatusReadsWhatMeshwaveWrites(t *testing.T) {
	st, ok, err := ParseStatus(map[string]string{AnnotationStatus: validStatus})
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, PhaseMigrating, st.Phase)
	assert.Equal(t, "1-26@2026-11-29T12:00:00Z", st.MigrationID())

	_, ok, err = ParseStatus(map[string]string{})
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestAStatusThatMeshwaveCouldNotHaveWrittenIsRefused(t *testing.T) {
	edit := func(from, to string) string {
		require.Contains(t, validStatus, from)
		return strings.Replace(validStatus, from, to, 1)
	}
	tests := []struct {
		name, raw, err string
	}{
		{"not JSON", `{"phase":`, "meshwave.io/status is not meshwave's status JSON: unexpected end of JSON input"},
		{"a key meshwave does not write", edit(`"wave":1,`, `"wave":1,"waves":3,`), `meshwave.io/status is not meshwave's status JSON: unknown field "waves"`},
		{"a key spelt in another case", edit(`"wave":1,`, `"Wave":3,"wave":1,`), `meshwave.io/status is not meshwave's status JSON: unknown field "Wave"`},
		{"a key given twice", edit(`"wave":1,`, `"wave":3,"wave":1,`), `meshwave.io/status is not meshwave's status JSON: duplicate field "wave"`},
		{"an unknown phase", edit(`"phase":"Migrating"`, `"phase":"Done"`), `meshwave.io/status: phase "Done" is not a phase meshwave writes`},
		{"an unknown wave state", edit(`"waveState":"Verifying"`, `"waveState":"Verified"`), `meshwave.io/status: waveState "Verified" is not Verifying, Passed, Failed, RollingBack or empty`},
		{"a source label that is no label value", edit(`"sourceLabel":"1-25"`, `"sourceLabel":"1 25"`), `meshwave.io/status: sourceLabel "1 25" is not a valid label value`},
		{"a negative count", edit(`"pending":2`, `"pending":-2`), `meshwave.io/status: counts.pending -2 is not from 0 to 1000000`},
		{"a wave beyond the total", edit(`"totalWaves":2`, `"totalWaves":0`), `meshwave.io/status: totalWaves 0 is not from wave (1) to 1000000`},
		{"a workload state meshwave does not write", edit(`"state":"Moving"`, `"state":"Done"`), `meshwave.io/status: workloads[0].state "Done" is not a workload state`},
		{"a wave in flight without the time its gates started", edit(`,"gatesSince":"2026-11-29T12:00:00Z"`, ``), `meshwave.io/status: gatesSince null is not set while a wave is verified or rolled back`},
		{"a migrating phase before any wave", edit(`"wave":1,"totalWaves":2`, `"wave":0,"totalWaves":2`), `meshwave.io/status: waveState "Verifying" at wave 0 is not Verifying or Passed at a wave of 1 or more while Migrating`},
		{"null", `null`, `meshwave.io/status: phase "" is not a phase meshwave writes`},
		{"a gate's verdict given twice", edit(`"counts"`, `"verdicts":[{"gate":"rollout","result":"Pass","reason":"ok","at":"2026-11-29T12:00:00Z"},{"gate":"rollout","result":"Fail","reason":"no","at":"2026-11-29T12:00:00Z"}],"counts"`),
			`meshwave.io/status: verdicts[1] "rollout" "Fail" is not a named gate with a result, each gate once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ok, err := ParseStatus(map[string]string{AnnotationStatus: tt.raw})
			assert.True(t, ok)
			assert.Nil(t, st)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

func TestOnlyProgressIsTheGatesStateOfTheWaveUnderTest(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decide(nil)
	base := s.status
	require.Equal(t, WaveVerifying, base.WaveState)
	progressed := func(edit func(*Status)) *Status {
		n := base.DeepCopy()
		edit(n)
		return n
	}
	ready := timePtr(t0.Add(time.Minute))
	for _, tt := range []struct {
		name string
		next *Status
		want bool
	}{
		{"the wave came up and its checks run", progressed(func(n *Status) {
			n.Phase, n.Analysis = PhaseAnalyzing, &AnalysisState{ReadyAt: ready, ConsecutivePasses: 1}
			n.Verdicts = []Verdict{{Gate: "rollout", Result: ResultPass}}
		}), true},
		{"an inconclusive check counted", progressed(func(n *Status) { n.Analysis = &AnalysisState{Inconclusive: 2} }), true},
		{"the wave passed", progressed(func(n *Status) { n.WaveState = WavePassed }), false},
		{"a member failed", progressed(func(n *Status) { n.Workloads[0].State = StateFailed }), false},
		{"paused", progressed(func(n *Status) { n.Phase = PhasePaused }), false},
		{"a reason", progressed(func(n *Status) { n.Reason = "wave 1 held" }), false},
		{"nothing before", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prev := base
			if tt.next == nil {
				prev, tt.next = nil, base
			}
			assert.Equal(t, tt.want, OnlyProgress(prev, tt.next))
		})
	}
}

func TestStatusStaysSmallWithThousandsOfWorkloads(t *testing.T) {
	var ws []Workload
	for i := 0; i < 5000; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	for i := 0; i < 500; i++ {
		ws = append(ws, deploy(fmt.Sprintf("skip-%04d", i), ann(AnnotationSkip, "true")))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 50}
	d := s.decide(nil)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	assert.Less(t, len(raw), 8*1024, "status of %d bytes", len(raw))
	assert.Equal(t, 5500, d.Status.Counts.Total)
	assert.Len(t, d.Status.Skipped, maxSkipped)
	assert.True(t, strings.HasPrefix(d.Status.Skipped[0].Workload, "skip-"))
}

// The status stays bounded in size whatever the namespace holds, so the
// namespace write is one the apiserver takes. Under policy Pause with
// batches of 250, an admission policy refuses the restarts of wave 2 with
// a 1.1 KB answer each (Gatekeeper lists every violated constraint).
// Quoted in full in each member's reason and in each of the last
// failures', the Paused status would be well over the apiserver's 256 KiB
// limit for an object's annotations: refused with 422 and asked again
// every minute, the failed wave would never be recorded.
func TestTheStatusOfAWaveOfRefusedRestartsStaysUnderTheAnnotationLimit(t *testing.T) {
	var ws []Workload
	for i := 0; i <= 250; i++ {
		ws = append(ws, deploy(fmt.Sprintf("svc-%04d", i)))
	}
	s := newSim(t, ws...)
	s.cfg.Sizes = WaveSizes{CanarySize: 1, BatchSize: 250}
	s.cfg.FailurePolicy = PolicyPause
	s.decide(nil)
	s.rollOut("1-26", "svc-0000")
	s.decide(s.gates())
	s.now = s.now.Add(time.Minute)
	answer := `admission webhook "validation.gatekeeper.sh" denied the request: ` + strings.Repeat("[restrict-template-changes] pod template annotation changes need a change ticket; ", 13) + "(403 Forbidden)"
	s.refused = map[string]string{}
	for _, w := range ws[1:] {
		s.refused[w.Name] = answer
	}
	s.decide(nil) // wave 2's restarts are sent and refused
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	require.Equal(t, PhasePaused, d.Status.Phase)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	memberReasons, verdictReasons, failureReasons := 0, 0, 0
	for _, w := range d.Status.Workloads {
		memberReasons += len(w.Reason)
	}
	for _, v := range d.Status.Verdicts {
		verdictReasons += len(v.Reason)
	}
	for _, f := range d.Status.Failures {
		failureReasons += len(f.Reason)
	}
	assert.Less(t, len(raw), 256*1024, "the Paused status is %d bytes: reason %d, %d members' reasons %d, verdict reasons %d, %d failures' reasons %d",
		len(raw), len(d.Status.Reason), len(d.Status.Workloads), memberReasons, verdictReasons, len(d.Status.Failures), failureReasons)
}

// A status a person edited into one no decision could go on from (a
// phase it is resumed or unblocked into whose fields it lacks) is not
// read: the migration is rebuilt from the records, and what is written
// reads back.
func TestAnEditedStatusNoDecisionCouldGoOnFromIsNotRead(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		more func(s *sim)
	}{
		// paused() resumes a Paused status without a wave state at wave 1
		// into Migrating without one.
		{"paused at a wave without a wave state", func(m map[string]any) {
			m["phase"] = "Paused"
			delete(m, "waveState")
		}, nil},
		// unblock() takes it back to Migrating with the RollingBack wave state.
		{"blocked while migrating with a rollback's wave state", func(m map[string]any) {
			m["phase"], m["blockedPhase"], m["blockedKind"], m["waveState"] = "Blocked", "Migrating", "InvalidInput", "RollingBack"
		}, nil},
		// blockInvalid() keeps the Pending status's stale blockedPhase,
		// which Validate refuses at wave 0 once Blocked.
		{"pending with a blocked phase of a rollback", func(m map[string]any) {
			m["phase"], m["blockedPhase"], m["wave"] = "Pending", "RollingBack", 0
			for _, k := range []string{"waveState", "workloads", "startedAt", "waveStartedAt", "gatesSince"} {
				delete(m, k)
			}
		}, func(s *sim) { s.snap.Workloads[1].Annotations[AnnotationSkip] = "maybe" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, deploy("a"), deploy("b"))
			s.decide(nil)
			s.editStatus(c.edit)
			_, _, err := ParseStatus(map[string]string{AnnotationStatus: *s.raw})
			require.Error(t, err, "a status no decision could go on from is not read")
			if c.more != nil {
				c.more(s)
			}
			d := s.decide(nil) // the sim fails the test unless what is written reads back
			require.NotNil(t, d.Status)
			assert.Contains(t, reasonsOf(d.Events), "StatusUnreadable")
		})
	}
}
