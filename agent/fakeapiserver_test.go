package agent

import (
	"encoding/json"
	"fmt"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// apiserverResourceVersions makes the fake clientset's merge patches
// behave as the apiserver's do: each write bumps the object's
// resourceVersion, and a patch that carries a resourceVersion other than
// the stored one is refused with 409 Conflict.
func apiserverResourceVersions(client *fake.Clientset) {
	var mu sync.Mutex
	next := 1000
	client.PrependReactor("patch", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		if p.GetSubresource() != "" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		gvr := p.GetResource()
		obj, err := client.Tracker().Get(gvr, p.GetNamespace(), p.GetName(), metav1.GetOptions{})
		if err != nil {
			return true, nil, err
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		var pre struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &pre); err != nil {
			return true, nil, err
		}
		if pre.Metadata.ResourceVersion != "" && pre.Metadata.ResourceVersion != m.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: gvr.Group, Resource: gvr.Resource}, p.GetName(),
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			return true, nil, err
		}
		merged, err := jsonpatch.MergePatch(raw, p.GetPatch())
		if err != nil {
			return true, nil, err
		}
		out := obj.DeepCopyObject()
		if err := json.Unmarshal(merged, out); err != nil {
			return true, nil, err
		}
		next++
		om, _ := meta.Accessor(out)
		om.SetResourceVersion(fmt.Sprint(next))
		if err := client.Tracker().Update(gvr, out, p.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, out, nil
	})
}
