// Package mesh simulates an Istio control plane over Istio's own protocols:
// a sidecar injector served as a real admission webhook with Istio's
// selectors, an istiod per revision that answers xDS debug/syncz over gRPC
// and HTTP, a Mesh v1 webhook that adds pod-only settings, and an exporter
// of Istio's request metrics. Scenarios stage faults through its API.
package mesh
