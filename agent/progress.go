package agent

import (
	"sync"

	"github.com/meshwave/meshwave/canary"
)

// progressMemory keeps, per namespace, the progress of the wave under test
// that is not written to the namespace (canary.OnlyProgress): the gates'
// state and verdicts so far. Each entry is bound to the status annotation
// it grew from: once the written status changes (a write of ours, of a
// person, of another replica), the entry no longer applies. Losing it (a
// restart, a new leader) only makes the wave's checks start again.
type progressMemory struct {
	mu   sync.Mutex
	byNS map[string]progressEntry
}

type progressEntry struct {
	base    string
	working *canary.Status
}

// get returns the working status of ns if it grew from the written status
// base, else nil.
func (p *progressMemory) get(ns, base string) *canary.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byNS[ns]
	if !ok || e.base != base {
		return nil
	}
	return e.working.DeepCopy()
}

func (p *progressMemory) set(ns, base string, working *canary.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byNS == nil {
		p.byNS = map[string]progressEntry{}
	}
	p.byNS[ns] = progressEntry{base: base, working: working.DeepCopy()}
}

func (p *progressMemory) drop(ns string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byNS, ns)
}
