package agent

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/meshwave/meshwave/canary"
)

// HoldersNow reads the cluster once through fresh caches and lists every
// pod injected by revision, with what meshwave will do about it. md reads
// the Jobs' metadata, to name the CronJob behind a Job. A name no pod
// carries that is a revision tag gets a note saying which revision to ask
// for: pods carry revisions, and the tag "default" may point away from
// the unnamed revision "default". It writes nothing.
func HoldersNow(ctx context.Context, client kubernetes.Interface, md metadata.Interface, cfg Config, revision string) (canary.Holders, error) {
	caches := NewCaches(client, 0, nil)
	caches.WatchJobs(md, 0)
	caches.Start(ctx)
	defer caches.Shutdown()
	if !caches.WaitForSync() {
		return canary.Holders{}, errors.New("informer caches did not sync")
	}
	all, err := caches.Holders(cfg.RootNamespace, cfg.Decisions(), func(rev string) bool { return rev == revision })
	if err != nil {
		return canary.Holders{}, err
	}
	out, ok := all[revision]
	if !ok {
		out = canary.ClassifyHolders(canary.HoldersInput{Revision: revision})
	}
	if out.Ambient, out.AmbientPods, err = caches.ambientHolders(cfg.RootNamespace, revision); err != nil {
		return canary.Holders{}, err
	}
	if out.Pods+out.FinishedPods+out.AmbientPods == 0 {
		if m, err := caches.mesh(cfg.RootNamespace); err == nil {
			if rev, ok := m.Tags[revision]; ok {
				out.Note = "tag " + revision + " points at revision " + rev + "; pods carry revisions, not tags: ask for " + rev
			}
		}
	}
	return out, nil
}

// Holders classifies the pods of every revision wants accepts, from the
// caches: one pass over the pods, owners resolved through the ReplicaSet
// and Job caches, and each opted-in namespace that holds one planned once.
// decisions is the configuration the namespaces' decisions read them with
// (Config.Decisions): the plans are those of the same readings.
func (c *Caches) Holders(rootNamespace string, decisions canary.Config, wants func(revision string) bool) (map[string]canary.Holders, error) {
	pods, err := c.Pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out, _, err := c.holdersOf(pods, rootNamespace, decisions, wants, time.Now())
	return out, err
}

// holdersOf classifies pods as Holders does, read at now: the namespaces
// that hold them are read and planned whole, so the pods of a namespace
// are classified alike whether they are given alone or among every pod of
// the cluster. until holds, for each namespace whose classification
// depends on the clock, the instant it may change (canary.Reading.Until).
func (c *Caches) holdersOf(pods []*CachedPod, rootNamespace string, decisions canary.Config, wants func(revision string) bool, now time.Time) (out map[string]canary.Holders, until map[string]time.Time, err error) {
	revs, counts := holderRevisions(pods, wants)
	byRevision := make(map[string][]canary.HolderPod, len(counts))
	for i, p := range pods {
		rev := revs[i]
		if rev == "" {
			continue
		}
		if byRevision[rev] == nil {
			byRevision[rev] = make([]canary.HolderPod, 0, counts[rev])
		}
		byRevision[rev] = append(byRevision[rev], canary.HolderPod{
			Namespace: p.Namespace, Name: p.Name, Owner: c.ownerOf(p), Phase: string(p.Phase),
			Terminating: p.DeletionTimestamp != nil, RevLabel: p.Labels[canary.LabelRev],
		})
	}
	if len(byRevision) == 0 {
		return map[string]canary.Holders{}, nil, nil
	}
	nsInfo, mesh, until, err := c.holderNamespaces(byRevision, rootNamespace, decisions, now)
	if err != nil {
		return nil, nil, err
	}
	out = make(map[string]canary.Holders, len(byRevision))
	for rev, ps := range byRevision {
		out[rev] = canary.ClassifyHolders(canary.HoldersInput{Revision: rev, Pods: ps, Namespaces: nsInfo, Mesh: mesh})
	}
	return out, until, nil
}

