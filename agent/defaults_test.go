package agent

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/meshwave/meshwave/canary"
)

// The Go defaults (DefaultConfig, which starts from canary.DefaultConfig)
// are the only source; the chart's values.yaml and the README's config
// reference repeat them for people to read, and must say the same.
func TestTheChartAndTheREADMEStateTheGoDefaults(t *testing.T) {
	values, err := os.ReadFile("../charts/meshwave/values.yaml")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	for _, p := range chartDisagreements(t, values) {
		t.Error("charts/meshwave/values.yaml: " + p)
	}
	for _, p := range readmeDisagreements(t, string(readme)) {
		t.Error("README.md, Config reference: " + p)
	}
}

func TestTheDefaultsCheckNamesEachDisagreement(t *testing.T) {
	t.Run("in values.yaml", func(t *testing.T) {
		got := chartDisagreements(t, []byte("image: {tag: x}\nconfig:\n  canarySize: 1\n  batchSize: 7\n  gates: {sync: {timeout: 3m, mode: grpc}}\n  maintenanceWindows: []\n"))
		assert.Equal(t, []string{
			`config.batchSize is 7; the Go default is 5`,
			`config.gates.sync.timeout is "3m0s"; the Go default is "2m0s"`,
		}, got)
		got = chartDisagreements(t, []byte("config:\n  batches: 3\n  gates: {metrics: {bakeTime: 1m, Window: 1m}}\n"))
		assert.Equal(t, []string{
			"config key batches: unknown key (keys match exactly, case included)",
			"config key gates.metrics.Window: unknown key (keys match exactly, case included)",
		}, got)
	})
	t.Run("in the README", func(t *testing.T) {
		readme := "# x\n## Config reference\n\n| key | default | meaning |\n|---|---|---|\n" +
			"| `rootNamespace` | `istio-system` | |\n" +
			"| `readinessTimeout` | `10m` | |\n" +
			"| `retries` | 3 | |\n" +
			"| `gates.sync.{timeout,interval}` | `2m` | |\n" +
			"| `gates.metrics.errorRate` | on; threshold 0.05, minRequests 20, mode threshold, sequential.alpha 0.05, sequential.tolerance 0.5, " +
			"sequential.floor 0.005, sequential.step 15s, sequential.history 10m, sequential.maxDuration 15m | |\n" +
			"| `maintenanceWindows[]` | empty: always open | |\n" +
			"## Metrics reference\n| `workers` | 4 | outside the section |\n"
		got := readmeDisagreements(t, readme)
		require.GreaterOrEqual(t, len(got), 5)
		assert.Equal(t, []string{
			"`gates.metrics.errorRate.minRequests` is 20; the Go default is 50",
			"`gates.metrics.errorRate.tolerance`: no default stated; the Go default is 1",
			"`gates.sync.{timeout,interval}`: 1 defaults for 2 keys",
			"`readinessTimeout` is \"10m0s\"; the Go default is \"5m0s\"",
			"`retries`: not a setting of the agent",
		}, got[:5])
		assert.Contains(t, got, "`workers`: a setting with a Go default and no row")
		assert.Contains(t, got, "`gates.sync.timeout`: a setting with a Go default and no row")
		assert.NotContains(t, got, "`maintenanceWindows`: a setting with a Go default and no row")
	})
}

func TestTheAgentsDefaultsAreThePhaseMachines(t *testing.T) {
	want := canary.DefaultConfig()
	// The phase machine has no bake time of its own: the agent's gates
	// set it.
	want.BakeTime = DefaultConfig().Gates.Metrics.BakeTime.D()
	assert.Equal(t, want, DefaultConfig().Decisions())
}

// chartDisagreements lists where the config block of a values.yaml
// disagrees with the Go defaults: a key or value the agent refuses, or a
// value other than the default. The chart may leave a setting out (the
// agent's default then applies), but what it states must be the default.
func chartDisagreements(t *testing.T, values []byte) []string {
	t.Helper()
	var doc struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, yaml.Unmarshal(values, &doc))
	block, err := yaml.Marshal(doc.Config)
	require.NoError(t, err)
	cfg, err := ParseConfig(block)
	if err != nil {
		return strings.Split(err.Error(), "\n")
	}
	stated, read, def := settings(t, doc.Config), settings(t, cfg), settings(t, DefaultConfig())
	var out []string
	for _, k := range slices.Sorted(maps.Keys(stated)) {
		if !reflect.DeepEqual(read[k], def[k]) {
			out = append(out, fmt.Sprintf("config.%s is %s; the Go default is %s", k, jsonText(read[k]), jsonText(def[k])))
		}
	}
	return out
}

