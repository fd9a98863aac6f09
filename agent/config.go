package agent

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"
	yamlv2 "go.yaml.in/yaml/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/meshwave/meshwave/canary"
)

// Duration is a time.Duration written as a Go duration string ("90s",
// "5m") in the config file.
type Duration time.Duration

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("%s is not a quoted Go duration", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a Go duration such as \"90s\" or \"5m\"", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is the agent's configuration file. Every field has a default; a
// file needs only what it changes.
type Config struct {
	// RootNamespace is the mesh's root namespace, where istiod runs.
	RootNamespace string `json:"rootNamespace"`
	// Concurrency is how many namespaces migrate at once.
	Concurrency int `json:"concurrency"`
	// CanarySize is the number of workloads in a namespace's first wave.
	CanarySize int `json:"canarySize"`
	// BatchSize is the largest number of workloads in a later wave; they
	// restart concurrently.
	BatchSize int `json:"batchSize"`
	// ReadinessTimeout bounds each workload's rollout; a Deployment's
	// meshwave.io/readiness-timeout overrides it.
	ReadinessTimeout Duration `json:"readinessTimeout"`
	// DelayBetweenWaves is the wait after a wave passes.
	DelayBetweenWaves Duration `json:"delayBetweenWaves"`
	// PersistAnnotations are the pod-only settings written into templates.
	PersistAnnotations []string `json:"persistAnnotations"`
	// FailurePolicy is RollbackWave, Pause or Continue; a namespace's
	// meshwave.io/failure-policy overrides it.
	FailurePolicy string `json:"failurePolicy"`
	// MaxFailedPercent bounds the Continue policy.
	MaxFailedPercent float64 `json:"maxFailedPercent"`
	// InconclusiveLimit is how many inconclusive gate results in a row
	// are retried before the namespace pauses.
	InconclusiveLimit int `json:"inconclusiveLimit"`
	// Workers is the number of namespaces reconciled in parallel.
	Workers int `json:"workers"`
	// ResyncPeriod re-lists the informers' caches; 0 never does.
	ResyncPeriod Duration `json:"resyncPeriod"`
	// LeaderElection configures the lease that makes one replica active.
	LeaderElection LeaderElection `json:"leaderElection"`
	// Gates configures the checks after each wave.
	Gates Gates `json:"gates"`
	// Prechecks configures the checks before the first wave.
	Prechecks Prechecks `json:"prechecks"`
	// MaintenanceWindows are when a wave may start; empty is always. A
	// namespace's meshwave.io/maintenance-window narrows them.
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows"`
	// Fleet places this cluster in rings of clusters (fleetconfig.go).
	Fleet FleetConfig `json:"fleet"`
}

// Prechecks configures the checks before a namespace's first wave.
type Prechecks struct {
	// Strict turns the compatibility warnings (EnvoyFilters, Telemetries,
	// Sail's grace period) into a block.
	Strict bool `json:"strict"`
}

// MaintenanceWindow opens at each time of a five-field cron schedule, read
// in an IANA time zone (default UTC), for a duration.
type MaintenanceWindow struct {
	Schedule string   `json:"schedule"`
	Duration Duration `json:"duration"`
	TimeZone string   `json:"timeZone"`
}

// LeaderElection configures the leader lease.
type LeaderElection struct {
	Enabled bool `json:"enabled"`
	// Namespace holds the Lease; default RootNamespace.
	Namespace     string   `json:"namespace"`
	LeaseName     string   `json:"leaseName"`
	LeaseDuration Duration `json:"leaseDuration"`
	RenewDeadline Duration `json:"renewDeadline"`
	RetryPeriod   Duration `json:"retryPeriod"`
}

// DefaultConfig returns the configuration with every default filled in:
// the phase machine's own (canary.DefaultConfig) and the agent's.
func DefaultConfig() Config {
	def := canary.DefaultConfig()
	return Config{
		RootNamespace:      "istio-system",
		Concurrency:        def.Concurrency,
		CanarySize:         def.Sizes.CanarySize,
		BatchSize:          def.Sizes.BatchSize,
		ReadinessTimeout:   Duration(def.ReadinessTimeout),
		DelayBetweenWaves:  Duration(def.DelayBetweenWaves),
		PersistAnnotations: append([]string(nil), def.PersistAnnotations...),
		FailurePolicy:      string(def.FailurePolicy),
		InconclusiveLimit:  def.InconclusiveLimit,
		Workers:            4,
		ResyncPeriod:       Duration(10 * time.Minute),
		LeaderElection: LeaderElection{
			Enabled:       true,
			LeaseName:     "meshwave",
			LeaseDuration: Duration(15 * time.Second),
			RenewDeadline: Duration(10 * time.Second),
			RetryPeriod:   Duration(2 * time.Second),
		},
		Gates: defaultGates(),
		Fleet: FleetConfig{Await: "namespace"},
	}
}

// LoadConfig reads a YAML config file over the defaults and validates it.
// Unknown keys are errors: a misspelt key silently ignored would leave a
// default in place that the author meant to change.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, cfg.Validate()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(raw)
}

