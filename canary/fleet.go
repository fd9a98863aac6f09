package canary

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// A fleet moves in rings of clusters, each cluster with its own agent and
// no server between them: an agent reads the other clusters' namespaces
// (their meshwave.io/status) and starts a namespace's waves only when the
// ring before its own is done with them (docs/fleet.md).

// Fleet is the fleet this cluster belongs to: the same rings in every
// cluster's configuration, and this cluster's own name.
type Fleet struct {
	// Cluster is this cluster's name in the rings; "" when the agent runs
	// alone, and no ring holds anything.
	Cluster string
	Rings   []Ring
	// WholeRing waits for every opted-in namespace of the ring before to
	// complete, not only the namespace of the same name.
	WholeRing bool
	// SoakAlerts makes a soak one with no alert: an alert that fired for
	// a namespace of the ring before since it completed starts its soak
	// again from the alert's last firing (Snapshot.FleetAlerts).
	SoakAlerts bool
}

// FleetAlerts reads, for a namespace of another cluster, the last time an
// alert fired for it at since or later, and that alert's name; a zero time
// when none did.
type FleetAlerts func(cluster, namespace string, since time.Time) (last time.Time, alert string, err error)

// Ring is a set of clusters that move together, and how long they must
// stay completed before the next ring starts.
type Ring struct {
	Name     string
	Clusters []string
	Soak     time.Duration
}

// ringOf is the index of cluster's ring, or -1.
func (f Fleet) ringOf(cluster string) int {
	for i, r := range f.Rings {
		if slices.Contains(r.Clusters, cluster) {
			return i
		}
	}
	return -1
}

// PeerCluster is what the agent read of another cluster of the fleet.
type PeerCluster struct {
	// Err is why it could not be read (no kubeconfig, the apiserver down,
	// access refused, not synced yet): such a cluster counts as not done.
	Err string
	// Namespaces are its namespaces, by name.
	Namespaces map[string]PeerNamespace
}

// PeerNamespace is a namespace of another cluster, as its status says.
type PeerNamespace struct {
	// OptedIn is true when it carries meshwave.io/target-revision.
	OptedIn bool
	// Status is its recorded status; nil when it has none yet, or when it
	// cannot be read (StatusErr).
	Status    *Status
	StatusErr string
	// Labels are the labels a completed status must agree with
	// (PeerLabels): a status a person wrote over a namespace that was
	// never switched is not taken as done.
	Labels map[string]string
}

// PeerLabels keeps of a peer namespace's labels those that show where its
// workloads were sent: istio.io/rev and istio.io/dataplane-mode.
func PeerLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range []string{LabelRev, LabelDataplaneMode} {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// contradicted says how a peer namespace's labels contradict its status's
// Completed, or "": a completed sidecar move leaves istio.io/rev on its
// target, a completed move to ambient that enrolled the namespace leaves
// it ambient with no istio.io/rev.
func contradicted(n PeerNamespace) string {
	st := n.Status
	rev, has := n.Labels[LabelRev]
	switch {
	case st.Mode == ModeAmbient && st.NamespaceEnrolled:
		if n.Labels[LabelDataplaneMode] != DataplaneAmbient || has {
			return fmt.Sprintf("the namespace is not labelled %s=%s alone (%s)", LabelDataplaneMode, DataplaneAmbient, describeLabels(n.Labels))
		}
	case st.Mode == ModeAmbient:
		// Completed without enrolling: its label says nothing certain.
	case !has || rev != st.label():
		return fmt.Sprintf("its %s is not %s (%s)", LabelRev, st.label(), describeLabels(n.Labels))
	}
	return ""
}

func describeLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "neither " + LabelRev + " nor " + LabelDataplaneMode
	}
	var out []string
	for _, k := range []string{LabelRev, LabelDataplaneMode} {
		if v, ok := labels[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, ", ")
}

