package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	apiserverproxy "k8s.io/apiserver/pkg/util/proxy"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// The port-forward endpoint of the fake kubelet.
//
// The apiserver serves a pod's pods/portforward subresource by proxying it
// to https://<node InternalIP>:<node's kubelet port>/portForward/<ns>/<pod>.
// As a real kubelet does, the fake one answers there and hands the stream
// to its "container runtime's" streaming server, a plain HTTP server on
// 127.0.0.1 like containerd's, which serves it with Kubernetes' own
// port-forward server (k8s.io/cri-streaming, what a runtime's streaming
// server runs): every forwarded connection is dialled to the pod's IP, the
// loopback address where the world's simulated processes of that pod
// listen.
//
// The nodes declare ExtendWebSocketsToKubelet, as a 1.37 kubelet does, so
// the apiserver passes a client's websocket (SPDY tunnelled in websocket
// frames, kubectl's first choice) through to the kubelet, which unwraps it
// into SPDY before the runtime sees it; a SPDY client's upgrade is passed
// through as is.

const (
	// streamIdleTimeout is how long a port-forward connection may sit idle:
	// the kubelet's default streamingConnectionIdleTimeout.
	streamIdleTimeout = 4 * time.Hour
	// podDialTimeout bounds connecting to a port of the pod.
	podDialTimeout = 5 * time.Second
)

// extendWebSocketsToKubelet is the node feature a kubelet declares when it
// unwraps websocket-tunnelled streams itself.
const extendWebSocketsToKubelet = "ExtendWebSocketsToKubelet"

// serve starts the kubelet's HTTPS server and the runtime's streaming
// server on 127.0.0.1, each at a port the kernel picks, and records the
// kubelet's port for the nodes to report. Both stop, with every connection
// they hold (hijacked streams included), when ctx ends; served is closed
// once they have.
func (k *Kubelet) serve(ctx context.Context) error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return fmt.Errorf("kubelet serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("kubelet serving certificate: %w", err)
	}
	runtimeL, err := listenTracked()
	if err != nil {
		return fmt.Errorf("runtime streaming server: %w", err)
	}
	kubeletL, err := listenTracked()
	if err != nil {
		runtimeL.closeAll()
		return fmt.Errorf("kubelet server: %w", err)
	}
	k.runtimeAddr = runtimeL.Addr().String()
	k.port = kubeletL.Addr().(*net.TCPAddr).Port

	runtimeMux := http.NewServeMux()
	runtimeMux.HandleFunc("/portforward/{podNamespace}/{podID}/{uid}", func(w http.ResponseWriter, r *http.Request) {
		k.runtimePortForward(ctx, w, r)
	})
	kubeletMux := http.NewServeMux()
	kubeletMux.HandleFunc("/portForward/{podNamespace}/{podID}", k.portForward)
	kubeletMux.HandleFunc("/portForward/{podNamespace}/{podID}/{uid}", k.portForward)

	runtimeSrv := &http.Server{Handler: runtimeMux, ReadHeaderTimeout: 10 * time.Second}
	// Only HTTP/1.1: a port-forward is an HTTP/1.1 upgrade. The apiserver
	// does not verify a kubelet's certificate unless it is given
	// --kubelet-certificate-authority, nor does this kubelet ask for a
	// client certificate.
	kubeletSrv := &http.Server{Handler: kubeletMux, ReadHeaderTimeout: 10 * time.Second}
	tlsL := tls.NewListener(kubeletL, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = runtimeSrv.Serve(runtimeL) }()
	go func() { defer wg.Done(); _ = kubeletSrv.Serve(tlsL) }()
	k.served = make(chan struct{})
	go func() {
		<-ctx.Done()
		_ = kubeletSrv.Close()
		_ = runtimeSrv.Close()
		// A port-forward's connection was hijacked from its server, which
		// no longer closes it.
		kubeletL.closeAll()
		runtimeL.closeAll()
		wg.Wait()
		close(k.served)
	}()
	return nil
}

// waitServed returns once the servers started by serve have stopped.
func (k *Kubelet) waitServed() {
	if k.served != nil {
		<-k.served
	}
}

