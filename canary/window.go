package canary

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	cron "github.com/netresearch/go-cron"
	sigsjson "sigs.k8s.io/json"
)

// Window is a maintenance window: it opens at each time Schedule, a
// five-field cron expression, names in TimeZone, and stays open for
// Duration. Duration is elapsed time: a 3h window that opens at 01:00 on
// the night the clocks go back closes at 03:00 by the new clock, 02:00.
type Window struct {
	Schedule string
	Duration time.Duration
	TimeZone string
	spec     *cron.SpecSchedule
}

// Bounds of a window. A cron expression opens at most once a minute, so a
// shorter window could close before a decision saw it open; a window of
// more than 31 days opens again before it closes whatever its schedule.
const (
	MinWindowDuration = time.Minute
	MaxWindowDuration = 31 * 24 * time.Hour
	// maxWindows bounds how many windows a namespace annotation may list.
	maxWindows = 20
	// windowHorizon is how far ahead the next opening is looked for.
	windowHorizon = 366 * 24 * time.Hour
)

// cronParser reads the standard five fields. A day of the month and a day
// of the week both restricted match either, as cron(8) and Kubernetes
// CronJobs read them (the library's own default is both).
var cronParser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.DowOrDom)

// WindowError names the field of a window that is wrong, its value and
// what was expected.
type WindowError struct {
	Field    string
	Value    string
	Expected string
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("%s %s is not %s", e.Field, quoteShort(e.Value), e.Expected)
}

// NewWindow validates a window. The time zone is an IANA name such as
// "Europe/Berlin"; "" is UTC, and "Local" (the agent's own machine) is
// refused: a window must mean the same whichever replica leads.
func NewWindow(schedule string, duration time.Duration, timeZone string) (Window, error) {
	w := Window{Schedule: schedule, Duration: duration, TimeZone: timeZone}
	fields := strings.Fields(schedule)
	if len(fields) != 5 || strings.Contains(schedule, "=") || strings.HasPrefix(schedule, "@") {
		return w, &WindowError{"schedule", schedule, `a cron expression of five fields (minute hour day-of-month month day-of-week), e.g. "0 2 * * 6"; the time zone goes in timeZone`}
	}
	parsed, err := cronParser.Parse(schedule)
	if err != nil {
		return w, &WindowError{"schedule", schedule, "a cron expression of five fields: " + err.Error()}
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return w, &WindowError{"schedule", schedule, "a cron expression of five fields"}
	}
	if duration < MinWindowDuration || duration > MaxWindowDuration {
		return w, &WindowError{"duration", duration.String(), `a duration from 1m to 744h (31 days), e.g. "2h"`}
	}
	if timeZone == "Local" {
		return w, &WindowError{"timeZone", timeZone, `an IANA time zone such as "Europe/Berlin" or "UTC" ("Local" depends on the agent's machine)`}
	}
	loc, err := loadLocation(timeZone)
	if err != nil {
		return w, &WindowError{"timeZone", timeZone, `an IANA time zone such as "Europe/Berlin" or "UTC"`}
	}
	s := *spec
	s.Location = loc
	// Never: February 30th. Checked from a fixed leap year, so that the
	// answer does not depend on when it is asked.
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return w, &WindowError{"schedule", schedule, "a cron expression that ever opens"}
	}
	w.spec = &s
	return w, nil
}

// locations caches time.LoadLocation, which reads the zone database on
// every call: every reconcile reads the windows of each opted-in
// namespace (its peers' included).
var locations sync.Map

func loadLocation(name string) (*time.Location, error) {
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, loc)
	return loc, nil
}

// String renders the window as a person wrote it.
func (w Window) String() string {
	tz := w.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%q for %s in %s", w.Schedule, w.Duration, tz)
}

// next is the window's first opening strictly after t.
func (w Window) next(t time.Time) time.Time {
	return w.spec.Next(t)
}

// openAt reports whether t falls in one of the window's openings: one
// that started in (t-Duration, t]. Openings are half-open intervals
// [start, start+Duration): a window is open at the second it opens and
// closed at the second it closes.
func (w Window) openAt(t time.Time) bool {
	s := w.next(t.Add(-w.Duration))
	return !s.IsZero() && !s.After(t)
}

// Windows is a list of windows: open whenever one of them is. An empty
// list is always open.
type Windows []Window

// openAt reports whether any window is open at t; an empty list always is.
func (ws Windows) openAt(t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if w.openAt(t) {
			return true
		}
	}
	return false
}

// nextOpening is the first instant at or after t when a window is open:
// t itself when one is; the zero time when none opens again.
func (ws Windows) nextOpening(t time.Time) time.Time {
	if ws.openAt(t) {
		return t
	}
	var first time.Time
	for _, w := range ws {
		// Openings are whole seconds: the one at t itself, if any, was
		// found open above.
		if n := w.next(t); !n.IsZero() && (first.IsZero() || n.Before(first)) {
			first = n
		}
	}
	return first
}

