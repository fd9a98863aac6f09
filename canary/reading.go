package canary

import (
	"fmt"
	"time"
)

// Standing says what the reading made of the recorded status.
type Standing string

const (
	// StandingKept: the recorded status is of the migration the namespace
	// asks for (or of one being rolled back first), and the decision goes
	// on from it.
	StandingKept Standing = "Kept"
	// StandingNew: no migration the namespace asks for is under way in the
	// recorded status (there is none and nothing is on record, it is of
	// another target, its tag was repointed, or it stopped): the decision
	// goes on from a new migration's status, before its first wave.
	StandingNew Standing = "New"
	// StandingAdopted: the recorded status could not be read, is lost, is
	// a stale copy, or the move records contradict it: the decision goes on
	// from a status rebuilt from the newest migration on record.
	StandingAdopted Standing = "Adopted"
)

// Reading is everything a decision derives before it decides: which
// migration the namespace's status is about, worked out once per
// reconcile (Read) and handed to every reader, so that none of them works
// it out again. Decide decides from it, WaveToVerify picks the wave to
// judge from it, PeerOf reads a peer's slot from it, and PlanWaves and
// ClassifyHolders plan and explain from it.
type Reading struct {
	Snapshot Snapshot
	Settings NamespaceSettings
	// OptedIn is true when the namespace carries meshwave.io/target-revision.
	OptedIn bool
	// Errors are the invalid inputs: the namespace's annotations, its
	// workloads', maintenance windows that never meet the configured ones,
	// and a target that resolves to nothing (only when nothing else is
	// wrong).
	Errors []InputError
	// Revision is the revision the namespace's target resolves to now;
	// Resolved is false when it resolves to none.
	Revision string
	Resolved bool
	// Recorded is the status as recorded, nil when there is none or it
	// could not be read (StatusErr says why).
	Recorded  *Status
	StatusErr error
	// Status is the status the decision goes on from, never nil once the
	// namespace opted in: the recorded one kept, a new one, or one adopted
	// from the move records (Standing). Readers never change it.
	Status   *Status
	Standing Standing
	// Undoing is true when Status is of a migration being rolled back, or
	// asked to be (undoing): the rollback is done before anything else.
	// Retargeted is true when it is of another target than the namespace
	// names now: its rollback ends before the new target's migration
	// starts.
	Undoing, Retargeted bool
	// Inherited is the source of an unfinished migration a new one
	// replaces, kept until the new one starts: a rollback must send the
	// workloads it had not moved back to a revision they ran. Nil when
	// there is none.
	Inherited *Source
	// Continuation, for a migration that has not started, is the
	// migration to the same target on record that it continues once
	// admitted, instead of starting afresh; nil when there is none.
	Continuation *Continuation
	// Events are what the reading found that a person should know: a
	// repointed tag, a status that could not be read or was rebuilt.
	Events []Event
	// ignored are the invalid inputs that do not block: a maintenance
	// window annotation while the migration rolls back.
	ignored []InputError

	// announceRetarget says that the decision's status, when written, goes
	// with an Event naming the new target that waits for the rollback.
	announceRetarget bool

	now       time.Time
	cfg       Config
	workloads workloadSet
	// recordsErr is why the workloads could not be read (PeerOf's lazy
	// read); records read none then.
	recordsErr  error
	loadRecords func() (workloadSet, error)
	loaded      bool
}

// Source is a migration's source: the istio.io/rev value a rollback puts
// back and the revision it stands for.
type Source struct {
	Label, Revision string
}

