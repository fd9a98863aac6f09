package harness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A token is replaced once 80% of its life has passed, each time by the
// life the new one reports; a failed mint is tried again soon.
func TestKeepFreshMintsAtFourFifthsOfEachLife(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	calls := 0
	mint := func(context.Context) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		at = append(at, time.Since(start))
		if calls == 2 {
			return 0, errors.New("apiserver away")
		}
		if calls == 4 {
			cancel()
		}
		return time.Second, nil
	}
	keepFresh(ctx, 2*time.Second, 10*time.Millisecond, mint)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, 4)
	// A timer never fires early, and may fire late on a busy machine: each
	// gap is at least what it should be, and the retry far shorter than a
	// token's four fifths.
	gaps := []time.Duration{at[0], at[1] - at[0], at[2] - at[1], at[3] - at[2]}
	assert.GreaterOrEqual(t, gaps[0], 1600*time.Millisecond, "80%% of the first token's 2 s")
	assert.GreaterOrEqual(t, gaps[1], 800*time.Millisecond, "80%% of the 1 s the new token lives")
	assert.GreaterOrEqual(t, gaps[2], 10*time.Millisecond, "the retry")
	assert.Less(t, gaps[2], 700*time.Millisecond, "a failed mint is tried again soon, not a token's life later")
	assert.GreaterOrEqual(t, gaps[3], 800*time.Millisecond)
}

func TestReplaceFileSwapsTheWholeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "istio-token")
	require.NoError(t, replaceFile(path, []byte("first")))
	require.NoError(t, replaceFile(path, []byte("second")))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "second", string(got))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind")
}
