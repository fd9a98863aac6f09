package agent

import (
	"context"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// receivedBytes counts what the agent's Kubernetes clients receive, as it
// arrives on their connections: compressed where the API server
// compressed it, TLS records included. Most of it is the caches' first
// listing, at start-up and at every change of leader.
var receivedBytes = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "meshwave_kube_received_bytes_total",
	Help: "Bytes received from the Kubernetes API server on the agent's connections, as they arrive (compressed where the server compressed them, TLS included).",
})

// CountReceived makes the clients built from rc count the bytes their
// connections receive in meshwave_kube_received_bytes_total. Each client
// then dials connections of its own: client-go shares a transport only
// between configurations without a dialer.
func CountReceived(rc *rest.Config) {
	dial := rc.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	rc.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return countingConn{c}, nil
	}
}

type countingConn struct{ net.Conn }

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	receivedBytes.Add(float64(n))
	return n, err
}
