package harness

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseAPIPath(t *testing.T) {
	for path, want := range map[string]APIPath{
		"/api/v1/namespaces/shop":                                {Namespace: "shop", Resource: "namespaces", Name: "shop"},
		"/api/v1/namespaces/shop/status":                         {Namespace: "shop", Resource: "namespaces", Name: "shop", Subresource: "status"},
		"/api/v1/namespaces/shop/finalize":                       {Namespace: "shop", Resource: "namespaces", Name: "shop", Subresource: "finalize"},
		"/api/v1/namespaces/shop/pods":                           {Namespace: "shop", Resource: "pods"},
		"/apis/apps/v1/namespaces/shop/deployments/cart":         {Namespace: "shop", Resource: "deployments", Name: "cart"},
		"/apis/apps/v1/namespaces/shop/deployments/cart/status/": {Namespace: "shop", Resource: "deployments", Name: "cart", Subresource: "status"},
		"/api/v1/namespaces/shop/pods/cart-1/eviction":           {Namespace: "shop", Resource: "pods", Name: "cart-1", Subresource: "eviction"},
	} {
		got, ok := ParseAPIPath(path)
		assert.True(t, ok, path)
		assert.Equal(t, want, got, path)
	}
	_, ok := ParseAPIPath("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/x")
	assert.False(t, ok)
}

func TestObjectOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/shop":                                             "namespaces shop",
		"/api/v1/namespaces/shop/status":                                      "namespaces shop",
		"/api/v1/namespaces/shop/pods":                                        "pods shop",
		"/apis/apps/v1/namespaces/shop/deployments/cart":                      "deployments shop/cart",
		"/apis/apps/v1/namespaces/shop/deployments/cart/scale":                "deployments shop/cart",
		"/apis/coordination.k8s.io/v1/leases":                                 "/apis/coordination.k8s.io/v1/leases",
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
	} {
		assert.Equal(t, want, ObjectOf(path), path)
	}
}