// NextOpening is the first instant at or after t when every non-empty list
// is open (their intersection: a namespace's windows narrow the
// configured ones); t itself when they all are. ok is false when none
// opens within a year.
func NextOpening(t time.Time, lists ...Windows) (time.Time, bool) {
	limit := t.Add(windowHorizon)
	// Each step moves to the next opening of a list that is closed; it
	// ends when all are open. Two lists that never meet (Saturdays and
	// Mondays) step until the horizon; the step bound keeps that cheap:
	// an hourly window against another hourly one an hour apart takes
	// about 17,600 steps to cover the year.
	for range 50_000 {
		moved := false
		for _, ws := range lists {
			n := ws.nextOpening(t)
			if n.IsZero() || n.After(limit) {
				return time.Time{}, false
			}
			if n.After(t) {
				t, moved = n, true
			}
		}
		if !moved {
			return t, true
		}
	}
	return time.Time{}, false
}

// WindowsOpen reports whether every non-empty list is open at t.
func WindowsOpen(t time.Time, lists ...Windows) bool {
	for _, ws := range lists {
		if !ws.openAt(t) {
			return false
		}
	}
	return true
}

// WindowSpec is a window as a person writes it, in the configuration file
// or in the namespace annotation meshwave.io/maintenance-window.
type WindowSpec struct {
	Schedule string `json:"schedule"`
	Duration string `json:"duration"`
	TimeZone string `json:"timeZone,omitempty"`
}

// parseWindowAnnotation reads meshwave.io/maintenance-window: a JSON
// window or list of windows, keys as written. It returns what was
// expected when the value cannot be used.
func parseWindowAnnotation(v string) (Windows, string) {
	const shape = `a JSON list of windows, each {"schedule": "<five-field cron>", "duration": "<Go duration>", "timeZone": "<IANA zone>"}`
	raw := strings.TrimSpace(v)
	if strings.HasPrefix(raw, "{") {
		raw = "[" + raw + "]"
	}
	var specs []WindowSpec
	strict, err := sigsjson.UnmarshalStrict([]byte(raw), &specs)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, shape + " (" + err.Error() + ")"
	}
	if len(specs) == 0 || len(specs) > maxWindows {
		return nil, fmt.Sprintf("%s, from 1 to %d of them", shape, maxWindows)
	}
	out := make(Windows, 0, len(specs))
	for i, s := range specs {
		d, err := time.ParseDuration(s.Duration)
		if err != nil {
			return nil, fmt.Sprintf("%s (window %d: duration %q is not a Go duration such as \"2h\")", shape, i, s.Duration)
		}
		w, err := NewWindow(s.Schedule, d, s.TimeZone)
		if err != nil {
			return nil, fmt.Sprintf("%s (window %d: %v)", shape, i, err)
		}
		out = append(out, w)
	}
	return out, ""
}

// waitForWindow reports whether the next wave must wait for a maintenance
// window, and if so says until when: in the reason, in nextWindow, and as
// the requeue, so that the namespace is looked at again when it opens
// rather than polled. Only the start of a wave waits: a wave in flight
// finishes its gates, and a rollback runs whenever it is needed.
func waitForWindow(m *machine, what string) bool {
	opening, ok := NextOpening(m.now, m.cfg.MaintenanceWindows, m.settings.Windows)
	if ok && !opening.After(m.now) {
		return false
	}
	st := m.st
	if !ok {
		// Only the configuration can get here: a namespace's windows that
		// never meet it are invalid input (windowsMeet).
		st.Reason = fmt.Sprintf("%s waits: no maintenance window opens within a year", what)
		m.requeue(time.Hour)
		return true
	}
	opening = opening.UTC()
	st.Reason = fmt.Sprintf("%s is waiting for the maintenance window opening at %s", what, opening.Format(time.RFC3339))
	st.NextWindow = &opening
	if prev := m.r.Recorded; prev == nil || prev.Reason != st.Reason {
		m.event("", EventNormal, "WaitingForWindow", st.Reason)
	}
	m.requeue(opening.Sub(m.now))
	return true
}

// windowsMeet checks that the namespace's maintenance windows meet the
// configured ones within a year: windows that narrow them to nothing
// would hold the namespace forever without saying why.
func windowsMeet(settings NamespaceSettings, ns Namespace, configured Windows, now time.Time) []InputError {
	if len(settings.Windows) == 0 {
		return nil
	}
	if _, ok := NextOpening(now, configured, settings.Windows); ok {
		return nil
	}
	expected := "windows that open within a year"
	if len(configured) > 0 {
		expected = "windows that meet the agent's maintenanceWindows within a year (a namespace narrows them, never widens them)"
	}
	return []InputError{{Key: AnnotationMaintenanceWindow, Kind: "namespace", Namespace: ns.Name, Name: ns.Name,
		Value: ns.Annotations[AnnotationMaintenanceWindow], Expected: expected}}
}

