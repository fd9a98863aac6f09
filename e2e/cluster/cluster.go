package cluster

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Options configure a Cluster.
type Options struct {
	// Kubelet configures the fake kubelet.
	Kubelet KubeletOptions
	// Logf receives the control plane's log lines. Nil discards them.
	Logf func(format string, args ...any)
	// Dir holds etcd's data and the kubeconfig. Empty means a fresh
	// temporary directory, removed on Stop.
	Dir string
}

// Cluster is a running control plane.
type Cluster struct {
	// Config is an administrator's client configuration.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// Kubelet is the fake kubelet, for scenarios that inject pod faults.
	Kubelet *Kubelet
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// BootTime is how long Start took.
	BootTime time.Duration

	tb       *harnessTB
	api      *apiServer
	cancel   context.CancelFunc
	stops    []func()
	stopOnce sync.Once
}

// StripManagedFields is an informer's transform that drops each object's
// managed fields.
func StripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

var quietKlog sync.Once

// silenceKlog routes the global klog output, which the apiserver and the
// controllers write to directly, away from stderr unless the environment
// asks for it. A test run would otherwise print tens of thousands of lines.
func silenceKlog() {
	quietKlog.Do(func() {
		if os.Getenv("MESHWAVE_E2E_KLOG") != "" {
			return
		}
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("alsologtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	})
}

// Start boots etcd, kube-apiserver, kube-controller-manager and the fake
// kubelet, and returns when all of them are serving.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	begin := time.Now()
	silenceKlog()
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c := &Cluster{tb: &harnessTB{name: "meshwave-e2e", logf: logf}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	dir := opts.Dir
	if dir == "" {
		dir = c.tb.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}

	etcd, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	c.stops = append(c.stops, etcd.stop)

	api, err := startAPIServer(c.tb, etcd.clientURL, filepath.Join(dir, "apiserver"))
	if err != nil {
		return nil, err
	}
	c.api = api
	c.stops = append(c.stops, api.close)
	c.Config = api.config
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(c.Config, c.Kubeconfig); err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel

	stopKCM, err := startControllerManager(runCtx, c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	c.stops = append(c.stops, stopKCM)

	// The fake kubelet keeps only what it reads (see Kubelet.keep): a
	// world loaded with 100,000 pods holds them in the apiserver's cache
	// and the controllers' informers already.
	factory := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTransform(func(obj any) (any, error) {
		return c.Kubelet.keep(obj)
	}))
	c.Kubelet = newKubelet(c.Client, opts.Kubelet)
	// The kubelet's server stops when runCtx ends; Stop waits for it.
	c.stops = append(c.stops, c.Kubelet.waitServed)
	if err := c.Kubelet.start(runCtx, factory); err != nil {
		return nil, err
	}
	factory.Start(runCtx.Done())
	for typ, ok := range factory.WaitForCacheSync(runCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("fake kubelet: cache for %v did not sync", typ)
		}
	}
	c.stops = append(c.stops, factory.Shutdown)
	c.BootTime = time.Since(begin)
	return c, nil
}

// RestartAPIServer stops kube-apiserver, dropping every connection to it,
// and starts it again on the same etcd at the same address, with the same
// certificate and credentials: clients reconnect as they would to a
// restarted apiserver process. It returns once the new one serves.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.api.restart(ctx); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.Discovery().ServerVersion()
		return err == nil, nil
	})
}

// StopAPIServer stops kube-apiserver, dropping every connection to it, and
// leaves it stopped until StartAPIServer: an outage of the cluster's API,
// as the clients outside and inside it see one.
func (c *Cluster) StopAPIServer() {
	c.api.forward.setTarget("")
	c.api.forward.dropAll()
	c.api.stop()
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same etcd at the same address, and returns once it serves.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	addr, err := c.api.start()
	if err != nil {
		return err
	}
	c.api.forward.setTarget(addr)
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.Discovery().ServerVersion()
		return err == nil, nil
	})
}

// Stop stops every component, newest first, and removes temporary files.
// It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		for i := len(c.stops) - 1; i >= 0; i-- {
			c.stops[i]()
		}
		c.tb.runCleanups()
	})
}
