// Package checkout finds the repository the tests, benchmarks and demo
// run from, whatever their working directory inside it: the e2e module's
// cached artifacts (e2e/.cache), the chart, hack/tools. It walks up from
// the working directory, since a binary built with -trimpath (as make
// test builds everything) keeps no source paths to start from.
package checkout

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// e2eModule is the module path whose go.mod marks the e2e directory.
const e2eModule = "github.com/meshwave/meshwave/e2e"

// Root is the repository's root directory: the parent of the first
// directory, from the working directory up, whose go.mod declares the e2e
// module, or the directory that holds such an e2e/ itself.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresE2E(filepath.Join(dir, "go.mod")) {
			return filepath.Dir(dir), nil
		}
		if declaresE2E(filepath.Join(dir, "e2e", "go.mod")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no meshwave checkout above the working directory (no e2e/go.mod of module " + e2eModule + ")")
		}
		dir = up
	}
}

// Path is Root joined with elem.
func Path(elem ...string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{root}, elem...)...), nil
}

// declaresE2E reports whether the go.mod at path declares the e2e module.
func declaresE2E(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == e2eModule
		}
	}
	return false
}
