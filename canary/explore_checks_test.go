package canary

import (
	"fmt"
	"reflect"
	"strings"
	"time"
)

// invariant is a property every transition the explorer makes must keep.
// check returns why the transition from `from` breaks it, or "".
type invariant struct {
	name  string
	check func(x *exploration, from *cluster, tr transition) string
}

// exploredInvariants are checked on every transition, in this order.
var exploredInvariants = []invariant{
	{"restart-once", restartedOnce},
	{"wave-order", wavesInOrder},
	{"completed-on-target", completedOnTarget},
	{"slots", slotsWithinConcurrency},
	{"admission", startsReadThePeers},
	{"phantom-slot", noPhantomSlot},
	{"reads-back", statusReadsBack},
	{"no-hot-loop", noHotLoop},
	{"settles", settles},
	{"rollback-to-source", rollbackEndsOnTheSource},
	{"label-owned", labelAsOwned},
	{"facts-agree", factsAgree},
}

// restartedOnce: no workload is restarted twice for one move. A move is
// a restart in one migration, one direction, to one revision
// (restartLedger); the same key again is a second restart for the same
// move, unless the first was undone whole and reported, and a person
// resumed the namespace since.
func restartedOnce(_ *exploration, from *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil {
		return ""
	}
	ns := from.namespaces[tr.ns]
	for _, m := range dd.restarts {
		prev := ns.restarts[m.Workload]
		again := prev.again || prev.undone && hasEvent(dd.d, "Resumed")
		if prev.key == restartKey(m.Record) && !again {
			return fmt.Sprintf("%s restarted a second time for move %s (wave %d): it was made in wave %d and not undone since",
				m.Workload, prev.key, m.Record.Wave, prev.wave)
		}
	}
	return ""
}

// wavesInOrder: no wave starts before the one before it passed: a forward
// restart in wave n of a migration, or a status that starts wave n, comes
// only after the gates passed wave n-1 of that migration on this path (or
// failed it, and the failure policy Continue tolerated that).
func wavesInOrder(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil {
		return ""
	}
	passed := tr.to.namespaces[tr.ns].passed
	for _, m := range dd.restarts {
		if n := m.Record.Wave; !m.Record.Rollback && n > 1 && !passed[fmt.Sprintf("%s#%d", m.Record.Migration, n-1)] {
			return fmt.Sprintf("%s restarted in wave %d of %s, whose wave %d the gates never passed", m.Workload, n, m.Record.Migration, n-1)
		}
	}
	if st := dd.d.Status; st != nil && st.Wave > 1 && hasEvent(dd.d, "WaveStarted") && !passed[fmt.Sprintf("%s#%d", st.MigrationID(), st.Wave-1)] {
		return fmt.Sprintf("wave %d of %s started, whose wave %d the gates never passed", st.Wave, st.MigrationID(), st.Wave-1)
	}
	return ""
}

// completedOnTarget: a decision that ends a migration as Completed (and
// is carried out whole) leaves no planned workload off the target: every
// workload with injected pods and without meshwave.io/skip runs the
// target revision, unless the migration failed it (its record's outcome,
// or a failure in the status).
func completedOnTarget(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full || dd.d.Status == nil || dd.d.Status.Phase != PhaseCompleted || dd.in.Status != nil && dd.in.Status.Phase == PhaseCompleted {
		return ""
	}
	st := dd.d.Status
	failed := map[string]bool{}
	for _, f := range st.Failures {
		failed[f.Workload] = true
	}
	for _, w := range tr.to.namespaces[tr.ns].workloads {
		if w.Annotations[AnnotationSkip] == "true" || failed[w.Name] {
			continue
		}
		if r, ok := ReadMoveRecord(w.Annotations); ok && r.Migration == st.MigrationID() && r.Outcome != "" {
			continue
		}
		for _, p := range w.Pods {
			if p.Injected() && p.Revision != st.TargetRevision {
				return fmt.Sprintf("Completed (%s) while %s runs %s, not the target %s", st.Reason, w.Name, p.Revision, st.TargetRevision)
			}
		}
	}
	return ""
}