// ParseConfig reads YAML over the defaults and validates the result. Keys
// match exactly, case included: encoding/json alone would take BatchSize
// for batchSize, and a key that is not meant is better refused than
// guessed. Every error names its key, the value and what was expected;
// values JSON cannot carry (NaN, infinities) are named before the YAML
// becomes JSON. gates.metrics.prometheus.http is decoded as Prometheus
// decodes its own configuration, with its YAML library in strict mode.
func ParseConfig(raw []byte) (Config, error) {
	cfg := DefaultConfig()
	var doc any
	if err := yamlv2.Unmarshal(raw, &doc); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if doc == nil {
		return cfg, cfg.Validate()
	}
	if _, ok := doc.(map[any]any); !ok {
		return cfg, errors.New("config: the file is not a mapping of keys to values")
	}
	if errs := checkValue(doc, reflect.TypeFor[Config](), ""); len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	http, hasHTTP, err := prometheusHTTP(doc)
	if err != nil {
		return cfg, err
	}
	js, err := yaml.YAMLToJSONStrict(raw) // a key set twice is an error
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	strict, err := kjson.UnmarshalStrict(js, &cfg)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	var errs []error
	for _, e := range strict {
		var fe kjson.FieldError
		if !errors.As(e, &fe) {
			errs = append(errs, fmt.Errorf("config: %w", e))
			continue
		}
		errs = append(errs, fmt.Errorf("config key %s: unknown key (keys match exactly, case included)", fe.FieldPath()))
	}
	if len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	if hasHTTP {
		cfg.Gates.Metrics.Prometheus.HTTP = http
	}
	cfg.applyFleetDefaults()
	return cfg, cfg.Validate()
}

// applyFleetDefaults fills the settings whose default is the fleet's:
// a fleet Prometheus's value of its cluster label is fleet.cluster.
func (c *Config) applyFleetDefaults() {
	if p := &c.Gates.Metrics.Prometheus; p.ClusterLabel != "" && p.Cluster == "" {
		p.Cluster = c.Fleet.Cluster
	}
}

var (
	durationType   = reflect.TypeFor[Duration]()
	httpConfigType = reflect.TypeFor[promconfig.HTTPClientConfig]()
)

// checkValue walks a YAML value alongside the Go type it decodes into and
// names each value of the wrong kind with its key. Unknown keys are left
// to the JSON decoder, which names them; their values are still checked
// for NaN and infinities, which JSON cannot hold.
func checkValue(v any, t reflect.Type, key string) []error {
	if v == nil {
		return nil // null keeps the default
	}
	bad := func(expected string) []error {
		return []error{fmt.Errorf("config key %s: %s is not %s", key, show(v), expected)}
	}
	switch t {
	case durationType:
		if s, ok := v.(string); ok {
			if _, err := time.ParseDuration(s); err == nil {
				return nil
			}
		}
		return bad(`a Go duration such as "90s" or "5m"`)
	case httpConfigType:
		return checkFinite(v, key)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[any]any)
		if !ok {
			return bad("a mapping of keys to values")
		}
		fields := jsonFields(t)
		var errs []error
		for _, k := range slices.SortedFunc(maps.Keys(m), func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
			sub := fmt.Sprint(k)
			if key != "" {
				sub = key + "." + sub
			}
			name, _ := k.(string)
			if f, known := fields[name]; known {
				errs = append(errs, checkValue(m[k], f, sub)...)
			} else {
				errs = append(errs, checkFinite(m[k], sub)...)
			}
		}
		return errs
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			return bad("a list")
		}
		var errs []error
		for i, e := range l {
			errs = append(errs, checkValue(e, t.Elem(), fmt.Sprintf("%s[%d]", key, i))...)
		}
		return errs
	case reflect.String:
		if _, ok := v.(string); !ok {
			return bad("a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad("true or false")
		}
	case reflect.Int:
		switch n := v.(type) {
		case int:
		case int64:
			if n != int64(int(n)) {
				return bad("an integer")
			}
		default:
			return bad("an integer")
		}
	case reflect.Float64:
		switch n := v.(type) {
		case int, int64, uint64:
		case float64:
			if math.IsNaN(n) || math.IsInf(n, 0) {
				return bad("a finite number")
			}
		default:
			return bad("a number")
		}
	}
	return nil
}

