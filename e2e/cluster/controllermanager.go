package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
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
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg.Complete()) }()
	return func() {
		cancel()
		<-done
		configz.Delete(app.ConfigzName)
	}, nil
}
