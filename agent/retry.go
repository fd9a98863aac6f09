package agent

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
)

// A namespace whose reconcile failed is retried with exponential backoff
// from retryBaseDelay, capped at retryMaxDelay. The cap matters because
// every informer event that requeues a failing namespace counts as another
// failure: a patch that meets conflicts while a wave's pods churn would
// otherwise reach client-go's default cap of 1000 s, and the wave would
// sit for minutes after the conflict cleared. Thirty seconds is the scale
// at which the gates themselves look again.
const (
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 30 * time.Second
)

// newRetryLimiter is the queue's limiter: the capped backoff per namespace,
// and client-go's overall bucket of 10 retries a second (burst 100), so an
// apiserver outage is not met with a storm from every namespace at once.
func newRetryLimiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryBaseDelay, retryMaxDelay),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