// portForward is the kubelet's /portForward/{podNamespace}/{podID}[/{uid}]:
// it checks that the pod exists and runs (has an IP), and proxies the
// stream to the runtime's streaming server, unwrapping a websocket tunnel
// into SPDY first.
func (k *Kubelet) portForward(w http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("podNamespace"), r.PathValue("podID"), types.UID(r.PathValue("uid"))
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	// A tunnel carries SPDY, whose streams name their ports; a plain
	// websocket (protocol v4.channel.k8s.io) names them in the query.
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	pod, err := k.client.CoreV1().Pods(ns).Get(r.Context(), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && uid != "" && pod.UID != uid:
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case pod.Status.PodIP == "":
		// No colon in the message: a websocket client reads an error body
		// as YAML, where "a: b" is a map, and would lose the message.
		http.Error(w, fmt.Sprintf("pod %s/%s has no IP, its sandbox is not running", ns, name), http.StatusInternalServerError)
		return
	}
	query := url.Values{}
	for _, p := range opts.Ports {
		query.Add(portforward.PortHeader, strconv.Itoa(int(p)))
	}
	target := &url.URL{
		Scheme:   "http",
		Host:     k.runtimeAddr,
		Path:     "/portforward/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/" + url.PathEscape(string(pod.UID)),
		RawQuery: query.Encode(),
	}
	var h http.Handler = proxy.NewUpgradeAwareHandler(target, nil, false, true, errorResponder{})
	if tunnel {
		h = apiserverproxy.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

type errorResponder struct{}

func (errorResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// runtimePortForward is the runtime's streaming endpoint for one pod: the
// port-forward server of k8s.io/cri-streaming, over SPDY or a plain
// websocket, forwarding each stream to the pod.
func (k *Kubelet) runtimePortForward(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var ports []int32
	for _, s := range r.URL.Query()[portforward.PortHeader] {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			http.Error(w, fmt.Sprintf("invalid port %q", s), http.StatusBadRequest)
			return
		}
		ports = append(ports, int32(p))
	}
	opts, err := portforward.BuildV4Options(ports)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod := podDialer{k: k, ctx: ctx, namespace: r.PathValue("podNamespace")}
	portforward.ServePortForward(w, r, pod, r.PathValue("podID"), r.PathValue("uid"), opts,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
}

// podDialer is the runtime's side of a forwarded connection: it connects
// to the port of the pod, at the pod's current IP, and copies the stream
// both ways until the pod's side ends or the world stops.
type podDialer struct {
	k         *Kubelet
	ctx       context.Context
	namespace string
}

func (d podDialer) PortForward(_ context.Context, name, uid string, port int32, stream io.ReadWriteCloser) error {
	pod, err := d.k.client.CoreV1().Pods(d.namespace).Get(d.ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && uid != "" && string(pod.UID) != uid:
		return fmt.Errorf("pod %s/%s does not exist", d.namespace, name)
	case err != nil:
		return err
	case pod.Status.PodIP == "":
		return fmt.Errorf("pod %s/%s has no IP, its sandbox is not running", d.namespace, name)
	}
	dialer := net.Dialer{Timeout: podDialTimeout}
	conn, err := dialer.DialContext(d.ctx, "tcp", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(d.ctx, func() {
		_ = conn.Close()
		_ = stream.Close()
	})
	defer stop()
	go func() {
		// The client's side: once it has sent everything, tell the pod; if
		// its stream broke, the client is gone and so is the connection.
		if _, err := io.Copy(conn, stream); err != nil {
			_ = conn.Close()
		} else if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	// The pod's side: when the pod closes the connection the forward ends,
	// and the library closes the stream.
	if _, err := io.Copy(stream, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// trackedListener listens on 127.0.0.1 and remembers the connections it
// accepted until they close, so that closeAll can end the hijacked ones an
// http.Server no longer tracks.
type trackedListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[*trackedConn]bool
	closed bool
}

func listenTracked() (*trackedListener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &trackedListener{Listener: l, conns: map[*trackedConn]bool{}}, nil
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[tc] = true
	return tc, nil
}

func (l *trackedListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[*trackedConn]bool{}
	l.mu.Unlock()
	_ = l.Listener.Close()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l *trackedListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
