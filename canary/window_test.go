package canary

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func window(t *testing.T, schedule string, d time.Duration, tz string) Window {
	t.Helper()
	w, err := NewWindow(schedule, d, tz)
	require.NoError(t, err)
	return w
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v
}

func TestAWindowIsOpenFromTheSecondItOpensUntilTheSecondItCloses(t *testing.T) {
	ws := Windows{window(t, "0 14 * * *", time.Hour, "UTC")}
	for _, c := range []struct {
		now  string
		want string
	}{
		{"2026-11-29T13:59:59Z", "2026-11-29T14:00:00Z"},
		{"2026-11-29T14:00:00Z", "2026-11-29T14:00:00Z"}, // opens exactly now: open
		{"2026-11-29T14:59:59Z", "2026-11-29T14:59:59Z"},
		{"2026-11-29T15:00:00Z", "2026-11-30T14:00:00Z"}, // closes exactly now: closed
	} {
		got, ok := NextOpening(at(t, c.now), ws)
		require.True(t, ok)
		assert.Equal(t, at(t, c.want), got.UTC(), "at %s", c.now)
	}
	half := at(t, "2026-11-29T13:59:59Z").Add(500 * time.Millisecond)
	got, _ := NextOpening(half, ws)
	assert.Equal(t, at(t, "2026-11-29T14:00:00Z"), got.UTC(), "a clock between seconds waits for the opening itself")
}

func TestAWindowReadsItsScheduleInItsTimeZoneAcrossDaylightSavingTime(t *testing.T) {
	// 02:00 in Berlin is 01:00Z in winter (CET) and 00:00Z in summer (CEST).
	ws := Windows{window(t, "0 2 * * *", time.Hour, "Europe/Berlin")}
	winter, _ := NextOpening(at(t, "2026-01-10T12:00:00Z"), ws)
	summer, _ := NextOpening(at(t, "2026-07-10T12:00:00Z"), ws)
	assert.Equal(t, at(t, "2026-01-11T01:00:00Z"), winter.UTC())
	assert.Equal(t, at(t, "2026-07-11T00:00:00Z"), summer.UTC())

	// Clocks go forward at 02:00 CET on 2026-03-29: 02:30 never happens
	// that night. The window opens an hour later by the new clock (03:30
	// CEST, 01:30Z) rather than being lost for the day.
	skipped := Windows{window(t, "30 2 * * *", time.Hour, "Europe/Berlin")}
	got, _ := NextOpening(at(t, "2026-03-28T23:00:00Z"), skipped)
	assert.Equal(t, at(t, "2026-03-29T01:30:00Z"), got.UTC())

	// Clocks go back at 03:00 CEST on 2026-10-25: 02:30 happens twice,
	// and the window opens at both, as the wall clock says: open from
	// 02:30 CEST (00:30Z) to 03:30 CET (02:30Z).
	twice := Windows{window(t, "30 2 * * *", time.Hour, "Europe/Berlin")}
	got, _ = NextOpening(at(t, "2026-10-24T23:00:00Z"), twice)
	assert.Equal(t, at(t, "2026-10-25T00:30:00Z"), got.UTC(), "02:30 CEST")
	assert.True(t, twice.openAt(at(t, "2026-10-25T01:30:00Z")), "02:30 CET opens it again")
	assert.True(t, twice.openAt(at(t, "2026-10-25T02:29:59Z")))
	assert.False(t, twice.openAt(at(t, "2026-10-25T02:30:00Z")), "closed at 03:30 CET")
}

