// Package analysis implements the gates a wave must pass: rollout readiness,
// the injected revision, xDS sync with istiod, and PromQL checks.
package analysis
