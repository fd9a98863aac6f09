package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/agent"
	"github.com/meshwave/meshwave/canary"
	"github.com/meshwave/meshwave/e2e/checkout"
	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
	"github.com/meshwave/meshwave/e2e/world"
)

// TestAFleetMovesRingByRing runs three clusters, each its own etcd,
// kube-apiserver, controllers and real istiods, each with its own agent:
// staging in the first ring, prod-eu and prod-us in the second, with a soak
// of seconds. Each reads the others through the Secrets
// create-remote-secret made.
func TestAFleetMovesRingByRing(t *testing.T) {
	const soak = 8 * time.Second
	boot := time.Now()
	// One root of trust for the fleet, plugged into every istiod, as a
	// multi-primary mesh has.
	fleetCA, err := mesh.NewPluggedCA("fleet")
	require.NoError(t, err)
	opts := world.Options{NoPrometheus: true, Tags: map[string]string{"default": "1-25"}, CA: fleetCA}
	staging, prodEU, prodUS := fixture.New(t, opts), fixture.New(t, opts), fixture.New(t, opts)
	t.Logf("three clusters booted in %s", time.Since(boot).Round(100*time.Millisecond))
	clusters := []struct {
		name string
		f    *fixture.Fixture
	}{{"staging", staging}, {"prod-eu", prodEU}, {"prod-us", prodUS}}
	secondRing := []*fixture.Fixture{prodEU, prodUS}
	all := []*fixture.Fixture{staging, prodEU, prodUS}
	rings := []agent.RingConfig{
		{Name: "staging", Clusters: []string{"staging"}, Soak: agent.Duration(soak)},
		{Name: "prod", Clusters: []string{"prod-eu", "prod-us"}},
	}

	// Each cluster's reading account, made by create-remote-secret against
	// it; its Secret applied in the others.
	for _, from := range clusters {
		out := runCLI(t, from.f, "create-remote-secret", "--name", from.name, "--token-expiration", "1h")
		var secret corev1.Secret
		require.NoError(t, yaml.Unmarshal([]byte(out), &secret), out)
		assert.Equal(t, "meshwave-remote-"+from.name, secret.Name)
		assert.Equal(t, map[string]string{agent.LabelRemoteCluster: "true"}, secret.Labels)
		for _, to := range clusters {
			if to.name == from.name {
				continue
			}
			_, err := to.f.Client.CoreV1().Secrets("istio-system").Create(to.f.Ctx, secret.DeepCopy(), metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}

	t.Run("the remote account reads namespaces and nothing else", func(t *testing.T) {
		reader := rest.CopyConfig(staging.World.Cluster.Config)
		reader.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:istio-system:meshwave-remote-reader",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:istio-system", "system:authenticated"}}
		client, err := kubernetes.NewForConfig(reader)
		require.NoError(t, err)
		_, err = client.CoreV1().Namespaces().List(staging.Ctx, metav1.ListOptions{})
		require.NoError(t, err, "list namespaces")
		_, err = client.CoreV1().Namespaces().Get(staging.Ctx, "istio-system", metav1.GetOptions{})
		require.NoError(t, err, "get a namespace")
		w, err := client.CoreV1().Namespaces().Watch(staging.Ctx, metav1.ListOptions{})
		require.NoError(t, err, "watch namespaces")
		w.Stop()
		for what, call := range map[string]func() error{
			"list pods": func() error { _, err := client.CoreV1().Pods("").List(staging.Ctx, metav1.ListOptions{}); return err },
			"list secrets": func() error {
				_, err := client.CoreV1().Secrets("istio-system").List(staging.Ctx, metav1.ListOptions{})
				return err
			},
			"list deployments": func() error {
				_, err := client.AppsV1().Deployments("").List(staging.Ctx, metav1.ListOptions{})
				return err
			},
			"patch a namespace": func() error {
				_, err := client.CoreV1().Namespaces().Patch(staging.Ctx, "istio-system", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
				return err
			},
			"create a namespace": func() error {
				_, err := client.CoreV1().Namespaces().Create(staging.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}, metav1.CreateOptions{})
				return err
			},
		} {
			assert.True(t, apierrors.IsForbidden(call()), "%s is forbidden", what)
		}
	})

	fleetConfig := func(f *fixture.Fixture, name string) agent.Config {
		cfg := testConfig(f)
		cfg.Fleet = agent.FleetConfig{Cluster: name, Rings: rings, Await: "namespace"}
		// One replica a cluster: it goes on through its own apiserver's
		// outage, which would cost a replica its lease and its run.
		cfg.LeaderElection.Enabled = false
		return cfg
	}
	agents := map[string]*runningAgent{}
	for _, c := range clusters {
		agents[c.name] = startAgent(t, c.f, fleetConfig(c.f, c.name), newAPICounter(), "agent-"+c.name)
	}

	t.Run("the second ring starts after the first completed and soaked, and waits while the first cannot be read", func(t *testing.T) {
		const ns = "shop"
		for _, f := range all {
			f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).
				Deployment(ns, "cart").Deployment(ns, "web").RolledOut(ns)
		}
		for _, f := range secondRing {
			optIn(f.For(t), ns, "1-26", 10)
		}
		for _, f := range secondRing {
			waitForReason(f.For(t), ns, "the first wave of 2 waits: waiting for namespace shop in cluster staging (ring staging) to complete the move to 1-26: ")
		}
		optIn(staging.For(t), ns, "1-26", 10)

		done := waitForPhase(staging.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
		require.NotNil(t, done.CompletedAt)
		for _, f := range secondRing {
			waitForReason(f.For(t), ns, "the first wave of 2 waits: ring staging soaks: namespace shop in cluster staging (ring staging) completed the move to 1-26, and must stay completed ")
		}

		// The first ring's apiserver stops mid-soak: the second waits, and
		// says why, past the end of the soak.
		staging.World.Cluster.StopAPIServer()
		for _, f := range secondRing {
			waitForReason(f.For(t), ns, "the first wave of 2 waits: cluster staging of ring staging cannot be read: its apiserver did not answer through Secret istio-system/meshwave-remote-staging: ")
		}
		time.Sleep(time.Until(done.CompletedAt.Add(soak + 2*time.Second)))
		for _, f := range secondRing {
			st := status(f.For(t), ns)
			require.NotNil(t, st)
			assert.Equal(t, canary.PhasePending, st.Phase, "nothing advances on missing data: %s", st.Reason)
			_, moved := moveRecord(f.For(t), ns, "cart")
			assert.False(t, moved, "no workload of the second ring restarted")
		}
		require.NoError(t, staging.World.Cluster.StartAPIServer(staging.Ctx))

		for _, f := range secondRing {
			final := waitForPhase(f.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
			assert.Equal(t, "moved 2 workloads to 1-26 in 2 waves", final.Reason)
			first := firstMove(f.For(t), ns, "cart", "web")
			assert.False(t, first.Before(done.CompletedAt.Add(soak)), "the second ring's first restart (%s) comes after the first ring's soak (%s + %s)", first, done.CompletedAt, soak)
			var waits []string
			for _, e := range eventsFor(f.For(t), "Namespace", "", ns) {
				if strings.HasPrefix(e, "WaitingForRing: ") {
					waits = append(waits, e)
				}
			}
			assert.GreaterOrEqual(t, len(waits), 3, "an Event for each thing waited for: %v", waits)
		}
		for _, f := range all {
			f.For(t).Then().PodsOnRevision(ns, "cart", "1-26").PodsOnRevision(ns, "web", "1-26")
		}
	})

	// pausedInFirstRing opts ns in to 1-26 in staging and prod-eu, one
	// Deployment each, and returns once staging's first wave has failed
	// and paused (its new pod held back from Ready until release).
	pausedInFirstRing := func(t *testing.T, ns string) (release func()) {
		t.Helper()
		for _, f := range []*fixture.Fixture{staging, prodEU} {
			f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, map[string]string{canary.AnnotationFailurePolicy: "Pause"}).
				Deployment(ns, "api", fixture.Annotations(map[string]string{canary.AnnotationReadinessTimeout: "5s"})).RolledOut(ns)
		}
		release = holdNew(staging.For(t), ns, "api")
		optIn(prodEU.For(t), ns, "1-26", 10)
		optIn(staging.For(t), ns, "1-26", 10)
		waitForPhase(staging.For(t), ns, canary.PhasePaused, 2*time.Minute)
		return release
	}

	t.Run("a wave failed and paused in the first ring holds the second until a person resumes it", func(t *testing.T) {
		const ns = "hold"
		release := pausedInFirstRing(t, ns)
		waitForReason(prodEU.For(t), ns, "the first wave of 1 waits: held by namespace hold in cluster staging (ring staging), Paused at wave 1: ")
		st := status(prodEU.For(t), ns)
		require.NotNil(t, st)
		assert.True(t, strings.HasSuffix(st.Reason, "; every later ring waits until a person resumes it or it completes"), st.Reason)

		// The pods come up; a person resumes the first ring.
		release()
		staging.For(t).When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
		done := waitForPhase(staging.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
		final := waitForPhase(prodEU.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", final.Reason)
		r, ok := moveRecord(prodEU.For(t), ns, "api")
		require.True(t, ok)
		assert.False(t, r.At.Before(done.CompletedAt.Add(soak)), "resumed, the second ring still waits out the first's soak")
	})

	t.Run("a wave rolled back in the first ring holds the second until a retry completes it", func(t *testing.T) {
		const ns = "retry"
		release := pausedInFirstRing(t, ns)

		// A person rolls the first ring's wave back.
		release()
		all := string(canary.RollbackAll)
		staging.For(t).When().AnnotateNamespace(ns, canary.AnnotationRollback, &all)
		waitForPhase(staging.For(t), ns, canary.PhaseRolledBack, 2*time.Minute)
		waitForReason(prodEU.For(t), ns, "the first wave of 1 waits: held by namespace retry in cluster staging (ring staging), RolledBack at wave 1: ")
		r, ok := moveRecord(prodEU.For(t), ns, "api")
		assert.False(t, ok, "the second ring moved nothing: %+v", r)

		// And retries it: the target removed and set again, unpaused.
		staging.For(t).When().AnnotateNamespace(ns, canary.AnnotationTargetRevision, nil)
		waitForPhase(staging.For(t), ns, canary.PhaseStopped, time.Minute)
		staging.For(t).When().AnnotateNamespace(ns, canary.AnnotationPaused, nil)
		optIn(staging.For(t), ns, "1-26", 10)
		done := waitForPhase(staging.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
		final := waitForPhase(prodEU.For(t), ns, canary.PhaseCompleted, 2*time.Minute)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", final.Reason)
		r, ok = moveRecord(prodEU.For(t), ns, "api")
		require.True(t, ok)
		assert.False(t, r.At.Before(done.CompletedAt.Add(soak)), "the retry completed, the second ring waits out its soak")
	})

	t.Run("a Completed status a person writes in the first ring starts nothing in the second", func(t *testing.T) {
		const ns = "forged"
		for _, f := range []*fixture.Fixture{staging, prodEU} {
			f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "api").RolledOut(ns)
		}
		optIn(prodEU.For(t), ns, "1-26", 10)
		waitForReason(prodEU.For(t), ns, "the first wave of 1 waits: waiting for namespace forged in cluster staging (ring staging) to complete the move to 1-26: it has not opted in")

		// In one write, the first ring's namespace opts in with a status
		// that says its move completed an hour ago.
		forgedAt := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		forged := fmt.Sprintf(`{"phase":"Completed","target":"1-26","targetRevision":"1-26","sourceLabel":"1-25","sourceRevision":"1-25","wave":1,"totalWaves":1,"counts":{"total":1,"moved":1},"startedAt":%q,"completedAt":%q}`, forgedAt, forgedAt)
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			canary.AnnotationTargetRevision: "1-26", canary.AnnotationPriority: "10", canary.AnnotationStatus: forged,
		}}})
		require.NoError(t, err)
		_, err = staging.Client.CoreV1().Namespaces().Patch(staging.Ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{})
		require.NoError(t, err)

		patchedAt := time.Now()
		staging.For(t).Eventually("a StatusRejected Event in the first ring", func() (bool, string) {
			events := eventsFor(staging.For(t), "Namespace", "", ns)
			for _, e := range events {
				if strings.HasPrefix(e, "StatusRejected: the status says migration 1-26@"+forgedAt+" completed 1 waves, but the namespace is not labelled istio.io/rev=1-26") {
					return true, ""
				}
			}
			return false, strings.Join(events, "\n")
		})
		var done *canary.Status
		staging.For(t).EventuallyWithin("the first ring's real completion", 2*time.Minute, func() (bool, string) {
			done = status(staging.For(t), ns)
			if done == nil || done.CompletedAt == nil {
				return false, "not completed"
			}
			return done.Phase == canary.PhaseCompleted && done.CompletedAt.After(patchedAt.Add(-time.Second)), fmt.Sprintf("%s, completed at %s", done.Phase, done.CompletedAt)
		})
		r, ok := moveRecord(staging.For(t), ns, "api")
		require.True(t, ok, "the first ring moved its workload")
		assert.Equal(t, 1, r.Wave)
		waitForMigration(prodEU.For(t), ns, "1-26", canary.PhaseCompleted)
		first := firstMove(prodEU.For(t), ns, "api")
		assert.False(t, first.Before(done.CompletedAt.Add(soak)), "the second ring's restart (%s) waits for the real completion (%s) and its soak", first, done.CompletedAt)
	})

	t.Run("moving the default tag in each cluster moves the fleet ring by ring, with the target auto", func(t *testing.T) {
		const ns = "follow"
		for _, f := range all {
			f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "api").RolledOut(ns)
			optIn(f.For(t), ns, canary.TargetAuto, 10)
		}
		for _, f := range all {
			st := waitForPhase(f.For(t), ns, canary.PhaseCompleted, time.Minute)
			assert.Equal(t, "1-25", st.TargetRevision, "auto is the default tag's revision, which the namespace already runs")
		}

		// The tag moves in each cluster, the later ring's first; nobody
		// writes to a namespace.
		for _, f := range []*fixture.Fixture{prodUS, prodEU, staging} {
			require.NoError(t, f.World.Mesh.SetTag(f.Ctx, "default", "1-26"))
		}
		done := waitForMigration(staging.For(t), ns, "1-26", canary.PhaseCompleted)
		for _, f := range secondRing {
			final := waitForMigration(f.For(t), ns, "1-26", canary.PhaseCompleted)
			assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", final.Reason)
			first := firstMove(f.For(t), ns, "api")
			assert.False(t, first.Before(done.CompletedAt.Add(soak)), "the second ring's restart (%s) comes after the first ring's soak (%s + %s)", first, done.CompletedAt, soak)
			var followed, waited bool
			for _, e := range eventsFor(f.For(t), "Namespace", "", ns) {
				followed = followed || strings.HasPrefix(e, "TargetFollowed: auto now resolves to 1-26 (the tag default); the migration to 1-25 completed, so a new one to 1-26 starts")
				waited = waited || strings.HasPrefix(e, "WaitingForRing: the first wave of 1 waits: ")
			}
			assert.True(t, followed, "a TargetFollowed Event")
			assert.True(t, waited, "a WaitingForRing Event")
		}
		for _, f := range all {
			n, err := f.Client.CoreV1().Namespaces().Get(f.Ctx, ns, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, canary.TargetAuto, n.Annotations[canary.AnnotationTargetRevision])
			assert.Equal(t, "1-26", n.Labels[mesh.LabelRev], "the revision auto resolved to, never the tag: its next move injects nothing before its wave")
			f.For(t).Then().PodsOnRevision(ns, "api", "1-26")
		}
	})

	t.Run("a cluster whose target distributes another root of trust is blocked with the reason", func(t *testing.T) {
		const ns = "trust"
		otherCA, err := mesh.NewPluggedCA("elsewhere")
		require.NoError(t, err)
		for _, c := range clusters {
			rev := mesh.Revision{Name: "1-27"}
			if c.f == prodUS {
				rev.CA = otherCA
			}
			require.NoError(t, c.f.World.Mesh.InstallRevision(c.f.Ctx, rev))
			c.f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "api").RolledOut(ns)
			optIn(c.f.For(t), ns, "1-27", 10)
		}
		done := waitForMigration(staging.For(t), ns, "1-27", canary.PhaseCompleted)
		assert.Equal(t, []string{fingerprint(t, fleetCA.CertPEM)}, done.Roots, "the fleet's root, as istiod distributes it in its webhook")
		final := waitForMigration(prodEU.For(t), ns, "1-27", canary.PhaseCompleted)
		assert.Equal(t, done.Roots, final.Roots)

		blocked := waitForMigration(prodUS.For(t), ns, "1-27", canary.PhaseBlocked)
		other := fingerprint(t, otherCA.CertPEM)
		assert.Equal(t, canary.BlockedPrecheck, blocked.BlockedKind)
		assert.Equal(t, fmt.Sprintf("precheck failed: the root of trust of revision 1-27 here (%s…) is not the one namespace trust in cluster staging (ring staging) published for it (%s…): workloads under two roots fail mTLS across clusters; plug the fleet's CA into this revision (Istio's cacerts) and its istiods will distribute it",
			other[:len("sha256:")+16], done.Roots[0][:len("sha256:")+16]), blocked.Reason)
		assert.Equal(t, []string{other}, blocked.Roots)
		_, moved := moveRecord(prodUS.For(t), ns, "api")
		assert.False(t, moved, "nothing restarted under another root")
		prodUS.For(t).Then().PodsOnRevision(ns, "api", "1-25")
	})

	t.Run("fleet status shows every cluster, ring by ring, through the local kubeconfig's contexts", func(t *testing.T) {
		dir := t.TempDir()
		merged := clientcmdapi.NewConfig()
		for _, c := range clusters {
			name, f := c.name, c.f
			one, err := clientcmd.LoadFromFile(f.World.Cluster.Kubeconfig)
			require.NoError(t, err)
			ctx := one.Contexts[one.CurrentContext]
			require.NotNil(t, ctx)
			merged.Clusters[name] = one.Clusters[ctx.Cluster]
			merged.AuthInfos[name] = one.AuthInfos[ctx.AuthInfo]
			merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		}
		merged.CurrentContext = "prod-eu"
		kubeconfig := filepath.Join(dir, "kubeconfig")
		require.NoError(t, clientcmd.WriteToFile(*merged, kubeconfig))
		config := filepath.Join(dir, "config.yaml")
		require.NoError(t, os.WriteFile(config, []byte("fleet:\n  cluster: prod-eu\n  rings:\n  - {name: staging, clusters: [staging], soak: 8s}\n  - {name: prod, clusters: [prod-eu, prod-us, prod-ap]}\n"), 0o600))
		cmd := exec.Command(meshwaveCLI(t), "fleet", "status", "--config", config, "-o", "json")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.Output()
		require.NoError(t, err, string(out))
		var clusters []agent.FleetCluster
		require.NoError(t, json.Unmarshal(out, &clusters), string(out))
		var got []string
		for _, c := range clusters {
			if c.Error != "" {
				got = append(got, c.Ring+"/"+c.Cluster+": "+c.Error)
				continue
			}
			for _, n := range c.Namespaces {
				got = append(got, fmt.Sprintf("%s/%s/%s: %s %s", c.Ring, c.Cluster, n.Namespace, n.Status.Phase, n.Status.TargetRevision))
			}
		}
		assert.Equal(t, []string{
			"staging/staging/follow: Completed 1-26", "staging/staging/forged: Completed 1-26", "staging/staging/hold: Completed 1-26", "staging/staging/retry: Completed 1-26", "staging/staging/shop: Completed 1-26", "staging/staging/trust: Completed 1-27",
			"prod/prod-eu/follow: Completed 1-26", "prod/prod-eu/forged: Completed 1-26", "prod/prod-eu/hold: Completed 1-26", "prod/prod-eu/retry: Completed 1-26", "prod/prod-eu/shop: Completed 1-26", "prod/prod-eu/trust: Completed 1-27",
			"prod/prod-us/follow: Completed 1-26", "prod/prod-us/shop: Completed 1-26", "prod/prod-us/trust: Blocked 1-27",
			"prod/prod-ap: no kubeconfig context of this name",
		}, got)
	})

	t.Run("one Prometheus for the fleet: each cluster's checks keep to its own series, and the dashboard's fleet row shows the rings", func(t *testing.T) {
		const ns = "checked"
		// Each cluster's agent serves its metrics; one Prometheus scrapes
		// them and each cluster's proxies, whose series it labels with
		// their cluster as an external label would.
		var targets []prom.Target
		served := map[string]*lazyHandler{}
		for _, c := range clusters {
			h := &lazyHandler{}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			served[c.name] = h
			targets = append(targets, prom.Target{Job: "meshwave", Addr: strings.TrimPrefix(srv.URL, "http://")},
				prom.Target{Job: world.MeshJob, Addr: c.f.World.Mesh.Traffic().Addr(), Labels: map[string]string{"cluster": c.name}})
		}
		// An application's alert, evaluated by the fleet's Prometheus.
		rules := filepath.Join(t.TempDir(), "rules.yaml")
		require.NoError(t, os.WriteFile(rules, []byte(`groups:
- name: application
  rules:
  - alert: CheckedAnswers5xx
    expr: sum by (cluster, namespace) (label_replace(rate(istio_requests_total{reporter="destination",destination_workload_namespace="checked",response_code=~"5.."}[5s]), "namespace", "$1", "destination_workload_namespace", "(.*)")) > 0
`), 0o644))
		fleetProm, err := prom.Start(staging.Ctx, prom.Options{Targets: targets, RuleFiles: []string{rules}})
		require.NoError(t, err)
		t.Cleanup(fleetProm.Close)

		// The agents start again with the metric checks on, through it.
		for _, c := range clusters {
			agents[c.name].Kill()
			cfg := fleetConfig(c.f, c.name)
			m := &cfg.Gates.Metrics
			m.Prometheus.URL, m.Prometheus.ClusterLabel = fleetProm.URL, "cluster"
			m.Window, m.BakeTime, m.Interval = agent.Duration(10*time.Second), agent.Duration(10*time.Second), agent.Duration(2*time.Second)
			m.RequiredPasses, m.QueryTimeout = 2, agent.Duration(3*time.Second)
			cfg.Fleet.SoakAlerts = true
			reg := prometheus.NewRegistry()
			a := startAgentWithOptions(t, c.f, cfg, newAPICounter(), "agent-"+c.name+"-checked", func(o *agent.Options) { o.Registerer = reg })
			served[c.name].set(a.Controller.Handler(reg))
		}
		begin := time.Now()

		// The same namespace and workload in every cluster; prod-us's
		// answers 5xx on 1-26.
		for _, f := range all {
			f.For(t).Given().Namespace(ns, map[string]string{mesh.LabelRev: "1-25"}, nil).Deployment(ns, "api").RolledOut(ns)
		}
		prodUS.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "api"}, "1-26", mesh.Behavior{ErrorRatio: 0.5, LatencyMs: 40})
		require.NoError(t, fleetProm.WaitForQuery(staging.Ctx, fmt.Sprintf(`sum by (cluster) (increase(istio_requests_total{reporter="destination",destination_workload_namespace=%q}[10s])) > 50`, ns), 3, time.Minute))
		for _, f := range secondRing {
			optIn(f.For(t), ns, "1-26", 10)
		}
		optIn(staging.For(t), ns, "1-26", 10)

		done := waitForMigration(staging.For(t), ns, "1-26", canary.PhaseCompleted)
		assert.Equal(t, "moved 1 workloads to 1-26 in 1 waves", done.Reason)

		// staging's api answers 5xx after it completed: the alert fires,
		// and the second ring's soak starts again from its last firing.
		staging.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "api"}, "1-26", mesh.Behavior{ErrorRatio: 0.5, LatencyMs: 40})
		waitForReason(prodEU.For(t), ns, "the first wave of 1 waits: ring staging soaks: namespace checked in cluster staging (ring staging) completed the move to 1-26; alert CheckedAnswers5xx is firing there, and its soak of 8s starts again when it stops")
		staging.World.Mesh.Traffic().SetBehavior(mesh.WorkloadRef{Namespace: ns, Name: "api"}, "1-26", mesh.DefaultBehavior)
		healed := time.Now()

		eu := waitForMigration(prodEU.For(t), ns, "1-26", canary.PhaseCompleted)
		assert.False(t, firstMove(prodEU.For(t), ns, "api").Before(healed.Add(soak)), "the second ring starts a soak after the alert's last firing, not the completion's")
		v, ok := verdictOf(eu, "error-rate")
		require.True(t, ok, "prod-eu's wave was checked: %+v", eu.Verdicts)
		assert.Equal(t, canary.ResultPass, v.Result, "prod-eu counts its own api's answers, not prod-us's of the same name: %s", v.Reason)
		us := waitForMigration(prodUS.For(t), ns, "1-26", canary.PhaseRolledBack)
		assert.Contains(t, us.Reason, "error-rate", us.Reason)
		prodUS.For(t).Then().PodsOnRevision(ns, "api", "1-25")
		prodEU.For(t).Then().PodsOnRevision(ns, "api", "1-26")

		// The dashboard's fleet row, over what the Prometheus holds.
		time.Sleep(2 * time.Second) // the last states scraped
		end := time.Now()
		path, err := checkout.Path("charts", "meshwave", "files", "dashboard.json")
		require.NoError(t, err)
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		vars := map[string]string{"namespace": ".*", "__interval": "1s", "__rate_interval": "4s", "__range": model.Duration(end.Sub(begin).Round(time.Second)).String()}
		var fleetPanels []string
		for _, tg := range dashboardTargets(t, string(raw)) {
			if tg.Row != "Fleet" {
				continue
			}
			fleetPanels = append(fleetPanels, tg.Panel)
			expr, err := grafanaExpr(tg.Expr, vars)
			require.NoError(t, err, tg.Panel)
			expr = strings.TrimSuffix(expr, " or vector(0)") // the query itself must find data
			v, _, _, err := fleetProm.API.QueryRange(staging.Ctx, expr, promv1.Range{Start: begin, End: end, Step: time.Second})
			require.NoError(t, err, tg.Panel)
			n, largest := seriesWithData(v)
			t.Logf("%-44s %d series, largest %g: %s", tg.Panel, n, largest, tg.Expr)
			if tg.Panel == "Clusters that cannot be read" {
				continue // every peer was read throughout: it shows none
			}
			assert.Positive(t, n, "%q shows nothing: %s", tg.Panel, expr)
			assert.Positive(t, largest, "%q never showed what happened: %s", tg.Panel, expr)
		}
		assert.Equal(t, []string{"Clusters that cannot be read", "Waiting for the ring before", "Holding the fleet", "Phase of each namespace, cluster by cluster", "Peers each agent can read"}, fleetPanels)
		phases, _, _, err := fleetProm.API.Query(staging.Ctx, fmt.Sprintf(`count by (cluster) (max_over_time(meshwave_namespace_phase{namespace=%q}[%s]) == 1)`, ns, vars["__range"]), end)
		require.NoError(t, err)
		var seen []string
		for _, s := range phases.(model.Vector) {
			seen = append(seen, string(s.Metric["cluster"]))
		}
		slices.Sort(seen)
		assert.Equal(t, []string{"prod-eu", "prod-us", "staging"}, seen, "each cluster's agent, told apart by its cluster label")
	})
}

