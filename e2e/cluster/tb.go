package cluster

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

// harnessTB satisfies the testing.TB subset that the apiserver test server
// wants, without needing a *testing.T, so that the same code path boots the
// world for tests and for the demo binary. Cleanups run in reverse order when
// the cluster stops.
type harnessTB struct {
	name string
	logf func(format string, args ...any)

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	tempDirs []string
}

func (t *harnessTB) Attr(key, value string) {}
func (t *harnessTB) Chdir(dir string)       { _ = os.Chdir(dir) }
func (t *harnessTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *harnessTB) Error(args ...any) { t.fail(fmt.Sprint(args...)) }
func (t *harnessTB) Errorf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
}
func (t *harnessTB) Fail() { t.fail("failed") }
func (t *harnessTB) FailNow() {
	t.fail("failed")
	runtime.Goexit()
}
func (t *harnessTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *harnessTB) Fatal(args ...any) {
	t.fail(fmt.Sprint(args...))
	runtime.Goexit()
}
func (t *harnessTB) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (t *harnessTB) Helper()                          {}
func (t *harnessTB) Log(args ...any)                  { t.logf("%s", fmt.Sprint(args...)) }
func (t *harnessTB) Logf(format string, args ...any)  { t.logf(format, args...) }
func (t *harnessTB) Name() string                     { return t.name }
func (t *harnessTB) Setenv(key, value string)         { _ = os.Setenv(key, value) }
func (t *harnessTB) Skip(args ...any)                 { t.Log(args...) }
func (t *harnessTB) Skipf(format string, args ...any) { t.Logf(format, args...) }
func (t *harnessTB) SkipNow()                         {}
func (t *harnessTB) Skipped() bool                    { return false }
func (t *harnessTB) TempDir() string {
	dir, err := os.MkdirTemp("", "meshwave-e2e-")
	if err != nil {
		panic(err)
	}
	t.mu.Lock()
	t.tempDirs = append(t.tempDirs, dir)
	t.mu.Unlock()
	return dir
}

func (t *harnessTB) fail(msg string) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	t.logf("harness error: %s", msg)
}

// runCleanups runs the registered cleanups, newest first, then removes the
// temporary directories.
func (t *harnessTB) runCleanups() {
	t.mu.Lock()
	cleanups := t.cleanups
	dirs := t.tempDirs
	t.cleanups, t.tempDirs = nil, nil
	t.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
