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

func TestMetaKeysDifferWhenLabelsOrAnnotationsDo(t *testing.T) {
	keys := map[string]bool{}
	for _, m := range [][2]map[string]string{
		{nil, nil},
		{{"a": "b"}, nil},
		{nil, {"a": "b"}},
		{{"a": "b", "c": "d"}, nil},
		{{"a": "bc", "": "d"}, nil},
		{{"a": "b:c"}, nil},
		{{"a:b": "c"}, nil},
		{{"a": "b"}, {"a": "b"}},
	} {
		keys[metaKey(m[0], m[1])] = true
	}
	assert.Len(t, keys, 8)
	assert.Equal(t, metaKey(map[string]string{"a": "1", "b": "2"}, nil), metaKey(map[string]string{"b": "2", "a": "1"}, map[string]string{}))
}