// Read reads a namespace's migration once: the target as resolved, the
// source, whether the recorded status is kept, replaced by a new one, or
// rebuilt from the move records (and why), and whether a rollback comes
// first. statusErr is ParseStatus's error when the status could not be
// read. It is pure: the same input gives the same reading.
func Read(snap Snapshot, recorded *Status, statusErr error, cfg Config, now time.Time) Reading {
	cfg = cfg.WithDefaults()
	set, werrs := parseWorkloads(snap.Workloads)
	r := Reading{Snapshot: snap, Recorded: recorded, StatusErr: statusErr, now: now, cfg: cfg, workloads: set, loaded: true}
	r.Settings, r.Errors = ParseNamespace(snap.Namespace.Name, snap.Namespace.Annotations)
	_, r.OptedIn = snap.Namespace.Annotations[AnnotationTargetRevision]
	if !r.OptedIn {
		r.Status = recorded
		return r
	}
	r.Errors = append(r.Errors, werrs...)
	r.Errors = append(r.Errors, windowsMeet(r.Settings, snap.Namespace, cfg.MaintenanceWindows, now)...)
	r.settle(snap.Mesh.Resolve, false)
	if r.Resolved && r.Status.Wave == 0 {
		if c, ok := r.continuation(r.Status); ok {
			r.Continuation = &c
		}
	}
	r.Errors, r.ignored = windowErrorsNotGoingForward(r.Status, r.Continuation, r.Settings, r.Errors)
	if len(r.Errors) == 0 && !r.Resolved && !r.Retargeted {
		// A rollback kept before a new target runs to its end whatever
		// the new target names; once it ended, the target blocks.
		r.Errors = append(r.Errors, unresolvedTarget(snap.Namespace.Name, r.Settings.Target))
	}
	return r
}

// settle works out the status the decision goes on from. A peer's reading
// (peer) stops short of the records where they cannot change whether the
// namespace holds a slot.
func (r *Reading) settle(resolve func(string) (string, bool), peer bool) {
	prev, settings := r.Recorded, r.Settings
	if r.targetInvalid() {
		// A target that is not a revision or tag name names no migration:
		// the status stays as it is, to be blocked with the reason; one
		// lost or unreadable is rebuilt from the newest migration on
		// record, of whatever revision; and a namespace with neither gets
		// a status that names no target.
		r.Status, r.Standing = prev.DeepCopy(), StandingKept
		if r.Status == nil {
			r.Status, r.Standing = &Status{Phase: PhasePending}, StandingNew
			r.adoptNewest()
		}
		return
	}
	st, staleOf := r.keptOrNew(resolve)
	r.announceRetarget = r.Retargeted && st.TargetRevision != ""
	rev, resolved := resolve(settings.Target)
	r.Revision, r.Resolved = rev, resolved
	if r.Retargeted && st.TargetRevision != "" {
		// Its records are of the revision it went to, whatever the
		// namespace's target names now.
		rev = st.TargetRevision
	}
	r.Status = st
	if resolved {
		keeps := keepsRevision(st, settings)
		if st.TargetRevision != "" && st.TargetRevision != rev && !keeps {
			if followsAuto(st, settings) {
				// The mesh's default moved after the migration completed:
				// the hands-off target's signal to move again.
				r.event(EventNormal, "TargetFollowed", fmt.Sprintf("%s now resolves to %s%s; the migration to %s completed, so a new one to %s starts", settings.Target, rev, r.autoFrom(), st.TargetRevision, rev))
			} else {
				// A tag was repointed mid-way: this is a migration to somewhere else.
				r.event(EventWarning, "TargetChanged", fmt.Sprintf("%s now resolves to %s instead of %s; starting over", settings.Target, rev, st.TargetRevision))
			}
			st = r.freshStatus(settings.Target)
			r.Status = st
		}
		if !keeps || st.TargetRevision == "" {
			// A migration that ended, or is being undone, keeps the
			// revision it went to: its records are of that revision's
			// migration.
			st.TargetRevision = rev
		}
		if st.Wave == 0 && !terminal(st.unblockedPhase()) && !r.Retargeted {
			// Until it starts, a migration is of the mode the namespace
			// asks for, or of the sidecar step an ambient one needs
			// first.
			st.Mode = r.modeOf(settings.Mode, rev)
		}
		if peer && (st.HoldsSlot() || r.StatusErr != nil && prev == nil) {
			// An adopted status would hold a slot too; an unreadable one
			// is held until its own decision rebuilds it (PeerOf).
			return
		}
		r.adoptIfNeeded(rev, keeps, staleOf)
		if st := r.Status; r.Inherited == nil && st.Wave == 0 && st.SourceRevision != "" && !st.keepsRevision() {
			// The source of an unfinished migration this one replaced,
			// kept while it waited to start (freshStatus).
			r.Inherited = &Source{st.SourceLabel, st.SourceRevision}
		}
	}
	r.Undoing = undoing(r.Status, settings)
}