func TestANamespaceWindowNarrowsTheConfiguredOnesToTheirIntersection(t *testing.T) {
	// Configured: every day 20:00-24:00Z. The namespace: 23:00-01:00Z.
	cfg := Windows{window(t, "0 20 * * *", 4*time.Hour, "UTC")}
	ns := Windows{window(t, "0 23 * * *", 2*time.Hour, "UTC")}
	got, ok := NextOpening(at(t, "2026-11-29T12:00:00Z"), cfg, ns)
	require.True(t, ok)
	assert.Equal(t, at(t, "2026-11-29T23:00:00Z"), got.UTC(), "both open only from 23:00")
	got, _ = NextOpening(at(t, "2026-11-30T00:00:00Z"), cfg, ns)
	assert.Equal(t, at(t, "2026-11-30T23:00:00Z"), got.UTC(), "midnight is inside the namespace's window, outside the configured one: never wider")

	// With no configured windows the namespace's alone decide.
	got, _ = NextOpening(at(t, "2026-11-29T12:00:00Z"), nil, ns)
	assert.Equal(t, at(t, "2026-11-29T23:00:00Z"), got.UTC())

	// Saturdays against Mondays never meet.
	_, ok = NextOpening(at(t, "2026-11-29T12:00:00Z"), Windows{window(t, "0 0 * * 6", 2*time.Hour, "UTC")}, Windows{window(t, "0 0 * * 1", 2*time.Hour, "UTC")})
	assert.False(t, ok)
}

func TestNoWindowsAreAlwaysOpen(t *testing.T) {
	got, ok := NextOpening(t0)
	assert.True(t, ok)
	assert.Equal(t, t0, got)
	got, ok = NextOpening(t0, nil, nil)
	assert.True(t, ok)
	assert.Equal(t, t0, got)
}

func TestInvalidWindowsNameTheFieldAndWhatWasExpected(t *testing.T) {
	for _, c := range []struct {
		schedule string
		d        time.Duration
		tz       string
		want     string
	}{
		{"0 2 * *", time.Hour, "", `schedule "0 2 * *" is not a cron expression of five fields`},
		{"0 0 2 * * *", time.Hour, "", `schedule "0 0 2 * * *" is not a cron expression of five fields`},
		{"@daily", time.Hour, "", `schedule "@daily" is not a cron expression of five fields`},
		{"CRON_TZ=UTC 0 2 * *", time.Hour, "", `schedule "CRON_TZ=UTC 0 2 * *" is not a cron expression of five fields`},
		{"0 25 * * *", time.Hour, "", `schedule "0 25 * * *" is not a cron expression of five fields: `},
		{"0 0 30 2 *", time.Hour, "", `schedule "0 0 30 2 *" is not a cron expression that ever opens`},
		{"0 2 * * *", 30 * time.Second, "", `duration "30s" is not a duration from 1m to 744h`},
		{"0 2 * * *", 32 * 24 * time.Hour, "", `duration "768h0m0s" is not a duration from 1m to 744h`},
		{"0 2 * * *", time.Hour, "Mars/Olympus", `timeZone "Mars/Olympus" is not an IANA time zone`},
		{"0 2 * * *", time.Hour, "Local", `timeZone "Local" is not an IANA time zone`},
	} {
		_, err := NewWindow(c.schedule, c.d, c.tz)
		require.Error(t, err, c.schedule)
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestTheWindowAnnotationIsValidated(t *testing.T) {
	s, errs := ParseNamespace("shop", map[string]string{AnnotationMaintenanceWindow: `{"schedule":"0 2 * * *","duration":"2h","timeZone":"Europe/Berlin"}`})
	assert.Empty(t, errs)
	require.Len(t, s.Windows, 1, "one window may be written without a list")
	assert.Equal(t, `"0 2 * * *" for 2h0m0s in Europe/Berlin`, s.Windows[0].String())

	for _, c := range []struct{ value, want string }{
		{`0 2 * * *`, `meshwave.io/maintenance-window on namespace shop: "0 2 * * *" is not a JSON list of windows`},
		{`[]`, `from 1 to 20 of them`},
		{`[{"schedule":"0 2 * * *","duration":"2h","timezone":"UTC"}]`, `(unknown field "[0].timezone")`},
		{`[{"schedule":"0 2 * * *","duration":"two hours"}]`, `(window 0: duration "two hours" is not a Go duration such as "2h")`},
		{`[{"schedule":"0 2 * * *","duration":"2h"},{"schedule":"0 2 * * *","duration":"2h","timeZone":"Nowhere"}]`, `(window 1: timeZone "Nowhere" is not an IANA time zone`},
	} {
		_, errs := ParseNamespace("shop", map[string]string{AnnotationMaintenanceWindow: c.value})
		require.Len(t, errs, 1, c.value)
		assert.Equal(t, AnnotationMaintenanceWindow, errs[0].Key)
		assert.Equal(t, c.value, errs[0].Value)
		assert.Contains(t, errs[0].Error(), c.want)
	}
}

// canaryInWindow is namespace shop of ws under windowAt2pm, its canary
// started at 14:30Z, inside the window.
func canaryInWindow(t *testing.T, ws ...Workload) *sim {
	s := newSim(t, ws...)
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:30:00Z")
	s.decide(nil)
	return s
}

// windowAt2pm is open every day from 14:00Z to 15:00Z; t0 is 12:00Z.
func windowAt2pm(t *testing.T) Windows {
	return Windows{window(t, "0 14 * * *", time.Hour, "UTC")}
}

func TestNoWaveStartsOutsideAWindowAndTheFirstStartsWhenItOpens(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, 0, d.Status.Wave)
	assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at 2026-11-29T14:00:00Z", d.Status.Reason)
	assert.Equal(t, at(t, "2026-11-29T14:00:00Z"), *d.Status.NextWindow)
	assert.Equal(t, 2*time.Hour, d.RequeueAfter, "looked at again when it opens, not polled")
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label, "the label does not switch before the first wave")
	assert.False(t, d.Status.HoldsSlot(), "waiting for its window, it holds no slot")
	assert.Equal(t, []Event{{Type: EventNormal, Reason: "WaitingForWindow", Message: d.Status.Reason}}, d.Events)

	s.now = at(t, "2026-11-29T13:59:59Z")
	d = s.decide(nil)
	assert.Nil(t, d.Status, "the same wait is not written again")
	assert.Empty(t, d.Events, "nor reported again")
	assert.Equal(t, time.Second, d.RequeueAfter)

	s.now = at(t, "2026-11-29T14:00:00Z") // exactly when it opens
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Empty(t, d.Status.Reason)
	assert.Nil(t, d.Status.NextWindow)
	require.Len(t, d.Moves, 1)
}

