//go:build race

package canary

// raceDetector is true in a build with the race detector: the explorer
// skips it (see TestExplore).
const raceDetector = true