// keptOrNew is the recorded status kept, or a new one: a status of another
// target is replaced, unless its migration is being rolled back, or asked
// to be (undoing), which is done first. staleOf names the migration of a
// status so kept that the records show older than the new target's: it is
// read as lost.
func (r *Reading) keptOrNew(resolve func(string) (string, bool)) (st *Status, staleOf string) {
	prev, settings := r.Recorded, r.Settings
	st = prev.DeepCopy()
	r.Retargeted = rollsBackFirst(st, settings)
	if r.Retargeted {
		switch newRev, ok := resolve(settings.Target); {
		case ok && newRev == st.TargetRevision && st.Mode == settings.Mode:
			// The same revision named another way: the same migration.
			st.Target, r.Retargeted = settings.Target, false
		case ok && r.newerOnRecord(newRev, st):
			// A stale copy: the new target's migration is under way or
			// done, and its records are what to go by, as if the status
			// were lost (adoptIfNeeded).
			r.Retargeted, staleOf = false, st.MigrationID()
		}
	}
	if followsAuto(st, settings) {
		if newRev, ok := resolve(settings.Target); ok && newRev != st.TargetRevision && r.newerOnRecord(newRev, st) {
			// A completed status older than the migration its target
			// followed since (a stale copy restored over it): that
			// migration's records are what to go by, a rollback on record
			// included, as if the status were lost.
			staleOf, st = st.MigrationID(), nil
		}
	}
	r.Standing = StandingKept
	if st != nil && st.serves(settings) && !r.Retargeted {
		if why := unfoundedCompletion(r.records, st, r.Snapshot.Namespace); why != "" {
			r.event(EventWarning, "StatusRejected", why+"; the migration starts over from where the workloads run")
			st = nil
		}
	}
	if st == nil || !st.serves(settings) && !r.Retargeted || st.Phase == PhaseStopped {
		st = r.freshStatus(settings.Target)
	}
	return st, staleOf
}

// targetInvalid reports whether the namespace's target is not a revision
// or tag name at all (ParseNamespace refused it).
func (r *Reading) targetInvalid() bool {
	for _, e := range r.Errors {
		if e.Key == AnnotationTargetRevision && e.Workload == "" {
			return true
		}
	}
	return false
}

// freshStatus starts a new migration's status. One that replaces an
// unfinished migration to another target keeps that migration's source:
// the workloads it had not moved yet still run it, and a rollback must
// send them to a revision they ran, not to the abandoned target.
func (r *Reading) freshStatus(target string) *Status {
	prev := r.Recorded
	r.Standing = StandingNew
	st := &Status{Phase: PhasePending, Target: target}
	if prev != nil && terminal(prev.Phase) && prev.Target == target && prev.Mode == r.Settings.Mode {
		// The target was set again after the migration ended: a retry.
		// Rollbacks on record from before now are history.
		st.RetriedAt = timePtr(r.now)
	}
	if prev != nil && !prev.keepsRevision() && prev.SourceRevision != "" {
		// Half-way, or changed again before it started: the same source,
		// kept in the status until the migration starts, so that one that
		// waits first (paused, blocked, for its turn) never guesses it
		// from pods that ran the abandoned target.
		r.Inherited = &Source{prev.SourceLabel, prev.SourceRevision}
		st.SourceLabel, st.SourceRevision = prev.SourceLabel, prev.SourceRevision
	}
	return st
}

