package agent

import (
	"context"
	"errors"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// ErrLostLease is returned by Run when another replica took the lease.
var ErrLostLease = errors.New("lost the leader lease")

// setLeading reports leadership in meshwave_leader.
func (c *Controller) setLeading(v bool) {
	if c.metrics != nil {
		c.metrics.leader.Set(b2f(v))
	}
}

// Run starts the caches on every replica and runs the workers on the one
// holding the lease. It returns nil when ctx ends, and ErrLostLease when
// leadership is lost, after which the process should exit and start over.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	le := c.cfg.LeaderElection
	if !le.Enabled {
		c.setLeading(true)
		defer c.setLeading(false)
		c.RunWorkers(ctx)
		return nil
	}
	ns := le.Namespace
	if ns == "" {
		ns = c.cfg.RootNamespace
	}
	id := c.identity
	if id == "" {
		host, _ := os.Hostname()
		id = host + "_" + rand.String(6)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.LeaseName, Namespace: ns},
		Client:     c.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	logger := klog.FromContext(ctx)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration.D(),
		RenewDeadline:   le.RenewDeadline.D(),
		RetryPeriod:     le.RetryPeriod.D(),
		ReleaseOnCancel: true,
		Name:            "meshwave",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Acquired the leader lease", "identity", id, "lease", ns+"/"+le.LeaseName)
				c.setLeading(true)
				c.RunWorkers(ctx)
			},
			OnStoppedLeading: func() {
				c.setLeading(false)
				logger.Info("Stopped leading", "identity", id)
			},
		},
	})
	if err != nil {
		return err
	}
	elector.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return ErrLostLease
}
