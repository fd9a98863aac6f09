package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	testVersion  = "0.0.0-test.1"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

func testOptions(output string) Options {
	return Options{
		Source:     "../../..",
		Version:    testVersion,
		Revision:   testRevision,
		Repository: "ghcr.io/meshwave/meshwave",
		SourceURL:  "https://github.com/meshwave/meshwave",
		Arch:       runtime.GOARCH,
		Output:     output,
	}
}

var built struct {
	once   sync.Once
	dir    string
	path   string
	digest v1.Hash
	err    error
}

// builtImage builds the image once for every test in the package, as make
// image does, and returns the tarball and the digest Build reported.
func builtImage(t *testing.T) (string, v1.Hash) {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "meshwave-image-test-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "meshwave-image.tar")
		built.digest, built.err = Build(context.Background(), testOptions(built.path))
	})
	require.NoError(t, built.err)
	return built.path, built.digest
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func readImage(t *testing.T) v1.Image {
	t.Helper()
	path, _ := builtImage(t)
	img, err := tarball.ImageFromPath(path, nil)
	require.NoError(t, err)
	return img
}

// entry is what the image's filesystem holds at a path.
type entry struct {
	typ      byte
	mode     int64
	uid, gid int
	data     []byte
}

// filesystem flattens the image's layers, as a container runtime would.
func filesystem(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	fs := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		fs[hdr.Name] = entry{typ: hdr.Typeflag, mode: hdr.Mode, uid: hdr.Uid, gid: hdr.Gid, data: data}
	}
	return fs
}

func TestTheTarballHoldsTheImageBuildReported(t *testing.T) {
	path, digest := builtImage(t)
	img := readImage(t)
	got, err := img.Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, got)

	tagged, err := tarball.ImageFromPath(path, mustTag(t, "ghcr.io/meshwave/meshwave:"+testVersion))
	require.NoError(t, err, "the tarball names the image repository:version")
	taggedDigest, err := tagged.Digest()
	require.NoError(t, err)
	assert.Equal(t, digest, taggedDigest)
}

func TestTheImageRunsTheAgentAsNonRoot(t *testing.T) {
	cfg, err := readImage(t).ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, runtime.GOARCH, cfg.Architecture)
	assert.Equal(t, epoch, cfg.Created.UTC())
	assert.Equal(t, v1.Config{
		Entrypoint:   []string{"/meshwave"},
		Cmd:          []string{"run"},
		User:         "65532:65532",
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "meshwave",
			"org.opencontainers.image.description": "Moves Istio sidecar workloads between control-plane revisions in metrics-gated canary waves.",
			"org.opencontainers.image.version":     testVersion,
			"org.opencontainers.image.revision":    testRevision,
			"org.opencontainers.image.source":      "https://github.com/meshwave/meshwave",
		},
	}, cfg.Config)
	require.Len(t, cfg.History, 2)
	assert.Equal(t, "meshwave image: /meshwave, built from ./cmd/agent", cfg.History[1].CreatedBy)
}

func TestTheImageHoldsTheAgentCertificatesAndUserAndNothingElse(t *testing.T) {
	img := readImage(t)
	layers, err := img.Layers()
	require.NoError(t, err)
	assert.Len(t, layers, 2, "system files, then the binary")

	fs := filesystem(t, img) // the names of directories lose their trailing slash
	shape := map[string]entry{}
	for path, e := range fs {
		shape[path] = entry{typ: e.typ, mode: e.mode, uid: e.uid, gid: e.gid}
	}
	dir := func(mode int64, owner int) entry { return entry{typ: tar.TypeDir, mode: mode, uid: owner, gid: owner} }
	reg := func(mode int64) entry { return entry{typ: tar.TypeReg, mode: mode} }
	assert.Equal(t, map[string]entry{
		"etc":                               dir(0o755, 0),
		"etc/group":                         reg(0o644),
		"etc/passwd":                        reg(0o644),
		"etc/ssl":                           dir(0o755, 0),
		"etc/ssl/certs":                     dir(0o755, 0),
		"etc/ssl/certs/ca-certificates.crt": reg(0o644),
		"home":                              dir(0o755, 0),
		"home/nonroot":                      dir(0o700, 65532),
		"tmp":                               dir(0o1777, 0),
		"meshwave":                          reg(0o755),
	}, shape)
	assert.NotContains(t, fs, "bin/sh", "no shell")

	assert.Equal(t, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		string(fs["etc/passwd"].data))
	assert.Equal(t, "root:x:0:\nnonroot:x:65532:\n", string(fs["etc/group"].data))

	want, err := caBundle("")
	require.NoError(t, err)
	assert.Equal(t, want, fs["etc/ssl/certs/ca-certificates.crt"].data)
	n, err := countCertificates(fs["etc/ssl/certs/ca-certificates.crt"].data)
	require.NoError(t, err)
	assert.Greater(t, n, 100, "the NSS roots: about 150 in 2026")
}

