package analysis

import (
	"fmt"
	"maps"
	"slices"

	"github.com/meshwave/meshwave/canary"
)

// The delta xDS types a ztunnel subscribes to, with the short names
// istioctl proxy-status shows (pkg/model/xds.go, GetShortType).
const (
	TypeAddress       = "type.googleapis.com/istio.workload.Address"
	TypeAuthorization = "type.googleapis.com/istio.security.Authorization"
)

func init() {
	shortType[TypeAddress] = "WDS"
	shortType[TypeAuthorization] = "WADS"
}

// ztunnelSubscribed are the types every ztunnel subscribes to, with a
// wildcard, as soon as it connects (ztunnel's src/xds/client.rs).
var ztunnelSubscribed = []string{TypeAddress, TypeAuthorization}

// ZtunnelPod is a pod of the ztunnel DaemonSet.
type ZtunnelPod struct {
	// Pod and Namespace name it; its syncz id is Pod.Namespace.
	Pod, Namespace string
	Ready          bool
}

// subscribedBy are the types each wanted proxy of the wave must be in
// sync for: a sidecar's, or, for a wave into ambient mode, a ztunnel's.
func subscribedBy(wave canary.WaveUnderTest) []string {
	if wave.Ambient {
		return ztunnelSubscribed
	}
	return alwaysSubscribed
}

// proxiesNamespace is the namespace of the proxies the gate asks about:
// the wave's own, or for a wave into ambient mode, the root namespace the
// ztunnels run in (istiod lists them there, and shows a caller outside
// the root namespace only its own namespace's).
func (g SyncGate) proxiesNamespace(wave canary.WaveUnderTest) string {
	if wave.Ambient {
		return g.RootNamespace
	}
	return wave.Namespace
}

// wanted are the proxies the gate asks istiod about, by syncz id, with the
// wave's workloads each serves, and the problems found without asking,
// by workload. For a wave into ambient mode, they are the ztunnels of the
// nodes its new pods run on: each must be connected to the target's
// istiod and in sync. A node with no Ready ztunnel is a problem of every
// workload with a new pod on it: its pods are not in the mesh.
func (g SyncGate) wanted(wave canary.WaveUnderTest) (map[string][]string, map[string][]string) {
	if !wave.Ambient {
		return wantedProxies(wave), nil
	}
	want, absent := map[string][]string{}, map[string][]string{}
	serves := map[string]map[string]bool{}
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if !p.Current || p.Terminating || p.Node == "" {
				continue
			}
			var ready []string
			if g.Ztunnels != nil {
				for _, z := range g.Ztunnels(p.Node) {
					if z.Ready {
						ready = append(ready, z.Pod+"."+z.Namespace)
					}
				}
			}
			if len(ready) == 0 {
				absent[m.Name] = append(absent[m.Name], fmt.Sprintf("no Ready ztunnel runs on node %s of pod %s", p.Node, p.Name))
				continue
			}
			for _, id := range ready {
				if serves[id] == nil {
					serves[id] = map[string]bool{}
				}
				serves[id][m.Name] = true
			}
		}
	}
	for id, ws := range serves {
		want[id] = slices.Sorted(maps.Keys(ws))
	}
	return want, absent
}
