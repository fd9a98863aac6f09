package agent

import (
	"hash/maphash"
	"maps"
	"runtime"
	"sync"
	"unique"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// intern returns s backed by a copy of its bytes that other strings of
// the same value share. Decoding gives each object its own copy of every
// string, and the same few label keys and values, annotation keys, owner
// kinds, node and namespace names repeat on every pod: interned, each is
// held once. The copy is unique's: while any handle to it lives, every
// intern of the value returns it; once none does (a GC later), the next
// intern makes a new one, and the strings that hold the old copy keep it.
// So a value is held about once per GC cycle in which objects carrying it
// were decoded, not once per object.
func intern(s string) string {
	return unique.Make(s).Value()
}

// internMap returns m with its keys and values interned, in a new map;
// nil when m is empty, which reads alike.
func internMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[intern(k)] = intern(v)
	}
	return out
}

// internOwners returns owners with their kinds, API versions, names and
// UIDs interned, in place: the objects of one owner (the pods of a
// ReplicaSet) name it alike.
func internOwners(owners []metav1.OwnerReference) []metav1.OwnerReference {
	for i := range owners {
		o := &owners[i]
		o.APIVersion, o.Kind, o.Name, o.UID = intern(o.APIVersion), intern(o.Kind), intern(o.Name), types.UID(intern(string(o.UID)))
	}
	return owners
}

// metaPool shares one copy of a pod's labels and kept annotations among
// the pods that carry the same: every pod of a ReplicaSet, of a Job, of a
// DaemonSet's revision. Its entries are weak: an entry lives while a pod
// holds its sharedMeta, and the pool forgets it once none does. The maps
// it hands out are shared, so they must never be written to; no cached
// object's may be anyway.
type metaPool struct {
	mu sync.Mutex
	// entries are keyed by a hash of the labels and annotations: a key
	// that spelt them out would cost a pod whose labels are its own (a
	// StatefulSet's, a Job's) as much again as the maps themselves.
	entries map[uint64]weak.Pointer[sharedMeta]
	seed    maphash.Seed
}

// sharedMeta is the labels and annotations the pods of one entry share.
type sharedMeta struct {
	labels, annotations map[string]string
}

func newMetaPool() *metaPool {
	return &metaPool{entries: map[uint64]weak.Pointer[sharedMeta]{}, seed: maphash.MakeSeed()}
}

// share makes p hold the pool's copy of its labels and annotations, and
// keep that copy's entry alive.
func (pool *metaPool) share(p *CachedPod) *CachedPod {
	p.shared = pool.get(p.Labels, p.Annotations)
	p.Labels, p.Annotations = p.shared.labels, p.shared.annotations
	return p
}

// get returns the entry of these labels and annotations, adding it from
// them when the pool has none. Labels and annotations whose hash an entry
// of others holds get an entry of their own, outside the pool.
func (pool *metaPool) get(labels, annotations map[string]string) *sharedMeta {
	key := pool.key(labels, annotations)
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if m := pool.entries[key].Value(); m != nil {
		if maps.Equal(m.labels, labels) && maps.Equal(m.annotations, annotations) {
			return m
		}
		return &sharedMeta{labels: labels, annotations: annotations}
	}
	m := &sharedMeta{labels: labels, annotations: annotations}
	ref := weak.Make(m)
	pool.entries[key] = ref
	runtime.AddCleanup(m, pool.forget, pooledKey{key: key, ref: ref})
	return m
}

// pooledKey names an entry for its cleanup.
type pooledKey struct {
	key uint64
	ref weak.Pointer[sharedMeta]
}

// forget drops an entry no pod holds any more, unless a new one took its
// key since.
func (pool *metaPool) forget(k pooledKey) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.entries[k.key] == k.ref {
		delete(pool.entries, k.key)
	}
}

// key hashes labels and annotations, in any order: the sum of the hashes
// of their pairs, each hashed with the map it is in. Equal maps hash
// alike; get compares the maps of a key it finds, so unequal ones that
// hash alike are told apart.
func (pool *metaPool) key(labels, annotations map[string]string) uint64 {
	sum := uint64(len(labels))<<32 | uint64(len(annotations))
	for i, m := range [2]map[string]string{labels, annotations} {
		for k, v := range m {
			var h maphash.Hash
			h.SetSeed(pool.seed)
			h.WriteByte(byte(i))
			h.WriteString(k)
			h.WriteByte(0)
			h.WriteString(v)
			sum += h.Sum64()
		}
	}
	return sum
}
