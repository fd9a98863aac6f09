package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/meshwave/meshwave/canary"
)

// A start this process made counts as holding a slot until the cache
// shows the namespace at the write's resourceVersion or later, or for a
// minute: a migration that started and ended between two peer readings
// (the move to ambient after its sidecar step, say) holds no slot once the
// cache has its writes, and a namespace that waited on the hold is told
// when it ends.
func TestAStartHoldsASlotUntilTheCacheShowsItsWrite(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	c := &Controller{caches: &Caches{Namespaces: corelisters.NewNamespaceLister(indexer)}, clock: clock, starting: map[string]startMark{}}
	set := func(rv string) {
		_ = indexer.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "amb", ResourceVersion: rv}})
	}
	done := []canary.Peer{{Name: "amb", Phase: canary.PhaseCompleted}}
	read := func() ([]canary.Peer, time.Time) {
		peers := append([]canary.Peer(nil), done...)
		return c.withStarting(peers)
	}

	set("100")
	c.markStarting("amb")
	peers, until := read()
	assert.True(t, peers[0].HoldsSlot, "the write has not returned: the cache may be behind")
	assert.Equal(t, clock.Now().Add(time.Minute), until)

	c.markStarted("amb", "120")
	peers, _ = read()
	assert.True(t, peers[0].HoldsSlot, "the cache still holds the namespace from before the start")

	set("125")
	peers, until = read()
	assert.False(t, peers[0].HoldsSlot, "the cache holds the start and what followed: it is the truth")
	assert.True(t, until.IsZero())
	c.startMu.Lock()
	assert.Empty(t, c.starting)
	c.startMu.Unlock()

	// Without the cache catching up, the hold ends after a minute.
	set("100")
	c.markStarting("amb")
	clock.Step(time.Minute + time.Second)
	peers, until = read()
	assert.False(t, peers[0].HoldsSlot)
	assert.True(t, until.IsZero())
}