func TestAWaveInFlightFinishesAfterTheWindowClosesAndTheNextWaitsForTheNextOpening(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:59:00Z")
	s.decide(nil)
	require.Equal(t, 1, s.status.Wave)

	s.now = at(t, "2026-11-29T15:10:00Z") // closed since 15:00
	s.rollOut("1-26", "a")
	d := s.decide(s.gates())
	assert.Equal(t, WavePassed, d.Status.WaveState, "the wave in flight finished its gates")
	assert.Equal(t, PhaseMigrating, d.Status.Phase)

	s.now = s.now.Add(time.Minute) // the delay between waves is over
	d = s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Empty(t, d.Moves, "no new wave outside the window")
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, "wave 2 is waiting for the maintenance window opening at 2026-11-30T14:00:00Z", d.Status.Reason)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z"), *d.Status.NextWindow)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z").Sub(s.now), d.RequeueAfter)
	assert.True(t, d.Status.HoldsSlot(), "half-way, it keeps its slot")

	s.now = at(t, "2026-11-30T14:00:00Z")
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	assert.Nil(t, d.Status.NextWindow)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
}

func TestARollbackRunsOutsideTheWindow(t *testing.T) {
	s := canaryInWindow(t, deploy("a"), deploy("b"))
	s.rollOut("1-26", "a")

	s.now = at(t, "2026-11-29T16:00:00Z")
	errRate := Verdict{Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3 > threshold 0.05"}
	d := s.decide([]Verdict{pass("rollout"), errRate})
	assert.Equal(t, PhaseRollingBack, d.Status.Phase, "a failed wave rolls back whatever the hour")
	require.Len(t, d.Moves, 1)
	assert.True(t, d.Moves[0].Record.Rollback)

	s.rollOut("1-25", "a")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
}

func TestARollbackAskedForBetweenWavesRunsOutsideTheWindow(t *testing.T) {
	s := canaryInWindow(t, deploy("a"), deploy("b"))
	s.rollOut("1-26", "a")
	s.decide(s.gates())
	s.now = at(t, "2026-11-29T16:00:00Z")
	s.decide(nil)
	require.NotNil(t, s.status.NextWindow, "waiting for tomorrow's window")

	s.snap.Namespace.Annotations[AnnotationRollback] = "all"
	d := s.decide(nil)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Nil(t, d.Status.NextWindow)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
}

func TestANamespaceWindowNarrowsTheConfiguredWindow(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	// The namespace allows 14:30-16:30Z: together, 14:30-15:00Z.
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = `[{"schedule":"30 14 * * *","duration":"2h","timeZone":"UTC"}]`
	s.now = at(t, "2026-11-29T14:10:00Z") // the configured window is open
	d := s.decide(nil)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, at(t, "2026-11-29T14:30:00Z"), *d.Status.NextWindow)

	s.now = at(t, "2026-11-29T15:30:00Z") // the namespace's is open, the configured one closed
	d = s.decide(nil)
	assert.Equal(t, PhasePending, d.Status.Phase, "a namespace never widens the configured windows")
	assert.Equal(t, at(t, "2026-11-30T14:30:00Z"), *d.Status.NextWindow)

	s.now = at(t, "2026-11-30T14:45:00Z")
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Len(t, d.Moves, 1)
}

