// Package canary decides, without touching a cluster, how workloads move
// between Istio revisions: it plans priority-ordered canary waves from a
// snapshot and runs the phase machine that advances, pauses or rolls back.
package canary