// holderRevisions returns the revision each pod's sidecar status names,
// "" for a pod without one or of a revision wants refuses, and how many
// pods each revision holds: the lists of holders are made at their size,
// since growing them one append at a time allocated five times what they
// hold on every scrape of a large cluster.
func holderRevisions(pods []*CachedPod, wants func(revision string) bool) ([]string, map[string]int) {
	revs := make([]string, len(pods))
	counts := map[string]int{}
	wanted := map[string]bool{}
	for i, p := range pods {
		rev := p.Revision
		if rev == "" {
			continue
		}
		ok, seen := wanted[rev]
		if !seen {
			ok = wants(rev)
			wanted[rev] = ok
		}
		if ok {
			revs[i] = rev
			counts[rev]++
		}
	}
	return revs, counts
}

// holderNamespaces reads the namespaces that hold the pods, and plans
// those that opted in as the controller would. A namespace is planned in
// full (its workloads gathered) only when a Deployment, StatefulSet or
// DaemonSet of it holds a live pod off its target revision: the others'
// holders need its target and status only, which a plan of no workload
// gives, so a cluster whose migrations are over scrapes cheaply. until is
// as holdersOf's.
func (c *Caches) holderNamespaces(byRevision map[string][]canary.HolderPod, rootNamespace string, decisions canary.Config, now time.Time) (map[string]canary.HolderNamespace, canary.Mesh, map[string]time.Time, error) {
	mesh, err := c.mesh(rootNamespace)
	if err != nil {
		return nil, mesh, nil, err
	}
	until := map[string]time.Time{}
	changes := func(ns string, r *canary.Reading) {
		if t := r.Until(); !t.IsZero() && (until[ns].IsZero() || t.Before(until[ns])) {
			until[ns] = t
		}
	}
	out := map[string]canary.HolderNamespace{}
	inputs := map[string]canary.PlanInput{}
	var light []canary.PlanInput
	for _, ps := range byRevision {
		for _, p := range ps {
			if _, seen := out[p.Namespace]; seen {
				continue
			}
			ns, err := c.Namespaces.Get(p.Namespace)
			if err != nil {
				out[p.Namespace] = canary.HolderNamespace{Name: p.Namespace} // gone since the pods were listed
				continue
			}
			h := canary.HolderNamespace{Name: ns.Name, Labels: ns.Labels}
			if _, ok := ns.Annotations[canary.AnnotationTargetRevision]; ok {
				st, _, err := canary.ParseStatus(ns.Annotations)
				in := canary.PlanInput{Snapshot: canary.Snapshot{Namespace: canary.Namespace{Name: ns.Name, Labels: ns.Labels, Annotations: ns.Annotations}, Mesh: mesh}, Status: st, StatusErr: err}
				reading := canary.Read(in.Snapshot, st, err, decisions, now)
				in.Reading = &reading
				changes(ns.Name, &reading)
				inputs[ns.Name] = in
				light = append(light, in)
			}
			out[ns.Name] = h
		}
	}
	targets := map[string]string{}
	for _, p := range canary.PlanWaves(light, decisions.Sizes) {
		h := out[p.Namespace]
		h.Plan = &p
		out[p.Namespace] = h
		targets[p.Namespace] = p.TargetRevision
	}
	full := map[string]bool{}
	for rev, ps := range byRevision {
		for _, p := range ps {
			target, opted := targets[p.Namespace]
			if !opted || target == "" || target == rev || full[p.Namespace] || p.Phase == string(corev1.PodSucceeded) || p.Phase == string(corev1.PodFailed) {
				continue
			}
			switch p.Owner.Kind {
			case canary.OwnerDeployment, canary.OwnerStatefulSet, canary.OwnerDaemonSet:
				full[p.Namespace] = true
			}
		}
	}
	var planned []canary.PlanInput
	for name := range full {
		in := inputs[name]
		ws, err := c.workloads(name)
		if err != nil {
			return nil, mesh, nil, err
		}
		in.Snapshot.Workloads = ws
		reading := canary.Read(in.Snapshot, in.Status, in.StatusErr, decisions, now)
		in.Reading = &reading
		changes(name, &reading)
		planned = append(planned, in)
	}
	for _, p := range canary.PlanWaves(planned, decisions.Sizes) {
		h := out[p.Namespace]
		h.Plan = &p
		out[p.Namespace] = h
	}
	return out, mesh, until, nil
}

