package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
	_ "unsafe"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/compatibility"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
)

// controllers are the kube-controller-manager loops the world runs. Version
// 1.37 names them with the -controller suffix.
//
// Left out on purpose: the pod garbage collector, which deletes pods bound
// to a node that does not exist, such as the idle pods benchmarks bind to a
// node no kubelet runs (the fake kubelet finishes every deletion itself);
// and the node lifecycle controller, which would taint the fake nodes
// not-ready once their status stops being renewed.
var controllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"daemonset-controller",
	"job-controller",
	"cronjob-controller",
	// Finished Jobs with ttlSecondsAfterFinished go away, as in a cluster.
	"ttl-after-finished-controller",
	// PodDisruptionBudgets get their status (currentHealthy,
	// disruptionsAllowed), which the Eviction API enforces.
	"disruption-controller",
	"namespace-controller",
	"garbage-collector-controller",
	"serviceaccount-controller",
	// istiod reads endpoints from EndpointSlices for EDS.
	"endpointslice-controller",
}

// startControllerManager runs kube-controller-manager in-process against the
// apiserver described by kubeconfigPath and returns a function that stops it.
// It serves no port of its own: its health is the apiserver's, and leader
// election is off because there is only one.
func startControllerManager(ctx context.Context, kubeconfigPath string) (func(), error) {
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("controller-manager options: %w", err)
	}
	// A registry of its own per start, so that a process can boot several
	// worlds one after another without re-registering component versions.
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	effectiveVersion := utilcompatibility.DefaultKubeEffectiveVersionForTest()
	effectiveVersion.SetEmulationVersion(featureGate.EmulationVersion())
	effectiveVersion.SetMinCompatibilityVersion(featureGate.MinCompatibilityVersion())
	registry := compatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(compatibility.DefaultKubeComponent, effectiveVersion, featureGate); err != nil {
		return nil, err
	}
	s.ComponentGlobalsRegistry = registry

	all, disabled, aliases := app.KnownControllers(), app.ControllersDisabledByDefault(), app.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	args := []string{
		"--kubeconfig=" + kubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + strings.Join(controllers, ","),
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10",
		"--concurrent-gc-syncs=10",
		"--concurrent-namespace-syncs=5",
	}
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	cfg, err := s.Config(ctx, all, disabled, aliases)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("controller-manager config: %w", err)
	}
	// kube-controller-manager registers its configuration in a registry
	// of the process (configz, for its /configz page, which this one does
	// not serve) and refuses to run when the name is taken: a second
	// cluster in the same process, a fleet's, would get no controllers.
	// Each start frees the name and waits until its own run has taken it.
	configzMu.Lock()
	defer configzMu.Unlock()
	configz.Delete(app.ConfigzName)
	releaseInformerName("kube-controller-manager")
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg.Complete()) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("kube-controller-manager stopped: %w", err)
		default:
		}
		return configzHas(app.ConfigzName), nil
	}); err != nil {
		cancel()
		return nil, err
	}
	return func() {
		cancel()
		<-done
		configz.Delete(app.ConfigzName)
	}, nil
}

// configzMu serialises the controller managers' starts: see
// startControllerManager.
var configzMu sync.Mutex

// configzHas reports whether the process's configz registry holds name,
// read through its own /configz handler, which changes nothing.
func configzHas(name string) bool {
	var h http.Handler
	configz.InstallHandler(muxFunc(func(_ string, handler http.Handler) { h = handler }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/configz", nil))
	var all map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &all); err != nil {
		return false
	}
	_, ok := all[name]
	return ok
}

type muxFunc func(string, http.Handler)

func (f muxFunc) Handle(path string, h http.Handler) { f(path, h) }

// informerNames is client-go's registry of informer names, which
// kube-controller-manager reserves "kube-controller-manager" in for its
// informers' metrics, refusing to start while another holds it: one
// process runs one controller manager. A fleet's clusters each run theirs
// in this process, so each start releases the reservation of the one
// before, whose informers then report no metrics of their own (nothing
// here reads them). The layout is client-go's (tools/cache/identity.go).
//
//go:linkname informerNames k8s.io/client-go/tools/cache.informerNameRegistry
var informerNames struct {
	sync.Mutex
	names map[string]*cache.InformerName
}

func releaseInformerName(name string) {
	informerNames.Lock()
	n := informerNames.names[name]
	informerNames.Unlock()
	n.Release()
}
