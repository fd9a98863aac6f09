//go:build !race

package canary

// raceDetector is true in a build with the race detector: the explorer
// skips it (TestEveryEventSequenceKeepsTheInvariants).
const raceDetector = false
