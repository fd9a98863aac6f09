package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshwave/meshwave/canary"
)

// istiod's syncz says a ztunnel acknowledged the last push of each type,
// not which workloads that push held: a pod istiod has not pushed yet (its
// pushes are debounced) leaves the ztunnel SYNCED on the push before. Once
// the ztunnels of a wave are SYNCED, the gate reads what each holds, as
// `istioctl ztunnel-config workloads` does: ztunnel's admin /config_dump.
// Every new pod of the wave must be listed there, by the ztunnel of its
// node, with protocol HBONE (docs/ztunnel-facts.md §5).

// ZtunnelWorkload is a workload as ztunnel's config dump lists it (its
// src/state/workload.rs, in camelCase), with the fields the gate reads.
type ZtunnelWorkload struct {
	UID       string `json:"uid"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Node      string `json:"node"`
	// Protocol is HBONE or TCP: what istiod told the ztunnel the workload
	// speaks, HBONE once istio-cni redirects it.
	Protocol string `json:"protocol"`
}

// ZtunnelDumps reads the workloads a ztunnel holds, from its admin
// /config_dump. ztunnel binds its admin port to localhost, so it is
// reached through the apiserver's port-forward (agent/ztunneldump.go).
type ZtunnelDumps interface {
	Workloads(ctx context.Context, z ZtunnelPod) ([]ZtunnelWorkload, error)
}

// MaxZtunnelDump bounds the config dump read: it lists every workload of
// the mesh, some hundreds of bytes each.
const MaxZtunnelDump = 256 << 20

// DecodeZtunnelDump reads the workloads of a ztunnel config dump. ztunnel
// writes them as an array sorted by uid; an older shape, an object keyed
// by address (istioctl's own test data still has it), is read too.
func DecodeZtunnelDump(r io.Reader) ([]ZtunnelWorkload, error) {
	limited := &io.LimitedReader{R: r, N: MaxZtunnelDump + 1}
	var dump struct {
		Workloads json.RawMessage `json:"workloads"`
	}
	if err := json.NewDecoder(limited).Decode(&dump); err != nil {
		if limited.N <= 0 {
			return nil, fmt.Errorf("the config dump is larger than %d MiB", MaxZtunnelDump>>20)
		}
		return nil, fmt.Errorf("read the config dump: %w", err)
	}
	raw := strings.TrimSpace(string(dump.Workloads))
	switch {
	case raw == "" || raw == "null":
		return nil, errors.New("the config dump has no workloads key: not a ztunnel's")
	case raw[0] == '{':
		var byAddress map[string]ZtunnelWorkload
		if err := json.Unmarshal(dump.Workloads, &byAddress); err != nil {
			return nil, fmt.Errorf("read the config dump's workloads: %w", err)
		}
		return slices.Collect(maps.Values(byAddress)), nil
	}
	var out []ZtunnelWorkload
	if err := json.Unmarshal(dump.Workloads, &out); err != nil {
		return nil, fmt.Errorf("read the config dump's workloads: %w", err)
	}
	return out, nil
}

// DumpAnswer is what one ztunnel's config dump said, or why it could not
// be read.
type DumpAnswer struct {
	Ztunnel   ZtunnelPod
	Workloads []ZtunnelWorkload
	Err       error
}

// heldPod is a new pod of the wave, with the Ready ztunnels of its node.
type heldPod struct {
	workload, pod string
	ztunnels      []ZtunnelPod
}

// podsToHold are the wave's new pods on a node, each with the Ready
// ztunnels of its node (a pod with none is the syncz judgement's).
func (g SyncGate) podsToHold(wave canary.WaveUnderTest) []heldPod {
	var out []heldPod
	for _, m := range wave.Workloads {
		for _, p := range m.Pods {
			if !p.Current || p.Terminating || p.Node == "" || g.Ztunnels == nil {
				continue
			}
			h := heldPod{workload: m.Name, pod: p.Name}
			for _, z := range g.Ztunnels(p.Node) {
				if z.Ready {
					h.ztunnels = append(h.ztunnels, z)
				}
			}
			if len(h.ztunnels) > 0 {
				out = append(out, h)
			}
		}
	}
	return out
}

// maxDumpReads bounds the config dumps read at once: each is a
// port-forward through the apiserver and a document of every workload of
// the mesh, and a DaemonSet's wave has a pod on every node.
const maxDumpReads = 4

// readDumps reads the config dump of each ztunnel that serves a new pod of
// the wave, once, a few at a time.
func (g SyncGate) readDumps(ctx context.Context, pods []heldPod) map[ZtunnelPod]DumpAnswer {
	var zs []ZtunnelPod
	seen := map[ZtunnelPod]bool{}
	for _, h := range pods {
		for _, z := range h.ztunnels {
			if !seen[z] {
				seen[z] = true
				zs = append(zs, z)
			}
		}
	}
	answers := make([]DumpAnswer, len(zs))
	slots := make(chan struct{}, maxDumpReads)
	var wg sync.WaitGroup
	for i, z := range zs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			ws, err := g.Dumps.Workloads(ctx, z)
			answers[i] = DumpAnswer{Ztunnel: z, Workloads: ws, Err: err}
		}()
	}
	wg.Wait()
	out := make(map[ZtunnelPod]DumpAnswer, len(zs))
	for _, a := range answers {
		out[a.Ztunnel] = a
	}
	return out
}

// judgeHeld decides, from the dumps read, a wave whose ztunnels syncz
// found SYNCED (synced is that verdict): every new pod listed with
// protocol HBONE by each Ready ztunnel of its node passes; a dump that
// could not be read is inconclusive; a pod missing or held as TCP waits
// out the gate's timeout, then fails its workload. No I/O, no clock.
func (g SyncGate) judgeHeld(wave canary.WaveUnderTest, pods []heldPod, dumps map[ZtunnelPod]DumpAnswer, synced canary.Verdict, now time.Time) canary.Verdict {
	var unread []string
	for _, z := range slices.SortedFunc(maps.Keys(dumps), func(a, b ZtunnelPod) int { return strings.Compare(a.Pod, b.Pod) }) {
		if err := dumps[z].Err; err != nil {
			unread = append(unread, fmt.Sprintf("could not read the config dump of %s: %v", z.Pod, err))
		}
	}
	var problems []string
	failedBy := map[string][]string{}
	held := 0
	for _, h := range pods {
		ok := true
		for _, z := range h.ztunnels {
			d := dumps[z]
			if d.Err != nil {
				ok = false
				continue
			}
			i := slices.IndexFunc(d.Workloads, func(w ZtunnelWorkload) bool { return w.Namespace == wave.Namespace && w.Name == h.pod })
			line := ""
			switch {
			case i < 0:
				line = fmt.Sprintf("%s does not hold pod %s", z.Pod, h.pod)
			case d.Workloads[i].Protocol != "HBONE":
				line = fmt.Sprintf("%s holds pod %s with protocol %s, not HBONE", z.Pod, h.pod, d.Workloads[i].Protocol)
			}
			if line != "" {
				ok = false
				problems = append(problems, line)
				failedBy[h.workload] = append(failedBy[h.workload], line)
			}
		}
		if ok {
			held++
		}
	}
	tally := fmt.Sprintf("%s; %d of %d pods held as HBONE by their node's ztunnel", synced.Reason, held, len(pods))
	out := synced
	out.Measurements = append(slices.Clone(synced.Measurements), canary.Measurement{Check: "ztunnels-hold-pods", Value: float64(held), Threshold: ptr(float64(len(pods)))})
	out.Checked = true
	out.RetryAfter = g.Interval
	if len(unread) == 0 && len(problems) == 0 {
		out.Reason = tally
		return out
	}
	if len(unread) > 0 {
		out.Result, out.Reason = canary.ResultInconclusive, strings.Join(slices.Concat([]string{tally}, problems, unread), "; ")
		return out
	}
	out.Reason = tally + "; " + strings.Join(problems, "; ")
	started := now
	if t, ok := wave.Analysis.Started[GateSync]; ok {
		started = t
	}
	if deadline := started.Add(g.Timeout); now.Before(deadline) {
		out.Result = canary.ResultPending
		out.RetryAfter = min(g.Interval, deadline.Sub(now))
		return out
	}
	out.Result, out.Reason = canary.ResultFail, fmt.Sprintf("%s after %s", out.Reason, g.Timeout)
	for _, w := range slices.Sorted(maps.Keys(failedBy)) {
		out.Failed = append(out.Failed, canary.WorkloadState{Name: w, State: canary.StateFailed, Reason: strings.Join(failedBy[w], "; ")})
	}
	return out
}
