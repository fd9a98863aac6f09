package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/meshwave/meshwave/analysis"
)

// ztunnelAdminPort is where a ztunnel's admin answers: localhost:15000 in
// its pod (ztunnel's DEFAULT_ADMIN_PORT, bound to Address::Localhost).
const ztunnelAdminPort = 15000

// portForwardDumps reads a ztunnel's /config_dump the way
// `istioctl ztunnel-config workloads` does: ztunnel binds its admin port
// to localhost, so it is reached through the apiserver's pods/portforward
// of the ztunnel's pod, over a websocket where the apiserver supports it
// and SPDY where it does not, as kubectl port-forward dials.
type portForwardDumps struct {
	config *rest.Config
	// timeout bounds one read, from the dial to the dump's last byte.
	timeout time.Duration
	// dialing holds the ztunnels whose port-forward is still being dialed:
	// client-go's dialers take no context, so a dial the apiserver never
	// answers outlives the read that gave up on it. One such dial a
	// ztunnel at most: the next read says so instead of adding another.
	dialing *sync.Map
}

// Workloads implements analysis.ZtunnelDumps.
func (d portForwardDumps) Workloads(ctx context.Context, z analysis.ZtunnelPod) ([]analysis.ZtunnelWorkload, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	key := z.Namespace + "/" + z.Pod
	if d.dialing != nil {
		if _, busy := d.dialing.LoadOrStore(key, true); busy {
			return nil, fmt.Errorf("port-forward to %s: the one a read before opened has not been answered yet", key)
		}
	}
	started := false
	defer func() {
		if !started && d.dialing != nil {
			d.dialing.Delete(key)
		}
	}()
	dialer, err := d.dialer(z)
	if err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddressesForStreamingWithContext(ctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", ztunnelAdminPort)}, ready, nil, &errOut)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	started = true
	go func() {
		err := fw.ForwardPorts()
		if d.dialing != nil {
			d.dialing.Delete(key)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			err = errors.New("it stopped before it was ready")
		}
		return nil, fmt.Errorf("port-forward to %s/%s: %w", z.Namespace, z.Pod, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("port-forward to %s/%s: %w", z.Namespace, z.Pod, ctx.Err())
	case <-ready:
	}
	defer func() {
		cancel()
		<-done
	}()
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		return nil, fmt.Errorf("port-forward to %s/%s: no local port (%v)", z.Namespace, z.Pod, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/config_dump", ports[0].Local), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return nil, fmt.Errorf("GET /config_dump of %s/%s: %s", z.Namespace, z.Pod, msg)
		}
		return nil, fmt.Errorf("GET /config_dump of %s/%s: %w", z.Namespace, z.Pod, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /config_dump of %s/%s: %s", z.Namespace, z.Pod, resp.Status)
	}
	return analysis.DecodeZtunnelDump(resp.Body)
}

// dialer dials the pod's portforward subresource: a websocket first, SPDY
// when the apiserver cannot upgrade to one (before Kubernetes 1.30, or
// behind a proxy that refuses it). The websocket dialer's failures are
// k8s.io/streaming's, which apimachinery's predicates do not recognise.
func (d portForwardDumps) dialer(z analysis.ZtunnelPod) (streamhttp.Dialer, error) {
	rc := rest.CopyConfig(d.config)
	url, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, err
	}
	url.Path = strings.TrimSuffix(url.Path, "/") + fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/portforward", z.Namespace, z.Pod)
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	viaSPDY := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	viaWebsocket, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, rc)
	if err != nil {
		return nil, err
	}
	return portforward.NewFallbackDialerForStreaming(viaWebsocket, viaSPDY, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	}), nil
}
