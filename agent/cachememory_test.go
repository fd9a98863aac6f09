package agent

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/canary"

	"github.com/meshwave/meshwave/internal/podfixture"
)

// BenchmarkCacheMemory measures what the informer caches retain per
// object, at a namespace's usual mix: 10 Deployments of 5 Istio-injected
// pods each, every Deployment with its current ReplicaSet and two old
// ones, and as many ControllerRevisions of StatefulSets of the same
// templates. Each object is decoded from its protobuf encoding, as the client
// decodes a watch event, passed through the informers' transform and
// added to an indexer keyed and indexed as a shared informer's. It
// reports the heap the indexers retain after a GC, per object, beside
// the same objects cached whole ("plain-").
func BenchmarkCacheMemory(b *testing.B) {
	const namespaces = 40
	objs := encodeCluster(b, namespaces, 10, 5)
	keep := transform(map[string]bool{canary.AnnotationSidecar: true})
	whole := func(obj any) (any, error) { return obj, nil }
	for i := 0; i < b.N; i++ {
		for _, kind := range objs {
			store, bytes := retainedPerObject(b, kind, whole)
			b.ReportMetric(bytes, "plain-B/"+kind.name)
			runtime.KeepAlive(store)
		}
		// What a metadata-only informer of pods would hold: the whole
		// metadata, as the apiserver sends it for a PartialObjectMetadata
		// watch, and no status, so no readiness for the gates.
		store, bytes := retainedPerObject(b, objs[0], metadataOnly)
		b.ReportMetric(bytes, "metadata-only-B/pod")
		runtime.KeepAlive(store)
		var stores []cache.Indexer
		for _, kind := range objs {
			store, bytes := retainedPerObject(b, kind, keep)
			b.ReportMetric(bytes, "B/"+kind.name)
			stores = append(stores, store)
		}
		if *cacheHeapProfile != "" {
			writeHeapProfile(b, *cacheHeapProfile)
		}
		runtime.KeepAlive(stores)
	}
}

// metadataOnly turns a pod into the PartialObjectMetadata a metadata
// informer caches.
func metadataOnly(obj any) (any, error) {
	p := obj.(*corev1.Pod)
	meta := p.ObjectMeta
	meta.ManagedFields = nil
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: meta}, nil
}

// cacheHeapProfile names a file to which BenchmarkCacheMemory writes a
// heap profile while the transformed objects are cached: read it with
// go tool pprof -sample_index=inuse_space, after -test.memprofilerate=1.
var cacheHeapProfile = flag.String("cachememory.heapprofile", "", "write a heap profile of the transformed caches to this file")

func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// The caches hold an injected pod, a ReplicaSet or a ControllerRevision
// in under a kilobyte and a Deployment in under three, where the whole
// objects take 21, 5, 3.5 and 6.5: BenchmarkCacheMemory gives the figures. Each is measured three
// times and the least kept, as other goroutines may allocate meanwhile.
func TestTheCachesHoldAPodInUnderAKilobyte(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of 2,000 pods")
	}
	budget := map[string]float64{"pod": 1024, "replicaset": 1024, "controllerrevision": 1024, "deployment": 3072}
	keep := transform(map[string]bool{canary.AnnotationSidecar: true})
	for _, kind := range encodeCluster(t, 40, 10, 5) {
		least := math.Inf(1)
		for range 3 {
			_, bytes := retainedPerObject(t, kind, keep)
			least = min(least, bytes)
		}
		assert.LessOrEqual(t, least, budget[kind.name], "bytes per %s", kind.name)
	}
}

