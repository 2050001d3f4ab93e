// Command build-image builds the gpuchaos container image the Helm chart
// runs (gpuchaos and gpuchaos-agent), without docker: see internal/image
// and scripts/build-image.
//
//	go run ./tools/build-image -o bin/gpuchaos-image.tar --layout bin/gpuchaos-oci
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/gpuchaos/gpuchaos/internal/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("build-image", flag.ContinueOnError)
	out := fs.String("o", "bin/gpuchaos-image.tar", "docker-archive tarball to write (docker load, kind load image-archive, ctr image import); empty: none")
	lay := fs.String("layout", "", "OCI image layout folder to write (skopeo copy oci:FOLDER); empty: none")
	repo := fs.String("repository", image.DefaultRepository, "image repository; the chart's image.repository")
	tag := fs.String("tag", "", "image tag; empty: the chart's appVersion, the tag the chart pulls by default")
	bin := fs.String("binary", "", "a gpuchaos binary to use; empty: build ./cmd/gpuchaos with "+strings.Join(image.GoBuildArgs, " "))
	agentBin := fs.String("agent-binary", "", "a gpuchaos-agent binary to use; empty: build ./cmd/gpuchaos-agent likewise")
	licenses := fs.String("licenses", "NOASSERTION", "SPDX expression for the org.opencontainers.image.licenses label")
	source := fs.String("source", image.DefaultSource, "org.opencontainers.image.source label")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" && *lay == "" {
		return fmt.Errorf("-o and --layout are both empty: nothing to write")
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if *tag == "" {
		if *tag, err = image.ChartAppVersion(root); err != nil {
			return err
		}
	}
	ref, err := name.NewTag(*repo + ":" + *tag)
	if err != nil {
		return fmt.Errorf("--repository/--tag: %w", err)
	}
	rev, err := image.GitRevision(root)
	if err != nil {
		return err
	}
	created, err := image.Created(root)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gpuchaos-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, c := range []struct {
		name string
		path *string
	}{{"gpuchaos", bin}, {"gpuchaos-agent", agentBin}} {
		if *c.path == "" {
			*c.path = filepath.Join(dir, c.name)
			if err := image.BuildBinary(root, c.name, *c.path); err != nil {
				return err
			}
		}
	}
	b, err := image.Build(image.Options{
		Binary: *bin, AgentBinary: *agentBin, GOARCH: runtime.GOARCH, Created: created,
		Version: *tag, Revision: rev, Source: *source, Licenses: *licenses,
	})
	if err != nil {
		return err
	}
	d, err := b.Image.Digest()
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
			return err
		}
		if err := image.WriteTarball(*out, ref, b.Image); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", *out)
	}
	if *lay != "" {
		if err := image.WriteLayout(*lay, ref, b.Image); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", *lay)
	}
	fmt.Printf("image %s@%s\n", ref, d)
	return nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s: run from the gpuchaos tree", dir)
		}
	}
}
