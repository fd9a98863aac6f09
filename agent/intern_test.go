package agent

import (
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// Pods of one template hold one copy of their labels and annotations,
// which the pool forgets once no pod holds it.
func TestPodsOfOneTemplateShareTheirLabelsAndAnnotations(t *testing.T) {
	pool := newMetaPool()
	keep := map[string]bool{canary.AnnotationSidecar: true}
	same := func(a, b map[string]string) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	cart0 := pool.share(slimPod(istioInjectedPod("shop", "cart", 0), keep))
	cart1 := pool.share(slimPod(istioInjectedPod("shop", "cart", 1), keep))
	orders := pool.share(slimPod(istioInjectedPod("shop", "orders", 0), keep))

	whole := istioInjectedPod("shop", "cart", 1)
	assert.Equal(t, whole.Labels, cart1.Labels)
	assert.Equal(t, map[string]string{canary.AnnotationSidecar: whole.Annotations[canary.AnnotationSidecar]}, cart1.Annotations)
	assert.True(t, same(cart0.Labels, cart1.Labels) && same(cart0.Annotations, cart1.Annotations))
	assert.False(t, same(cart0.Labels, orders.Labels), "other labels")
	assert.Len(t, pool.entries, 2)

	runtime.KeepAlive([]*CachedPod{cart0, cart1, orders})
	require.Eventually(t, func() bool {
		runtime.GC()
		pool.mu.Lock()
		defer pool.mu.Unlock()
		return len(pool.entries) == 0
	}, 5*time.Second, 10*time.Millisecond)
}

// Equal labels and annotations get one key, in any order; unequal ones
// that hash alike are told apart, each pod keeping its own.
func TestThePoolTellsApartMapsOfOneKey(t *testing.T) {
	pool := newMetaPool()
	assert.Equal(t, pool.key(map[string]string{"a": "1", "b": "2"}, nil), pool.key(map[string]string{"b": "2", "a": "1"}, map[string]string{}))
	keys := map[uint64]bool{}
	for _, m := range [][2]map[string]string{
		{nil, nil},
		{{"a": "b"}, nil},
		{nil, {"a": "b"}},
		{{"a": "b", "c": "d"}, nil},
		{{"a": "bc", "": "d"}, nil},
		{{"a": "b", "c": "d"}, {"a": "b"}},
		{{"a": "b"}, {"a": "b", "c": "d"}},
		{{"ab": ""}, nil},
		{{"a": "b"}, {"a": "b"}},
	} {
		keys[pool.key(m[0], m[1])] = true
	}
	assert.Len(t, keys, 9)

	keep := map[string]bool{canary.AnnotationSidecar: true}
	cart := pool.share(slimPod(istioInjectedPod("shop", "cart", 0), keep))
	orders := slimPod(istioInjectedPod("shop", "orders", 0), keep)
	// orders' labels hash as cart's do.
	pool.entries[pool.key(orders.Labels, orders.Annotations)] = pool.entries[pool.key(cart.Labels, cart.Annotations)]
	orders = pool.share(orders)
	assert.Equal(t, "orders", orders.Labels["app"])
	assert.Equal(t, "cart", cart.Labels["app"])
	assert.Equal(t, istioInjectedPod("shop", "orders", 0).Labels, orders.Labels)
	runtime.KeepAlive(cart)
}

// A cached pod carries the revision its sidecar status names, read once
// as it is cached: "" when it was not injected or the status is unreadable.
func TestACachedPodKeepsItsSidecarRevision(t *testing.T) {
	keep := map[string]bool{canary.AnnotationSidecar: true}
	injected := istioInjectedPod("shop", "cart", 0)
	assert.Equal(t, "1-25", slimPod(injected, keep).Revision)

	plain := istioInjectedPod("shop", "cart", 1)
	delete(plain.Annotations, canary.AnnotationSidecar)
	assert.Equal(t, "", slimPod(plain, keep).Revision)

	unreadable := istioInjectedPod("shop", "cart", 2)
	unreadable.Annotations[canary.AnnotationSidecar] = `{"revision":`
	assert.Equal(t, "", slimPod(unreadable, keep).Revision)

	unnamed := istioInjectedPod("shop", "cart", 3)
	unnamed.Annotations[canary.AnnotationSidecar] = `{"containers":["istio-proxy"]}`
	assert.Equal(t, canary.SidecarRevision(unnamed.Annotations), slimPod(unnamed, keep).Revision)
}