// fleetWait says why the namespace may not start its next wave because of
// the fleet, or "", with when to look again (0: when a peer changes). The
// first wave waits for the ring before to have completed the same move
// and stayed completed for its soak; every wave waits while a namespace
// of an earlier ring is paused, rolling back or rolled back, which holds
// every later ring until a person resumes it or it completes.
func fleetWait(m *machine, first bool) (string, time.Duration) {
	f := m.cfg.Fleet
	r := f.ringOf(f.Cluster)
	if f.Cluster == "" || r <= 0 {
		return "", 0
	}
	peers := m.snap().Clusters
	for k := range r {
		for _, c := range f.Rings[k].Clusters {
			p, ok := peers[c]
			switch {
			case !ok:
				return fmt.Sprintf("cluster %s of ring %s cannot be read: no kubeconfig Secret names it; missing data never advances a ring", c, f.Rings[k].Name), 0
			case p.Err != "":
				return fmt.Sprintf("cluster %s of ring %s cannot be read: %s; missing data never advances a ring", c, f.Rings[k].Name, p.Err), 0
			}
			for _, name := range m.fleetNamespaces(p) {
				if why := held(p.Namespaces[name], name, c, f.Rings[k].Name); why != "" {
					return why, 0
				}
			}
		}
	}
	if !first {
		return "", 0
	}
	before := f.Rings[r-1]
	var soakEnd time.Time
	var soaking, firing string
	for _, c := range before.Clusters {
		p := peers[c]
		for _, name := range m.fleetNamespaces(p) {
			n := p.Namespaces[name]
			st := n.Status
			where := fmt.Sprintf("namespace %s in cluster %s (ring %s)", name, c, before.Name)
			switch {
			case !n.OptedIn:
				return fmt.Sprintf("waiting for %s to complete the move to %s: it has not opted in (%s)", where, m.st.TargetRevision, AnnotationTargetRevision), 0
			case st == nil:
				return fmt.Sprintf("waiting for %s to complete the move to %s: it has not started", where, m.st.TargetRevision), 0
			case st.TargetRevision != m.st.TargetRevision || st.Mode != m.st.Mode:
				return fmt.Sprintf("waiting for %s to complete the move to %s: its migration to %s is %s", where, describeMove(m.st.TargetRevision, m.st.Mode), describeMove(st.TargetRevision, st.Mode), st.Phase), 0
			case st.Phase != PhaseCompleted || st.CompletedAt == nil:
				progress := ""
				if st.Wave > 0 {
					progress = fmt.Sprintf(", wave %d/%d", st.Wave, st.TotalWaves)
				}
				return fmt.Sprintf("waiting for %s to complete the move to %s: it is %s%s", where, m.st.TargetRevision, st.Phase, progress), 0
			}
			if why := contradicted(n); why != "" {
				return fmt.Sprintf("waiting for %s to complete the move to %s: its status says %s, but %s; a status its namespace contradicts is not taken as done", where, m.st.TargetRevision, st.Phase, why), 0
			}
			from, alerted := *st.CompletedAt, ""
			if f.SoakAlerts && before.Soak > 0 {
				read := m.snap().FleetAlerts
				if read == nil {
					return fmt.Sprintf("ring %s soaks with no alert, but the alerts of %s cannot be read: no Prometheus to read them from; missing data never advances a ring", before.Name, where), 0
				}
				// An alert older than a soak ago has no soak left: the
				// window read is the soak at most, however long ago the
				// namespace completed.
				since := from
				if ago := m.now.Add(-before.Soak); ago.After(since) {
					since = ago
				}
				last, alert, err := read(c, name, since)
				if err != nil {
					return fmt.Sprintf("ring %s soaks with no alert, but the alerts of %s cannot be read: %v; missing data never advances a ring", before.Name, where, err), alertsRetry
				}
				if last.After(from) && m.now.Sub(last) < min(alertFiring, before.Soak) {
					// Still firing: the reason says so without the time
					// of its last evaluation, which moves at every look.
					firing = fmt.Sprintf("ring %s soaks: %s completed the move to %s; alert %s is firing there, and its soak of %s starts again when it stops",
						before.Name, where, m.st.TargetRevision, alert, before.Soak)
				}
				if last.After(from) {
					from, alerted = last, fmt.Sprintf("; alert %s fired there at %s, so its soak starts again from then", alert, last.UTC().Format(time.RFC3339))
				}
			}
			if end := from.Add(before.Soak); end.After(m.now) && end.After(soakEnd) {
				soakEnd, soaking = end, where+" completed the move to "+m.st.TargetRevision+alerted
			}
		}
	}
	if firing != "" {
		return firing, alertsRetry
	}
	if !soakEnd.IsZero() {
		// The end, not the time left: a reason that changes at every look
		// would be a status write at every look of a soak with no alert.
		return fmt.Sprintf("ring %s soaks: %s, and must stay completed until %s", before.Name, soaking, soakEnd.UTC().Format(time.RFC3339)),
			min(soakEnd.Sub(m.now), alertsRecheck(f))
	}
	return "", 0
}

