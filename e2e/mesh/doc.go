// Package mesh installs an Istio mesh into the local world: for each
// revision, Istio's own istiod (pilot-discovery, its objects rendered from
// Istio's chart) that injects the pods and serves xDS, and for each injected
// pod a simulated Envoy that speaks xDS to it; a Mesh v1 webhook that adds
// pod-only settings; and an exporter of Istio's request metrics. Scenarios
// stage faults through its API, as protocol behaviour that istiod itself
// reports. A simulated istiod and injector remain for the one case the
// real istiod cannot produce on loopback: HTTP debug authentication.
package mesh
