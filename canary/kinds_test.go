package canary

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWorkloadIDsReadBack(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		name string
		id   string
	}{
		{KindDeployment, "api", "api"},
		{KindStatefulSet, "db", "StatefulSet/db"},
		{KindDaemonSet, "node-agent", "DaemonSet/node-agent"},
	} {
		id := WorkloadID(tc.kind, tc.name)
		assert.Equal(t, tc.id, id)
		kind, name, ok := SplitWorkloadID(id)
		assert.True(t, ok, id)
		assert.Equal(t, tc.kind, kind)
		assert.Equal(t, tc.name, name)
		assert.Equal(t, tc.name, Workload{Name: id, Kind: tc.kind}.ObjectName())
	}
	for _, bad := range []string{"", "Job/x", "statefulset/db", "StatefulSet/", "StatefulSet/a/b", "Deployment/api", "API"} {
		_, _, ok := SplitWorkloadID(bad)
		assert.False(t, ok, bad)
	}
}
