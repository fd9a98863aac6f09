package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/meshwave/meshwave/canary"
)

// At verbosity 4 the agent logs each namespace write as it sends it and
// each evaluation of a wave's gates with the members shown Ready: what an
// operator reads when a wave waits, and what the scale benchmark times an
// agent of its own process by.
func TestVerbosity4LogsNamespaceWritesAndGateEvaluations(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 4})
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), nil)
	ctx = klog.NewContext(ctx, logger)
	apiserverResourceVersions(client)
	require.NoError(t, c.sync(ctx, "shop"))
	require.Eventually(t, func() bool {
		ns, err := c.caches.Namespaces.Get("shop")
		return err == nil && c.expect.satisfied(ns, c.cachedWorkload("shop"), c.cachedPod("shop"), now)
	}, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.sync(ctx, "shop"))

	var verbose []string
	for _, l := range lines {
		if strings.Contains(l, `"msg"="Writing the namespace"`) || strings.Contains(l, `"msg"="Evaluating the wave's gates"`) {
			verbose = append(verbose, l)
		}
	}
	assert.Equal(t, []string{
		` "level"=4 "msg"="Writing the namespace" "phase"="Migrating" "wave"=1 "waveState"="Verifying" "fenceOnly"=false`,
		// The fake client's cart pod is the old one: no member is shown
		// Ready, and the injection gate fails the wave.
		` "level"=4 "msg"="Evaluating the wave's gates" "wave"=1 "rollback"=false "expect"="1-26" "readyWorkloads"=""`,
		` "level"=4 "msg"="Writing the namespace" "phase"="RollingBack" "wave"=1 "waveState"="RollingBack" "fenceOnly"=false`,
	}, verbose)
}

func TestReadyWorkloadsNamesMembersWithAPodReadyOnTheExpectedRevision(t *testing.T) {
	member := func(name string, pods ...canary.Pod) canary.WaveWorkload {
		return canary.WaveWorkload{Workload: canary.Workload{Name: name, Pods: pods}}
	}
	wave := canary.WaveUnderTest{Expect: "1-26", Workloads: []canary.WaveWorkload{
		member("ready", canary.Pod{Revision: "1-25", Ready: true}, canary.Pod{Revision: "1-26", Ready: true}),
		member("old-only", canary.Pod{Revision: "1-25", Ready: true}),
		member("not-ready", canary.Pod{Revision: "1-26"}),
		member("terminating", canary.Pod{Revision: "1-26", Ready: true, Terminating: true}),
		member("also-ready", canary.Pod{Revision: "1-26", Ready: true}),
	}}
	assert.Equal(t, "ready,also-ready", readyWorkloads(wave))
	assert.Empty(t, readyWorkloads(canary.WaveUnderTest{Expect: "1-26"}))
}