// newerOnRecord reports whether the workloads' records show a migration
// to rev that started after st's.
func (r *Reading) newerOnRecord(rev string, st *Status) bool {
	if st.StartedAt == nil {
		return false
	}
	for _, m := range migrationsOnRecord(r.records(), rev) {
		if m.StartedAt.After(*st.StartedAt) {
			return true
		}
	}
	return false
}

// adoptIfNeeded replaces a status that cannot be decided from: one that
// could not be read, is lost or stale, or that the move records
// contradict.
func (r *Reading) adoptIfNeeded(rev string, keeps bool, staleOf string) {
	st := r.Status
	if err := r.StatusErr; err != nil && r.Recorded == nil {
		r.event(EventWarning, "StatusUnreadable", err.Error()+"; rebuilding it from the Deployments' move records")
		if ms := migrationsOnRecord(r.records(), st.TargetRevision); len(ms) > 0 {
			r.adopt(ms[0].current(nil), EventWarning, "StatusAdopted", "the status could not be read")
		}
		return
	}
	if r.Recorded == nil || staleOf != "" {
		// No status at all (lost, or never written), or one of a migration
		// older than the new target's on record (newerOnRecord). Records
		// of a migration to this target mean it was under way.
		if ms := migrationsOnRecord(r.records(), st.TargetRevision); len(ms) > 0 {
			why := "the namespace has no status"
			if staleOf != "" {
				why = fmt.Sprintf("the status is of migration %s, older than migration %s on record", staleOf, ms[0].ID)
			}
			r.adopt(ms[0].current(nil), EventWarning, "StatusAdopted", why)
		}
		return
	}
	if st.MigrationID() == "" || st.Phase == PhaseStopped {
		return // nothing on record can contradict a migration not started
	}
	if m, why := recordConflict(r.records(), st, rev, keeps); why != "" {
		st.TargetRevision = rev
		r.adopt(m, EventWarning, "StatusAdopted", "the status disagrees with the Deployments' move records: "+why)
	}
}

// adoptNewest rebuilds a lost or unreadable status from the newest
// migration on record, of whatever revision: the namespace's target names
// none to go by.
func (r *Reading) adoptNewest() {
	if r.StatusErr != nil {
		r.event(EventWarning, "StatusUnreadable", r.StatusErr.Error()+"; rebuilding it from the Deployments' move records")
	}
	var newest *migrationOnRecord
	for _, rev := range revisionsOnRecord(r.records()) {
		if ms := migrationsOnRecord(r.records(), rev); len(ms) > 0 && (newest == nil || ms[0].StartedAt.After(newest.StartedAt)) {
			newest = &ms[0]
		}
	}
	if newest == nil {
		return
	}
	rev, _, _ := ParseMigrationID(newest.ID)
	r.Status.Target, r.Status.TargetRevision = rev, rev
	why := "the namespace has no status"
	if r.StatusErr != nil {
		why = "the status could not be read"
	}
	r.adopt(newest.current(nil), EventWarning, "StatusAdopted", why)
}

// records are the namespace's workloads as the move records are read from
// them; none when they could not be read (recordsErr).
func (r *Reading) records() workloadSet {
	if !r.loaded {
		r.loaded = true
		if r.loadRecords != nil {
			r.workloads, r.recordsErr = r.loadRecords()
		}
	}
	return r.workloads
}

func (r *Reading) event(typ EventType, reason, message string) {
	r.Events = append(r.Events, Event{Type: typ, Reason: reason, Message: cut(message, maxEventMessage)})
}

// Adopted reports whether the decision rebuilt the status from the move
// records: it decides nothing more until the rebuilt status is written.
func (r *Reading) Adopted() bool { return r.Standing == StandingAdopted }
