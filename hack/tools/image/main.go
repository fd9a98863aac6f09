// Command image builds meshwave's container image as a tarball, with no
// container daemon: a static agent, CA certificates and a non-root user on
// an empty base, in layers with fixed times so that the same sources give
// the same digest.
//
//	go run ./image -source ../.. -version 0.1.0 -revision $(git rev-parse HEAD) -o ../../bin/meshwave-image.tar
//
// It lives in hack/tools so that go-containerregistry stays out of the
// agent's module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"time"
)

func main() {
	var o Options
	flag.StringVar(&o.Source, "source", "", "root of the meshwave module to build (required)")
	flag.StringVar(&o.Version, "version", "", "version to stamp and tag: the chart's appVersion (required)")
	flag.StringVar(&o.Revision, "revision", "", "git commit to stamp and label (empty: no revision label)")
	flag.StringVar(&o.Repository, "repository", "ghcr.io/meshwave/meshwave", "image repository the tarball names, tagged with -version")
	flag.StringVar(&o.SourceURL, "source-url", "https://github.com/meshwave/meshwave", "org.opencontainers.image.source label")
	flag.StringVar(&o.CABundle, "ca-bundle", "", "PEM file of CA certificates to trust (empty: the Mozilla NSS roots pinned in go.mod)")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH of the image (linux only)")
	flag.StringVar(&o.Output, "o", "", "tarball to write (required)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	digest, err := Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		stop()
		os.Exit(1)
	}
	st, err := os.Stat(o.Output)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		stop()
		os.Exit(1)
	}
	fmt.Printf("%s:%s %s\n%s, %.1f MiB, built in %s\n", o.Repository, o.Version, digest, o.Output,
		float64(st.Size())/(1<<20), time.Since(start).Round(100*time.Millisecond))
}
