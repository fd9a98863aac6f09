package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Where things are in the image, and who runs it. 65532 is the chart's
// podSecurityContext.runAsUser (and distroless's nonroot).
const (
	module       = "module github.com/meshwave/meshwave"
	binaryPath   = "meshwave"
	caBundlePath = "etc/ssl/certs/ca-certificates.crt"
	nonrootID    = 65532
	metricsPort  = "8080/tcp"
)

// epoch is the time of every file and of the image itself, so the same
// sources give the same bytes and the same digest: the Unix epoch, as ko
// and distroless use.
var epoch = time.Unix(0, 0).UTC()

// validTag is the OCI distribution spec's tag grammar. A semantic
// version's build metadata ("+build.1") does not fit it.
var validTag = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)

// Options say what to build.
type Options struct {
	// Source is the root of the meshwave module.
	Source string
	// Version is the chart's appVersion: stamped into the binary, and the
	// image's version label and tag.
	Version string
	// Revision is the git commit, stamped into the binary and the revision
	// label; empty leaves the label out and the binary says "unknown".
	Revision string
	// Repository is the image's name in the tarball, tagged Version.
	Repository string
	// SourceURL is the org.opencontainers.image.source label.
	SourceURL string
	// CABundle is a PEM file of CA certificates; empty takes the Mozilla
	// NSS roots of golang.org/x/crypto/x509roots/fallback, pinned in go.mod.
	CABundle string
	// Arch is the GOARCH of the binary and the image; linux is the only OS.
	Arch string
	// Output is the tarball to write.
	Output string
}

func (o Options) validate() error {
	var errs []error
	for _, f := range []struct{ flag, value string }{
		{"-source", o.Source}, {"-version", o.Version}, {"-repository", o.Repository},
		{"-source-url", o.SourceURL}, {"-arch", o.Arch}, {"-o", o.Output},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.flag))
		}
	}
	if o.Version != "" && !validTag.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("-version %q cannot be an image tag: up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'", o.Version))
	}
	if o.Repository != "" {
		if _, err := name.NewRepository(o.Repository, name.StrictValidation); err != nil {
			errs = append(errs, fmt.Errorf("-repository %q: %w", o.Repository, err))
		}
	}
	return errors.Join(errs...)
}

// Build compiles the agent and writes its image as a tarball that docker
// load and crane push read. It returns the image's digest.
func Build(ctx context.Context, o Options) (v1.Hash, error) {
	if err := o.validate(); err != nil {
		return v1.Hash{}, err
	}
	if err := checkSource(o.Source); err != nil {
		return v1.Hash{}, err
	}
	ca, err := caBundle(o.CABundle)
	if err != nil {
		return v1.Hash{}, err
	}
	tmp, err := os.MkdirTemp("", "meshwave-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(tmp)
	bin, err := compile(ctx, o, filepath.Join(tmp, "meshwave"))
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := Image(o, ca, bin)
	if err != nil {
		return v1.Hash{}, err
	}
	tag, err := name.NewTag(o.Repository+":"+o.Version, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.MkdirAll(filepath.Dir(o.Output), 0o755); err != nil {
		return v1.Hash{}, err
	}
	if err := tarball.WriteToFile(o.Output, tag, img); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", o.Output, err)
	}
	return img.Digest()
}

// checkSource makes sure dir is the root of the meshwave module, so that a
// wrong -source says so rather than failing in go build.
func checkSource(dir string) error {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return fmt.Errorf("-source %s is not the meshwave module: %w", dir, err)
	}
	if !bytes.HasPrefix(gomod, []byte(module+"\n")) {
		return fmt.Errorf("-source %s is not the meshwave module: its go.mod does not start with %q", dir, module)
	}
	return nil
}

// compile builds a static agent: no cgo (the image has no libc), no paths
// of the build machine (-trimpath), no symbol table or DWARF (-s -w; a
// panic still prints its stack), and the version from the arguments rather
// than from the go command's VCS stamp, which would differ with the state
// of the work tree.
func compile(ctx context.Context, o Options, out string) ([]byte, error) {
	ldflags := "-s -w -X main.version=" + o.Version
	if o.Revision != "" {
		ldflags += " -X main.revision=" + o.Revision
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/agent")
	cmd.Dir = o.Source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/agent in %s: %w\n%s", o.Source, err, msg)
	}
	return os.ReadFile(out)
}

// caBundle is the PEM the image trusts: the file named, or else the NSS
// roots pinned in go.mod. The pinned roots keep the image the same on every
// machine, and keep a machine's own additions (a company proxy's CA, say)
// out of a published image. A root that NSS constrains beyond what a PEM
// file can say (a distrust-after date) is left out rather than trusted
// without its limit.
func caBundle(path string) ([]byte, error) {
	if path == "" {
		var buf bytes.Buffer
		for root := range bundle.Roots() {
			if root.Constraint != nil {
				continue
			}
			if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
				return nil, err
			}
		}
		return buf.Bytes(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	n, err := countCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", path, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return data, nil
}

// countCertificates parses every CERTIFICATE block of a PEM bundle.
func countCertificates(data []byte) (int, error) {
	n := 0
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return n, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	return n, nil
}

// Image is the agent's image: two layers on nothing, the system files
// (which change rarely, so a new version pulls only the binary's layer)
// and the binary, run as 65532 with no shell.
func Image(o Options, ca, binary []byte) (v1.Image, error) {
	system, err := layer([]file{
		{path: "etc/", mode: 0o755},
		{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "etc/passwd", mode: 0o644, data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "etc/ssl/", mode: 0o755},
		{path: "etc/ssl/certs/", mode: 0o755},
		{path: caBundlePath, mode: 0o644, data: ca},
		{path: "home/", mode: 0o755},
		{path: "home/nonroot/", mode: 0o700, owner: nonrootID},
		{path: "tmp/", mode: 0o1777},
	})
	if err != nil {
		return nil, err
	}
	agent, err := layer([]file{{path: binaryPath, mode: 0o755, data: binary}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: system, History: v1.History{Created: v1.Time{Time: epoch},
			CreatedBy: "meshwave image: /etc/passwd, /etc/group, CA certificates, /home/nonroot, /tmp"}},
		mutate.Addendum{Layer: agent, History: v1.History{Created: v1.Time{Time: epoch},
			CreatedBy: "meshwave image: /meshwave, built from ./cmd/agent"}},
	)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = o.Arch, "linux"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config = v1.Config{
		// The chart's Deployment passes "run" and its flags as args, which
		// replace Cmd and keep Entrypoint.
		Entrypoint:   []string{"/" + binaryPath},
		Cmd:          []string{"run"},
		User:         fmt.Sprintf("%d:%d", nonrootID, nonrootID),
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{metricsPort: {}},
		Labels:       labels(o),
	}
	return mutate.ConfigFile(img, cfg)
}

// labels are the OCI annotations registries and scanners show. The
// repository has no license file, so there is no licenses label.
func labels(o Options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "meshwave",
		"org.opencontainers.image.description": "Moves Istio sidecar workloads between control-plane revisions in metrics-gated canary waves.",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.source":      o.SourceURL,
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// file is one entry of a layer; a path ending in "/" is a directory.
type file struct {
	path  string
	mode  int64
	owner int
	data  []byte
}

// layer writes files, in path order, into an uncompressed tar with every
// time set to epoch, and wraps it as a gzip-compressed layer.
func layer(files []file) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.path, b.path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name: f.path, Mode: f.mode, Uid: f.owner, Gid: f.owner, ModTime: epoch,
			Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX,
		}
		if strings.HasSuffix(f.path, "/") {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
