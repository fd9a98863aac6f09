// Package cluster runs a real Kubernetes control plane inside the calling
// process: etcd, kube-apiserver and kube-controller-manager from the
// Kubernetes Go modules, plus a fake kubelet that plays the part of the
// nodes. It knows nothing about meshwave; scenarios drive it through its
// exported API.
package cluster
