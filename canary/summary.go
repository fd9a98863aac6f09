package canary

import "sort"

// summarize fills in the counts and totals of the status being written,
// keeps the label meshwave owns, and decides whether the status changed:
// only a changed status is written.
func summarize(m *machine) {
	st, prev := m.st, m.r.Recorded
	st.boundText()
	if !st.labelHeld() {
		ensureLabel(m, st.ownedLabel())
	}
	releaseWaypoint(m)
	replacedPolicies(m)
	publishRoots(m)
	if st.Phase != PhasePending {
		st.WaitsForRing = false
	}
	p := m.plan()
	st.Counts, st.Kinds = count(m, p)
	st.Skipped = p.Excluded
	if len(st.Skipped) > maxSkipped {
		st.Skipped = st.Skipped[:maxSkipped]
	}
	// What meshwave never restarts is brought up to date whenever the
	// status is written, and never causes a write of its own: a CronJob
	// that runs every minute must not cost a status write each time.
	fresh := unmovable(m.snap().Unmovable, st.TargetRevision, m.snap().Namespace.Labels[LabelRev])
	st.Unmovable = nil
	if prev != nil {
		st.Unmovable = prev.Unmovable
	}
	switch {
	case st.Wave == 0:
		st.TotalWaves = len(p.Waves)
	case st.Phase == PhaseCompleted || st.Phase == PhaseRolledBack || st.Phase == PhaseStopped:
		st.TotalWaves = st.Wave
	default:
		// Never past the bound a status reads back within: only a record
		// meshwave did not write names a wave near it (betweenWaves).
		st.TotalWaves = min(st.Wave+len(p.Waves), maxWaves)
	}
	if !st.Equal(prev) {
		st.Unmovable = fresh
		m.out.Status = st
	}
	sort.SliceStable(m.out.Moves, func(i, j int) bool { return m.out.Moves[i].Workload < m.out.Moves[j].Workload })
}

// tally counts workloads by state, for the namespace and for each kind.
type tally struct {
	all   Counts
	kinds map[Kind]*Counts
}

// add counts one workload in the state field picks.
func (t *tally) add(id string, field func(*Counts) *int) {
	*field(&t.all)++
	k := kindOfID(id)
	kc := t.kinds[k]
	if kc == nil {
		kc = &Counts{}
		t.kinds[k] = kc
	}
	*field(kc)++
}

func pendingCount(c *Counts) *int    { return &c.Pending }
func movingCount(c *Counts) *int     { return &c.Moving }
func movedCount(c *Counts) *int      { return &c.Moved }
func failedCount(c *Counts) *int     { return &c.Failed }
func skippedCount(c *Counts) *int    { return &c.Skipped }
func rolledBackCount(c *Counts) *int { return &c.RolledBack }

// count counts the namespace's workloads by state: those the plan leaves
// out or has still to move, the wave's members, those moved or failed in
// earlier waves, and those a rollback returns or returned. The kinds are
// counted apart once the namespace holds another kind than Deployments.
// It also counts the earlier waves' failures into the status (PastFailed)
// until the migration completes.
func count(m *machine, p NamespacePlan) (Counts, map[Kind]Counts) {
	st := m.st
	t := &tally{kinds: map[Kind]*Counts{}}
	for _, x := range p.Excluded {
		t.add(x.Workload, skippedCount)
	}
	for _, w := range p.Waves {
		for _, x := range w {
			t.add(x.Name, pendingCount)
		}
	}
	inWave := countMembersByState(st, t)
	failed := failedOnRecord(m, p)
	returning := countReturning(m, t)
	for _, name := range p.Moved {
		if !inWave[name] && !failed[name] && !returning[name] {
			t.add(name, movedCount)
		}
	}
	if st.Phase != PhaseCompleted {
		st.PastFailed = 0
		for name := range failed {
			if !inWave[name] {
				st.PastFailed++
				t.add(name, failedCount)
			}
		}
	} else {
		t.all.Failed += st.PastFailed
	}
	if st.Phase == PhaseRollingBack || st.Phase == PhaseRolledBack {
		for _, w := range m.workloads() {
			if w.rolledBackIn(st.MigrationID()) != nil {
				t.add(w.Name, rolledBackCount)
			}
		}
	}
	return t.totals()
}

// countMembersByState counts the wave's members (not a rollback's) and
// returns them.
func countMembersByState(st *Status, t *tally) map[string]bool {
	inWave := map[string]bool{}
	if st.Phase == PhaseRollingBack || st.Phase == PhaseRolledBack {
		return inWave
	}
	for _, w := range st.Workloads {
		inWave[w.Name] = true
		switch w.State {
		case StateMoving:
			t.add(w.Name, movingCount)
		case StateMoved:
			t.add(w.Name, movedCount)
		case StateFailed:
			t.add(w.Name, failedCount)
		}
	}
	return inWave
}

// countReturning counts as moving the workloads a rollback under way (or
// paused in) still has to return, and returns them.
func countReturning(m *machine, t *tally) map[string]bool {
	st := m.st
	back := map[string]bool{}
	if st.Phase == PhaseRollingBack || (st.Phase == PhasePaused && st.WaveState == WaveRollingBack) {
		for _, w := range rollbackMembers(m.workloads(), st) {
			if returning(w, st) {
				back[w.Name] = true
				t.add(w.Name, movingCount) // on its way back
			}
		}
	}
	return back
}

// totals adds up the counts; the kinds are kept only when the namespace
// holds another kind than Deployments.
func (t *tally) totals() (Counts, map[Kind]Counts) {
	c := t.all
	c.Total = c.Pending + c.Moving + c.Moved + c.Failed + c.Skipped + c.RolledBack
	if !(len(t.kinds) > 1 || t.kinds[KindDeployment] == nil && len(t.kinds) == 1) {
		return c, nil
	}
	kinds := map[Kind]Counts{}
	for k, kc := range t.kinds {
		kc.Total = kc.Pending + kc.Moving + kc.Moved + kc.Failed + kc.Skipped + kc.RolledBack
		kinds[k] = *kc
	}
	return c, kinds
}

// ownedLabel is the istio.io/rev value the namespace must carry while
// meshwave owns it, or "" when it owns no label: before the first wave,
// while blocked before it, and once opted out. A label a person removed or
// changed is put back.
func (s *Status) ownedLabel() string {
	if s.Phase == PhaseBlocked && s.BlockedPhase != "" && s.BlockedPhase != PhaseBlocked {
		// Blocked half-way: the migration still owns what it owned.
		held := *s
		held.Phase = s.BlockedPhase
		return held.ownedLabel()
	}
	switch {
	case s.Phase == PhaseRollingBack || s.Phase == PhaseRolledBack || (s.Phase == PhasePaused && s.WaveState == WaveRollingBack):
		return s.SourceLabel
	case s.Phase == PhaseCompleted && s.NamespaceEnrolled:
		return "" // the namespace is ambient: it carries no istio.io/rev
	case s.Phase == PhaseCompleted:
		return s.label()
	case s.Wave > 0 && (s.Phase == PhaseMigrating || s.Phase == PhaseAnalyzing || s.Phase == PhasePaused):
		return s.label()
	}
	return ""
}