// readmeDisagreements lists where the table of the README's "Config
// reference" disagrees with the Go defaults: a row for a key the agent
// does not know, a default other than the Go one, or a setting with a Go
// default and no row.
//
// A row names one key, a list (`maintenanceWindows[]`), or several keys
// of one mapping (`gates.sync.{timeout,interval}`) with their defaults
// separated by ", ". A default is a value (`5m`, 1, `true`), "empty" (the
// empty string or no list), one of the phrases below, or for a built-in
// check "on" or "off", then "; " and each field with its value.
func readmeDisagreements(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Config reference\n")
	require.True(t, ok, "the README has a Config reference section")
	section, _, _ = strings.Cut(section, "\n## ")
	def := settings(t, DefaultConfig())
	// The defaults the README names in words.
	phrases := map[string]any{
		"the runbook's keys": canary.DefaultPersistAnnotations,
		"root namespace":     "", // leaderElection.namespace: empty is the root namespace
		"Prometheus's own":   promconfig.DefaultHTTPClientConfig,
		"none":               nil,
	}
	var out []string
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		key, text := strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[1]), "`"), "[]"), strings.TrimSpace(cells[2])
		keys, texts := []string{key}, []string{text}
		if prefix, names, ok := strings.Cut(key, ".{"); ok && strings.HasSuffix(names, "}") {
			keys = nil
			for _, n := range strings.Split(strings.TrimSuffix(names, "}"), ",") {
				keys = append(keys, prefix+"."+n)
			}
			if texts = strings.Split(text, ", "); len(texts) != len(keys) {
				out = append(out, fmt.Sprintf("%s: %d defaults for %d keys", strings.TrimSpace(cells[1]), len(texts), len(keys)))
				continue
			}
		}
		for i, k := range keys {
			rows = append(rows, k)
			out = append(out, stateDefault(t, k, texts[i], def, phrases)...)
		}
	}
	slices.Sort(out)
	for _, k := range slices.Sorted(maps.Keys(def)) {
		covered := slices.ContainsFunc(rows, func(r string) bool { return k == r || strings.HasPrefix(k, r+".") })
		if !covered {
			out = append(out, fmt.Sprintf("`%s`: a setting with a Go default and no row", k))
		}
	}
	return out
}

// stateDefault compares what the README says of key with the Go defaults
// under it.
func stateDefault(t *testing.T, key, text string, def map[string]any, phrases map[string]any) []string {
	t.Helper()
	goLeaves := map[string]any{}
	for k, v := range def {
		if k == key || strings.HasPrefix(k, key+".") {
			goLeaves[k] = v
		}
	}
	if len(goLeaves) == 0 {
		return []string{fmt.Sprintf("`%s`: not a setting of the agent", key)}
	}
	said := map[string]any{}
	enabled, fields, composite := strings.Cut(text, "; ")
	phrase, isPhrase := phrases[text]
	switch {
	case composite && (enabled == "on" || enabled == "off"):
		said[key+".enabled"] = enabled == "on"
		for _, f := range strings.Split(fields, ", ") {
			name, value, _ := strings.Cut(f, " ")
			value, _, _ = strings.Cut(value, " ") // a unit: "1000 ms"
			k := key + "." + name
			said[k] = readmeValue(value, def[k])
		}
	case isPhrase:
		for k, v := range settings(t, phrase) {
			said[strings.TrimSuffix(key+"."+k, ".")] = v
		}
	case text == "":
		// Nothing said: each setting below is a problem.
	case text == "empty" || strings.HasPrefix(text, "empty:"):
		// The empty string, or no list.
		said[key] = ""
		if v, ok := goLeaves[key]; ok && v == nil {
			said[key] = nil
		}
	default:
		said[key] = readmeValue(strings.Trim(text, "`"), goLeaves[key])
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(goLeaves)) {
		s, stated := said[k]
		switch {
		case !stated:
			out = append(out, fmt.Sprintf("`%s`: no default stated; the Go default is %s", k, jsonText(goLeaves[k])))
		case !reflect.DeepEqual(s, goLeaves[k]):
			out = append(out, fmt.Sprintf("`%s` is %s; the Go default is %s", k, jsonText(s), jsonText(goLeaves[k])))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(said)) {
		if _, known := goLeaves[k]; !known {
			out = append(out, fmt.Sprintf("`%s`: not a setting of the agent", k))
		}
	}
	return out
}

// readmeValue reads a default as the README writes it into the kind of
// JSON value the Go default is: a duration ("5m") as Duration writes it
// ("5m0s"), a number, true or false, or a string. Anything else stays the
// README's text, which then differs.
func readmeValue(text string, goValue any) any {
	switch g := goValue.(type) {
	case string:
		if _, err := time.ParseDuration(g); err == nil {
			if d, err := time.ParseDuration(text); err == nil {
				return d.String()
			}
		}
	case float64:
		if f, err := strconv.ParseFloat(text, 64); err == nil {
			return f
		}
	case bool:
		if text == "true" || text == "false" {
			return text == "true"
		}
	}
	return text
}

// settings flattens a configuration, as its JSON, into its settings by
// dotted key: a mapping is walked into; anything else, a list included,
// is one setting. An empty list is nil: `[]` and no list both mean none.
func settings(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var doc any
	require.NoError(t, json.Unmarshal(raw, &doc))
	out := map[string]any{}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, sub := range m {
				walk(strings.TrimPrefix(key+"."+k, "."), sub)
			}
			return
		}
		if l, ok := v.([]any); ok && len(l) == 0 {
			v = nil
		}
		out[key] = v
	}
	walk("", doc)
	return out
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