// ownerOf resolves what keeps a pod: the Deployment behind its ReplicaSet,
// the CronJob behind its Job, its StatefulSet or DaemonSet, or the pod
// itself when nothing controls it. A ReplicaSet or Job the caches do not
// hold (deleted, orphaning the pod, or Jobs not watched), or a workload
// they do not hold, is named as is. A controller reference is followed, as
// Kubernetes' controllers follow theirs, only to the object of its UID: a
// pod whose reference names an object the caches hold under another UID
// has no live controller (its own was deleted and another took the name,
// or the reference was written by hand) and counts as a bare pod; a
// ReplicaSet whose reference names a Deployment held under another UID
// (or another API's Deployment of that name) has no Deployment.
func (c *Caches) ownerOf(p *CachedPod) canary.Owner {
	ref := metav1.GetControllerOfNoCopy(p)
	if ref == nil {
		return canary.Owner{Kind: canary.OwnerPod, Name: p.Name}
	}
	bare := canary.Owner{Kind: canary.OwnerPod, Name: p.Name}
	switch ref.Kind {
	case canary.OwnerReplicaSet:
		rs, err := c.ReplicaSets.In(p.Namespace).Get(ref.Name)
		if err != nil {
			break
		}
		if rs.UID != ref.UID {
			return bare
		}
		up := metav1.GetControllerOfNoCopy(rs)
		if up == nil {
			break
		}
		if held, same := c.holdsWorkload(p.Namespace, up); held && !same {
			return canary.Owner{Kind: canary.OwnerReplicaSet, Name: rs.Name}
		}
		return canary.Owner{Kind: up.Kind, Name: up.Name}
	case canary.OwnerStatefulSet, canary.OwnerDaemonSet:
		if held, same := c.holdsWorkload(p.Namespace, ref); held && !same {
			return bare
		}
	case canary.OwnerJob:
		if c.Jobs == nil {
			break
		}
		if obj, err := c.Jobs.ByNamespace(p.Namespace).Get(ref.Name); err == nil {
			if job, ok := obj.(metav1.Object); ok {
				if job.GetUID() != ref.UID {
					return bare
				}
				if up := metav1.GetControllerOfNoCopy(job); up != nil && up.Kind == canary.OwnerCronJob {
					return canary.Owner{Kind: canary.OwnerCronJob, Name: up.Name}
				}
			}
		}
	}
	return canary.Owner{Kind: ref.Kind, Name: ref.Name}
}

// holdsWorkload reports whether the caches hold a Deployment, StatefulSet
// or DaemonSet of ref's kind and name in ns, and whether it is ref's: of
// its UID. Any other kind is held by none.
func (c *Caches) holdsWorkload(ns string, ref *metav1.OwnerReference) (held, same bool) {
	var obj metav1.Object
	var err error
	switch ref.Kind {
	case canary.OwnerDeployment:
		obj, err = c.Deployments.Deployments(ns).Get(ref.Name)
	case canary.OwnerStatefulSet:
		obj, err = c.StatefulSets.StatefulSets(ns).Get(ref.Name)
	case canary.OwnerDaemonSet:
		obj, err = c.DaemonSets.DaemonSets(ns).Get(ref.Name)
	default:
		return false, false
	}
	if err != nil {
		return false, false
	}
	return true, obj.GetUID() == ref.UID
}