// slotsWithinConcurrency: no more migrations hold a slot than the
// concurrency allows. A slot is taken only when a decision starts a
// migration (TakesSlot: the status it writes holds one, the one before
// did not), so that is where it is checked: when a namespace starts, the
// other namespaces holding a slot, read as the peers read them (PeerOf)
// and as their statuses say (HoldsSlot, opted in or not: a namespace
// whose target was just removed holds its slot until its own decision
// stops it), leave a slot free. A rollback always runs, and is let
// through; so is the adoption of a migration its peers already counted.
//
// The count over all namespaces at every state is no invariant: an
// outside edit (a stale status restored, a target removed and set again)
// can make a namespace read as holding a slot for a while, which starts
// nothing; its own next decision settles it.
func slotsWithinConcurrency(x *exploration, from *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || dd.d.Status == nil || !TakesSlot(dd.in.Status, dd.d.Status) || dd.d.Status.Phase == PhaseRollingBack || dd.before.HoldsSlot {
		return ""
	}
	limit := x.cfg.WithDefaults().Concurrency
	self := from.namespaces[tr.ns]
	var byPeers, byStatus []string
	for _, ns := range from.namespaces {
		if ns == self {
			continue
		}
		if p, ok := from.peer(ns); ok && p.HoldsSlot {
			byPeers = append(byPeers, ns.Name)
		}
		if st, _, err := ns.status(); err == nil && st.HoldsSlot() {
			byStatus = append(byStatus, ns.Name+" ("+statusWords(st)+")")
		}
	}
	switch {
	case len(byPeers) >= limit:
		return fmt.Sprintf("%s started (%s) while %s held the %d slot(s), as its peers read them", self.Name, statusWords(dd.d.Status), strings.Join(byPeers, ", "), limit)
	case len(byStatus) >= limit:
		return fmt.Sprintf("%s started (%s) while %s held the %d slot(s), as their statuses say", self.Name, statusWords(dd.d.Status), strings.Join(byStatus, ", "), limit)
	}
	return ""
}

// startsReadThePeers: a decision reads its peers at most once, and one
// that takes a slot (TakesSlot) read them: that read is how the agent
// serialises starts. Two starts go without:
// a rollback, which always runs; and the adoption of a migration from its
// move records while its peers already counted it as holding its slot.
func startsReadThePeers(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd != nil && dd.reads > 1 {
		return fmt.Sprintf("the decision read its peers %d times; the agent's admission lock covers one read", dd.reads)
	}
	if dd == nil || dd.d.Status == nil || !TakesSlot(dd.in.Status, dd.d.Status) || dd.reads > 0 || dd.d.Status.Phase == PhaseRollingBack {
		return ""
	}
	if (dd.in.Status == nil || hasEvent(dd.d, "StatusAdopted")) && dd.before.HoldsSlot {
		return ""
	}
	was := "no status"
	if dd.in.Status != nil {
		was = statusWords(dd.in.Status)
	}
	return fmt.Sprintf("%s took a slot over %s without reading its peers (events %v)", statusWords(dd.d.Status), was, eventReasons(dd.d))
}

// noPhantomSlot: once a decision was carried out, its peers do not read
// the namespace as holding a slot its status does not hold: such a hold
// (a status the records contradict) lasts only until the namespace's own
// decision rebuilds the status, and one no decision ends would keep every
// other namespace waiting.
func noPhantomSlot(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full {
		return ""
	}
	ns := tr.to.namespaces[tr.ns]
	st, ok, err := ns.status()
	if !ok || err != nil || st.HoldsSlot() {
		return ""
	}
	if p, opted := tr.to.peer(ns); opted && p.HoldsSlot {
		return fmt.Sprintf("after the decision, %s holds no slot, but its peers read it as holding one", statusWords(st))
	}
	return ""
}

