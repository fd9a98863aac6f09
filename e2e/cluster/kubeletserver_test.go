package cluster

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// The kubelet's server alone, dialled directly as the apiserver would: its
// stop must end the forwards it serves by itself, not only once the
// apiserver's side goes away.
func TestStoppingTheKubeletEndsItsPortForwardsAndFreesItsPort(t *testing.T) {
	ip := net.IPv4(127, byte(1+rand.IntN(250)), byte(rand.IntN(250)), byte(2+rand.IntN(250))).String()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: "default", UID: "holder-uid"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	k := newKubelet(fake.NewClientset(pod), KubeletOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	require.NoError(t, k.serve(ctx))

	// A process in the pod that holds its connection open and reports what
	// it read and when the connection ended.
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	defer l.Close()
	read, ended := make(chan string, 1), make(chan struct{})
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(conn, buf); err == nil {
			read <- string(buf)
		}
		_, _ = io.Copy(io.Discard, conn)
		close(ended)
	}()

	cfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(k.port), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	require.NoError(t, err)
	u := &url.URL{Scheme: "https", Host: "127.0.0.1:" + strconv.Itoa(k.port), Path: "/portForward/default/holder/holder-uid"}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stopCh, ready := make(chan struct{}), make(chan struct{})
	defer close(stopCh)
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}, stopCh, ready, io.Discard, io.Discard)
	require.NoError(t, err)
	forwardEnded := make(chan error, 1)
	go func() { forwardEnded <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-forwardEnded:
		t.Fatalf("the port-forward failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the port-forward was not ready within 10s")
	}
	ports, err := pf.GetPorts()
	require.NoError(t, err)
	conn, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(int(ports[0].Local)))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("hello"))
	require.NoError(t, err)
	select {
	case got := <-read:
		require.Equal(t, "hello", got)
	case <-time.After(10 * time.Second):
		t.Fatal("the pod did not receive the forwarded bytes within 10s")
	}

	cancel()
	served := make(chan struct{})
	go func() { k.waitServed(); close(served) }()
	for what, ch := range map[string]<-chan struct{}{"the kubelet's servers": served, "the pod's end of the forwarded connection": ended} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still ran 10s after the kubelet stopped", what)
		}
	}
	select {
	case err := <-forwardEnded:
		assert.ErrorIs(t, err, portforward.ErrLostConnectionToPod)
	case <-time.After(10 * time.Second):
		t.Fatal("the client's port-forward session still ran 10s after the kubelet stopped")
	}
	_, err = net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(k.port), time.Second)
	assert.Error(t, err, "the kubelet no longer listens")
}
