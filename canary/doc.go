// Package canary decides, without touching a cluster, how workloads move
// between Istio revisions: it plans priority-ordered canary waves from a
// snapshot and runs the phase machine that advances, pauses or rolls back.
//
// # Reading the package
//
// A reconcile reads the namespace once (Read, reading.go) and every
// reader takes that Reading: Decide (decide.go), Reading.WaveToVerify
// (verify.go), PeerOf (admission.go), PlanWaves (plan.go) and
// ClassifyHolders (holders.go). Decide stops a namespace that opted out,
// blocks one whose input is invalid, and otherwise runs the phase machine:
// each rule is a step that writes into the decision and returns the step
// that follows (docs/design.md has the table of phases, events and the
// steps that handle them). Each rule lives in the file named for it:
//
//	reading.go    which migration the status is about: target, source, kept, new or rebuilt, undoing
//	until.go      when the clock alone may change a reading
//	records.go    what the move records say of each migration, and whether they contradict a status
//	adopt.go      a status rebuilt from the records; a migration on record continued
//	start.go      Pending: the precheck, the source, admission, the first wave
//	waves.go      starting a wave, passing it, the delay between waves, completing
//	restarts.go   a wave's restarts: each member once, records written back, refusals
//	judge.go      the gates' verdicts: bake time, passes in a row, inconclusive results
//	policy.go     the failure policies: RollbackWave, Pause, Continue
//	pause.go      pausing, and resuming where the migration stopped
//	rollback.go   rollbacks: asked, after a failure, widened, ended
//	window.go     maintenance windows: only a wave's start waits
//	evict.go      OnDelete workloads, one eviction at a time
//	gitops.go     changes a GitOps owner undid: the label, a template
//	block.go      invalid input and failed prechecks
//	stop.go       a namespace that opted out
//	summary.go    the counts, the totals and the label meshwave owns
//	admission.go  concurrency slots: Admit and PeerOf
//	ambient.go    the move to ambient: its mode, the sidecar step first, its
//	              prechecks, the namespace enrolled last
//	ambientpolicy.go  the policies that change meaning in ambient
//
// The data: snapshot.go (what the agent gathers), status.go (the status
// annotation), moverecord.go (the move record), annotations.go (what a
// person writes), config.go (the settings and their defaults), plan.go,
// verify.go, verdict.go, patch.go, compat.go, holders.go.
package canary
