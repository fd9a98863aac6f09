package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheStatusAccountsForWhatMeshwaveNeverRestarts(t *testing.T) {
	s := snap(deploy("api"))
	s.Namespace.Labels[LabelRev] = "1-26"
	s.Unmovable = []Unmovable{
		{ID: "CronJob/nightly", Revisions: map[string]int{"1-25": 1}},
		{ID: "Job/migrate", Revisions: map[string]int{"1-25": 2, "1-26": 1}},
		{ID: "Job/fresh", Revisions: map[string]int{"1-26": 1}},
		{ID: "Pod/debug", Revisions: map[string]int{"1-25": 1}},
		{ID: "ReplicaSet/old-web", Revisions: map[string]int{"1-24": 1, "1-25": 1}},
		{ID: "Workflow/etl", Revisions: map[string]int{"1-25": 1}},
	}
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	assert.Equal(t, []Exclusion{
		{"CronJob/nightly", "1 running pod carries a proxy of 1-25: meshwave never restarts a Job: the running one finishes where it started; the next run starts with istio.io/rev=1-26"},
		{"Job/migrate", "2 running pods carry a proxy of 1-25: meshwave never restarts a Job: it finishes where it started"},
		{"Pod/debug", "1 running pod carries a proxy of 1-25: a bare pod has no controller to create it again: it needs a person"},
		{"ReplicaSet/old-web", "2 running pods carry a proxy of 1-24, 1-25: no Deployment owns this ReplicaSet, so nothing restarts its pods: it needs a person"},
		{"Workflow/etl", "1 running pod carries a proxy of 1-25: its owner is a Workflow, which meshwave does not restart: it needs a person"},
	}, d.Status.Unmovable, "a Job already on the target is not listed")
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	back, _, err := ParseStatus(map[string]string{AnnotationStatus: raw})
	require.NoError(t, err)
	assert.Equal(t, d.Status.Unmovable, back.Unmovable)
}

func TestTheUnmovableListIsBounded(t *testing.T) {
	var ws []Unmovable
	for i := 0; i < 100; i++ {
		ws = append(ws, Unmovable{ID: fmt.Sprintf("Pod/p-%03d", i), Revisions: map[string]int{"1-25": 1}})
	}
	got := unmovable(ws, "1-26", "1-26")
	require.Len(t, got, maxSkipped)
	assert.Equal(t, Exclusion{"*", "and 81 more: see meshwave holders"}, got[maxSkipped-1])

	st := Status{Phase: PhasePending, Target: "1-26"}
	for i := 0; i <= maxSkipped; i++ {
		st.Unmovable = append(st.Unmovable, Exclusion{Workload: "Pod/x", Reason: "r"})
	}
	raw, err := st.Encode()
	require.NoError(t, err)
	_, _, err = ParseStatus(map[string]string{AnnotationStatus: raw})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unmovable")
}

func TestWhatMeshwaveNeverRestartsCostsNoWriteOfItsOwn(t *testing.T) {
	s := snap(deploy("api"))
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	s.Namespace.Annotations[AnnotationStatus] = raw
	s.Workloads[0].Annotations[AnnotationMove] = d.Moves[0].Record.Encode()
	s.Namespace.Labels[LabelRev] = d.Label
	st, _, err := ParseStatus(s.Namespace.Annotations)
	require.NoError(t, err)

	// A Job's pod appears mid-wave: no write for it alone.
	s.Unmovable = []Unmovable{{ID: "Job/report", Revisions: map[string]int{"1-25": 1}}}
	pending := []Verdict{{Gate: "rollout", Result: ResultPending, RetryAfter: time.Second}}
	d = Decide(Input{Snapshot: s, Status: st, Verdicts: pending, Now: t0.Add(time.Second), Config: DefaultConfig()})
	assert.True(t, d.Status == nil || OnlyProgress(st, d.Status), "no status write for a Job's pod alone")

	// The next write carries it.
	passed := []Verdict{{Gate: "rollout", Result: ResultPass}}
	d = Decide(Input{Snapshot: s, Status: st, Verdicts: passed, Now: t0.Add(2 * time.Second), Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	assert.Equal(t, []Exclusion{{"Job/report", "1 running pod carries a proxy of 1-25: meshwave never restarts a Job: it finishes where it started"}}, d.Status.Unmovable)
}

func TestWhatMeshwaveNeverRestartsIsBoundedWhateverItsPodsSay(t *testing.T) {
	s := snap(deploy("api"))
	revs := map[string]int{}
	for i := 0; i < 2000; i++ {
		revs[fmt.Sprintf("rev-%04d-%s", i, strings.Repeat("x", 50))] = 1
	}
	var ws []Unmovable
	for i := 0; i < maxSkipped; i++ {
		// A pod's owner reference may name any kind, and its sidecar
		// status any revision.
		ws = append(ws, Unmovable{ID: fmt.Sprintf("%s/p-%02d", strings.Repeat("K", 10_000), i), Revisions: revs})
	}
	s.Unmovable = ws
	d := Decide(Input{Snapshot: s, Now: t0, Config: DefaultConfig()})
	require.NotNil(t, d.Status)
	raw, err := d.Status.Encode()
	require.NoError(t, err)
	assert.Less(t, len(raw), 16<<10, "the status stays small")
	for _, x := range d.Status.Unmovable {
		assert.LessOrEqual(t, len(x.Reason), maxItemReason)
	}
	_, _, err = ParseStatus(map[string]string{AnnotationStatus: raw})
	require.NoError(t, err)
}