// alertFiring is how recent an alert's last firing must be for it to be
// read as firing still: its rule's next evaluation (every 15 s to 1 m,
// as usual) has not resolved it yet. A soak shorter than that is its own
// bound: past it, the soak from the last firing is over either way.
const alertFiring = 2 * time.Minute

// alertsRetry is when to read the alerts again after they could not be.
const alertsRetry = 15 * time.Second

// alertsRecheck is how often a soak with no alert looks again: an alert
// that fires mid-soak changes nothing this cluster watches.
func alertsRecheck(f Fleet) time.Duration {
	if f.SoakAlerts {
		return alertsRetry
	}
	return time.Duration(math.MaxInt64)
}

// fleetNamespaces are the namespaces of a peer the decision waits for:
// this one, or every opted-in one with WholeRing. A cluster without the
// namespace has nothing of it to move; one where it exists but has not
// opted in is waited for: a later ring opted in first (a GitOps sync
// reaching it first) never skips the ring before.
func (m *machine) fleetNamespaces(p PeerCluster) []string {
	if !m.cfg.Fleet.WholeRing {
		if _, ok := p.Namespaces[m.ns]; ok {
			return []string{m.ns}
		}
		return nil
	}
	names := make([]string, 0, len(p.Namespaces))
	for name, n := range p.Namespaces {
		if n.OptedIn {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// held says why a namespace of an earlier ring holds the later rings: its
// status cannot be read, or its migration is paused, rolling back or
// rolled back.
func held(n PeerNamespace, name, cluster, ring string) string {
	where := fmt.Sprintf("namespace %s in cluster %s (ring %s)", name, cluster, ring)
	if n.StatusErr != "" {
		return fmt.Sprintf("held by %s: its status cannot be read (%s)", where, n.StatusErr)
	}
	st := n.Status
	if st == nil {
		return ""
	}
	switch st.Phase {
	case PhasePaused, PhaseRollingBack, PhaseRolledBack:
		wave := ""
		if st.Wave > 0 {
			wave = fmt.Sprintf(" at wave %d", st.Wave)
		}
		return fmt.Sprintf("held by %s, %s%s: %s; every later ring waits until a person resumes it or it completes", where, st.Phase, wave, strings.TrimSpace(st.Reason))
	}
	return ""
}

func describeMove(rev string, mode Mode) string {
	if mode == ModeAmbient {
		return "ambient (" + rev + ")"
	}
	return rev
}

// waitForFleet holds the next wave while fleetWait says so: the status
// says what it waits for, an Event says so when that changes, and the
// decision looks again when the soak ends (a peer's change brings the
// namespace back before that).
func waitForFleet(m *machine, what string, first bool) bool {
	why, retry := fleetWait(m, first)
	if why == "" {
		return false
	}
	st := m.st
	st.WaitsForRing = first
	st.Reason = fmt.Sprintf("%s waits: %s", what, why)
	if prev := m.r.Recorded; prev == nil || prev.Reason != st.Reason {
		m.event("", EventNormal, "WaitingForRing", st.Reason+soakLeft(why, m.now))
	}
	if retry <= 0 {
		retry = backstop
	}
	m.requeue(retry)
	return true
}

// soakLeft is the time a soak's reason has left, as " (5m0s left)", for
// the Event that tells of the wait; "" for another wait.
func soakLeft(why string, now time.Time) string {
	_, at, ok := strings.Cut(why, ", and must stay completed until ")
	if !ok {
		return ""
	}
	end, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (%s left)", end.Sub(now).Round(time.Second))
}