// checkFinite names any NaN or infinity under v.
func checkFinite(v any, key string) []error {
	switch n := v.(type) {
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return []error{fmt.Errorf("config key %s: %s is not a finite number", key, show(n))}
		}
	case map[any]any:
		var errs []error
		for _, k := range slices.SortedFunc(maps.Keys(n), func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) }) {
			errs = append(errs, checkFinite(n[k], key+"."+fmt.Sprint(k))...)
		}
		return errs
	case []any:
		var errs []error
		for i, e := range n {
			errs = append(errs, checkFinite(e, fmt.Sprintf("%s[%d]", key, i))...)
		}
		return errs
	}
	return nil
}

// jsonFields maps a struct's JSON keys to their field types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func show(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[any]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}

// prometheusHTTP decodes gates.metrics.prometheus.http strictly, with the
// YAML library and the rules Prometheus uses for its own configuration:
// the JSON decoder its type also offers ignores unknown keys and matches
// them in any case.
func prometheusHTTP(doc any) (promconfig.HTTPClientConfig, bool, error) {
	v := doc
	for _, k := range []string{"gates", "metrics", "prometheus", "http"} {
		m, ok := v.(map[any]any)
		if !ok {
			return promconfig.HTTPClientConfig{}, false, nil
		}
		if v, ok = m[k]; !ok || v == nil {
			return promconfig.HTTPClientConfig{}, false, nil
		}
	}
	raw, err := yamlv2.Marshal(v)
	if err != nil {
		return promconfig.HTTPClientConfig{}, false, fmt.Errorf("config key gates.metrics.prometheus.http: %w", err)
	}
	http := promconfig.DefaultHTTPClientConfig
	if err := yamlv2.UnmarshalStrict(raw, &http); err != nil {
		return promconfig.HTTPClientConfig{}, false, fmt.Errorf("config key gates.metrics.prometheus.http: %w", err)
	}
	return http, true, nil
}