// The pool shares the labels and annotations of the pods of one template;
// a pod whose labels are its own (a StatefulSet's, which name the pod, a
// Job's, a bare pod) shares them with none, and its entry in the pool
// costs it little beside what it costs unpooled. Measured as
// TestTheCachesHoldAPodInUnderAKilobyte measures.
func TestThePoolCostsAPodOfItsOwnLabelsLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of 2,000 pods")
	}
	pods := encodedKind{name: "pod", decode: func(raw []byte) (any, error) {
		p := &corev1.Pod{}
		return p, p.Unmarshal(raw)
	}}
	for n := 0; n < 400; n++ {
		for i := 0; i < 5; i++ {
			p := istioInjectedPod(fmt.Sprintf("load-%03d", n), "db", i)
			p.Labels[appsv1.StatefulSetPodNameLabel] = fmt.Sprintf("db-%d-%d", n, i)
			p.Labels[appsv1.PodIndexLabel] = strconv.Itoa(i)
			raw, err := p.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			pods.objects = append(pods.objects, raw)
		}
	}
	keep := map[string]bool{canary.AnnotationSidecar: true}
	pooled, unpooled := math.Inf(1), math.Inf(1)
	for range 3 {
		_, bytes := retainedPerObject(t, pods, func(obj any) (any, error) { return slimPod(obj.(*corev1.Pod), keep), nil })
		unpooled = min(unpooled, bytes)
		_, bytes = retainedPerObject(t, pods, transform(keep))
		pooled = min(pooled, bytes)
	}
	assert.LessOrEqual(t, pooled, unpooled+256, "bytes per pod, pooled beside unpooled")
}

// encodedKind is one kind's objects, each protobuf-encoded, with a
// decoder for it.
type encodedKind struct {
	name    string
	objects [][]byte
	decode  func([]byte) (any, error)
}

// retainedPerObject decodes every object of kind, transforms it and adds
// it to an indexer, and returns the indexer and the heap it retains per
// object once collected. The encoded objects are live before and after,
// so they do not count.
func retainedPerObject(tb testing.TB, kind encodedKind, transform cache.TransformFunc) (cache.Indexer, float64) {
	tb.Helper()
	before := liveHeap()
	store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, raw := range kind.objects {
		obj, err := kind.decode(raw)
		if err != nil {
			tb.Fatal(err)
		}
		if obj, err = transform(obj); err != nil {
			tb.Fatal(err)
		}
		if err := store.Add(obj); err != nil {
			tb.Fatal(err)
		}
	}
	return store, float64(liveHeap()-before) / float64(len(kind.objects))
}

// liveHeap is the heap in use once garbage is collected.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// encodeCluster encodes namespaces × deployments Deployments, each with
// three ReplicaSets and pods injected pods, and as many StatefulSets'
// ControllerRevisions, three each, of the same templates.
func encodeCluster(tb testing.TB, namespaces, deployments, pods int) []encodedKind {
	tb.Helper()
	dep := encodedKind{name: "deployment", decode: func(raw []byte) (any, error) {
		d := &appsv1.Deployment{}
		return d, d.Unmarshal(raw)
	}}
	rs := encodedKind{name: "replicaset", decode: func(raw []byte) (any, error) {
		r := &appsv1.ReplicaSet{}
		return r, r.Unmarshal(raw)
	}}
	pod := encodedKind{name: "pod", decode: func(raw []byte) (any, error) {
		p := &corev1.Pod{}
		return p, p.Unmarshal(raw)
	}}
	rev := encodedKind{name: "controllerrevision", decode: func(raw []byte) (any, error) {
		r := &appsv1.ControllerRevision{}
		return r, r.Unmarshal(raw)
	}}
	encode := func(obj interface{ Marshal() ([]byte, error) }) []byte {
		raw, err := obj.Marshal()
		if err != nil {
			tb.Fatal(err)
		}
		return raw
	}
	for n := 0; n < namespaces; n++ {
		ns := fmt.Sprintf("load-%03d", n)
		for d := 0; d < deployments; d++ {
			app := fmt.Sprintf("svc-%02d", d)
			deployment := appliedDeployment(ns, app, int32(pods))
			dep.objects = append(dep.objects, encode(deployment))
			for r, hash := range []string{"5b6c7d8e9f", "6c7d8e9f5b", templateHash} {
				rs.objects = append(rs.objects, encode(replicaSetOf(deployment, hash, r+1)))
				rev.objects = append(rev.objects, encode(statefulSetRevisionOf(tb, deployment, hash, r+1)))
			}
			for p := 0; p < pods; p++ {
				pod.objects = append(pod.objects, encode(istioInjectedPod(ns, app, p)))
			}
		}
	}
	return []encodedKind{pod, dep, rs, rev}
}

