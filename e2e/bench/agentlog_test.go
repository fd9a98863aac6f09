package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLogLineReadsKlogsStructuredText(t *testing.T) {
	line, err := parseLogLine(`I1203 08:20:01.123456   12345 act.go:188] "Writing the namespace" namespace="react-001" phase="Migrating" wave=1 waveState="" fenceOnly=false`, 2026)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 12, 3, 8, 20, 1, 123456000, time.Local), line.at)
	assert.Equal(t, "Writing the namespace", line.msg)
	assert.Equal(t, map[string]string{"namespace": "react-001", "phase": "Migrating", "wave": "1", "waveState": "", "fenceOnly": "false"}, line.kv)

	line, err = parseLogLine(`I0101 00:00:00.000001       7 controller.go:470] "Evaluating the wave's gates" namespace="a b" readyWorkloads="svc-001,svc-\"2\""`, 2027)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 1000, time.Local), line.at)
	assert.Equal(t, map[string]string{"namespace": "a b", "readyWorkloads": `svc-001,svc-"2"`}, line.kv)

	for _, bad := range []string{
		`some other output`,
		`I1203 08:20:01.123456   12345 act.go:188] not quoted`,
		`I1203 08:20:01.123456   12345 act.go:188] "msg" key="unterminated`,
		`I1203 08:20:01.123456   12345 act.go:188] "msg" novalue`,
	} {
		_, err := parseLogLine(bad, 2026)
		assert.Error(t, err, bad)
	}
}
