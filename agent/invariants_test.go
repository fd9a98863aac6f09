package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/meshwave/meshwave/canary"
)

// The controller's side of the promises meshwave keeps against refused
// writes and concurrent admissions.

// A refused write is reported with an Event and a status reason, and the
// failure policy applies; it is not retried forever.
//
// Scenario: an admission policy on Namespaces (Kyverno/Gatekeeper
// protecting istio.io/rev, or the 256 KiB annotation limit answering 422)
// refuses meshwave's namespace write with 403. A namespace write is
// treated as a refusal, as a Deployment patch is: an Event names the
// answer and the write is asked again later, rather than the reconcile
// failing and the workqueue retrying it with back-off forever, with no
// status saying why nothing happens.
func TestARefusedNamespaceWriteIsReportedAndAskedAgainLater(t *testing.T) {
	recorder := record.NewFakeRecorder(100)
	c, client, ctx := startTestController(t, recorder, nil)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "shop",
		errString(`admission webhook "protect-rev.example" denied the request: istio.io/rev is managed by platform`))
	client.PrependReactor("patch", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, forbidden
	})

	var errs int
	for i := 0; i < 5; i++ {
		err := c.sync(ctx, "shop")
		if err != nil {
			errs++
		}
		c.handleErr(ctx, "shop", err)
	}
	close(recorder.Events)
	var events []string
	for e := range recorder.Events {
		events = append(events, e)
	}
	nsPatches := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "namespaces" {
			nsPatches++
		}
	}
	const want = `Warning NamespaceWriteRefused the apiserver refused meshwave's write to namespace shop, so nothing was changed; asking again in 1m0s: namespaces "shop" is forbidden: admission webhook "protect-rev.example" denied the request: istio.io/rev is managed by platform (403 Forbidden)`
	require.NotEmpty(t, events, "the 403 is never reported: %d reconciles failed, %d namespace patches sent", errs, nsPatches)
	assert.Equal(t, want, events[0])
	assert.Equal(t, 5, nsPatches, "one write per reconcile, none retried within it")
	assert.Zero(t, c.queue.NumRequeues("shop"), "asked again after a minute, not at the queue's back-off pace")
	for _, a := range client.Actions() {
		assert.NotEqual(t, "deployments", a.GetResource().Resource, "nothing restarts after a namespace write that did not land")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// Never more namespaces migrating than concurrency allows: the
// reconciles whose decision reads the peers to admit a migration are
// serialised (admitMu).
//
// Scenario: shop's previous migration ended (RolledBack, then its target
// was removed: Stopped) and the target is added again to retry. Its cached
// status is terminal, yet the decision starts wave 1. Here another worker
// holds admitMu (it is admitting another namespace from a snapshot in
// which shop holds no slot): shop's reconcile must wait for it, or both
// namespaces start with concurrency 1. The same holds for a Completed or
// RolledBack status whose target is changed.
func TestARetryFromAStoppedStatusIsSerialisedWithOtherAdmissions(t *testing.T) {
	stopped, err := (&canary.Status{Phase: canary.PhaseStopped, Target: "1-26", TargetRevision: "1-26",
		Reason: "meshwave.io/target-revision was removed after the migration ended RolledBack"}).Encode()
	require.NoError(t, err)
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), func(c *Controller) {
		ns, err := c.client.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
		require.NoError(t, err)
		ns.Annotations[canary.AnnotationStatus] = stopped
		_, err = c.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
		require.NoError(t, err)
	})
	st, _, err := canary.ParseStatus(map[string]string{canary.AnnotationStatus: stopped})
	require.NoError(t, err)

	c.admitMu.Lock() // another worker is admitting another namespace
	done := make(chan error, 1)
	go func() { done <- c.sync(ctx, "shop") }()
	select {
	case err := <-done:
		c.admitMu.Unlock()
		require.NoError(t, err)
		ns, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
		require.NoError(t, err)
		now, _, _ := canary.ParseStatus(ns.Annotations)
		t.Errorf("shop started a migration (phase %s, wave %d, takes a slot: %v) while another admission held admitMu",
			now.Phase, now.Wave, canary.TakesSlot(st, now))
	case <-time.After(time.Second):
		c.admitMu.Unlock()
		<-done
	}
}

// Only a decision that may start a migration reads the peers and waits for
// the admission lock: a namespace whose migration ended decides without
// them (as does one under way), so a long admission elsewhere never holds
// it up.
func TestAnEndedMigrationDoesNotWaitForAnotherAdmission(t *testing.T) {
	at := now.Add(-time.Hour)
	completed, err := (&canary.Status{Phase: canary.PhaseCompleted, Target: "1-26", TargetRevision: "1-26", SourceLabel: "1-25", SourceRevision: "1-25",
		Wave: 1, TotalWaves: 1, StartedAt: &at, CompletedAt: &at, Reason: "moved 1 workloads to 1-26 in 1 waves"}).Encode()
	require.NoError(t, err)
	c, client, ctx := startTestController(t, record.NewFakeRecorder(100), func(c *Controller) {
		ns, err := c.client.CoreV1().Namespaces().Get(context.Background(), "shop", metav1.GetOptions{})
		require.NoError(t, err)
		ns.Annotations[canary.AnnotationStatus] = completed
		ns.Labels[canary.LabelRev] = "1-26" // where the migration left it
		_, err = c.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{})
		require.NoError(t, err)
	})

	c.admitMu.Lock() // another worker is admitting another namespace
	defer c.admitMu.Unlock()
	done := make(chan error, 1)
	go func() { done <- c.sync(ctx, "shop") }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reconcile of a namespace whose migration ended waited for another namespace's admission")
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
	require.NoError(t, err)
	st, _, err := canary.ParseStatus(ns.Annotations)
	require.NoError(t, err)
	assert.Equal(t, canary.PhaseCompleted, st.Phase)
}
