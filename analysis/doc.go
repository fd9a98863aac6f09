// Package analysis implements the gates a wave must pass: rollout readiness,
// the injected revision, xDS sync with istiod, and PromQL checks. A wave
// into ambient mode is checked in ambient terms: its pods enrolled and
// redirected (enrolment.go), the ztunnels of their nodes in sync
// (ztunnelsync.go), and no metric check passing on sidecar series
// (ambientmetrics.go).
package analysis
