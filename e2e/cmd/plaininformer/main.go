// Command plaininformer is the yardstick of the memory benchmark: plain,
// full-object shared informers over what the agent watches (namespaces,
// Deployments, ReplicaSets, pods), as a controller without meshwave's
// trimming would hold them. It prints its Go heap once synced and waits to
// be killed, so that its resident memory can be read.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig")
	flag.Parse()
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "plaininformer:", err)
		os.Exit(1)
	}
}

func run(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f := informers.NewSharedInformerFactory(client, 0)
	f.Core().V1().Namespaces().Informer()
	f.Apps().V1().Deployments().Informer()
	f.Apps().V1().ReplicaSets().Informer()
	f.Core().V1().Pods().Informer()
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("%v did not sync", typ)
		}
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fmt.Printf("synced heap_inuse=%d heap_alloc=%d\n", m.HeapInuse, m.HeapAlloc)
	<-ctx.Done()
	return nil
}
