// Package world boots the whole local world: the control plane, the Istio
// mesh (Istio's own istiod, simulated proxies) and a Prometheus that
// scrapes the mesh's request metrics.
// Tests and the demo share it.
package world

import (
	"context"
	"fmt"
	"time"

	"github.com/meshwave/meshwave/e2e/cluster"
	"github.com/meshwave/meshwave/e2e/mesh"
	"github.com/meshwave/meshwave/e2e/prom"
)

// MeshJob is the Prometheus job that scrapes the mesh's request metrics.
const MeshJob = "istio-mesh"

// Options configure a World.
type Options struct {
	// Revisions to install; default 1-25 and 1-26.
	Revisions []mesh.Revision
	// Tags maps revision tags to revisions.
	Tags map[string]string
	// MeshV1 installs the Mesh v1 pod webhook.
	MeshV1 bool
	// CA is the root CA plugged into every istiod, as a fleet's clusters
	// share one; nil lets each cluster's istiod make its own.
	CA *mesh.PluggedCA
	// ReadyDelay is how long the fake kubelet takes to start a pod; default 100ms.
	ReadyDelay time.Duration
	// RunTime is how long a pod that runs to completion (a Job's) runs
	// before its containers exit; default 1s.
	RunTime time.Duration
	// StopDelay is how long a deleted pod's containers take to stop before
	// the fake kubelet reports it terminated and removes it, at most its
	// grace period; default 200ms. Time enough for the disruption
	// controller to see a pod terminating, as it does in a cluster, before
	// a StatefulSet recreates it under the same name.
	StopDelay time.Duration
	// RequestRate is the default requests per second per workload.
	RequestRate float64
	// NoPrometheus skips Prometheus, for scenarios that need none.
	NoPrometheus bool
	// SimulatedIstiod runs the project's simulated istiod and injector
	// instead of Istio's own (built by `make istio`), for the one case the
	// real istiod cannot produce on a loopback world: the HTTP debug
	// endpoint's authentication (see e2e/README.md).
	SimulatedIstiod bool
	// Dir keeps the world's files; empty means temporary.
	Dir string
	// Logf receives diagnostics; nil discards them.
	Logf func(string, ...any)
}

// World is the running local world.
type World struct {
	Cluster    *cluster.Cluster
	Mesh       *mesh.Mesh
	Prometheus *prom.Server
	// BootTime is how long Start took, Prometheus included.
	BootTime time.Duration
}

// DefaultRevisions are the two revisions the scenarios move between.
func DefaultRevisions() []mesh.Revision {
	return []mesh.Revision{{Name: "1-25"}, {Name: "1-26"}}
}

// Start boots everything and returns when it all serves.
func Start(ctx context.Context, opts Options) (_ *World, err error) {
	begin := time.Now()
	if len(opts.Revisions) == 0 {
		opts.Revisions = DefaultRevisions()
	}
	if opts.ReadyDelay == 0 {
		opts.ReadyDelay = 100 * time.Millisecond
	}
	if opts.StopDelay == 0 {
		opts.StopDelay = 200 * time.Millisecond
	}
	w := &World{}
	defer func() {
		if err != nil {
			w.Stop()
		}
	}()
	cdir := ""
	if opts.Dir != "" {
		cdir = opts.Dir + "/cluster"
	}
	w.Cluster, err = cluster.Start(ctx, cluster.Options{
		Kubelet: cluster.KubeletOptions{ReadyDelay: opts.ReadyDelay, RunTime: opts.RunTime, StopDelay: opts.StopDelay},
		Logf:    opts.Logf,
		Dir:     cdir,
	})
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	var istio *mesh.IstioArtifacts
	if !opts.SimulatedIstiod {
		a, err := mesh.FindIstioArtifacts()
		if err != nil {
			return nil, err
		}
		istio = &a
	}
	mdir := ""
	if opts.Dir != "" {
		mdir = opts.Dir + "/istio"
	}
	w.Mesh, err = mesh.Start(ctx, mesh.Options{
		Client:      w.Cluster.Client,
		Config:      w.Cluster.Config,
		Istio:       istio,
		Dir:         mdir,
		IPs:         w.Cluster.Kubelet,
		Revisions:   opts.Revisions,
		Tags:        opts.Tags,
		CA:          opts.CA,
		MeshV1:      opts.MeshV1,
		RequestRate: opts.RequestRate,
		Logf:        opts.Logf,
	})
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	if !opts.NoPrometheus {
		pdir := ""
		if opts.Dir != "" {
			pdir = opts.Dir + "/prometheus"
		}
		w.Prometheus, err = prom.Start(ctx, prom.Options{
			Targets: []prom.Target{{Job: MeshJob, Addr: w.Mesh.Traffic().Addr()}},
			Dir:     pdir,
		})
		if err != nil {
			return nil, fmt.Errorf("prometheus: %w", err)
		}
	}
	w.BootTime = time.Since(begin)
	return w, nil
}

// Stop stops everything, Prometheus first.
func (w *World) Stop() {
	if w.Prometheus != nil {
		w.Prometheus.Close()
	}
	if w.Mesh != nil {
		w.Mesh.Stop()
	}
	if w.Cluster != nil {
		w.Cluster.Stop()
	}
}
