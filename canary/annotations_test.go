package canary

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseWorkload(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want WorkloadSettings
		errs []string
	}{
		{"no annotations give the defaults", nil, WorkloadSettings{Wave: 100}, nil},
		{"valid values are read", map[string]string{AnnotationWave: "0", AnnotationSkip: "true", AnnotationReadinessTimeout: "90s"},
			WorkloadSettings{Wave: 0, Skip: true, ReadinessTimeout: 90 * time.Second}, nil},
		{"a wave that is not a number is named with its value", map[string]string{AnnotationWave: "abc"}, WorkloadSettings{Wave: 100},
			[]string{`meshwave.io/wave on deployment shop/cart: "abc" is not a non-negative integer`}},
		{"a negative wave is rejected", map[string]string{AnnotationWave: "-1"}, WorkloadSettings{Wave: 100},
			[]string{`meshwave.io/wave on deployment shop/cart: "-1" is not a non-negative integer`}},
		{"skip accepts only true or false", map[string]string{AnnotationSkip: "yes"}, WorkloadSettings{Wave: 100},
			[]string{`meshwave.io/skip on deployment shop/cart: "yes" is not "true" or "false"`}},
		{"a readiness timeout must be a positive Go duration", map[string]string{AnnotationReadinessTimeout: "5 minutes"}, WorkloadSettings{Wave: 100},
			[]string{`meshwave.io/readiness-timeout on deployment shop/cart: "5 minutes" is not a positive Go duration such as "90s" or "10m"`}},
		{"a zero readiness timeout is rejected", map[string]string{AnnotationReadinessTimeout: "0s"}, WorkloadSettings{Wave: 100},
			[]string{`meshwave.io/readiness-timeout on deployment shop/cart: "0s" is not a positive Go duration such as "90s" or "10m"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := ParseWorkload("shop", "cart", tt.ann)
			assert.Equal(t, tt.want, got)
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			assert.Equal(t, tt.errs, msgs)
		})
	}
}

func TestParseNamespace(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want NamespaceSettings
		errs []string
	}{
		{"defaults", map[string]string{AnnotationTargetRevision: "1-26"}, NamespaceSettings{Target: "1-26", Priority: 100}, nil},
		{"every key is read", map[string]string{AnnotationTargetRevision: "canary", AnnotationPriority: "-5", AnnotationPaused: "true", AnnotationRollback: "all", AnnotationFailurePolicy: "Continue"},
			NamespaceSettings{Target: "canary", Priority: -5, Paused: true, Rollback: RollbackAll, FailurePolicy: PolicyContinue}, nil},
		{"an empty target is rejected", map[string]string{AnnotationTargetRevision: ""}, NamespaceSettings{Priority: 100},
			[]string{`meshwave.io/target-revision on namespace shop: "" is not a revision or tag name (a non-empty label value)`}},
		{"a target that cannot be a label value is rejected", map[string]string{AnnotationTargetRevision: "1.26/x"}, NamespaceSettings{Target: "1.26/x", Priority: 100},
			[]string{`meshwave.io/target-revision on namespace shop: "1.26/x" is not a revision or tag name (a non-empty label value)`}},
		{"every bad value is reported, not only the first", map[string]string{AnnotationPriority: "high", AnnotationPaused: "1", AnnotationRollback: "everything", AnnotationFailurePolicy: "Retry"},
			NamespaceSettings{Priority: 100},
			[]string{
				`meshwave.io/priority on namespace shop: "high" is not an integer between -1000000 and 1000000`,
				`meshwave.io/paused on namespace shop: "1" is not "true" or "false"`,
				`meshwave.io/rollback on namespace shop: "everything" is not "wave" or "all"`,
				`meshwave.io/failure-policy on namespace shop: "Retry" is not one of "RollbackWave", "Pause" or "Continue"`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := ParseNamespace("shop", tt.ann)
			assert.Equal(t, tt.want, got)
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			assert.Equal(t, tt.errs, msgs)
		})
	}
}
