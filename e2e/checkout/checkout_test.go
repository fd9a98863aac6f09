package checkout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheRootIsFoundFromAnyDirectoryInsideTheCheckout(t *testing.T) {
	root, err := Root()
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(root, "e2e", "go.mod"))
	assert.FileExists(t, filepath.Join(root, "charts", "meshwave", "Chart.yaml"))
	for _, dir := range []string{root, filepath.Join(root, "e2e"), filepath.Join(root, "hack", "tools")} {
		t.Chdir(dir)
		got, err := Root()
		require.NoError(t, err)
		assert.Equal(t, root, got, "from %s", dir)
	}
}

func TestOutsideACheckoutTheRootIsAnError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n"), 0o644))
	t.Chdir(dir)
	_, err := Root()
	assert.ErrorContains(t, err, "no meshwave checkout above the working directory")
}
