package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/cluster"
)

// The tests of this file share one cluster, booted by the first that needs
// it and stopped when they are done.
var (
	shared     *cluster.Cluster
	sharedErr  error
	sharedOnce sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

func world(t *testing.T) *cluster.Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = cluster.Start(context.Background(), cluster.Options{Kubelet: cluster.KubeletOptions{Nodes: 2}})
	})
	require.NoError(t, sharedErr, "boot the cluster")
	return shared
}

// loopbackIP is an address of 127.0.0.0/8 for a pod, chosen at random so
// that test processes running at once do not collide.
func loopbackIP() string {
	return fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(250), rand.IntN(250), 2+rand.IntN(250))
}

func createNamespace(t *testing.T, c *cluster.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// createPod creates a one-container pod labelled app=name and waits until
// done says it has got where the test needs it.
func createPod(t *testing.T, c *cluster.Cluster, ns, name string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{{Name: "app", Image: "example.com/" + name + ":1"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	_, err := c.Client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && done(got), nil
	})
	require.NoError(t, err, "wait for pod %s/%s", ns, name)
	return got
}

// dialers are the ways a client reaches pods/portforward: kubectl's (and
// istioctl's) websocket tunnel falling back to SPDY, the tunnel alone, and
// SPDY alone. fellBack is set when the fallback dialer used SPDY.
type dialerKind struct {
	name     string
	fallback bool
	new      func(t *testing.T, c *cluster.Cluster, ns, pod string, fellBack *atomic.Bool) httpstream.Dialer
}

var dialers = []dialerKind{
	{"websocket falling back to SPDY", true, func(t *testing.T, c *cluster.Cluster, ns, pod string, fellBack *atomic.Bool) httpstream.Dialer {
		ws := websocketDialer(t, c, ns, pod)
		// As kubectl decides: the websocket dialer's upgrade failure is
		// k8s.io/streaming's type, which apimachinery's
		// httpstream.IsUpgradeFailure does not recognise.
		return portforward.NewFallbackDialer(ws, recordingDialer{spdyDialer(t, c, ns, pod), fellBack}, func(err error) bool {
			return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
		})
	}},
	{"websocket", false, func(t *testing.T, c *cluster.Cluster, ns, pod string, _ *atomic.Bool) httpstream.Dialer {
		return websocketDialer(t, c, ns, pod)
	}},
	{"SPDY", false, func(t *testing.T, c *cluster.Cluster, ns, pod string, _ *atomic.Bool) httpstream.Dialer {
		return spdyDialer(t, c, ns, pod)
	}},
}

func websocketDialer(t *testing.T, c *cluster.Cluster, ns, pod string) httpstream.Dialer {
	u := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	d, err := portforward.NewSPDYOverWebsocketDialer(u, c.Config)
	require.NoError(t, err)
	return d
}

func spdyDialer(t *testing.T, c *cluster.Cluster, ns, pod string) httpstream.Dialer {
	u := c.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(c.Config)
	require.NoError(t, err)
	return spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
}

type recordingDialer struct {
	httpstream.Dialer
	used *atomic.Bool
}

func (d recordingDialer) Dial(protocols ...string) (httpstream.Connection, string, error) {
	d.used.Store(true)
	return d.Dialer.Dial(protocols...)
}

// forwardResult is how a port-forward session ended.
type forwardResult struct{ err error }

// startForward port-forwards a local port on 127.0.0.1, picked by the
// kernel, to remotePort of the pod. It returns the local port once the
// forward is ready, or the error that ended it before.
func startForward(t *testing.T, dialer httpstream.Dialer, remotePort int) (local int, ended <-chan forwardResult, stop func(), err error) {
	t.Helper()
	stopCh, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(remotePort)}, stopCh, ready, io.Discard, io.Discard)
	require.NoError(t, err)
	done := make(chan forwardResult, 1)
	go func() { done <- forwardResult{pf.ForwardPorts()} }()
	var once sync.Once
	stop = func() { once.Do(func() { close(stopCh) }) }
	select {
	case <-ready:
	case r := <-done:
		return 0, done, stop, r.err
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("the port-forward neither became ready nor failed within 30s")
	}
	ports, err := pf.GetPorts()
	require.NoError(t, err)
	require.Len(t, ports, 1)
	return int(ports[0].Local), done, stop, nil
}

func get(t *testing.T, url string) (string, error) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

func TestAPortForwardThroughTheAPIServerReachesAServerInThePod(t *testing.T) {
	c := world(t)
	const ns, name = "portforward-reach", "admin"
	createNamespace(t, c, ns)
	ip := loopbackIP()
	c.Kubelet.AssignIPs(ns, labels.SelectorFromSet(labels.Set{"app": name}), func() (string, error) { return ip, nil })
	pod := createPod(t, c, ns, name, func(p *corev1.Pod) bool { return p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning })
	require.Equal(t, ip, pod.Status.PodIP)

	// A process "in" the pod: it listens on the pod's IP, as the world's
	// simulated ztunnels serve their admin port.
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s of %s/%s at %s", r.URL.Path, ns, name, r.Host)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, kind := range dialers {
		t.Run(kind.name, func(t *testing.T) {
			var fellBack atomic.Bool
			local, ended, stop, err := startForward(t, kind.new(t, c, ns, name, &fellBack), port)
			require.NoError(t, err)
			// Two connections through one session, each a request of its own.
			for _, path := range []string{"/config_dump", "/stats"} {
				host := "127.0.0.1:" + strconv.Itoa(local)
				body, err := get(t, "http://"+host+path)
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("%s of %s/%s at %s", path, ns, name, host), body)
			}
			assert.False(t, fellBack.Load(), "the websocket tunnel is served: no fallback to SPDY")
			stop()
			select {
			case r := <-ended:
				assert.NoError(t, r.err, "a stopped forward ends cleanly")
			case <-time.After(10 * time.Second):
				t.Fatal("the forward did not end within 10s of being stopped")
			}
		})
	}
}

func TestAPortForwardToAPodThatDoesNotExistFails(t *testing.T) {
	c := world(t)
	const ns = "portforward-missing"
	createNamespace(t, c, ns)
	for _, kind := range dialers {
		t.Run(kind.name, func(t *testing.T) {
			var fellBack atomic.Bool
			_, _, stop, err := startForward(t, kind.new(t, c, ns, "nobody", &fellBack), 15000)
			defer stop()
			require.Error(t, err)
			assert.Contains(t, err.Error(), `pods "nobody" not found`)
			assert.Equal(t, kind.fallback, fellBack.Load(), "the failed websocket upgrade falls back to SPDY, which fails too")
		})
	}
}

func TestAPortForwardToAPodWithoutAnIPFails(t *testing.T) {
	c := world(t)
	const ns, name = "portforward-no-ip", "stuck"
	createNamespace(t, c, ns)
	// The pod is bound to a node but its sandbox never starts: it gets no IP.
	c.Kubelet.AssignIPs(ns, labels.SelectorFromSet(labels.Set{"app": name}), func() (string, error) {
		return "", errors.New("no address left")
	})
	createPod(t, c, ns, name, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	for _, kind := range dialers {
		t.Run(kind.name, func(t *testing.T) {
			var fellBack atomic.Bool
			_, _, stop, err := startForward(t, kind.new(t, c, ns, name, &fellBack), 15000)
			defer stop()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "pod "+ns+"/"+name+" has no IP")
			assert.Equal(t, kind.fallback, fellBack.Load(), "the failed websocket upgrade falls back to SPDY, which fails too")
		})
	}
}
