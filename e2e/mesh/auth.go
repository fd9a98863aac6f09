package mesh

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// IstioCAAudience is the audience istiod requires of the service-account
// tokens that authenticate debug requests.
const IstioCAAudience = "istio-ca"

var errUnauthenticated = errors.New("unauthenticated")

// caller is who sent a debug request.
type caller struct {
	Namespace      string
	ServiceAccount string
}

// tokenAuthenticator checks bearer tokens with a TokenReview against the
// real apiserver, as istiod does, and caches answers briefly.
type tokenAuthenticator struct {
	client kubernetes.Interface
	mu     sync.Mutex
	cache  map[string]cachedReview
}

type cachedReview struct {
	caller  caller
	err     error
	expires time.Time
}

func newTokenAuthenticator(client kubernetes.Interface) *tokenAuthenticator {
	return &tokenAuthenticator{client: client, cache: map[string]cachedReview{}}
}

// authenticate returns the caller behind an "Authorization: Bearer" value.
func (a *tokenAuthenticator) authenticate(ctx context.Context, header string) (caller, error) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return caller{}, fmt.Errorf("%w: no bearer token", errUnauthenticated)
	}
	a.mu.Lock()
	if c, ok := a.cache[token]; ok && time.Now().Before(c.expires) {
		a.mu.Unlock()
		return c.caller, c.err
	}
	a.mu.Unlock()

	review, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{IstioCAAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return caller{}, fmt.Errorf("token review: %w", err)
	}
	var c caller
	switch {
	case !review.Status.Authenticated:
		err = fmt.Errorf("%w: %s", errUnauthenticated, firstNonEmpty(review.Status.Error, "token rejected"))
	default:
		// system:serviceaccount:<namespace>:<name>
		parts := strings.Split(review.Status.User.Username, ":")
		if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
			err = fmt.Errorf("%w: %s is not a service account", errUnauthenticated, review.Status.User.Username)
		} else {
			c = caller{Namespace: parts[2], ServiceAccount: parts[3]}
		}
	}
	a.mu.Lock()
	a.cache[token] = cachedReview{caller: c, err: err, expires: time.Now().Add(30 * time.Second)}
	a.mu.Unlock()
	return c, err
}
