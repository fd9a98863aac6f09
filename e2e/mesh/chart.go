package mesh

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/meshwave/meshwave/e2e/checkout"
)

// IstioArtifacts are what the world needs to run Istio's real control
// plane: `make istio` (e2e/hack/get-istio.sh) builds them into
// e2e/.cache/istio.
type IstioArtifacts struct {
	// PilotDiscovery is istiod's binary.
	PilotDiscovery string
	// Helm renders Istio's charts.
	Helm string
	// Charts holds Istio's istio-discovery and base charts.
	Charts string
	// GatewayAPI holds the standard Gateway API CRDs of the
	// sigs.k8s.io/gateway-api module Istio requires.
	GatewayAPI string
	// Module is the istio.io/istio module version they come from;
	// Version is the Istio version it builds, such as 1.31-dev.
	Module, Version string
}

// FindIstioArtifacts locates the artifacts in $MESHWAVE_ISTIO_DIR, else in
// e2e/.cache/istio.
func FindIstioArtifacts() (IstioArtifacts, error) {
	dir := os.Getenv("MESHWAVE_ISTIO_DIR")
	if dir == "" {
		d, err := checkout.Path("e2e", ".cache", "istio")
		if err != nil {
			return IstioArtifacts{}, fmt.Errorf("cannot locate e2e/.cache/istio: %w", err)
		}
		dir = d
	}
	a := IstioArtifacts{
		PilotDiscovery: filepath.Join(dir, "pilot-discovery"),
		Helm:           filepath.Join(dir, "helm"),
		Charts:         filepath.Join(dir, "charts"),
		GatewayAPI:     filepath.Join(dir, "gateway-api"),
	}
	for _, f := range []string{a.PilotDiscovery, a.Helm, filepath.Join(a.Charts, "istio-discovery", "Chart.yaml")} {
		if _, err := os.Stat(f); err != nil {
			return a, fmt.Errorf("no %s: run `make istio` (e2e/hack/get-istio.sh), or set MESHWAVE_ISTIO_DIR", f)
		}
	}
	for file, into := range map[string]*string{".version": &a.Module, ".istio-version": &a.Version} {
		v, err := os.ReadFile(filepath.Join(a.Charts, file))
		if err != nil {
			return a, fmt.Errorf("read the charts' version (run `make istio`): %w", err)
		}
		*into = strings.TrimSpace(string(v))
	}
	return a, nil
}

// chartValues are the helm --set values the world renders a revision with.
type chartValues struct {
	Revision      string
	RootNamespace string
	// ServiceIP is where the apiserver reaches the revision's istiod: its
	// webhooks call https://ServiceIP:15017.
	ServiceIP string
	// Tags are revision tags this release renders.
	Tags []string
	// Replicas of istiod, and the injection policy ("enabled" or
	// "disabled").
	Replicas int
	Policy   string
	// Env is extra environment for istiod, the chart's env values.
	Env map[string]string
	// Tag is global.tag; default the built istiod's version.
	Tag string
}

// renderIstioChart renders Istio's istio-discovery chart for one revision,
// as `helm template` does, restricted to the templates in only when given.
// The one change from Istio's own install is that the webhooks reach istiod
// by URL: there is no service proxy in the local world.
func renderIstioChart(ctx context.Context, a IstioArtifacts, v chartValues, only ...string) ([]*unstructured.Unstructured, error) {
	args := []string{"template", "istiod-" + v.Revision, filepath.Join(a.Charts, "istio-discovery"),
		"--namespace", v.RootNamespace,
		"--set", "revision=" + v.Revision,
		"--set", "global.istioNamespace=" + v.RootNamespace,
		"--set", "istiodRemote.injectionURL=https://" + v.ServiceIP + ":15017/inject/cluster/Kubernetes/net/network1",
		"--set", "base.validationURL=https://" + v.ServiceIP + ":15017/validate",
		"--set", "global.tag=" + cmp.Or(v.Tag, a.Version),
		"--set", "autoscaleEnabled=false",
		"--set", fmt.Sprintf("replicaCount=%d", max(v.Replicas, 1)),
	}
	if v.Policy != "" {
		args = append(args, "--set", "global.proxy.autoInject="+v.Policy)
	}
	if len(v.Tags) > 0 {
		args = append(args, "--set", "revisionTags={"+strings.Join(v.Tags, ",")+"}")
	}
	if len(v.Env) > 0 {
		// A values file, since --set would split a list at its commas.
		raw, err := json.Marshal(map[string]any{"env": v.Env})
		if err != nil {
			return nil, err
		}
		f, err := os.CreateTemp("", "istiod-values-*.json")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		if _, err := f.Write(raw); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		args = append(args, "--values", f.Name())
	}
	for _, o := range only {
		args = append(args, "--show-only", o)
	}
	cmd := exec.CommandContext(ctx, a.Helm, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w: %s", v.Revision, err, stderr.String())
	}
	return decodeObjects(bytes.NewReader(out))
}

// decodeObjects reads a stream of YAML documents into objects, skipping
// empty ones.
func decodeObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// applier applies objects server-side, as `kubectl apply --server-side`.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(cfg *rest.Config) (*applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// apply applies each object with the field manager "istio-chart".
func (a *applier) apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			// A CRD applied earlier in this call: look again.
			a.mapper.Reset()
			m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		raw, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, raw, metav1.PatchOptions{FieldManager: "istio-chart", Force: ptrTo(true)}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// remove deletes the objects, ignoring those already gone.
func (a *applier) remove(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("map %s: %w", gvk, err)
		}
		var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// istioCRDs reads Istio's CRDs from the base chart.
func istioCRDs(a IstioArtifacts) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(filepath.Join(a.Charts, "base", "files", "crd-all.gen.yaml"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeObjects(f)
}

// gatewayAPICRDs reads the CRDs of the Gateway API files: the files also
// hold a ValidatingAdmissionPolicy, which the world leaves out.
func gatewayAPICRDs(a IstioArtifacts) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(a.GatewayAPI, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no Gateway API CRDs in %s: run `make istio` (e2e/hack/get-istio.sh)", a.GatewayAPI)
	}
	var out []*unstructured.Unstructured
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		objs, err := decodeObjects(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, o := range objs {
			if o.GetKind() == "CustomResourceDefinition" {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// InstallGatewayAPI applies the standard Gateway API CRDs, as a cluster
// that runs waypoints has them. istiod picks them up as they appear.
func (m *Mesh) InstallGatewayAPI(ctx context.Context) error {
	if m.istio == nil {
		return errors.New("the Gateway API needs the real istiod")
	}
	crds, err := gatewayAPICRDs(*m.istio)
	if err != nil {
		return err
	}
	return m.apply.apply(ctx, crds)
}

func ptrTo[T any](v T) *T { return &v }
