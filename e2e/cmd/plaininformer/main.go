// Command plaininformer is the yardstick of the memory benchmark: plain,
// full-object shared informers over what the agent watches (namespaces,
// Deployments, ReplicaSets, pods), as a controller without meshwave's
// trimming would hold them, with client-go's defaults (JSON, the
// watch-list). It prints its Go heap and the bytes its connections
// received once synced and waits to be killed, so that its resident
// memory can be read.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
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
	var received atomic.Int64
	dial := (&net.Dialer{}).DialContext
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &received}, nil
	}
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
	fmt.Printf("synced heap_inuse=%d heap_alloc=%d received=%d\n", m.HeapInuse, m.HeapAlloc, received.Load())
	<-ctx.Done()
	return nil
}

// countingConn counts the bytes a connection receives, as they arrive.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}