func TestTheImagesBinaryIsStaticAndReportsItsVersion(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary is a linux binary")
	}
	bin := filepath.Join(t.TempDir(), "meshwave")
	require.NoError(t, os.WriteFile(bin, filesystem(t, readImage(t))["meshwave"].data, 0o755))

	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "a static binary names no dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs)

	out, err := exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, fmt.Sprintf("meshwave %s (revision %s, %s linux/%s)\n", testVersion, testRevision, runtime.Version(), runtime.GOARCH), string(out))

	out, err = exec.Command(bin, "run", "-h").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "usage: meshwave run [flags]\n\nflags:\n  -config string\n")
}

func TestTheTarballPushesAsTheImageItHolds(t *testing.T) {
	path, digest := builtImage(t)
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref := strings.TrimPrefix(reg.URL, "http://") + "/meshwave/meshwave:" + testVersion

	// What crane push does with a tarball.
	img, err := crane.Load(path)
	require.NoError(t, err)
	require.NoError(t, crane.Push(img, ref))

	pushed, err := crane.Digest(ref)
	require.NoError(t, err)
	assert.Equal(t, digest.String(), pushed)
}

func TestTwoBuildsOfTheSameSourcesAreTheSameImage(t *testing.T) {
	first, digest := builtImage(t)
	second := filepath.Join(t.TempDir(), "again.tar")
	again, err := Build(context.Background(), testOptions(second))
	require.NoError(t, err)
	assert.Equal(t, digest, again)
	assert.Equal(t, fileSHA256(t, first), fileSHA256(t, second), "the tarballs are byte for byte the same")
}

func TestBadOptionsAreRefusedBeforeAnythingIsBuilt(t *testing.T) {
	o := testOptions(filepath.Join(t.TempDir(), "never.tar"))
	o.Version, o.Source, o.Repository = "1.0.0+build.1", "", "ghcr.io/Meshwave/meshwave"
	_, err := Build(context.Background(), o)
	require.Error(t, err)
	assert.Equal(t, `-source is required
-version "1.0.0+build.1" cannot be an image tag: up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'
-repository "ghcr.io/Meshwave/meshwave": repository can only contain the characters `+
		"`abcdefghijklmnopqrstuvwxyz0123456789_-./`: Meshwave/meshwave", err.Error())
	assert.NoFileExists(t, o.Output)

	for source, want := range map[string]string{
		"../../../e2e": `-source %[1]s is not the meshwave module: its go.mod does not start with "module github.com/meshwave/meshwave"`,
		t.TempDir():    "-source %[1]s is not the meshwave module: open %[1]s/go.mod: no such file or directory",
	} {
		o := testOptions(filepath.Join(t.TempDir(), "never.tar"))
		o.Source = source
		_, err := Build(context.Background(), o)
		assert.EqualError(t, err, fmt.Sprintf(want, source))
		assert.NoFileExists(t, o.Output)
	}
}

func TestACABundleMustHoldCertificates(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("# no certificates here\n"), 0o644))
	garbled := filepath.Join(dir, "garbled.pem")
	require.NoError(t, os.WriteFile(garbled, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644))

	for _, tc := range []struct{ path, err string }{
		{filepath.Join(dir, "missing.pem"), "CA bundle: open " + filepath.Join(dir, "missing.pem") + ": no such file or directory"},
		{empty, "CA bundle " + empty + " holds no PEM certificate"},
		{garbled, "CA bundle " + garbled + ": certificate 1: x509: malformed certificate"},
	} {
		_, err := caBundle(tc.path)
		assert.EqualError(t, err, tc.err)
	}

	// Two certificates of the pinned bundle, with a comment between them
	// as update-ca-certificates writes none but people do.
	pinned, err := caBundle("")
	require.NoError(t, err)
	first, rest := pem.Decode(pinned)
	second, _ := pem.Decode(rest)
	two := filepath.Join(dir, "two.pem")
	require.NoError(t, os.WriteFile(two, slices.Concat(pem.EncodeToMemory(first), []byte("# a comment\n"), pem.EncodeToMemory(second)), 0o644))
	data, err := caBundle(two)
	require.NoError(t, err)
	n, err := countCertificates(data)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

func TestThePinnedBundleLeavesOutRootsItCannotConstrain(t *testing.T) {
	data, err := caBundle("")
	require.NoError(t, err)
	n, err := countCertificates(data)
	require.NoError(t, err)
	total := 0
	for root := range bundle.Roots() {
		total++
		block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
		if root.Constraint != nil {
			assert.NotContains(t, string(data), string(block), "a root with a distrust-after date")
		} else {
			assert.Contains(t, string(data), string(block))
		}
	}
	assert.LessOrEqual(t, n, total)
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

func mustTag(t *testing.T, ref string) *name.Tag {
	t.Helper()
	tag, err := name.NewTag(ref, name.StrictValidation)
	require.NoError(t, err)
	return &tag
}