func TestAnInvalidWindowAnnotationBlocksAndWritesNothingElse(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = `[{"schedule":"0 2 * *","duration":"2h"}]`
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, BlockedInvalidInput, d.Status.BlockedKind)
	want := `meshwave.io/maintenance-window on namespace shop: "[{\"schedule\":\"0 2 * *\",\"duration\":\"2h\"}]" is not a JSON list of windows, each {"schedule": "<five-field cron>", "duration": "<Go duration>", "timeZone": "<IANA zone>"} (window 0: schedule "0 2 * *" is not a cron expression of five fields (minute hour day-of-month month day-of-week), e.g. "0 2 * * 6"; the time zone goes in timeZone)`
	assert.Equal(t, "invalid input: "+want, d.Status.Reason)
	assert.Equal(t, []Event{{Type: EventWarning, Reason: "InvalidAnnotation", Message: want}}, d.Events)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label)
	assert.Zero(t, d.RequeueAfter)
}

func TestANamespaceWindowThatNeverMeetsTheConfiguredOnesIsInvalid(t *testing.T) {
	s := newSim(t, deploy("a"))
	s.cfg.MaintenanceWindows = Windows{window(t, "0 0 * * 6", 2*time.Hour, "UTC")}
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = `{"schedule":"0 0 * * 1","duration":"2h"}`
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Contains(t, d.Status.Reason, `is not windows that meet the agent's maintenanceWindows within a year (a namespace narrows them, never widens them)`)
	assert.Empty(t, d.Moves)
}

func TestAStatusWithANextWindowOutsideAWaitIsNotTrusted(t *testing.T) {
	st := &Status{Phase: PhaseMigrating, Target: "1-26", TargetRevision: "1-26", SourceRevision: "1-25", Wave: 1, TotalWaves: 2,
		WaveState: WaveVerifying, StartedAt: &t0, WaveStartedAt: &t0, GatesSince: &t0, NextWindow: timePtr(t0.Add(time.Hour))}
	assert.ErrorContains(t, st.Validate(), "nextWindow 2026-11-29T13:00:00Z is not set while Migrating at wave 1")
	st.WaveState = WavePassed
	assert.NoError(t, st.Validate())
	st.NextWindow = timePtr(t0.Add(-time.Hour))
	assert.ErrorContains(t, st.Validate(), "nextWindow 2026-11-29T11:00:00Z is not a time after waveStartedAt")
}

