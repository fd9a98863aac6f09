package agent

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshwave/meshwave/canary"
)

// meshwave plan shows, beside each namespace's target, the data-plane mode
// its waves move into, the sidecar step that comes first, and the waypoint
// a move to ambient puts the namespace behind.
func TestThePlanShowsEachNamespacesModeAndWaypoint(t *testing.T) {
	plan := Plan{
		Namespaces: []canary.NamespacePlan{
			{Namespace: "shop", Priority: 10, Target: "1-26", TargetRevision: "1-26", Ambient: true, Waypoint: "waypoint", Waves: [][]canary.Planned{{{Name: "web"}}}},
			{Namespace: "media", Priority: 5, Target: "stable", TargetRevision: "1-26", AmbientNext: true, Waves: [][]canary.Planned{{{Name: "cdn"}}}},
			{Namespace: "legacy", Priority: 1, Target: "1-26", TargetRevision: "1-26"},
		},
		Workloads: []PlannedWorkload{
			{Namespace: "shop", Wave: 1, Workload: "web", Changes: canary.IntoAmbient(canary.TemplateChanges{})},
			{Namespace: "media", Wave: 1, Workload: "cdn"},
		},
	}
	var out bytes.Buffer
	require.NoError(t, RenderPlan(&out, plan, "table"))
	assert.Equal(t, `NAMESPACE  PRIORITY  TARGET                                 WAVE  WORKLOAD  PATCH
shop       10        1-26 ambient behind waypoint waypoint  1     web       restartedAt, label istio.io/dataplane-mode=ambient, label sidecar.istio.io/inject=false
media      5         stable (1-26) sidecar, then ambient    1     cdn       restartedAt
legacy     1         1-26                                   -     -         nothing to move
`, out.String())
}
