// Command demo brings up the local world: a real control plane, a simulated
// Istio mesh with revisions 1-25 and 1-26, a sample application and a real
// Prometheus. It prints how to reach them and runs until interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/world"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	dir := flag.String("dir", filepath.Join(os.TempDir(), "meshwave-demo"), "where the world keeps its kubeconfig and data")
	exitAfter := flag.Duration("exit-after", 0, "stop after this long instead of waiting for Ctrl-C (0 waits)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	fmt.Println("starting the local world (etcd, kube-apiserver, kube-controller-manager, fake kubelet, mesh, Prometheus)...")
	w, err := world.Start(ctx, world.Options{Dir: *dir})
	if err != nil {
		return err
	}
	defer w.Stop()

	if err := deploySample(ctx, w); err != nil {
		return err
	}
	fmt.Printf("\nworld up in %s\n\n", w.BootTime.Round(time.Millisecond))
	fmt.Printf("  kubeconfig:  export KUBECONFIG=%s\n", w.Cluster.Kubeconfig)
	fmt.Printf("  Prometheus:  %s\n", w.Prometheus.URL)
	fmt.Printf("  metrics:     %s\n", w.Mesh.Traffic().URL())
	for _, rev := range []string{"1-25", "1-26"} {
		fmt.Printf("  istiod %s:  %v (xDS %d, HTTP %d)\n", rev, w.Mesh.Istiod(rev).ReplicaAddrs(), w.Mesh.Ports().GRPCTLS, w.Mesh.Ports().HTTP)
	}
	fmt.Println("\ntry: kubectl get pods -A; press Ctrl-C to stop")

	if *exitAfter > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(*exitAfter):
		}
	} else {
		<-ctx.Done()
	}
	fmt.Println("\nstopping...")
	return nil
}

// deploySample installs a three-namespace sample application on 1-25.
func deploySample(ctx context.Context, w *world.World) error {
	apps := map[string][]string{
		"shop":    {"frontend", "cart", "checkout"},
		"media":   {"catalog", "stream"},
		"reviews": {"reviews", "ratings"},
	}
	for ns, names := range apps {
		_, err := w.Cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{mesh.LabelRev: "1-25"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		for _, name := range names {
			if _, err := w.Cluster.Client.AppsV1().Deployments(ns).Create(ctx, fixture.NewDeployment(ns, name), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}
