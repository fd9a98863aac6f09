package analysis

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// istiod's /debug/syncz lists only the proxies of the namespace its
// ?namespace= names (pilot/pkg/xds/debug.go, Syncz: namespace == "" ||
// node.GetNamespace() == namespace). A ztunnel lives in the root
// namespace, never in the wave's. A wave into ambient whose ztunnels are
// connected and SYNCED, asked over HTTP, must pass.
func TestTheAmbientSyncGateOverHTTPSeesZtunnelsOfTheRootNamespace(t *testing.T) {
	rows := []map[string]any{{
		"proxy": "ztunnel-a.istio-system",
		"resources": map[string]any{
			TypeAddress:       map[string]string{"sent": "n1", "acked": "n1"},
			TypeAuthorization: map[string]string{"sent": "n2", "acked": "n2"},
		},
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := r.URL.Query().Get("namespace")
		out := []map[string]any{}
		for _, row := range rows {
			id := row["proxy"].(string)
			if ns == "" || id[strings.LastIndex(id, ".")+1:] == ns {
				out = append(out, row)
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	host, portStr, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	port, _ := strconv.Atoi(portStr)

	istiod := Istiod{Pod: "istiod-1-26-a", IP: host, Revision: "1-26"}
	g := SyncGate{
		Source: HTTPSyncz{Port: port}, RootNamespace: "istio-system", Timeout: time.Minute, Interval: time.Second,
		Istiods: func(string) []Istiod { return []Istiod{istiod} },
		Ztunnels: func(string) []ZtunnelPod {
			return []ZtunnelPod{{Pod: "ztunnel-a", Namespace: "istio-system", Ready: true}}
		},
	}
	w := ambientWave(member("cart", ambientPod("cart-1", "n1", true)))
	w.Analysis.Started = map[string]time.Time{GateSync: t0}
	v := g.Evaluate(context.Background(), w, t0.Add(time.Minute))
	assert.Equal(t, canary.ResultPass, v.Result, v.Reason)
}
