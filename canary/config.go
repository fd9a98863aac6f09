package canary

import "time"

// Config holds the settings the decisions depend on.
type Config struct {
	Sizes WaveSizes
	// Concurrency is how many namespaces migrate at once; default 1.
	Concurrency int
	// ReadinessTimeout bounds each workload's rollout; default 5m.
	ReadinessTimeout time.Duration
	// DelayBetweenWaves is the wait after a wave passes; default 30s.
	DelayBetweenWaves time.Duration
	// PersistAnnotations is the allow-list of pod-only settings copied into
	// templates; default DefaultPersistAnnotations.
	PersistAnnotations []string
	// FailurePolicy applies when a gate fails; default RollbackWave.
	FailurePolicy FailurePolicy
	// MaxFailedPercent bounds the Continue policy; default 0.
	MaxFailedPercent float64
	// InconclusiveLimit is how many inconclusive results in a row are
	// retried before the namespace pauses; default 3.
	InconclusiveLimit int
	// PrecheckRetry is how soon a precheck that may fix itself (istiod not
	// ready yet) runs again; default 30s.
	PrecheckRetry time.Duration
	// RequiredPasses is how many consecutive passes of the metric checks a
	// wave needs; default 2.
	RequiredPasses int
	// AnalysisInterval is the time between two runs of the metric checks;
	// default 30s.
	AnalysisInterval time.Duration
	// MetricChecks is true when the metric checks run, and BakeTime is how
	// long after a wave is up they start: the migration's estimate counts
	// them.
	MetricChecks bool
	BakeTime     time.Duration
	// StrictPrechecks turns the compatibility warnings into a block.
	StrictPrechecks bool
	// MaintenanceWindows are when a new wave may start; empty is always.
	MaintenanceWindows Windows
}

// DefaultConfig is the one set of defaults: the agent's configuration
// file starts from them.
func DefaultConfig() Config {
	return Config{
		Sizes:              WaveSizes{CanarySize: 1, BatchSize: 5},
		Concurrency:        1,
		ReadinessTimeout:   5 * time.Minute,
		DelayBetweenWaves:  30 * time.Second,
		PersistAnnotations: DefaultPersistAnnotations,
		FailurePolicy:      PolicyRollbackWave,
		InconclusiveLimit:  3,
		PrecheckRetry:      30 * time.Second,
		RequiredPasses:     2,
		AnalysisInterval:   30 * time.Second,
	}
}

// WithDefaults fills in the zero values from DefaultConfig, except
// DelayBetweenWaves, where zero means no delay.
func (c Config) WithDefaults() Config {
	def := DefaultConfig()
	c.Sizes = c.Sizes.withDefaults()
	if c.Concurrency <= 0 {
		c.Concurrency = def.Concurrency
	}
	c.ReadinessTimeout = durationOr(c.ReadinessTimeout, def.ReadinessTimeout)
	c.PrecheckRetry = durationOr(c.PrecheckRetry, def.PrecheckRetry)
	if c.PersistAnnotations == nil {
		c.PersistAnnotations = def.PersistAnnotations
	}
	if c.FailurePolicy == "" {
		c.FailurePolicy = def.FailurePolicy
	}
	if c.InconclusiveLimit <= 0 {
		c.InconclusiveLimit = def.InconclusiveLimit
	}
	if c.RequiredPasses <= 0 {
		c.RequiredPasses = def.RequiredPasses
	}
	c.AnalysisInterval = durationOr(c.AnalysisInterval, def.AnalysisInterval)
	return c
}
