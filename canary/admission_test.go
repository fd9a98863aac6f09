package canary

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slotTakenUnadmitted says why decision d, made from in after reading its
// peers reads times, starts a migration (TakesSlot) without admission; ""
// when it does not. The agent serialises only the decisions that read the
// peers (Snapshot.ReadPeers), so any other start escapes both the priority
// order and the concurrency limit. Two starts go without admission by
// design, and are let through:
//   - a rollback: it always runs (README, maintenance windows);
//   - the adoption of a migration from its move records, when the status
//     is missing, unreadable, or contradicted by the records (an ended
//     status restored over a newer migration's): only while its peers
//     already count it as holding its slot (PeerOf, read from in).
func slotTakenUnadmitted(in Input, d Decision, reads int) string {
	if d.Status == nil || !TakesSlot(in.Status, d.Status) || reads > 0 {
		return ""
	}
	if d.Status.Phase == PhaseRollingBack {
		return ""
	}
	if in.Status == nil || hasEvent(d, "StatusAdopted") {
		if peerOf(in).HoldsSlot {
			return ""
		}
		return fmt.Sprintf("%s at wave %d adopted over %s without admission, while its peers read it as holding no slot: %v", d.Status.Phase, d.Status.Wave, describeStatus(in.Status), d.Events)
	}
	return fmt.Sprintf("%s at wave %d (%s) took a slot over %s at wave %d (blocked phase %q) without reading its peers: %s",
		d.Status.Phase, d.Status.Wave, d.Status.WaveState, in.Status.Phase, in.Status.Wave, in.Status.BlockedPhase, d.Status.Reason)
}

// peerOf is the namespace of in as its peers read it: its annotations, the
// status as in holds it, and its workloads.
func peerOf(in Input) Peer {
	annotations := map[string]string{}
	for k, v := range in.Snapshot.Namespace.Annotations {
		annotations[k] = v
	}
	delete(annotations, AnnotationStatus)
	switch {
	case in.StatusErr != nil:
		annotations[AnnotationStatus] = "{unreadable"
	case in.Status != nil:
		raw, err := in.Status.Encode()
		if err != nil {
			panic(err)
		}
		annotations[AnnotationStatus] = raw
	}
	p, _ := PeerOf(in.Snapshot.Namespace.Name, annotations, in.Snapshot.Mesh.Resolve, func() ([]Workload, error) { return in.Snapshot.Workloads, nil })
	return p
}

func describeStatus(st *Status) string {
	if st == nil {
		return "no status"
	}
	return fmt.Sprintf("%s at wave %d", st.Phase, st.Wave)
}

// requireAdmitted fails t when a decision read its peers more than once,
// or started a migration without reading them (slotTakenUnadmitted).
func requireAdmitted(t testing.TB, in Input, d Decision, reads int) {
	t.Helper()
	require.LessOrEqual(t, reads, 1, "a decision reads its peers at most once")
	if why := slotTakenUnadmitted(in, d, reads); why != "" {
		t.Fatal(why)
	}
}

func hasEvent(d Decision, reason string) bool {
	for _, e := range d.Events {
		if e.Reason == reason {
			return true
		}
	}
	return false
}

// Invariant 8: a status that says Blocked before the first wave holds no
// slot, whatever phase it was blocked in. One edited by a person (or
// restored from a copy) to be blocked in Migrating at wave 0 is unblocked
// into Migrating and starts wave 1 without admission: its peers are never
// read, so the agent never takes the admission lock, and it migrates
// beside the namespace holding the only slot.
func TestAStatusBlockedAtWaveZeroIsAdmittedBeforeItsFirstWave(t *testing.T) {
	for _, phase := range []string{"Migrating", "Analyzing"} {
		for _, state := range []string{"Passed", "Verifying"} {
			t.Run(phase+"/"+state, func(t *testing.T) {
				s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
				s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
				s.snap.Namespace.Annotations[AnnotationPriority] = "x" // blocks: invalid input
				s.decide(nil)
				require.Equal(t, PhaseBlocked, s.status.Phase)
				s.editStatus(func(m map[string]any) {
					m["blockedPhase"], m["waveState"] = phase, state
					m["gatesSince"] = t0.Format(time.RFC3339)
				})
				delete(s.snap.Namespace.Annotations, AnnotationPriority)
				s.now = s.now.Add(time.Minute)
				s.decide(s.gates())
				require.False(t, s.status.HoldsSlot(), "concurrency 1 and blog holds the slot, yet %s at wave %d", s.status.Phase, s.status.Wave)
			})
		}
	}
}

// Invariant 8, over every status a person could leave that meshwave reads:
// each phase, blocked phase, wave state and rollback scope, at wave 0 and
// 1, decided with and without a pause or rollback request. None starts a
// migration without reading its peers (decideBothWays checks each; the
// statuses decided are not written back).
func TestNoReadableStatusStartsAMigrationWithoutReadingThePeers(t *testing.T) {
	decided := 0
	for _, phase := range Phases {
		for _, blocked := range append([]Phase{""}, Phases...) {
			for _, state := range waveStates {
				for _, scope := range []RollbackScope{RollbackNone, RollbackWave, RollbackAll} {
					for wave := 0; wave <= 1; wave++ {
						st := &Status{Phase: phase, BlockedPhase: blocked, WaveState: state, Rollback: scope, Target: "1-26", TargetRevision: "1-26",
							Wave: wave, TotalWaves: 2, GatesSince: &t0, SourceLabel: "1-25", SourceRevision: "1-25", StartedAt: &t0}
						if phase == PhaseBlocked {
							st.BlockedKind = BlockedInvalidInput
						}
						if st.Validate() != nil {
							continue
						}
						for _, ann := range []string{"", AnnotationPaused, AnnotationRollback} {
							s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
							s.snap.Peers = []Peer{{Name: "blog", Priority: 1, Phase: PhaseMigrating, HoldsSlot: true}}
							switch ann {
							case AnnotationPaused:
								s.snap.Namespace.Annotations[ann] = "true"
							case AnnotationRollback:
								s.snap.Namespace.Annotations[ann] = "all"
							}
							s.status, s.now = st, t0.Add(time.Hour)
							decideBothWays(t, Input{Snapshot: s.snap, Status: st.DeepCopy(), Verdicts: s.gates(), Now: s.now, Config: s.cfg, WasOptedIn: true})
							decided++
						}
					}
				}
			}
		}
	}
	require.Greater(t, decided, 100)
}
