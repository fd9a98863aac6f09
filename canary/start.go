package canary

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// pending runs the precheck, waits for the namespace's turn, and starts
// the first wave: of the migration on record it continues, or of a new
// one.
func pending(m *machine) step {
	st := m.st
	st.WaitsForRing = false // set again below while it waits
	if m.settings.Rollback != RollbackNone && m.r.Continuation == nil {
		// A migration on record this one continues takes the request
		// once it is continued.
		m.out.ClearRollback = true
		why := "nothing to roll back: no wave has started"
		if prev := m.r.Recorded; prev != nil && prev.Target != st.Target && terminal(prev.Phase) && prev.Wave > 0 {
			why = fmt.Sprintf("nothing to roll back: the migration to %s is %s, and no wave to %s has started", prev.Target, prev.Phase, st.Target)
		}
		m.event("", EventNormal, "RollbackIgnored", why)
	}
	reason, retry, source := precheck(m)
	if reason != "" {
		blockPrecheck(m, reason, retry)
		return nil
	}
	plan := m.plan()
	if plan.Remaining() == 0 && len(plan.Moved) == 0 {
		// Every injected workload already runs the target.
		ensureLabel(m, st.label())
		st.Phase, st.Reason = PhaseCompleted, fmt.Sprintf("every injected workload already runs %s", st.TargetRevision)
		st.CompletedAt = timePtr(m.now)
		m.event("", EventNormal, "Completed", st.Reason)
		return nil
	}
	compat := compatWarnings(m, plan, source.Revision)
	if m.cfg.StrictPrechecks && len(compat) > 0 {
		st.Warnings = boundWarnings(compat)
		reason := "prechecks.strict: " + compat[0]
		if len(compat) > 1 {
			reason += fmt.Sprintf(" (and %d more in the status's warnings)", len(compat)-1)
		}
		blockPrecheck(m, reason, false)
		return nil
	}
	st.Warnings = nil
	if m.settings.Paused {
		// Paused before its first wave, it takes no slot and holds no one up.
		st.Phase, st.Reason = PhasePaused, "paused by "+AnnotationPaused+" before the first wave"
		st.PausedAt = timePtr(m.now)
		m.event("", EventNormal, "Paused", st.Reason)
		return nil
	}
	first := fmt.Sprintf("the first wave of %d", len(plan.Waves))
	if m.r.Continuation == nil && waitForFleet(m, first, true) {
		// Before asking for a slot: a namespace its ring holds waits
		// without one, and the fleet's Prometheus is never read under
		// the admission lock.
		return nil
	}
	if !admitted(m) {
		return nil
	}
	if c := m.r.Continuation; c != nil {
		next := c.Status.DeepCopy()
		if c.Resumed {
			// What the wait before the start changed carries over.
			next.Warnings, next.PausedSeconds = st.Warnings, st.PausedSeconds
		}
		m.st = next
		m.out.Events = append(m.out.Events, c.Event)
		m.requeue(soon)
		return nil
	}
	if waitForWindow(m, first) {
		return nil
	}
	start(m, plan, source, compat)
	return startWave
}

// admitted asks the peers whether the namespace may start now, and says
// why not in the status when it may not.
func admitted(m *machine) bool {
	peers := m.snap().Peers
	if m.snap().ReadPeers != nil {
		peers = m.snap().ReadPeers()
	}
	ok, why := Admit(Peer{Name: m.ns, Priority: m.settings.Priority, Phase: PhasePending}, peers, m.cfg.Concurrency)
	if !ok {
		m.st.Phase, m.st.Reason = PhasePending, why
	}
	return ok
}

// start stamps a new migration's start: its source, its ID and the
// precheck's warnings, with an Event for each.
func start(m *machine, plan NamespacePlan, source Source, compat []string) {
	st := m.st
	st.Phase, st.Reason = PhaseMigrating, ""
	st.SourceLabel, st.SourceRevision = source.Label, source.Revision
	st.StartedAt, st.RetriedAt = timePtr(freshStart(m)), nil
	st.Warnings = warnings(m, plan, source.Revision, compat)
	m.event("", EventNormal, "MigrationStarted", fmt.Sprintf("moving %d workloads from %s to %s in %d waves", plan.Remaining(), source.Revision, st.targetPlace(), len(plan.Waves)))
	for _, w := range st.Warnings {
		m.event("", EventWarning, "PrecheckWarning", w)
	}
	for _, x := range plan.Excluded {
		if strings.HasPrefix(x.Reason, "gateway") {
			m.event(x.Workload, EventNormal, "Skipped", x.Reason+": never restarted by meshwave; migrate it after its namespace")
		}
	}
}

// freshStart is the start time of a new migration: now, or a second later
// when a migration on record to the same target started in the same
// second, so that no two migrations share an ID.
func freshStart(m *machine) time.Time {
	now := m.now.UTC().Truncate(time.Second)
	for _, mr := range migrationsOnRecord(m.workloads(), m.st.TargetRevision) {
		if mr.StartedAt.Equal(now) {
			return now.Add(time.Second)
		}
	}
	return m.now
}

