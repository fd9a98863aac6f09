package tests

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestTheFirstWaveWaitsForTheMaintenanceWindow opts a namespace in while
// the configured maintenance window is closed: it stays Pending, says when
// the window opens, and nothing moves; the first wave starts when the
// window opens, and the migration completes inside it. The window is
// written in Asia/Kolkata (UTC+05:30) and opens at the next minute at
// least 8 s away, so the test waits 8 to 68 s for it.
func TestTheFirstWaveWaitsForTheMaintenanceWindow(t *testing.T) {
	f := fixture.New(t, world.Options{})
	const ns = "night"
	f.Given().
		Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "cart", waveAnnotation("0")).
		Deployment(ns, "web", waveAnnotation("1")).
		RolledOut(ns)

	kolkata, err := time.LoadLocation("Asia/Kolkata")
	require.NoError(t, err)
	opens := time.Now().Add(8 * time.Second).Truncate(time.Minute).Add(time.Minute)
	local := opens.In(kolkata)
	cfg := testConfig(f)
	cfg.MaintenanceWindows = []agent.MaintenanceWindow{{
		Schedule: fmt.Sprintf("%d %d * * *", local.Minute(), local.Hour()), Duration: agent.Duration(5 * time.Minute), TimeZone: "Asia/Kolkata",
	}}
	require.NoError(t, cfg.Validate())
	optIn(f, ns, "1-26", 10)
	startAgent(t, f, cfg, newAPICounter(), "agent-1")

	st := waitForPhase(f, ns, canary.PhasePending, 30*time.Second)
	f.EventuallyWithin("the namespace to wait for its window", 30*time.Second, func() (bool, string) {
		st = status(f, ns)
		return st.NextWindow != nil, st.Reason
	})
	require.True(t, time.Now().Before(opens), "the window is still closed: the test set it up too slowly")
	assert.Equal(t, opens.UTC(), st.NextWindow.UTC())
	assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at "+opens.UTC().Format(time.RFC3339), st.Reason)
	assert.Equal(t, 0, st.Wave)
	for _, name := range []string{"cart", "web"} {
		_, moved := moveRecord(f, ns, name)
		assert.False(t, moved, "%s is not moved before the window opens", name)
	}

	done := waitForPhase(f, ns, canary.PhaseCompleted, time.Until(opens)+time.Minute)
	assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", done.Reason)
	assert.Nil(t, done.NextWindow)
	first, ok := moveRecord(f, ns, "cart")
	require.True(t, ok)
	assert.False(t, first.At.Before(opens), "the first wave started at %s, not before the window opened at %s", first.At, opens)
	assert.Less(t, first.At.Sub(opens), 5*time.Second, "and promptly: the agent looked again when it opened")
	assert.False(t, done.StartedAt.Before(opens))

	var started []string
	for _, e := range eventsFor(f, "Namespace", "", ns) {
		if strings.HasPrefix(e, "WaveStarted") {
			started = append(started, e)
		}
	}
	assert.Equal(t, []string{"WaveStarted: wave 1/2 (canary) started: cart", "WaveStarted: wave 2/2 started: web"}, started)
}

