package agent

import (
	"context"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshwave/meshwave/canary"
)

// NamespaceStatus is one namespace's recorded status, for the CLI.
type NamespaceStatus struct {
	Namespace string         `json:"namespace"`
	Priority  int            `json:"priority"`
	Target    string         `json:"target"`
	Status    *canary.Status `json:"status,omitempty"`
	// PausedFor is the total time spent paused, in seconds, at the moment
	// of the reading.
	PausedFor float64 `json:"pausedSeconds"`
}

// StatusNow lists every namespace that opted in or carries a status, in
// migration order. It reads the namespaces once and writes nothing.
func StatusNow(ctx context.Context, client kubernetes.Interface, now time.Time) ([]NamespaceStatus, error) {
	list, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []NamespaceStatus
	for i := range list.Items {
		ns := &list.Items[i]
		if !concerns(ns) {
			continue
		}
		settings, _ := canary.ParseNamespace(ns.Name, ns.Annotations)
		st, _, err := canary.ParseStatus(ns.Annotations)
		if err != nil {
			st = &canary.Status{Phase: "Unreadable", Reason: err.Error()}
		}
		row := NamespaceStatus{Namespace: ns.Name, Priority: settings.Priority, Target: settings.Target, Status: st}
		if st != nil {
			row.PausedFor = st.PausedFor(now).Seconds()
		}
		out = append(out, row)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Priority != out[j].Priority {
			return out[i].Priority < out[j].Priority
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out, nil
}