// decideStoppingAfterTheNamespaceWrite decides as the sim does, but the
// agent stops right after the namespace write: the status and label land,
// no workload patch does.
func (s *sim) decideStoppingAfterTheNamespaceWrite(verdicts []Verdict) Decision {
	s.t.Helper()
	in := Input{Snapshot: s.snap, Status: s.status, Verdicts: verdicts, Now: s.now, Config: s.cfg, WasOptedIn: s.optedIn}
	d := Decide(in)
	_, s.optedIn = s.snap.Namespace.Annotations[AnnotationTargetRevision]
	written := d
	written.Moves, written.Evictions, written.Events = nil, nil, nil
	s.apply(written)
	return d
}

func TestAFirstWaveNoneOfWhoseRestartsWentOutWaitsForTheNextWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := s.decideStoppingAfterTheNamespaceWrite(nil)
	require.Equal(t, 1, s.status.Wave)
	require.Len(t, d.Moves, 1, "the decision asked for a's restart, which never went out")
	require.Equal(t, "1-26", s.snap.Namespace.Labels[LabelRev])

	s.now = at(t, "2026-11-29T15:10:00Z") // back after the window closed
	d = s.decide(nil)
	assert.Empty(t, d.Moves, "no restart goes out of the window")
	assert.Equal(t, "1-25", d.Label, "the label goes back to the source: pods created meanwhile keep their revision")
	require.NotNil(t, d.Status)
	assert.Equal(t, PhasePending, d.Status.Phase)
	assert.Equal(t, 0, d.Status.Wave)
	assert.Nil(t, d.Status.StartedAt)
	assert.Equal(t, "the first wave of 2 is waiting for the maintenance window opening at 2026-11-30T14:00:00Z", d.Status.Reason)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z"), *d.Status.NextWindow)
	assert.Equal(t, "1-25", d.Status.SourceLabel, "the source is kept until the wave starts")
	assert.False(t, d.Status.HoldsSlot(), "a migration that has not started holds no slot")
	assert.Equal(t, []Event{
		{Type: EventNormal, Reason: "WaveDeferred", Message: "wave 1 was written as started, but none of its workloads was restarted before the maintenance window closed: it starts when a window opens"},
		{Type: EventNormal, Reason: "WaitingForWindow", Message: d.Status.Reason},
	}, d.Events)
	assert.Equal(t, at(t, "2026-11-30T14:00:00Z").Sub(s.now), d.RequeueAfter)

	d = s.decide(nil)
	assert.Nil(t, d.Status, "the wait is written once")
	assert.Empty(t, d.Events)

	s.now = at(t, "2026-11-30T14:00:00Z")
	d = s.decide(nil)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, "1-26", d.Label)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: s.now, Migration: "1-26@2026-11-30T14:00:00Z"}, d.Moves[0].Record)
	assert.Equal(t, map[string]int{"a": 1}, s.patches)
}

func TestALaterWaveNoneOfWhoseRestartsWentOutWaitsForTheNextWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.cfg.DelayBetweenWaves = 0
	s.now = at(t, "2026-11-29T14:50:00Z")
	s.decide(nil)
	s.rollOut("1-26", "a")
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := s.decideStoppingAfterTheNamespaceWrite(s.gates())
	require.Equal(t, 2, s.status.Wave, "wave 1 passed and wave 2 was written as started")
	require.Len(t, d.Moves, 1)
	require.Equal(t, "b", d.Moves[0].Workload)

	s.now = at(t, "2026-11-29T15:10:00Z")
	d = s.decide(nil)
	assert.Empty(t, d.Moves)
	assert.Empty(t, d.Label, "the label stays on the target the first wave moved to")
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseMigrating, d.Status.Phase)
	assert.Equal(t, 1, d.Status.Wave)
	assert.Equal(t, WavePassed, d.Status.WaveState)
	assert.Equal(t, "wave 2 is waiting for the maintenance window opening at 2026-11-30T14:00:00Z", d.Status.Reason)
	assert.True(t, d.Status.HoldsSlot(), "half-way, it keeps its slot")
	assert.Equal(t, Counts{Total: 2, Pending: 1, Moved: 1}, d.Status.Counts)

	s.now = at(t, "2026-11-30T14:00:00Z")
	d = s.decide(nil)
	assert.Equal(t, 2, d.Status.Wave)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