// TestAWaveStartsInsideItsWindowAndARollbackRunsWhateverTheWindows stages
// what an agent stopped between two writes leaves behind, and a rollback
// that a window annotation must not stop, one namespace each on one
// world, each with an agent of its own.
func TestAWaveStartsInsideItsWindowAndARollbackRunsWhateverTheWindows(t *testing.T) {
	shared := fixture.New(t, world.Options{NoPrometheus: true})

	t.Run("a first wave none of whose restarts went out waits for the next opening when the agent comes back after its window closed", func(t *testing.T) {
		f := shared.For(t)
		const ns, next = "deferred", "deferred-next"
		optOutWhenDone(t, f, ns, next)
		f.Given().Namespace(next, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(next, "x", fixture.Replicas(1))
		f.WaitForNamespaceRolledOut(next)
		// The wave started inside a one-minute window that has closed
		// since; the next one opens at the next minute at least 15 s away,
		// so the test waits 15 to 75 s for it.
		startedAt := stageFirstWaveWrittenAsStarted(f, ns, 70*time.Second)
		opens := time.Now().UTC().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute)
		cfg := testConfig(f)
		cfg.MaintenanceWindows = []agent.MaintenanceWindow{
			{Schedule: dailyAt(startedAt), Duration: agent.Duration(time.Minute), TimeZone: "UTC"},
			{Schedule: dailyAt(opens), Duration: agent.Duration(5 * time.Minute), TimeZone: "UTC"},
		}
		require.NoError(t, cfg.Validate())
		counter := newAPICounter()
		startAgent(t, f, cfg, counter, "agent-"+ns)

		f.EventuallyWithin("the agent to decide on the staged wave", 30*time.Second, func() (bool, string) {
			st := status(f, ns)
			return st.Phase == canary.PhasePending || counter.get("PATCH deployments "+ns+"/cart") > 0,
				fmt.Sprintf("phase %s, wave %d, reason %q", st.Phase, st.Wave, st.Reason)
		})
		require.True(t, time.Now().Before(opens), "the window is still closed: the test set it up too slowly")
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/cart"), "no restart goes out of the window")
		st := status(f, ns)
		assert.Equal(t, canary.PhasePending, st.Phase)
		assert.Equal(t, 0, st.Wave)
		assert.Empty(t, st.WaveState)
		assert.Empty(t, st.Workloads)
		assert.Nil(t, st.StartedAt)
		assert.Nil(t, st.WaveStartedAt)
		require.NotNil(t, st.NextWindow)
		assert.Equal(t, opens, st.NextWindow.UTC())
		assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at "+opens.Format(time.RFC3339), st.Reason)
		assert.Equal(t, "1-25", st.SourceLabel, "the source is kept until the wave starts")
		assert.False(t, st.HoldsSlot())
		assert.Equal(t, "1-25", namespaceLabel(f, ns), "the label is back on the source")
		waitForEvent(f, "Namespace", "", ns, "WaveDeferred: ")
		waitForEvent(f, "Namespace", "", ns, "WaitingForWindow: ")
		assert.Equal(t, []string{
			"WaveDeferred: wave 1 was written as started, but none of its workloads was restarted before the maintenance window closed: it starts when a window opens",
			"WaitingForWindow: " + st.Reason,
		}, eventsFor(f, "Namespace", "", ns))

		// It holds no slot: a namespace behind it in the queue waits for its
		// turn, not for a slot.
		optIn(f, next, "1-26", 20)
		f.EventuallyWithin(next+" to wait behind "+ns, 30*time.Second, func() (bool, string) {
			st := status(f, next)
			return st != nil && st.Reason == "waiting for its turn: "+ns+" (priority 10) go first", fmt.Sprintf("%+v", st)
		})
		require.True(t, time.Now().Before(opens), "the window is still closed: the test set it up too slowly")
		assert.Zero(t, counter.get("PATCH deployments "+ns+"/cart"))
		assert.Equal(t, map[string]int{"cart": 0, "web": 0}, restarts(f, ns, "cart", "web"))
		f.When().AnnotateNamespace(next, canary.AnnotationTargetRevision, nil)

		done := waitForPhase(f, ns, canary.PhaseCompleted, time.Until(opens)+time.Minute)
		assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", done.Reason)
		first, ok := moveRecord(f, ns, "cart")
		require.True(t, ok)
		assert.False(t, first.At.Before(opens), "the first wave started at %s, not before the window opened at %s", first.At, opens)
		assert.Equal(t, done.MigrationID(), first.Migration, "a new migration, started when the window opened")
		assert.Equal(t, map[string]int{"PATCH deployments " + ns + "/cart": 1, "PATCH deployments " + ns + "/web": 1}, counter.writes("PATCH deployments "+ns+"/"))
		assert.Equal(t, map[string]int{"cart": 1, "web": 1}, restarts(f, ns, "cart", "web"))
		assert.Equal(t, "1-26", namespaceLabel(f, ns))
		f.Then().PodsOnRevision(ns, "cart", "1-26").PodsOnRevision(ns, "web", "1-26")
	})

	t.Run("inside its window, a first wave none of whose restarts went out sends them at once", func(t *testing.T) {
		f := shared.For(t)
		const ns = "resumed"
		optOutWhenDone(t, f, ns)
		startedAt := stageFirstWaveWrittenAsStarted(f, ns, time.Minute)
		phases := watchPhases(t, f, ns)
		cfg := testConfig(f)
		cfg.MaintenanceWindows = []agent.MaintenanceWindow{{Schedule: dailyAt(startedAt.Add(-time.Minute)), Duration: agent.Duration(time.Hour), TimeZone: "UTC"}}
		require.NoError(t, cfg.Validate())
		counter := newAPICounter()
		startAgent(t, f, cfg, counter, "agent-"+ns)

		f.EventuallyWithin("cart's restart", 30*time.Second, func() (bool, string) {
			_, ok := moveRecord(f, ns, "cart")
			return ok, fmt.Sprintf("%+v", status(f, ns))
		})
		r, _ := moveRecord(f, ns, "cart")
		assert.Equal(t, canary.MigrationID("1-26", startedAt), r.Migration, "the staged migration goes on")
		assert.Equal(t, 1, r.Wave)
		done := waitForPhase(f, ns, canary.PhaseCompleted, time.Minute)
		assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", done.Reason)
		assert.Equal(t, canary.MigrationID("1-26", startedAt), done.MigrationID(), "the staged migration completed")
		assert.Equal(t, map[string]int{"PATCH deployments " + ns + "/cart": 1, "PATCH deployments " + ns + "/web": 1}, counter.writes("PATCH deployments "+ns+"/"))
		assert.Equal(t, map[string]int{"cart": 1, "web": 1}, restarts(f, ns, "cart", "web"))
		// The watch may deliver the Completed status after the GET above saw it.
		f.EventuallyWithin("the watch to see Completed", 10*time.Second, func() (bool, string) {
			seen := phases()
			return len(seen) > 0 && seen[len(seen)-1] == "1-26 Completed", fmt.Sprint(seen)
		})
		assert.Equal(t, []string{"1-26 Migrating", "1-26 Completed"}, phases(), "never put back to Pending")
		for _, e := range eventsFor(f, "Namespace", "", ns) {
			assert.False(t, strings.HasPrefix(e, "WaveDeferred") || strings.HasPrefix(e, "WaitingForWindow"), e)
		}
	})

	t.Run("a window annotation that never meets the configured windows, added during a rollback, does not stop it", func(t *testing.T) {
		f := shared.For(t)
		const ns = "unwindowed"
		optOutWhenDone(t, f, ns)
		f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "cart", fixture.Replicas(1)).RolledOut(ns)
		// cart's new proxy never ACKs its routes on 1-26: the sync gate
		// fails the wave after 10 s, and the default policy rolls it back.
		heal := f.World.Mesh.Istiod("1-26").SetProxyStatus(ns, fixture.PodSelector(map[string]string{"app": "cart"}), mesh.TypeRDS, statusv3.ConfigStatus_STALE)
		t.Cleanup(heal)
		// Open now, every day from an hour ago for 6 hours; the annotation
		// opens every day 7 hours after they open, for an hour: never both.
		now := time.Now().UTC()
		cfg := testConfig(f)
		cfg.Gates.Sync.Timeout = agent.Duration(10 * time.Second)
		cfg.MaintenanceWindows = []agent.MaintenanceWindow{{Schedule: dailyAt(now.Add(-time.Hour)), Duration: agent.Duration(6 * time.Hour), TimeZone: "UTC"}}
		require.NoError(t, cfg.Validate())
		never := fmt.Sprintf(`{"schedule":%q,"duration":"1h"}`, dailyAt(now.Add(6*time.Hour)))
		phases := watchPhases(t, f, ns)
		optIn(f, ns, "1-26", 10)
		counter := newAPICounter()
		startAgent(t, f, cfg, counter, "agent-"+ns)

		var canaryPod string
		f.Eventually("cart's new pod Ready on 1-26", func() (bool, string) {
			pods, _, err := f.DeploymentPods(ns, "cart")
			require.NoError(t, err)
			if len(pods) != 1 {
				return false, fmt.Sprintf("%d pods", len(pods))
			}
			sidecar, _ := mesh.ParseSidecarStatus(pods[0])
			canaryPod = pods[0].Name
			return sidecar.Revision == "1-26" && fixture.PodReady(pods[0]), fmt.Sprintf("%s on %q", canaryPod, sidecar.Revision)
		})
		// The rollback's pod stays unready until released: the rollback
		// runs while the annotation is added.
		release := f.World.Cluster.Kubelet.HoldUnready(cluster.PodSelector{Namespace: ns, Labels: fixture.PodSelector(map[string]string{"app": "cart"}), OnlyNew: true})
		t.Cleanup(release)
		waitForPhase(f, ns, canary.PhaseRollingBack, time.Minute)
		f.When().AnnotateNamespace(ns, canary.AnnotationMaintenanceWindow, &never)

		note := fmt.Sprintf("meshwave.io/maintenance-window on namespace %s: %q is not windows that meet the agent's maintenanceWindows within a year "+
			"(a namespace narrows them, never widens them); the windows only hold the start of a wave, so a rollback, or a migration that ended, goes on as it is", ns, never)
		f.EventuallyWithin("the annotation to be reported", 30*time.Second, func() (bool, string) {
			st := status(f, ns)
			return st.Phase == canary.PhaseBlocked || slices.Contains(st.Warnings, note), fmt.Sprintf("phase %s, reason %q, warnings %q", st.Phase, st.Reason, st.Warnings)
		})
		st := status(f, ns)
		require.Equal(t, canary.PhaseRollingBack, st.Phase, "the rollback goes on: %s", st.Reason)
		release()

		f.EventuallyWithin("the rollback to end", time.Minute, func() (bool, string) {
			seen := phases()
			return slices.Contains(seen, "1-26 RolledBack"), fmt.Sprint(seen)
		})
		// The agent looks at the namespace again after its own write: it
		// stays RolledBack, the rollback's reason with it.
		time.Sleep(2 * time.Second)
		assert.Equal(t, []string{"1-26 Migrating", "1-26 RollingBack", "1-26 RolledBack"}, phases(), "never Blocked")
		st = status(f, ns)
		assert.Equal(t, canary.PhaseRolledBack, st.Phase, "%s", st.Reason)
		replicas := f.IstiodPods("1-26")
		require.Len(t, replicas, 1)
		assert.Equal(t, "rolled back 1 workloads to 1-25: wave 1 failed: xds-sync fail: 0 of 1 proxies SYNCED with istiod 1-26; "+
			canaryPod+"."+ns+" STALE on RDS with "+replicas[0]+" after 10s", st.Reason)
		assert.Contains(t, st.Warnings, note)
		var invalid []string
		for _, e := range eventsFor(f, "Namespace", "", ns) {
			if strings.HasPrefix(e, "InvalidAnnotation: ") {
				invalid = append(invalid, e)
			}
		}
		assert.Equal(t, []string{"InvalidAnnotation: " + note}, invalid, "reported once")
		assert.Equal(t, "1-25", namespaceLabel(f, ns))
		f.Then().PodsOnRevision(ns, "cart", "1-25")
		assert.Equal(t, map[string]int{"PATCH deployments " + ns + "/cart": 2}, counter.writes("PATCH deployments "+ns+"/"), "moved and returned")
	})
}