// statusReadsBack: every status meshwave writes, it reads back.
func statusReadsBack(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || dd.d.Status == nil {
		return ""
	}
	raw, err := dd.d.Status.Encode()
	if err != nil {
		return "the status written does not encode: " + err.Error()
	}
	if _, _, err := readStatus(raw, map[string]string{AnnotationStatus: raw}); err != nil {
		return fmt.Sprintf("the status written (%s) does not read back: %v", statusWords(dd.d.Status), err)
	}
	return ""
}

// hotLoopDecisions is how many decisions in a row that change nothing and
// ask again within a second make a loop that never ends.
const hotLoopDecisions = 20

// noHotLoop: no state writes nothing and asks to be decided again within a
// second, forever: a decision carried out whole that changes no object
// and asks again within a second is followed by the decisions the agent
// would make at each requeue, on the same objects and gates' answer; if
// each of hotLoopDecisions does the same, the agent spins.
func noHotLoop(x *exploration, from *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full || !quick(dd.d.RequeueAfter) || tr.to.key(false) != from.key(false) {
		return ""
	}
	c := tr.to
	for range hotLoopDecisions {
		var next *transition
		now := c.now.Add(dd.d.RequeueAfter)
		x.decide(c, tr.ns, now, func(WaveUnderTest, bool) []verdictChoice { return []verdictChoice{{dd.verdict, dd.in.Verdicts}} }, func(again *decided) {
			t := x.carryOut(c, tr.ns, now, again, "", -1)
			dd, next = again, &t
		})
		if !quick(dd.d.RequeueAfter) || next.to.key(false) != c.key(false) {
			return ""
		}
		c = next.to
	}
	return fmt.Sprintf("%d decisions in a row change nothing and ask again after %s (%s)", hotLoopDecisions+1, dd.d.RequeueAfter, statusSummary(c.namespaces[tr.ns].Annotations))
}

func quick(d time.Duration) bool { return d > 0 && d < time.Second }

// settleDecisions is how many decisions in a row, with nothing changing
// outside, a namespace may keep writing before it must have settled.
const settleDecisions = 8

// settles: with nothing changing outside, the agent stops writing. After a
// decision carried out whole that changed something, the agent decides
// again at once (its own write's watch event), with the gates answering
// what they see (honestGates), and again after each write: one of
// settleDecisions decisions in a row must change nothing. A namespace that
// keeps writing the same thing wakes itself up for ever.
func settles(x *exploration, from *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full || tr.to.key(false) == from.key(false) {
		return ""
	}
	start := tr.to.key(true)
	x.settledMu.Lock()
	why, ok := x.settled[start]
	x.settledMu.Unlock()
	if ok {
		return why
	}
	c := tr.to
	var trail []string
	for n := 0; ; n++ {
		if n == settleDecisions {
			why = fmt.Sprintf("%d decisions in a row after it still write: %s", settleDecisions, strings.Join(trail, "; "))
			break
		}
		now := c.now.Add(soon)
		var next transition
		x.decide(c, tr.ns, now, honestGates, func(again *decided) {
			next = x.carryOut(c, tr.ns, now, again, "", -1)
			trail = append(trail, fmt.Sprintf("%s %v", statusSummary(next.to.namespaces[tr.ns].Annotations), eventReasons(again.d)))
		})
		if next.to.key(false) == c.key(false) {
			break
		}
		c = next.to
	}
	x.settledMu.Lock()
	x.settled[start] = why
	x.settledMu.Unlock()
	return why
}

// honestGates answer what they see: a pass once every member's pods run the
// revision the wave expects, a rollout still pending before.
func honestGates(wave WaveUnderTest, ok bool) []verdictChoice {
	if !ok {
		return []verdictChoice{{}}
	}
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if p.Revision != wave.Expect || !p.Ready {
				return []verdictChoice{{"pending", []Verdict{{Gate: "rollout", Result: ResultPending, Reason: m.Name + " rolling out", RetryAfter: 10 * time.Second}}}}
			}
		}
	}
	return []verdictChoice{{"pass", []Verdict{
		{Gate: "rollout", Result: ResultPass, Reason: "rolled out"},
		{Gate: "injection", Result: ResultPass, Reason: "every new pod runs " + wave.Expect},
	}}}
}