// statefulSetRevisionOf is a ControllerRevision as the StatefulSet
// controller writes it for a StatefulSet of d's name and template: its
// data a patch that replaces the whole template, restarted at a time of
// its own.
func statefulSetRevisionOf(tb testing.TB, d *appsv1.Deployment, hash string, rev int) *appsv1.ControllerRevision {
	tb.Helper()
	template := *d.Spec.Template.DeepCopy()
	template.Annotations = map[string]string{canary.AnnotationRestartedAt: fmt.Sprintf("2025-03-0%dT12:00:00Z", rev)}
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
	if err != nil {
		tb.Fatal(err)
	}
	raw = bytes.Replace(raw, []byte(`{"spec":{"template":{`), []byte(`{"spec":{"template":{"$patch":"replace",`), 1)
	name := d.Name + "-" + hash
	sts := uid("StatefulSet", d.Namespace+"/"+d.Name)
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace, UID: uid("ControllerRevision", d.Namespace+"/"+name),
			ResourceVersion: strconv.Itoa(60000 + rev), CreationTimestamp: d.CreationTimestamp,
			Labels: map[string]string{"app": d.Name, appsv1.ControllerRevisionHashLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: d.Name, UID: sts,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{managedBy("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "",
				`{"f:data":{},"f:metadata":{"f:labels":{".":{},"f:app":{},"f:controller-revision-hash":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"`+string(sts)+`\"}":{}}},"f:revision":{}}`)},
		},
		Data:     k8sruntime.RawExtension{Raw: raw},
		Revision: int64(rev),
	}
}

// templateHash is the pod-template-hash of every Deployment's current
// ReplicaSet.
const templateHash = "7d9f8c6b5"

// uid makes a distinct UID of the form the apiserver writes.
func uid(kind, name string) types.UID {
	sum := uint64(14695981039346656037)
	for _, c := range []byte(kind + "/" + name) {
		sum = (sum ^ uint64(c)) * 1099511628211
	}
	h := fmt.Sprintf("%016x%016x", sum, sum*31)
	return types.UID(h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

// managedBy is a managedFields entry the way a field manager writes one.
func managedBy(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
	at := metav1.NewTime(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Time: &at, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(fields), Subresource: subresource}
}

// appliedDeployment is a Deployment as `kubectl apply` leaves it once its
// controller rolled it out: the apiserver's defaults, the last applied
// configuration, the revision annotation and a status.
func appliedDeployment(ns, app string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: labels, UID: uid("Deployment", ns+"/"+app),
			ResourceVersion: "48213", Generation: 1, CreationTimestamp: metav1.NewTime(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)),
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "3"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app, "version": "v1"}},
				Spec: corev1.PodSpec{ServiceAccountName: "default", RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
					SchedulerName: corev1.DefaultSchedulerName, TerminationGracePeriodSeconds: ptr.To[int64](30), SecurityContext: &corev1.PodSecurityContext{},
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + app + ":1.0",
						Ports:                  []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
						TerminationMessagePath: corev1.TerminationMessagePathDefault, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
						ImagePullPolicy: corev1.PullIfNotPresent}}},
			},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromString("25%")), MaxSurge: ptr.To(intstr.FromString("25%"))}},
			RevisionHistoryLimit: ptr.To[int32](10), ProgressDeadlineSeconds: ptr.To[int32](600),
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: replicas, UpdatedReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable",
					Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", app+"-"+templateHash)}}},
	}
	d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = fmt.Sprintf(
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"labels":{"app":%q},"name":%q,"namespace":%q},`+
			`"spec":{"replicas":%d,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q,"version":"v1"}},`+
			`"spec":{"containers":[{"image":"registry.example/%s:1.0","name":"app","ports":[{"containerPort":8080,"name":"http"}]}]}}}}`+"\n",
		app, app, ns, replicas, app, app, app)
	d.ManagedFields = []metav1.ManagedFieldsEntry{
		managedBy("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, "",
			`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:version":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}`),
		managedBy("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "status",
			`{"f:metadata":{"f:annotations":{"f:deployment.kubernetes.io/revision":{}}},"f:status":{"f:availableReplicas":{},"f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},"f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Progressing\"}":{".":{},"f:lastTransitionTime":{},"f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{},"f:updatedReplicas":{}}}`),
	}
	return d
}

