// Command study compares the sequential metric check with today's
// threshold mode on simulated waves, the same streams for both, and
// writes the figures into bench/results.md and its plots beside it. It is
// deterministic: run r of every cell draws from seed r.
//
//	go run ./study -results ../../bench/results.md -commit $(git rev-parse --short HEAD)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	runs := flag.Int("runs", 10000, "runs of each scenario at each traffic level")
	results := flag.String("results", "bench/results.md", "the file whose study section is written; created when missing")
	commit := flag.String("commit", "unknown", "the commit the figures are of")
	flag.Parse()
	if err := write(*runs, *results, *commit); err != nil {
		fmt.Fprintln(os.Stderr, "study:", err)
		os.Exit(1)
	}
}

func write(runs int, results, commit string) error {
	if runs < 1 {
		return fmt.Errorf("-runs %d is not a positive number", runs)
	}
	res, err := study(runs)
	if err != nil {
		return err
	}
	var section bytes.Buffer
	report(&section, res, commit)
	old, err := os.ReadFile(results)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := plots(res, filepath.Join(filepath.Dir(results), "study")); err != nil {
		return err
	}
	return os.WriteFile(results, []byte(replaceSection(string(old), section.String())), 0o644)
}

// replaceSection puts section in place of the study's section of doc, or
// after its end when it has none.
func replaceSection(doc, section string) string {
	start := strings.Index(doc, sectionTitle)
	if start < 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n\n") {
			doc = strings.TrimRight(doc, "\n") + "\n\n"
		}
		return doc + section
	}
	end := len(doc)
	if next := strings.Index(doc[start+len(sectionTitle):], "\n## "); next >= 0 {
		end = start + len(sectionTitle) + next + 1
	}
	return doc[:start] + section + doc[end:]
}