func TestAWaveWrittenAsStartedIsRestartedWhenTheAgentComesBackInsideTheWindow(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.now = at(t, "2026-11-29T14:59:00Z")
	s.decideStoppingAfterTheNamespaceWrite(nil)

	s.now = at(t, "2026-11-29T14:59:30Z")
	d := s.decide(nil)
	require.Len(t, d.Moves, 1, "the missing restart is sent while the window is open")
	assert.Equal(t, "a", d.Moves[0].Workload)
	assert.Nil(t, d.Status, "the wave in flight is unchanged")
	assert.Equal(t, 1, s.status.Wave)
}

func TestAWaveOneOfWhoseRestartsWentOutFinishesAfterTheWindowCloses(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"), deploy("c"))
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.cfg.Sizes = WaveSizes{CanarySize: 2}
	s.now = at(t, "2026-11-29T14:59:50Z")
	d := Decide(Input{Snapshot: s.snap, Now: s.now, Config: s.cfg})
	require.Len(t, d.Moves, 2)
	d.Moves = d.Moves[:1] // a's restart went out, b's did not
	s.apply(d)

	s.now = at(t, "2026-11-29T15:10:00Z")
	d = s.decide(nil)
	require.Len(t, d.Moves, 1, "the wave started: its last restart goes out whatever the hour")
	assert.Equal(t, "b", d.Moves[0].Workload)
	assert.Nil(t, d.Status, "the status is unchanged")
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, s.patches)
}

func TestAWaveWithoutWindowsIsNeverDeferred(t *testing.T) {
	s := newSim(t, deploy("a"), deploy("b"))
	s.decideStoppingAfterTheNamespaceWrite(nil)
	s.now = s.now.Add(24 * time.Hour)
	d := s.decide(nil)
	require.Len(t, d.Moves, 1)
	assert.Equal(t, "a", d.Moves[0].Workload)
}

// neverMeets is a namespace window that never meets windowAt2pm: Mondays
// at midnight, against every day at 14:00.
const neverMeets = `{"schedule":"0 0 * * 1","duration":"1h"}`

const neverMeetsError = `meshwave.io/maintenance-window on namespace shop: "{\"schedule\":\"0 0 * * 1\",\"duration\":\"1h\"}" is not windows that meet the agent's maintenanceWindows within a year (a namespace narrows them, never widens them); the windows only hold the start of a wave, so a rollback, or a migration that ended, goes on as it is`