// replicaSetOf is revision rev of d's ReplicaSets, with pod-template-hash
// hash; the newest runs d's replicas, the older ones none.
func replicaSetOf(d *appsv1.Deployment, hash string, rev int) *appsv1.ReplicaSet {
	replicas := int32(0)
	if hash == templateHash {
		replicas = *d.Spec.Replicas
	}
	labels := map[string]string{"app": d.Name, "version": "v1", "pod-template-hash": hash}
	template := *d.Spec.Template.DeepCopy()
	template.Labels = labels
	name := d.Name + "-" + hash
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace, Labels: labels, UID: uid("ReplicaSet", d.Namespace+"/"+name),
			ResourceVersion: strconv.Itoa(40000 + rev), Generation: 1, CreationTimestamp: d.CreationTimestamp,
			Annotations: map[string]string{"deployment.kubernetes.io/desired-replicas": strconv.Itoa(int(*d.Spec.Replicas)),
				"deployment.kubernetes.io/max-replicas": strconv.Itoa(int(*d.Spec.Replicas) + 2), "deployment.kubernetes.io/revision": strconv.Itoa(rev)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{managedBy("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "",
				`{"f:metadata":{"f:annotations":{".":{},"f:deployment.kubernetes.io/desired-replicas":{},"f:deployment.kubernetes.io/max-replicas":{},"f:deployment.kubernetes.io/revision":{}},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:version":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"`+string(d.UID)+`\"}":{}}},"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:version":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{}}}}}}}`)},
		},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": d.Name, "pod-template-hash": hash}},
			Template: template},
		Status: appsv1.ReplicaSetStatus{Replicas: replicas, FullyLabeledReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas, ObservedGeneration: 1},
	}
}

// istioInjectedPod is pod i of Deployment app as the apiserver serves it
// once Istio's injector and the kubelet are done (podfixture), with the
// fields the apiserver and the controllers set: its UID, resourceVersion,
// owner, managed fields, node and a Running status with a pod IP.
func istioInjectedPod(ns, app string, i int) *corev1.Pod {
	p := podfixture.InjectedPod(ns, app, templateHash, i)
	rs := app + "-" + templateHash
	p.UID, p.ResourceVersion = uid("Pod", ns+"/"+p.Name), strconv.Itoa(50000+i)
	p.CreationTimestamp = metav1.NewTime(time.Date(2025, 3, 1, 12, 0, i, 0, time.UTC))
	p.Labels["version"] = "v1"
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: uid("ReplicaSet", ns+"/"+rs),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	p.ManagedFields = []metav1.ManagedFieldsEntry{
		managedBy("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "",
			`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:version":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"`+string(uid("ReplicaSet", ns+"/"+rs))+`\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}`),
		managedBy("kubelet", metav1.ManagedFieldsOperationUpdate, "status",
			`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"PodReadyToStartContainers\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:initContainerStatuses":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.1.2.3\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`),
	}
	p.Spec.NodeName = fmt.Sprintf("node-%02d", i%50)
	p.Status = podfixture.RunningStatus(p, fmt.Sprintf("10.%d.%d.%d", 1+i%50, i/250%250, i%250), metav1.NewTime(time.Date(2025, 3, 1, 12, 1, 0, 0, time.UTC)))
	return p
}
