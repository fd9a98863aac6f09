package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// apiServer is a kube-apiserver that clients reach at a stable address,
// with credentials that outlive it: its serving certificate and an
// administrator token are files of the cluster's, and a forwarder on
// 127.0.0.1 sends connections to whichever instance runs now. Restart
// stops it and starts another on the same etcd and storage prefix, as a
// restarted kube-apiserver process would be.
type apiServer struct {
	tb      *harnessTB
	storage *storagebackend.Config
	flags   []string
	config  *rest.Config // what clients use: the forwarder, the admin token

	mu       sync.Mutex
	teardown func()
	forward  *forwarder
}

// startAPIServer starts kube-apiserver against etcdURL, keeping its
// certificate and token in dir.
//
// RBAC is on, so that identities other than the loopback administrator get
// real Forbidden answers. The ServiceAccount admission plugin is off: it
// rejects pods until a namespace's default ServiceAccount exists, which turns
// every new namespace into a race with the serviceaccount controller.
func startAPIServer(tb *harnessTB, etcdURL, dir string) (*apiServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, fmt.Errorf("apiserver certificate: %w", err)
	}
	certFile, keyFile, tokenFile := filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key"), filepath.Join(dir, "tokens.csv")
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(raw)
	for file, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM, tokenFile: []byte(token + `,admin,admin,"system:masters"` + "\n")} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return nil, err
		}
	}
	storage := storagebackend.NewDefaultConfig(path.Join("/meshwave-e2e", strconv.FormatInt(time.Now().UnixNano(), 36), "registry"), nil)
	storage.Transport.ServerList = []string{etcdURL}
	a := &apiServer{
		tb: tb, storage: storage,
		flags: []string{
			"--endpoint-reconciler-type=none",
			"--disable-admission-plugins=ServiceAccount",
			"--authorization-mode=RBAC",
			"--max-requests-inflight=2000",
			"--max-mutating-requests-inflight=1000",
			"--tls-cert-file=" + certFile,
			"--tls-private-key-file=" + keyFile,
			"--token-auth-file=" + tokenFile,
			// A port-forward reaches the fake kubelet at its node's
			// InternalIP (127.0.0.1); the Hostname address the default
			// order prefers is the node's name, which does not resolve.
			"--kubelet-preferred-address-types=InternalIP",
			// The peer proxy expects the test server's own generated
			// certificate, which a fixed one replaces; one apiserver has no
			// peers.
			"--feature-gates=UnknownVersionInteroperabilityProxy=false",
		},
	}
	addr, err := a.start()
	if err != nil {
		return nil, err
	}
	if a.forward, err = startForwarder(addr); err != nil {
		a.stop()
		return nil, err
	}
	a.config = &rest.Config{
		Host:            "https://" + a.forward.addr,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: certPEM},
		QPS:             -1,
	}
	return a, nil
}

// testServerSources lets Kubernetes' test server find its own package in
// a binary built with -trimpath, as make builds everything: it locates
// its testdata from the path of its source file, and such a binary holds
// module paths only (k8s.io/kubernetes@v1.37.2/...). The test server
// reads Bazel's TEST_SRCDIR and TEST_WORKSPACE to build that path again;
// the module cache, where the go command keeps those sources, is that
// directory here.
var testServerSources = sync.OnceValue(func() error {
	if _, file, _, ok := runtime.Caller(0); !ok || filepath.IsAbs(file) || os.Getenv("TEST_SRCDIR") != "" {
		return nil
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return fmt.Errorf("locate the module cache for the apiserver's test server (go env GOMODCACHE): %w", err)
	}
	if err := os.Setenv("TEST_SRCDIR", strings.TrimSpace(string(out))); err != nil {
		return err
	}
	return os.Setenv("TEST_WORKSPACE", ".")
})

// start runs one kube-apiserver instance and returns its address.
func (a *apiServer) start() (string, error) {
	if err := testServerSources(); err != nil {
		return "", err
	}
	opts := apiservertesting.NewDefaultTestServerOptions()
	// The invariant check scrapes the apiserver's own metrics at teardown and
	// fails on labels it does not expect; it tests Kubernetes, not us.
	opts.DisableInvariantChecks = true
	server, err := apiservertesting.StartTestServer(a.tb, opts, a.flags, a.storage)
	if err != nil {
		return "", fmt.Errorf("start kube-apiserver: %w", err)
	}
	a.mu.Lock()
	a.teardown = server.TearDownFn
	a.mu.Unlock()
	u, _, err := rest.DefaultServerUrlFor(server.ClientConfig)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

func (a *apiServer) stop() {
	a.mu.Lock()
	teardown := a.teardown
	a.teardown = nil
	a.mu.Unlock()
	if teardown != nil {
		teardown()
	}
}

// restart stops the running instance, dropping every connection to it, and
// starts another on the same etcd, behind the same address.
func (a *apiServer) restart(ctx context.Context) error {
	// Refuse new connections and cut the open ones first: the old instance
	// waits for its open requests (watches included) before it stops.
	a.forward.setTarget("")
	a.forward.dropAll()
	a.stop()
	addr, err := a.start()
	if err != nil {
		return err
	}
	a.forward.setTarget(addr)
	return nil
}

func (a *apiServer) close() {
	if a.forward != nil {
		a.forward.close()
	}
	a.stop()
}

// forwarder accepts TCP connections on 127.0.0.1 and splices each to the
// current target.
type forwarder struct {
	addr string
	l    net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
}

func startForwarder(target string) (*forwarder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{addr: l.Addr().String(), l: l, target: target, conns: map[net.Conn]bool{}}
	go f.serve()
	return f, nil
}

func (f *forwarder) setTarget(target string) {
	f.mu.Lock()
	f.target = target
	f.mu.Unlock()
}

func (f *forwarder) serve() {
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		go f.splice(c)
	}
}

func (f *forwarder) splice(c net.Conn) {
	f.mu.Lock()
	target := f.target
	f.mu.Unlock()
	if target == "" {
		// Between two instances: the connection is refused.
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	f.track(c, up)
	defer f.untrack(c, up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (f *forwarder) track(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		f.conns[c] = true
	}
}

func (f *forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(f.conns, c)
	}
}

// dropAll closes every spliced connection, as a stopped process's sockets
// close.
func (f *forwarder) dropAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
	}
}

func (f *forwarder) close() {
	_ = f.l.Close()
	f.dropAll()
}
