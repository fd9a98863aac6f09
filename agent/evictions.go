package agent

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshwave/meshwave/canary"
)

// evictionRefusals remember, per namespace and workload, the last eviction
// of one of its pods that a PodDisruptionBudget refused, so that the
// rollout gate can say why an OnDelete workload does not roll out: its
// reason, which meshwave status shows, would otherwise only count the
// replicas updated, while the budget is named in an Event alone.
//
// They are this process's memory, not the cluster's: a restarted agent or
// a new leader starts without them and learns them again at its first
// refused eviction (evictionRetry later at most, since a held eviction is
// tried again); the EvictionWaiting Events remain. A refusal counts only
// in the migration, wave and direction it was made in, and only while the
// pod it was about is still there, old: a deposed leader that leads again
// never shows a refusal of a pod another leader evicted since.
type evictionRefusals struct {
	mu   sync.Mutex
	byNS map[string]map[string]evictionRefusal
}

// evictionRefusal is one refused eviction.
type evictionRefusal struct {
	// stage is the migration, wave and direction it was refused in
	// (evictionStage).
	stage string
	// pod and uid are the pod it was about.
	pod, uid string
	// reason says it: "PodDisruptionBudget db-pdb refused to evict pod
	// db-2: <the apiserver's answer>", at most maxRefusalReason bytes.
	reason string
}

// maxRefusalReason bounds a refusal's reason: it is appended to the
// rollout gate's reasons, which the status keeps.
const maxRefusalReason = 512

// evictionStage names the migration, wave and direction a status is in;
// "" when there is none.
func evictionStage(st *canary.Status) string {
	if st == nil || st.Wave == 0 {
		return ""
	}
	direction := "forward"
	if st.WaveState == canary.WaveRollingBack {
		direction = "rollback"
	}
	return fmt.Sprintf("%s wave %d %s", st.MigrationID(), st.Wave, direction)
}

// refused remembers that a budget refused to evict pod (of uid) of
// workload, in stage.
func (r *evictionRefusals) refused(ns, workload, stage, pod, uid, reason string) {
	if stage == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byNS == nil {
		r.byNS = map[string]map[string]evictionRefusal{}
	}
	if r.byNS[ns] == nil {
		r.byNS[ns] = map[string]evictionRefusal{}
	}
	r.byNS[ns][workload] = evictionRefusal{stage: stage, pod: pod, uid: uid, reason: cutText(reason, maxRefusalReason)}
}

// evicted forgets the workload's refusal: one of its pods was evicted.
func (r *evictionRefusals) evicted(ns, workload string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byNS[ns], workload)
	if len(r.byNS[ns]) == 0 {
		delete(r.byNS, ns)
	}
}

// drop forgets a namespace's refusals.
func (r *evictionRefusals) drop(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byNS, ns)
}

// attach hands each workload of a namespace in stage its refusal
// (canary.Workload.EvictionRefused), and forgets those that no longer
// apply: of another stage, of a workload gone, or of a pod that was
// replaced, went or is current now.
func (r *evictionRefusals) attach(ns, stage string, ws []canary.Workload) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := r.byNS[ns]
	if len(held) == 0 {
		return
	}
	byName := make(map[string]*canary.Workload, len(ws))
	for i := range ws {
		byName[ws[i].Name] = &ws[i]
	}
	for name, refusal := range held {
		w, ok := byName[name]
		if !ok || refusal.stage != stage || !stillOld(w, refusal) {
			delete(held, name)
			continue
		}
		w.EvictionRefused = refusal.reason
	}
	if len(held) == 0 {
		delete(r.byNS, ns)
	}
}

// stillOld reports whether the pod a refusal was about is still one of
// w's, the same pod (by UID), old and not going away.
func stillOld(w *canary.Workload, refusal evictionRefusal) bool {
	for _, p := range w.Pods {
		if p.Name == refusal.pod {
			return p.UID == refusal.uid && !p.Current && !p.Terminating
		}
	}
	return false
}

// budgetRefusal reads a 429 the Eviction API answered for pod: ok when a
// PodDisruptionBudget refused it (the answer carries a DisruptionBudget
// cause; a 429 of the apiserver's own throttling carries none), with the
// budget's name and the answer, the cause's words included. The budget is
// the cached one that selects the pod, as the Eviction API picks it;
// failing that (not cached yet, or more than one), the one the cause
// names; "" when neither tells.
func (c *Caches) budgetRefusal(ns, pod string, err error) (budget, answer string, ok bool) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return "", "", false
	}
	st := status.Status()
	var causes []string
	named := ""
	if st.Details != nil {
		for _, cause := range st.Details.Causes {
			if cause.Type != policyv1.DisruptionBudgetCause {
				continue
			}
			causes = append(causes, cause.Message)
			if named == "" {
				named = budgetNamed(cause.Message)
			}
		}
	}
	if len(causes) == 0 {
		return "", "", false
	}
	if budget = c.budgetOf(ns, pod); budget == "" {
		budget = named
	}
	answer = fmt.Sprintf("%s (%d %s)", strings.TrimSpace(st.Message+" "+strings.Join(causes, " ")), st.Code, st.Reason)
	return budget, answer, true
}

// refusalReason says that budget ("" when unknown) refused to evict pod,
// with the apiserver's answer: "PodDisruptionBudget db-pdb refused to
// evict pod db-2: Cannot evict pod as it would violate the pod's
// disruption budget. ...".
func refusalReason(budget, pod, answer string) string {
	return fmt.Sprintf("%s refused to evict pod %s: %s", budgetDescribed(budget), pod, answer)
}

// budgetDescribed names a budget for a person: "PodDisruptionBudget
// db-pdb", or "a PodDisruptionBudget" when its name is unknown.
func budgetDescribed(budget string) string {
	if budget == "" {
		return "a PodDisruptionBudget"
	}
	return "PodDisruptionBudget " + budget
}

// budgetOf is the name of the one cached PodDisruptionBudget of ns that
// selects the cached pod, "" unless there is exactly one. As the Eviction
// API reads a budget's selector: an empty one selects every pod, a
// missing one none.
func (c *Caches) budgetOf(ns, pod string) string {
	p, err := c.Pods.In(ns).Get(pod)
	if err != nil {
		return ""
	}
	pdbs, err := c.PDBs.PodDisruptionBudgets(ns).List(labels.Everything())
	if err != nil {
		return ""
	}
	name := ""
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if name != "" {
			return ""
		}
		name = pdb.Name
	}
	return name
}

// budgetNamed reads the budget's name from a DisruptionBudget cause, as the
// Eviction API words it: "The disruption budget db-pdb needs 3 healthy
// pods and has 2 currently", "The disruption budget db-pdb is still being
// processed by the server."; "" when it reads otherwise.
func budgetNamed(message string) string {
	rest, ok := strings.CutPrefix(message, "The disruption budget ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	name = strings.TrimSuffix(name, ".")
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return ""
	}
	return name
}

// cutText shortens s to at most n bytes, on a rune boundary, ending it with
// an ellipsis when it was cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	end := n - len(ellipsis)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + ellipsis
}
