package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/meshwave/meshwave/e2e/fixture"
	"github.com/meshwave/meshwave/e2e/mesh"
)

// tokenLifetime is how long each token the harness projects lives: an
// hour, the shortest a kubelet asks for.
const tokenLifetime = time.Hour

// projectToken writes a token of the meshwave service account, audience
// istio-ca, to path, and keeps it fresh as the kubelet keeps a projected
// service-account token volume: a new token replaces the file whole (a
// new file renamed over it) once 80% of the old one's life has passed. A
// scenario or benchmark that runs longer than a token lives reads a valid
// one throughout, as the agent in a pod does. It stops with the test.
func projectToken(f *fixture.Fixture, path string) {
	f.T.Helper()
	require.NoError(f.T, os.WriteFile(path, []byte(f.IstioCAToken("meshwave")), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.T.Cleanup(func() {
		cancel()
		<-done
	})
	mint := func(ctx context.Context) (time.Duration, error) {
		tr, err := f.Client.CoreV1().ServiceAccounts(f.World.Mesh.RootNamespace()).CreateToken(ctx, "meshwave", &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{mesh.IstioCAAudience}, ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second))},
		}, metav1.CreateOptions{})
		if err != nil {
			return 0, err
		}
		if err := replaceFile(path, []byte(tr.Status.Token)); err != nil {
			return 0, err
		}
		return time.Until(tr.Status.ExpirationTimestamp.Time), nil
	}
	go func() {
		defer close(done)
		keepFresh(ctx, tokenLifetime, 10*time.Second, mint)
	}()
}

// keepFresh calls mint once 80% of the current token's life has passed,
// first of life, then of the life mint reports, until ctx ends. A failed
// mint is tried again after retry.
func keepFresh(ctx context.Context, life, retry time.Duration, mint func(context.Context) (time.Duration, error)) {
	wait := life * 8 / 10
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		next, err := mint(ctx)
		switch {
		case err != nil:
			wait = retry
		default:
			wait = next * 8 / 10
		}
	}
}

// replaceFile writes data to a new file beside path and renames it over
// path, so that a reader sees the old contents or the new, never a part.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
