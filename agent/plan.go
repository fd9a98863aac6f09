package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/meshwave/meshwave/canary"
)

// PlannedWorkload is one row of a plan: a workload, its wave, and what its
// move would write into its template.
type PlannedWorkload struct {
	Namespace string                 `json:"namespace"`
	Wave      int                    `json:"wave"`
	Workload  string                 `json:"workload"`
	Group     int                    `json:"group"`
	Changes   canary.TemplateChanges `json:"changes"`
}

// Plan is what the agent would do now, for every opted-in namespace in
// the order they migrate.
type Plan struct {
	Namespaces []canary.NamespacePlan `json:"namespaces"`
	Workloads  []PlannedWorkload      `json:"workloads"`
}

// PlanNow reads the cluster once through fresh caches and plans every
// opted-in namespace. It writes nothing.
func PlanNow(ctx context.Context, client kubernetes.Interface, cfg Config) (Plan, error) {
	caches := NewCaches(client, 0, cfg.PersistAnnotations)
	caches.Start(ctx)
	defer caches.Shutdown()
	if !caches.WaitForSync() {
		return Plan{}, errors.New("informer caches did not sync")
	}
	nss, err := caches.Namespaces.List(labels.Everything())
	if err != nil {
		return Plan{}, err
	}
	var inputs []canary.PlanInput
	snaps := map[string]canary.Snapshot{}
	dc, now := cfg.Decisions(), time.Now()
	for _, ns := range nss {
		if _, ok := ns.Annotations[canary.AnnotationTargetRevision]; !ok {
			continue
		}
		snap, err := caches.Gather(ns, cfg.RootNamespace)
		if err != nil {
			return Plan{}, err
		}
		st, _, err := canary.ParseStatus(ns.Annotations)
		reading := canary.Read(snap, st, err, dc, now)
		inputs = append(inputs, canary.PlanInput{Snapshot: snap, Status: st, StatusErr: err, Reading: &reading})
		snaps[ns.Name] = snap
	}
	out := Plan{Namespaces: canary.PlanWaves(inputs, dc.Sizes)}
	for _, p := range out.Namespaces {
		byName := map[string]canary.Workload{}
		for _, w := range snaps[p.Namespace].Workloads {
			byName[w.Name] = w
		}
		first := p.FirstWave()
		for i, wave := range p.Waves {
			for _, x := range wave {
				changes := canary.PersistedSettings(byName[x.Name], dc.PersistAnnotations)
				if p.Ambient {
					changes = canary.IntoAmbient(changes)
				}
				out.Workloads = append(out.Workloads, PlannedWorkload{
					Namespace: p.Namespace, Wave: first + i, Workload: x.Name, Group: x.Group, Changes: changes,
				})
			}
		}
	}
	return out, nil
}