// stageFirstWaveWrittenAsStarted leaves ns as an agent stopped right after
// the write that starts a migration's first wave leaves it: istio.io/rev
// switched to 1-26 and the status at wave 1 with cart moving, but cart's
// restart never sent (no move record; its pods run 1-25). web is the
// second wave. The wave started ago before now, which it returns.
func stageFirstWaveWrittenAsStarted(f *fixture.Fixture, ns string, ago time.Duration) time.Time {
	f.T.Helper()
	f.Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
		Deployment(ns, "cart", waveAnnotation("0"), fixture.Replicas(1)).
		Deployment(ns, "web", waveAnnotation("1"), fixture.Replicas(1)).
		RolledOut(ns)
	startedAt := time.Now().UTC().Add(-ago).Truncate(time.Second)
	written := &canary.Status{
		Phase: canary.PhaseMigrating, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 2, WaveState: canary.WaveVerifying,
		Workloads: []canary.WorkloadState{{Name: "cart", State: canary.StateMoving}},
		Counts:    canary.Counts{Total: 2, Pending: 1, Moving: 1},
		StartedAt: &startedAt, WaveStartedAt: &startedAt, GatesSince: &startedAt,
	}
	raw, err := written.Encode()
	require.NoError(f.T, err)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{mesh.LabelRev: "1-26"},
		"annotations": map[string]string{canary.AnnotationTargetRevision: "1-26", canary.AnnotationPriority: "10", canary.AnnotationStatus: raw},
	}})
	require.NoError(f.T, err)
	_, err = f.Client.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(f.T, err)
	got := status(f, ns)
	require.True(f.T, written.Equal(got), "the staged status reads back as written: %+v", got)
	for _, name := range []string{"cart", "web"} {
		_, moved := moveRecord(f, ns, name)
		require.False(f.T, moved, "%s has no move record", name)
		revs, _ := f.PodRevisions(ns, name)
		for pod, rev := range revs {
			require.Equal(f.T, "1-25", rev, "pod %s", pod)
		}
	}
	return startedAt
}

// dailyAt is a schedule that opens every day at t's hour and minute, UTC.
func dailyAt(t time.Time) string {
	t = t.UTC()
	return fmt.Sprintf("%d %d * * *", t.Minute(), t.Hour())
}

// optOutWhenDone removes meshwave.io/target-revision from the namespaces
// when the scenario ends, so that one left half-way by a failure holds no
// slot in the scenarios that share its world.
func optOutWhenDone(t *testing.T, f *fixture.Fixture, namespaces ...string) {
	t.Cleanup(func() {
		for _, ns := range namespaces {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, canary.AnnotationTargetRevision)
			_, err := f.Client.CoreV1().Namespaces().Patch(f.Ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("opt %s out: %v", ns, err)
			}
		}
	})
}
