package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
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

// ParseConfig reads YAML over the defaults and validates the result.
func ParseConfig(raw []byte) (Config, error) {
	cfg := DefaultConfig()
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	return cfg, cfg.Validate()
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
	if c.CanarySize < 1 {
		bad("canarySize", c.CanarySize, "a positive integer")
	}
	if c.BatchSize < 1 || c.BatchSize > 500 {
		bad("batchSize", c.BatchSize, "an integer from 1 to 500")
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
	errs = append(errs, c.Gates.validate()...)
	return errors.Join(errs...)
}

// Decisions returns the part of the configuration the phase machine uses.
func (c Config) Decisions() canary.Config {
	policy, _ := canary.ParseFailurePolicy(c.FailurePolicy)
	return canary.Config{
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
	}.WithDefaults()
}
