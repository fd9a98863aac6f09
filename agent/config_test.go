package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseConfigReadsValuesOverTheDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte("batchSize: 10\nreadinessTimeout: 90s\nfailurePolicy: Pause\n"))
	require.NoError(t, err)
	assert.Equal(t, 10, cfg.BatchSize)
	assert.Equal(t, 90*time.Second, cfg.ReadinessTimeout.D())
	assert.Equal(t, "Pause", cfg.FailurePolicy)
	assert.Equal(t, 1, cfg.CanarySize, "untouched keys keep their default")
	assert.Equal(t, 30*time.Second, cfg.DelayBetweenWaves.D())
}

func TestParseConfigRejectsBadValues(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"an unknown key", "batches: 3\n", `config: error unmarshaling JSON: while decoding JSON: json: unknown field "batches"`},
		{"a duration that is not one", "readinessTimeout: 5 minutes\n", `config: error unmarshaling JSON: while decoding JSON: "5 minutes" is not a Go duration such as "90s" or "5m"`},
		{"a zero batch", "batchSize: 0\n", "config key batchSize: 0 is not an integer from 1 to 500"},
		{"an unknown policy", "failurePolicy: Retry\n", `config key failurePolicy: "Retry" is not one of "RollbackWave", "Pause" or "Continue"`},
		{"msname in the allow-list", "persistAnnotations: [msname]\n", `config key persistAnnotations[0]: "msname" is not allowed: the msname labels must never be written into templates`},
		{"a percentage over 100", "maxFailedPercent: 150\n", "config key maxFailedPercent: 150 is not a percentage from 0 to 100"},
		{"a lease shorter than its renew deadline", "leaderElection: {enabled: true, leaseName: x, leaseDuration: 5s, renewDeadline: 10s, retryPeriod: 2s}\n",
			"config key leaderElection: leaseDuration 5s, renewDeadline 10s, retryPeriod 2s is not ordered leaseDuration > renewDeadline > retryPeriod > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			require.Error(t, err)
			assert.Equal(t, tt.err, err.Error())
		})
	}
}

func TestTheDefaultConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
}