// rollbackEndsOnTheSource: a decision that ends a rollback (RolledBack,
// carried out whole) leaves every workload it concerns on the source:
// those the migration moved (a wave rollback: in that wave or later; all:
// in any wave) and those it rolled back, as meshwave's own restarts on
// this path say, unless someone else replaced their pods since.
func rollbackEndsOnTheSource(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full || dd.d.Status == nil || dd.d.Status.Phase != PhaseRolledBack || dd.in.Status != nil && dd.in.Status.Phase == PhaseRolledBack {
		return ""
	}
	st := dd.d.Status
	ns := tr.to.namespaces[tr.ns]
	migration := st.MigrationID()
	for _, w := range ns.workloads {
		r, ok := ns.restarts[w.Name]
		if !ok || r.outside || !strings.HasPrefix(r.key, migration+"|") || w.Annotations[AnnotationSkip] == "true" {
			continue
		}
		forward := strings.HasPrefix(r.key, migration+"|>")
		if forward && st.Rollback != RollbackAll && r.wave < st.Wave {
			continue // an earlier wave: a wave's rollback leaves it
		}
		for _, p := range w.Pods {
			if p.Injected() && p.Revision != st.SourceRevision {
				what := "rolled back"
				if forward {
					what = fmt.Sprintf("moved in wave %d", r.wave)
				}
				return fmt.Sprintf("RolledBack (%s) while %s, %s by %s, runs %s, not the source %s", st.Reason, w.Name, what, migration, p.Revision, st.SourceRevision)
			}
		}
	}
	return ""
}

// labelAsOwned: once a decision was carried out, the namespace's
// istio.io/rev is what its status owns (README: the label switches to the
// target with the first wave and stays while the migration goes forward
// or has completed; a rollback, under way, paused or done, puts back the
// source), a namespace blocked half-way included; unless meshwave gave the
// label up to whoever reverts it (the third revert in a row: an entry
// Namespace/<name> of the status's reverts counted 3 times or more).
func labelAsOwned(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || !dd.full {
		return ""
	}
	ns := tr.to.namespaces[tr.ns]
	st, ok, err := ns.status()
	if _, opted := ns.Annotations[AnnotationTargetRevision]; !ok || err != nil || !opted {
		return ""
	}
	for _, r := range st.Reverts {
		if r.Object == "Namespace/"+ns.Name && r.Count >= 3 {
			return ""
		}
	}
	phase := st.Phase
	if phase == PhaseBlocked {
		phase = st.BlockedPhase
	}
	want := ""
	switch {
	case phase == PhaseRollingBack || phase == PhaseRolledBack || phase == PhasePaused && st.WaveState == WaveRollingBack:
		want = st.SourceLabel
	case phase == PhaseCompleted || st.Wave > 0 && (phase == PhaseMigrating || phase == PhaseAnalyzing || phase == PhasePaused):
		want = st.Target
	}
	if got := ns.Labels[LabelRev]; want != "" && got != want {
		return fmt.Sprintf("%s leaves %s=%s, not %s", statusWords(st), LabelRev, got, want)
	}
	return ""
}

// factsAgree: the decision made from the Facts the agent keeps beside each
// workload is the one made from reading the workloads.
func factsAgree(_ *exploration, _ *cluster, tr transition) string {
	dd := tr.decided
	if dd == nil || dd.withFacts == nil || reflect.DeepEqual(dd.d, *dd.withFacts) {
		return ""
	}
	return fmt.Sprintf("the decision from the workloads' Facts differs: %s (events %v) instead of %s (events %v)",
		decisionWords(*dd.withFacts), eventReasons(*dd.withFacts), decisionWords(dd.d), eventReasons(dd.d))
}

func decisionWords(d Decision) string {
	st := "no status"
	if d.Status != nil {
		st = statusWords(d.Status)
	}
	return fmt.Sprintf("%s, label %q, %d moves", st, d.Label, len(d.Moves))
}

func eventReasons(d Decision) []string {
	out := make([]string, 0, len(d.Events))
	for _, e := range d.Events {
		out = append(out, e.Reason)
	}
	return out
}