// windowErrorsNotGoingForward splits errs into those that block and those
// of the namespace's maintenance windows while its migration does not go
// forward: it rolls back (or is asked to, or continues a rollback on
// record), or it ended. The windows only say when a wave may start, so a
// bad window annotation must not stop a rollback half-way, nor block a
// migration that starts no wave. Those are reported instead
// (reportIgnored).
func windowErrorsNotGoingForward(st *Status, c *Continuation, settings NamespaceSettings, errs []InputError) (blocking, ignored []InputError) {
	if st == nil || goesForward(st, settings) && (c == nil || goesForward(c.Status, settings)) {
		return errs, nil
	}
	for _, e := range errs {
		if e.Key == AnnotationMaintenanceWindow && e.Workload == "" {
			ignored = append(ignored, e)
		} else {
			blocking = append(blocking, e)
		}
	}
	return blocking, ignored
}

// goesForward reports whether the migration in st may still start a wave:
// it neither rolls back (nor is asked to) nor ended.
func goesForward(st *Status, settings NamespaceSettings) bool {
	p := st.unblockedPhase()
	if p == PhaseStopped {
		return true // a new migration's status replaces it
	}
	return !terminal(p) && !undoing(st, settings)
}

// windowsHoldOnlyWaves ends the report of a window error that blocks
// nothing: the same words whatever the migration does, so that it is
// reported once.
const windowsHoldOnlyWaves = "the windows only hold the start of a wave, so a rollback, or a migration that ended, goes on as it is"

// reportIgnored reports the window errors that block nothing, as the
// migration does not go forward: a status warning, and an Event the first
// time.
func reportIgnored(m *machine) {
	for _, e := range m.r.ignored {
		note := e.Error() + "; " + windowsHoldOnlyWaves
		if prev := m.r.Recorded; prev == nil || !slices.Contains(prev.Warnings, note) {
			m.event("", EventWarning, "InvalidAnnotation", note)
		}
		m.st.warn(AnnotationMaintenanceWindow+" on namespace", note)
	}
}

// deferWave puts a wave that was written as started but none of whose
// members was restarted back to waiting for its window, when its window
// is closed now: the agent stopped between the status write and the
// patches, and came back after the window closed. Such a wave has not
// started, and its first restart must not go out of the window. It
// reports whether it did.
func deferWave(m *machine) bool {
	st := m.st
	if st.WaveState != WaveVerifying || st.WaveStartedAt == nil || len(st.Workloads) == 0 || WindowsOpen(m.now, m.cfg.MaintenanceWindows, m.settings.Windows) {
		return false
	}
	if movedInWave(m.workloads(), st) {
		return false // a move of this wave is on record, a member's or not
	}
	for _, w := range st.Workloads {
		p, ok := m.workloads().find(w.Name)
		if w.State != StateMoving || !ok || restartMade(p, st) {
			return false
		}
	}
	wave := st.Wave
	st.Workloads, st.Analysis, st.Verdicts, st.GatesSince, st.NextWaveAt = nil, nil, nil, nil, nil
	what := fmt.Sprintf("wave %d", wave)
	if wave == 1 {
		// Before the first wave the namespace holds no slot and keeps its
		// label: the next opening asks for both again, and the source
		// stays in the status (as a replaced migration's does).
		st.Phase, st.Wave, st.WaveState, st.StartedAt, st.WaveStartedAt = PhasePending, 0, "", nil, nil
		if m.snap().Namespace.Labels[LabelRev] != st.SourceLabel {
			m.out.Label = st.SourceLabel
		}
		what = fmt.Sprintf("the first wave of %d", len(m.plan().Waves))
	} else {
		st.Wave, st.WaveState = wave-1, WavePassed
	}
	m.event("", EventNormal, "WaveDeferred", fmt.Sprintf("wave %d was written as started, but none of its workloads was restarted before the maintenance window closed: it starts when a window opens", wave))
	waitForWindow(m, what)
	return true
}

// movedInWave reports whether any workload carries a forward move of st's
// migration in its wave in flight, whatever its outcome.
func movedInWave(set workloadSet, st *Status) bool {
	for _, w := range set {
		if r := w.forwardIn(st.MigrationID()); r != nil && r.Wave == st.Wave {
			return true
		}
	}
	return false
}

// restartMade reports whether the wave in flight restarted p: a forward
// move of this migration on record, a template restarted since the wave
// started, or a rollout of a template stamped in it.
func restartMade(p parsedWorkload, st *Status) bool {
	return p.forwardIn(st.MigrationID()) != nil || restartedSince(*p.Workload, st.WaveStartedAt) || memberReverted(*p.Workload, st.WaveStartedAt)
}