// rollingBackA is a namespace whose canary a failed: it rolls a back.
func rollingBackA(t *testing.T) *sim {
	s := canaryInWindow(t, deploy("a"), deploy("b"))
	s.rollOut("1-26", "a")
	errRate := Verdict{Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3 > threshold 0.05"}
	s.decide([]Verdict{pass("rollout"), errRate})
	require.Equal(t, PhaseRollingBack, s.status.Phase)
	return s
}

func TestAWindowAnnotationThatNeverMeetsDoesNotStopARollback(t *testing.T) {
	for _, value := range []string{neverMeets, `{"schedule":"every day"}`} {
		t.Run(value, func(t *testing.T) {
			s := rollingBackA(t)
			s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = value
			s.rollOut("1-25", "a")
			s.now = s.now.Add(time.Minute)
			d := s.decide(s.gates())
			require.NotNil(t, d.Status)
			assert.Equal(t, PhaseRolledBack, d.Status.Phase, "the rollback ends; it is not blocked")
			assert.Equal(t, "rolled back 1 workloads to 1-25: wave 1 failed: error-rate fail: a: 5xx ratio 0.3 > threshold 0.05", d.Status.Reason)
			require.Len(t, d.Events, 2)
			assert.Equal(t, "InvalidAnnotation", d.Events[0].Reason)
			assert.Equal(t, EventWarning, d.Events[0].Type)
			assert.Contains(t, d.Events[0].Message, "meshwave.io/maintenance-window on namespace shop: ")
			assert.Contains(t, d.Events[0].Message, "; the windows only hold the start of a wave, so a rollback, or a migration that ended, goes on as it is")
			assert.Equal(t, "RolledBack", d.Events[1].Reason)
			assert.Contains(t, d.Status.Warnings, d.Events[0].Message, "the status says so too")
			assert.Equal(t, map[string]int{"a": 2}, s.patches)
		})
	}
}

func TestAWindowAnnotationSetDuringARollbackIsReportedOnce(t *testing.T) {
	s := rollingBackA(t)
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.now = s.now.Add(time.Minute)
	d := s.decide(s.gates()) // a is still rolling back
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	assert.Equal(t, []Event{{Type: EventWarning, Reason: "InvalidAnnotation", Message: neverMeetsError}}, d.Events)
	assert.Equal(t, neverMeetsError, d.Status.Warnings[len(d.Status.Warnings)-1])

	s.now = s.now.Add(time.Minute)
	d = s.decide(s.gates())
	assert.Nil(t, d.Status, "nothing changed")
	assert.Empty(t, d.Events, "reported once")
}

func TestAWindowAnnotationBlocksNoRollbackAskedInTheSameEdit(t *testing.T) {
	s := canaryInWindow(t, deploy("a"), deploy("b"))
	s.rollOut("1-26", "a")
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.snap.Namespace.Annotations[AnnotationRollback] = "wave"
	d := s.decide(nil)
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase)
	require.Len(t, d.Moves, 1)
	assert.True(t, d.Moves[0].Record.Rollback)
	assert.True(t, d.ClearRollback)
}

func TestARollbackBlockedByAWindowAnnotationGoesOn(t *testing.T) {
	s := rollingBackA(t)
	// A status a version that blocked on the annotation left behind.
	blocked := s.status.DeepCopy()
	blocked.BlockedPhase, blocked.Phase, blocked.BlockedKind = blocked.Phase, PhaseBlocked, BlockedInvalidInput
	blocked.Reason = "invalid input: " + neverMeets
	s.status = blocked
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	s.rollOut("1-25", "a")
	d := s.decide(s.gates())
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase, "unblocked, the rollback goes on")
	d = s.decide(s.gates())
	assert.Equal(t, PhaseRolledBack, d.Status.Phase)
}

func TestAWindowAnnotationThatNeverMeetsStillBlocksAMigrationGoingForward(t *testing.T) {
	s := canaryInWindow(t, deploy("a"), deploy("b"))
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	d := s.decide(nil)
	assert.Equal(t, PhaseBlocked, d.Status.Phase)
	assert.Equal(t, PhaseMigrating, d.Status.BlockedPhase)
	assert.Empty(t, d.Moves)
}