// precheck returns why the migration cannot start ("" when it can),
// whether that may fix itself, and the source.
func precheck(m *machine) (reason string, retry bool, source Source) {
	ns, mesh := m.snap().Namespace, m.snap().Mesh
	if v, ok := ns.Labels[LabelInjection]; ok {
		return fmt.Sprintf("namespace carries %s=%s, which takes precedence over %s, so switching %s would move nothing; move it to %s first", LabelInjection, v, LabelRev, LabelRev, LabelRev), false, Source{}
	}
	label, ok := ns.Labels[LabelRev]
	if !ok {
		return fmt.Sprintf("namespace has no %s label; meshwave moves namespaces that select their revision with %s", LabelRev, LabelRev), false, Source{}
	}
	labelRev, ok := mesh.Resolve(label)
	if !ok && m.r.Inherited == nil {
		return fmt.Sprintf("its source revision %s=%s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", LabelRev, label), true, Source{}
	}
	source = sourceOf(m, label, labelRev)
	if _, ok := mesh.Resolve(source.Label); !ok {
		return fmt.Sprintf("its source revision %s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", source.Label), true, Source{}
	}
	if _, ok := mesh.Revisions[source.Revision]; !ok {
		return fmt.Sprintf("its source revision %s is not installed (no injector webhook configuration), so a rollback would have nowhere to go", source.Revision), true, Source{}
	}
	if rev, ok := mesh.Revisions[m.st.TargetRevision]; !ok || rev.ReadyIstiods == 0 {
		return fmt.Sprintf("revision %s has no Ready istiod pod (%d pods)", m.st.TargetRevision, rev.Istiods), true, Source{}
	}
	if why, _ := downgrade(m, source.Revision); why != "" {
		return why, false, Source{}
	}
	if why := rootOfTrustProblem(m); why != "" {
		return why, true, Source{}
	}
	if !anyInjected(m.snap().Workloads) {
		return fmt.Sprintf("nothing to migrate: no workload has an injected pod; %s stays %s", LabelRev, label), false, Source{}
	}
	if m.st.Mode == ModeAmbient {
		if why := ambientPrecheck(m); why != "" {
			return why, true, Source{}
		}
	}
	return "", false, source
}

// anyInjected reports whether any workload has a live injected pod.
func anyInjected(ws []Workload) bool {
	for _, w := range ws {
		for _, p := range w.Pods {
			if p.Injected() && !p.Terminating {
				return true
			}
		}
	}
	return false
}

// sourceOf is what a rollback returns the namespace to: the source of an
// unfinished migration this one replaces; else the revision most pods not
// on the target run, when the label says otherwise and that revision is
// installed (the label was switched by hand, or by a migration that was
// abandoned); else the label.
func sourceOf(m *machine, label, labelRev string) Source {
	if in := m.r.Inherited; in != nil && in.Revision != m.st.TargetRevision {
		// Not when the target is now where the replaced migration came
		// from (its tag repointed back): a rollback must not go to the
		// target itself.
		return *in
	}
	if rev := podSourceRevision(m.snap().Workloads, m.st.TargetRevision); rev != "" && rev != labelRev {
		if _, ok := m.snap().Mesh.Revisions[rev]; ok {
			return Source{rev, rev}
		}
	}
	return Source{label, labelRev}
}

// warnings are the risks the precheck reports without blocking: the
// compatibility warnings first, then an allowed downgrade, GitOps owners,
// single replicas and gateways.
func warnings(m *machine, plan NamespacePlan, sourceRev string, compat []string) []string {
	out := slices.Clone(compat)
	if _, note := downgrade(m, sourceRev); note != "" {
		out = append(out, note)
	}
	if m.st.Mode == ModeAmbient {
		out = append(out, reporterWarning)
	}
	out = append(out, replacedNotes(m, plan)...)
	out = append(out, gitopsWarnings(m, plan)...)
	inPlan := map[string]bool{}
	for _, w := range plan.Waves {
		for _, p := range w {
			inPlan[p.Name] = true
		}
	}
	for _, w := range m.workloads() {
		if inPlan[w.Name] && w.Replicas == 1 && !w.HasPDB {
			out = append(out, fmt.Sprintf("%s has one replica and no PodDisruptionBudget: it is unavailable while it restarts", describe(w.Name)))
		}
	}
	for _, x := range plan.Excluded {
		if strings.HasPrefix(x.Reason, "gateway") {
			out = append(out, fmt.Sprintf("%s is a %s and is skipped: once %s switches, a restarted gateway pod is injected by %s", describe(x.Workload), x.Reason, LabelRev, m.st.TargetRevision))
		}
	}
	return boundWarnings(out)
}

// boundWarnings keeps the status's warnings to maxWarnings, the last one
// counting those left out.
func boundWarnings(out []string) []string {
	if len(out) > maxWarnings {
		out = append(out[:maxWarnings-1:maxWarnings-1], fmt.Sprintf("and %d more", len(out)-maxWarnings+1))
	}
	return out
}