// Validate checks every value and names each bad one with what was
// expected.
func (c Config) Validate() error {
	var errs []error
	bad := func(key string, value any, expected string) {
		errs = append(errs, fmt.Errorf("config key %s: %v is not %s", key, value, expected))
	}
	if msgs := validation.IsDNS1123Label(c.RootNamespace); len(msgs) > 0 {
		bad("rootNamespace", strconv.Quote(c.RootNamespace), "a namespace name")
	}
	if c.Concurrency < 1 {
		bad("concurrency", c.Concurrency, "a positive integer")
	}
	if c.CanarySize < 1 || c.CanarySize > canary.MaxWaveSize {
		bad("canarySize", c.CanarySize, fmt.Sprintf("an integer from 1 to %d", canary.MaxWaveSize))
	}
	if c.BatchSize < 1 || c.BatchSize > canary.MaxWaveSize {
		bad("batchSize", c.BatchSize, fmt.Sprintf("an integer from 1 to %d", canary.MaxWaveSize))
	}
	if c.ReadinessTimeout <= 0 {
		bad("readinessTimeout", c.ReadinessTimeout.D(), "a positive duration")
	}
	if c.DelayBetweenWaves < 0 {
		bad("delayBetweenWaves", c.DelayBetweenWaves.D(), "a duration of zero or more")
	}
	for i, k := range c.PersistAnnotations {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			bad(fmt.Sprintf("persistAnnotations[%d]", i), strconv.Quote(k), "an annotation key ("+strings.Join(msgs, "; ")+")")
		}
		if k == "msname" || k == "asm.cpaas.io/msname" {
			bad(fmt.Sprintf("persistAnnotations[%d]", i), strconv.Quote(k), "allowed: the msname labels must never be written into templates")
		}
	}
	if _, ok := canary.ParseFailurePolicy(c.FailurePolicy); !ok {
		bad("failurePolicy", strconv.Quote(c.FailurePolicy), `one of "RollbackWave", "Pause" or "Continue"`)
	}
	if c.MaxFailedPercent < 0 || c.MaxFailedPercent > 100 {
		bad("maxFailedPercent", c.MaxFailedPercent, "a percentage from 0 to 100")
	}
	if c.InconclusiveLimit < 1 {
		bad("inconclusiveLimit", c.InconclusiveLimit, "a positive integer")
	}
	if c.Workers < 1 || c.Workers > 64 {
		bad("workers", c.Workers, "an integer from 1 to 64")
	}
	if c.ResyncPeriod < 0 {
		bad("resyncPeriod", c.ResyncPeriod.D(), "a duration of zero or more")
	}
	if le := c.LeaderElection; le.Enabled {
		if le.Namespace != "" && len(validation.IsDNS1123Label(le.Namespace)) > 0 {
			bad("leaderElection.namespace", strconv.Quote(le.Namespace), "a namespace name")
		}
		if len(validation.IsDNS1123Subdomain(le.LeaseName)) > 0 {
			bad("leaderElection.leaseName", strconv.Quote(le.LeaseName), "a Lease name")
		}
		if le.RetryPeriod <= 0 || le.RenewDeadline <= le.RetryPeriod || le.LeaseDuration <= le.RenewDeadline {
			bad("leaderElection", fmt.Sprintf("leaseDuration %s, renewDeadline %s, retryPeriod %s", le.LeaseDuration.D(), le.RenewDeadline.D(), le.RetryPeriod.D()),
				"ordered leaseDuration > renewDeadline > retryPeriod > 0")
		}
	}
	for i, w := range c.MaintenanceWindows {
		if _, err := canary.NewWindow(w.Schedule, w.Duration.D(), w.TimeZone); err != nil {
			var we *canary.WindowError
			if errors.As(err, &we) {
				errs = append(errs, fmt.Errorf("config key maintenanceWindows[%d].%s: %s is not %s", i, we.Field, strconv.Quote(we.Value), we.Expected))
				continue
			}
			errs = append(errs, fmt.Errorf("config key maintenanceWindows[%d]: %w", i, err))
		}
	}
	errs = append(errs, c.Gates.validate()...)
	errs = append(errs, c.Fleet.validate()...)
	if c.Fleet.SoakAlerts {
		switch p := c.Gates.Metrics.Prometheus; {
		case len(c.Fleet.Rings) == 0:
			errs = append(errs, errors.New("config key fleet.soakAlerts: true without fleet.rings: there is no ring to soak"))
		case p.URL == "":
			errs = append(errs, errors.New("config key fleet.soakAlerts: true, but gates.metrics.prometheus.url is empty: the alerts are read from the fleet's Prometheus"))
		case p.ClusterLabel == "":
			errs = append(errs, errors.New("config key fleet.soakAlerts: true, but gates.metrics.prometheus.clusterLabel is empty: the alerts of another cluster's namespace are told apart by it"))
		}
	}
	return errors.Join(errs...)
}

// Windows returns the maintenance windows, validated by Validate.
func (c Config) Windows() canary.Windows {
	var out canary.Windows
	for _, w := range c.MaintenanceWindows {
		if win, err := canary.NewWindow(w.Schedule, w.Duration.D(), w.TimeZone); err == nil {
			out = append(out, win)
		}
	}
	return out
}

// Decisions returns the part of the configuration the phase machine uses.
func (c Config) Decisions() canary.Config {
	policy, _ := canary.ParseFailurePolicy(c.FailurePolicy)
	return canary.Config{
		MaintenanceWindows: c.Windows(),
		Sizes:              canary.WaveSizes{CanarySize: c.CanarySize, BatchSize: c.BatchSize},
		Concurrency:        c.Concurrency,
		ReadinessTimeout:   c.ReadinessTimeout.D(),
		DelayBetweenWaves:  c.DelayBetweenWaves.D(),
		PersistAnnotations: c.PersistAnnotations,
		FailurePolicy:      policy,
		MaxFailedPercent:   c.MaxFailedPercent,
		InconclusiveLimit:  c.InconclusiveLimit,
		RequiredPasses:     c.Gates.Metrics.RequiredPasses,
		AnalysisInterval:   c.Gates.Metrics.Interval.D(),
		MetricChecks:       c.Gates.Metrics.Prometheus.URL != "",
		BakeTime:           c.Gates.Metrics.BakeTime.D(),
		StrictPrechecks:    c.Prechecks.Strict,
		Fleet:              c.Fleet.decisions(),
	}.WithDefaults()
}
