package canary

import "time"

// Config holds the settings the decisions depend on. DefaultConfig holds
// their defaults, and WithDefaults is the one place they are filled in:
// every entry point that takes a Config or WaveSizes (Decide,
// WaveToVerify, MigrationEstimate, PlanNamespace, PlanWaves) calls it, and
// the agent's configuration file starts from DefaultConfig.
type Config struct {
	Sizes WaveSizes
	// Concurrency is how many namespaces migrate at once.
	Concurrency int
	// ReadinessTimeout bounds each workload's rollout; a workload's
	// meshwave.io/readiness-timeout overrides it (readinessTimeoutOf).
	ReadinessTimeout time.Duration
	// DelayBetweenWaves is the wait after a wave passes; zero is no wait.
	DelayBetweenWaves time.Duration
	// PersistAnnotations is the allow-list of pod-only settings copied into
	// templates; nil is DefaultPersistAnnotations, empty is none.
	PersistAnnotations []string
	// FailurePolicy applies when a gate fails.
	FailurePolicy FailurePolicy
	// MaxFailedPercent bounds the Continue policy.
	MaxFailedPercent float64
	// InconclusiveLimit is how many inconclusive results in a row are
	// retried before the namespace pauses.
	InconclusiveLimit int
	// PrecheckRetry is how soon a precheck that may fix itself (istiod not
	// ready yet) runs again.
	PrecheckRetry time.Duration
	// RequiredPasses is how many consecutive passes of the metric checks a
	// wave needs.
	RequiredPasses int
	// AnalysisInterval is the time between two runs of the metric checks.
	AnalysisInterval time.Duration
	// MetricChecks is true when the metric checks run, and BakeTime is how
	// long after a wave is up they start: the migration's estimate counts
	// them. Neither has a default here: the agent's configuration sets
	// both.
	MetricChecks bool
	BakeTime     time.Duration
	// StrictPrechecks turns the compatibility warnings into a block.
	StrictPrechecks bool
	// MaintenanceWindows are when a new wave may start; empty is always.
	MaintenanceWindows Windows
	// Fleet holds a namespace's waves until the ring before this
	// cluster's is done with it (fleet.go); zero for a cluster alone.
	Fleet Fleet
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
// DelayBetweenWaves, where zero means no delay, and MaxFailedPercent,
// where zero is the default. A wave size above MaxWaveSize becomes
// MaxWaveSize: a wave's members are listed in the status, which holds at
// most that many of them (the agent's configuration refuses more).
func (c Config) WithDefaults() Config {
	def := DefaultConfig()
	if c.Sizes.CanarySize <= 0 {
		c.Sizes.CanarySize = def.Sizes.CanarySize
	}
	if c.Sizes.BatchSize <= 0 {
		c.Sizes.BatchSize = def.Sizes.BatchSize
	}
	c.Sizes.CanarySize, c.Sizes.BatchSize = min(c.Sizes.CanarySize, MaxWaveSize), min(c.Sizes.BatchSize, MaxWaveSize)
	if c.Concurrency <= 0 {
		c.Concurrency = def.Concurrency
	}
	if c.ReadinessTimeout == 0 {
		c.ReadinessTimeout = def.ReadinessTimeout
	}
	if c.PrecheckRetry == 0 {
		c.PrecheckRetry = def.PrecheckRetry
	}
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
	if c.AnalysisInterval == 0 {
		c.AnalysisInterval = def.AnalysisInterval
	}
	return c
}

// readinessTimeoutOf is how long a workload has to roll out: its own
// meshwave.io/readiness-timeout when it has one, else the configured
// ReadinessTimeout.
func (c Config) readinessTimeoutOf(s WorkloadSettings) time.Duration {
	if s.ReadinessTimeout != 0 {
		return s.ReadinessTimeout
	}
	return c.ReadinessTimeout
}
