package analysis

import (
	"strings"
	"testing"
)

// Any template text gets an answer or an error from UnscopedSelectors,
// never a panic, and each selector it names is one the text holds.
func FuzzUnscopedSelectors(f *testing.F) {
	for _, seed := range []string{
		`sum(rate(x{a="{{.Namespace}}"{{.Cluster}}}[{{.Window}}]{{.Offset}})) by (app)`,
		`x{a="}{\"` + "`" + `"} / on(a) group_left y[5m:1m] offset -1h unless {__name__=~"z"}`,
		`{{.Cluster}}{`, `sum by (`, `"unterminated`, `1e3 > bool .5`, `x{a='\'}'`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := UnscopedSelectors(text)
		if err != nil {
			return
		}
		for _, sel := range got {
			if sel == "" || strings.Contains(sel, scopeSentinel) && !strings.Contains(text, scopeSentinel[:8]) {
				t.Fatalf("%q: selector %q", text, sel)
			}
		}
	})
}