// A wave whose members all left it (each failed and was tolerated, so its
// record carries the outcome) is rebuilt from the records with no member:
// its canary a was restarted, so it has started, and is never put back to
// waiting for its window (with the label on the source and no slot).
func TestAWaveWhoseMembersAllLeftItIsNotPutBackAsUnstarted(t *testing.T) {
	rec := MoveRecord{Revision: "1-26", From: "1-25", Wave: 1, At: at(t, "2026-11-29T14:30:00Z"), Outcome: OutcomeFailed, Migration: "1-26@2026-11-29T14:30:00Z"}
	s := newSim(t, deploy("a", ann(AnnotationMove, rec.Encode())), deploy("b"), deploy("c"))
	s.snap.Namespace.Labels[LabelRev] = "1-26"
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.cfg.FailurePolicy, s.cfg.MaxFailedPercent = PolicyContinue, 100
	s.now = at(t, "2026-11-29T15:10:00Z") // the window closed at 15:00
	d := s.decide(nil)                    // the status was lost: rebuilt from a's record
	require.NotNil(t, d.Status)
	require.Equal(t, PhaseMigrating, d.Status.Phase)
	require.Equal(t, 1, d.Status.Wave)
	require.Empty(t, d.Status.Workloads, "a left wave 1 when it failed")

	var labels, deferred []string
	var slots []bool
	for i := 0; i < 3; i++ {
		s.now = s.now.Add(time.Minute)
		d = s.decide(nil)
		labels = append(labels, d.Label)
		if slices.Contains(eventReasons(d), "WaveDeferred") {
			deferred = append(deferred, s.now.Format(time.Kitchen))
		}
		slots = append(slots, s.status.HoldsSlot())
	}
	assert.Empty(t, deferred, "a was restarted in wave 1: the migration started, yet it is deferred as unstarted")
	assert.Equal(t, []string{"", "", ""}, labels, "the label stays on the target a was moved to")
	assert.Equal(t, []bool{true, true, true}, slots, "a migration half-way keeps its slot")
	assert.Equal(t, map[string]int{}, s.patches)
}

// A Pending status under a rollback on record is continued into that
// rollback once admitted, and a window annotation that never meets the
// configured windows does not block it.
func TestAWindowAnnotationDoesNotBlockARollbackOnRecordThatAPendingStatusContinues(t *testing.T) {
	s := restoredPendingOverARollback(t, false)
	s.cfg.MaintenanceWindows = windowAt2pm(t)
	s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
	d := s.decide(s.gates())
	require.NotNil(t, d.Status)
	assert.Equal(t, PhaseRollingBack, d.Status.Phase, "the rollback on record goes on: %s", d.Status.Reason)
	assert.Equal(t, 2, d.Status.Wave)
}

// A migration that ended starts no wave: a window annotation that never
// meets the configured windows does not block it (a RolledBack or
// Completed status keeps its phase and reason), and is reported once.
func TestAWindowAnnotationDoesNotBlockAMigrationThatEnded(t *testing.T) {
	for _, end := range []Phase{PhaseRolledBack, PhaseCompleted} {
		t.Run(string(end), func(t *testing.T) {
			s := canaryInWindow(t, deploy("a"))
			s.rollOut("1-26", "a")
			if end == PhaseRolledBack {
				s.decide([]Verdict{pass("rollout"), {Gate: "error-rate", Result: ResultFail, Analysis: true, Reason: "a: 5xx ratio 0.3"}})
				s.rollOut("1-25", "a")
			}
			s.decide(s.gates())
			require.Equal(t, end, s.status.Phase)
			reason := s.status.Reason

			s.snap.Namespace.Annotations[AnnotationMaintenanceWindow] = neverMeets
			s.now = s.now.Add(time.Minute)
			d := s.decide(nil)
			require.NotNil(t, d.Status, "the warning is written")
			assert.Equal(t, end, d.Status.Phase)
			assert.Equal(t, reason, d.Status.Reason)
			require.Len(t, d.Events, 1)
			assert.Equal(t, "InvalidAnnotation", d.Events[0].Reason)
			assert.True(t, strings.HasSuffix(d.Events[0].Message, "; the windows only hold the start of a wave, so a rollback, or a migration that ended, goes on as it is"), d.Events[0].Message)

			d = s.decide(nil)
			assert.Nil(t, d.Status)
			assert.Empty(t, d.Events)
		})
	}
}