// lazyHandler serves what it is set to, 503 until then: a scrape target
// whose agent starts after its Prometheus.
type lazyHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lazyHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lazyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	http.Error(w, "not started", http.StatusServiceUnavailable)
}

// waitForReason waits until namespace ns's status reason begins with want.
func waitForReason(f *fixture.Fixture, ns, want string) {
	f.T.Helper()
	f.EventuallyWithin("namespace "+ns+" to say: "+want, 2*time.Minute, func() (bool, string) {
		st := status(f, ns)
		if st == nil {
			return false, "no status"
		}
		return strings.HasPrefix(st.Reason, want), string(st.Phase) + ": " + st.Reason
	})
}

// waitForMigration waits until namespace ns's status is of the migration
// to rev, in phase.
func waitForMigration(f *fixture.Fixture, ns, rev string, phase canary.Phase) *canary.Status {
	f.T.Helper()
	var st *canary.Status
	f.EventuallyWithin(fmt.Sprintf("namespace %s to be %s to %s", ns, phase, rev), 2*time.Minute, func() (bool, string) {
		st = status(f, ns)
		if st == nil {
			return false, "no status"
		}
		return st.TargetRevision == rev && st.Phase == phase, fmt.Sprintf("%s to %s: %s", st.Phase, st.TargetRevision, st.Reason)
	})
	return st
}

// firstMove is the time of the first restart among the named Deployments'
// move records.
func firstMove(f *fixture.Fixture, ns string, names ...string) time.Time {
	f.T.Helper()
	var first time.Time
	for _, name := range names {
		if r, ok := moveRecord(f, ns, name); ok && (first.IsZero() || r.At.Before(first)) {
			first = r.At
		}
	}
	require.False(f.T, first.IsZero(), "none of %v moved", names)
	return first
}

// fingerprint is how meshwave names a root: sha256: and the hex digest of
// the certificate's DER.
func fingerprint(t *testing.T, certPEM []byte) string {
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	sum := sha256.Sum256(block.Bytes)
	return "sha256:" + hex.EncodeToString(sum[:])
}
