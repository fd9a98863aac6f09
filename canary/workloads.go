package canary

import (
	"slices"
	"strings"
)

// parsedWorkload is a workload with the labels and annotations decisions
// read about it parsed once: its meshwave settings, its move record and
// whether it is a gateway.
type parsedWorkload struct {
	*Workload
	settings WorkloadSettings
	// record is its move record; nil when it carries none that reads back
	// (ReadMoveRecord). Workloads that carry the same record share it:
	// it is never changed.
	record *MoveRecord
	// gateway says why it is a gateway; "" when it is not.
	gateway string
}

// Facts are what decisions read from a workload's own labels and
// annotations: its meshwave settings and the problems with them, its move
// record, and whether it is a gateway. ReadFacts reads them.
//
// A decision reads every workload of its namespace, and reading these
// from the maps of ten thousand objects is most of its time. A caller that
// decides again and again over the same objects (the agent, from its
// caches) reads each object's facts once, keeps them beside that object,
// and hands them in with it (Workload.Facts).
type Facts struct {
	Settings WorkloadSettings
	// Errors are the problems with its settings (ParseWorkload).
	Errors []InputError
	// Record is its move record; nil when it carries none that reads back.
	// It is shared, and never changed.
	Record *MoveRecord
	// Gateway says why it is a gateway; "" when it is not.
	Gateway string
}

// ReadFacts reads w's facts from its labels and annotations.
func ReadFacts(w *Workload) *Facts {
	f := &Facts{Record: readMoveRecord(w.Annotations), Gateway: gatewayReason(w)}
	f.Settings, f.Errors = ParseWorkload(w.Namespace, w.Name, w.Annotations)
	return f
}

// workloadSet is a namespace's workloads in name order, each parsed once.
// It is built from the snapshot a decision or a plan is given, lives as
// long as that call, and is never kept for the next one.
type workloadSet []parsedWorkload

// parseWorkloads parses every workload of ws: it takes the Facts a
// workload carries, and reads them for one that carries none. It returns
// the set, and the problems with the workloads' annotations in name order
// (ParseWorkload). The set refers to ws, which must not change while it is
// used.
func parseWorkloads(ws []Workload) (workloadSet, []InputError) {
	set := make(workloadSet, len(ws))
	for i := range ws {
		set[i].Workload = &ws[i]
	}
	// IDs are unique in a namespace (a kind and an object's name). The
	// sort is stable all the same, so that were two to share one, the
	// later in the snapshot would come last, and find would return it.
	slices.SortStableFunc(set, func(a, b parsedWorkload) int { return strings.Compare(a.Name, b.Name) })
	var errs []InputError
	records := moveRecords{}
	for i := range set {
		p := &set[i]
		if f := p.Facts; f != nil {
			p.settings, p.record, p.gateway = f.Settings, f.Record, f.Gateway
			errs = append(errs, f.Errors...)
			continue
		}
		var werrs []InputError
		p.settings, werrs = ParseWorkload(p.Namespace, p.Name, p.Annotations)
		errs = append(errs, werrs...)
		p.record = records.read(p.Annotations)
		p.gateway = gatewayReason(p.Workload)
	}
	return set, errs
}

// moveRecords reads move records, decoding each distinct annotation value
// once: the members of a wave carry the same record, written for all of
// them in one decision. It lives as long as one call.
type moveRecords map[string]*MoveRecord

// read is readMoveRecord, for one more workload.
func (rs moveRecords) read(annotations map[string]string) *MoveRecord {
	raw, ok := annotations[AnnotationMove]
	if !ok {
		return nil
	}
	r, decoded := rs[raw]
	if !decoded {
		r = decodeMoveRecord(raw)
		rs[raw] = r
	}
	return r
}

// find returns the workload whose ID is name. Of two that share it, it
// returns the later in the snapshot.
func (s workloadSet) find(name string) (parsedWorkload, bool) {
	i, found := slices.BinarySearchFunc(s, name, func(p parsedWorkload, name string) int { return strings.Compare(p.Name, name) })
	if !found {
		return parsedWorkload{}, false
	}
	for i+1 < len(s) && s[i+1].Name == name {
		i++
	}
	return s[i], true
}

// The record lookups below return p's own record, or nil: the record is
// shared, and a caller that changes it changes a copy.

// forwardIn returns p's last record when it is a forward move made by the
// given migration, whatever its outcome.
func (p parsedWorkload) forwardIn(migration string) *MoveRecord {
	if r := p.record; r != nil && migration != "" && !r.Rollback && r.Migration == migration {
		return r
	}
	return nil
}

// movedIn returns p's last record when it is a forward move made by the
// given migration that counts as moved (no outcome: it was not failed or
// skipped out of its wave).
func (p parsedWorkload) movedIn(migration string) *MoveRecord {
	if r := p.forwardIn(migration); r != nil && r.Outcome == "" {
		return r
	}
	return nil
}

// rolledBackIn returns p's last record when it is a rollback made by the
// given migration.
func (p parsedWorkload) rolledBackIn(migration string) *MoveRecord {
	if r := p.record; r != nil && migration != "" && r.Rollback && r.Migration == migration {
		return r
	}
	return nil
}
