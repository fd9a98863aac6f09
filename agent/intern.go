package agent

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// internOwners returns owners with their kinds, API versions and names
// interned, in place: the objects of one owner name it alike.
func internOwners(owners []metav1.OwnerReference) []metav1.OwnerReference {
	for i := range owners {
		o := &owners[i]
		o.APIVersion, o.Kind, o.Name = intern(o.APIVersion), intern(o.Kind), intern(o.Name)
	}
	return owners
}
