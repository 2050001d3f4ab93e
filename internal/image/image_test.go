package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpuchaos/gpuchaos/internal/harness/kubetest"
	"github.com/gpuchaos/gpuchaos/internal/harness/testutil"
	"github.com/gpuchaos/gpuchaos/internal/image"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveGPUChaos()
	os.Exit(code)
}

var created = time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)

func options(bin, agent string) image.Options {
	return image.Options{
		Binary: bin, AgentBinary: agent, GOARCH: runtime.GOARCH, Created: created,
		Version: "0.1.0", Revision: "4e08b58", Source: image.DefaultSource, Licenses: "NOASSERTION",
	}
}

// needDpkg ends the test where the runtime files' provenance cannot be
// asked: the builder refuses to copy files no package vouches for.
func needDpkg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		kubetest.Missing(t, "the image builder takes the C library from this Debian host and needs dpkg-query for its provenance: "+err.Error())
	}
}

// TestImageRunsOnItsOwn writes the image both ways, reads each back,
// checks its config, unpacks its root filesystem and runs the command in
// it under chroot as the image's user: nothing of the host's libraries is
// reachable there, so the runs prove the image carries what the binary
// needs. Removing the image's libc then must break it.
func TestImageRunsOnItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		kubetest.Missing(t, "running the image's root filesystem needs chroot, which needs root")
	}
	needDpkg(t)
	bin := testutil.GPUChaos(t)
	b, err := image.Build(options(bin, testutil.GPUChaosAgent(t)))
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.Image.Digest()
	if err != nil {
		t.Fatal(err)
	}
	ref := name.MustParseReference(image.DefaultRepository + ":0.1.0").(name.Tag)
	dir := t.TempDir()
	tarPath, layPath := filepath.Join(dir, "image.tar"), filepath.Join(dir, "oci")
	if err := image.WriteTarball(tarPath, ref, b.Image); err != nil {
		t.Fatal(err)
	}
	if err := image.WriteLayout(layPath, ref, b.Image); err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(tarPath, &ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(layPath)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.1.0" {
		t.Fatalf("layout index: %+v, want one manifest named 0.1.0", im.Manifests)
	}
	fromLayout, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fromLayout.Digest(); d != want {
		t.Errorf("layout image digest %s, built %s", d, want)
	}
	// The docker archive keeps the config and layers, not the manifest
	// bytes, so compare what a runtime sees: the config and layer digests.
	for what, img := range map[string]v1.Image{"tarball": fromTar, "layout": fromLayout} {
		checkConfig(t, what, img, b.Image)
	}

	root := filepath.Join(t.TempDir(), "rootfs")
	extract(t, fromTar, root)
	cf, err := fromTar.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	ep := cf.Config.Entrypoint
	help, err := inImage(root, cf.Config, append(ep, "--help")...)
	if err != nil || !strings.Contains(help, "Usage:") || !strings.Contains(help, "controller") || !strings.Contains(help, "agent") {
		t.Fatalf("gpuchaos --help in the image: %v\n%s", err, help)
	}
	// The DaemonSet's command, beside the entrypoint.
	agentHelp, err := inImage(root, cf.Config, image.AgentBinaryPath, "--help")
	if err != nil || !strings.Contains(agentHelp, "gpuchaos-agent is gpuchaos's node agent") {
		t.Fatalf("gpuchaos-agent --help in the image: %v\n%s", err, agentHelp)
	}
	faults, err := inImage(root, cf.Config, append(ep, "faults", "--format", "json")...)
	if err != nil {
		t.Fatalf("gpuchaos faults --format json in the image: %v\n%s", err, faults)
	}
	var cat []map[string]any
	if err := json.Unmarshal([]byte(faults), &cat); err != nil || len(cat) == 0 {
		t.Fatalf("gpuchaos faults --format json in the image: %d faults, %v\n%.500s", len(cat), err, faults)
	}
	host, err := exec.Command(bin, "faults", "--format", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	if faults != string(host) {
		t.Errorf("the catalogue in the image differs from the same binary's on the host")
	}

	// The image's own libc is what ran: without it the command cannot start.
	var libc string
	for _, p := range b.Packages {
		for _, f := range p.Files {
			if filepath.Base(f) == "libc.so.6" {
				libc = f
			}
		}
	}
	if libc == "" {
		t.Fatalf("no libc.so.6 among the image's runtime files: %+v", b.Packages)
	}
	checkDriverLoads(t, bin, root, libc, cf.Config)
	if err := os.Remove(filepath.Join(root, libc)); err != nil {
		t.Fatal(err)
	}
	if out, err := inImage(root, cf.Config, append(ep, "--help")...); err == nil {
		t.Fatalf("gpuchaos ran in the image without its libc.so.6: the test does not prove the image's libraries are used\n%s", out)
	}
}

func checkConfig(t *testing.T, what string, img, built v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{image.BinaryPath}) {
		t.Errorf("%s: entrypoint %q, want [%s]", what, c.Entrypoint, image.BinaryPath)
	}
	if c.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532, the chart's controller runAsUser", what, c.User)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(created) {
		t.Errorf("%s: %s/%s created %v, want linux/%s created %v", what, cf.OS, cf.Architecture, cf.Created.Time, runtime.GOARCH, created)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   image.DefaultSource,
		"org.opencontainers.image.revision": "4e08b58",
		"org.opencontainers.image.version":  "0.1.0",
		"org.opencontainers.image.licenses": "NOASSERTION",
		"org.opencontainers.image.created":  "2026-12-02T07:00:00Z",
	} {
		if c.Labels[k] != v {
			t.Errorf("%s: label %s=%q, want %q", what, k, c.Labels[k], v)
		}
	}
	if !strings.HasPrefix(c.Labels[image.PackagesLabel], "libc6:") {
		t.Errorf("%s: label %s=%q, want the libc6 package and version", what, image.PackagesLabel, c.Labels[image.PackagesLabel])
	}
	// The config's diff ids and the manifest's layer digests, not ones
	// recomputed from the layers: gunzipping the binary's layer again is
	// most of the test's time under the race detector.
	bcf, err := built.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.RootFS.DiffIDs) != 2 || !slices.Equal(cf.RootFS.DiffIDs, bcf.RootFS.DiffIDs) {
		t.Errorf("%s: diff ids %v, built %v; want 2: runtime files, then the binaries", what, cf.RootFS.DiffIDs, bcf.RootFS.DiffIDs)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	bm, err := built.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != len(bm.Layers) {
		t.Fatalf("%s: %d layers, built %d", what, len(m.Layers), len(bm.Layers))
	}
	for i := range m.Layers {
		if m.Layers[i].Digest != bm.Layers[i].Digest {
			t.Errorf("%s: layer %d digest %s, built %s", what, i, m.Layers[i].Digest, bm.Layers[i].Digest)
		}
	}
	if mt, _ := img.MediaType(); what == "layout" && mt != types.OCIManifestSchema1 {
		t.Errorf("%s: manifest media type %s, want OCI", what, mt)
	}
}

// extract unpacks the image's flattened filesystem as a runtime would,
// checking on the way that every entry carries the one timestamp.
func extract(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: time %v, want %v", h.Name, h.ModTime, created)
		}
		p := filepath.Join(root, h.Name)
		if !strings.HasPrefix(p, root+"/") {
			t.Fatalf("entry %q escapes the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				err = errors.Join(err, f.Close())
			}
			files[h.Name] = true
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		default:
			t.Fatalf("entry %q: type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chown(p, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range []string{"usr/local/bin/gpuchaos", "usr/local/bin/gpuchaos-agent", "etc/passwd", "etc/group", strings.TrimPrefix(image.PackagesFile, "/")} {
		if !files[f] {
			t.Errorf("image has no %s", f)
		}
	}
	// The chrooted process, not root, must be able to enter /.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// checkDriverLoads puts a library needing what NVIDIA's libnvidia-ml.so.1
// needs (image.DriverNeeds and libc) where the NVIDIA runtime mounts it,
// and has the image's loader load it: the runtime brings the driver's
// libraries but not the C library's others.
func checkDriverLoads(t *testing.T, bin, root, libc string, c v1.Config) {
	t.Helper()
	cc, err := exec.Command("go", "env", "CC").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "driver.c"), filepath.Join(dir, "libnvidia-ml.so.1")
	if err := os.WriteFile(src, []byte("int gpuchaos_fake_driver(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-shared", "-fPIC", "-o", lib, src, "-Wl,--no-as-needed"}
	for _, so := range image.DriverNeeds {
		args = append(args, "-l:"+so)
	}
	if out, err := exec.Command(strings.TrimSpace(string(cc)), args...).CombinedOutput(); err != nil {
		t.Fatalf("build a library needing %v: %v\n%s", image.DriverNeeds, err, out)
	}
	data, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	// Where the image's libc is: the multiarch folder, where the runtime
	// mounts the driver's libraries on Debian and Ubuntu nodes.
	mounted := filepath.Join(filepath.Dir(libc), "libnvidia-ml.so.1")
	if err := os.WriteFile(filepath.Join(root, mounted), data, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(root, mounted))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var loader string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			loader = strings.TrimRight(string(b), "\x00")
		}
	}
	out, err := inImage(root, c, loader, "--list", mounted)
	if err != nil || strings.Contains(out, "not found") {
		t.Fatalf("the image's loader cannot load a driver library needing %v: %v\n%s", image.DriverNeeds, err, out)
	}
	for _, so := range image.DriverNeeds {
		if !strings.Contains(out, so+" => ") {
			t.Errorf("%s --list %s does not list %s:\n%s", loader, mounted, so, out)
		}
	}
}

// inImage runs argv in root, as the image's user, with the image's
// environment only.
func inImage(root string, c v1.Config, argv ...string) (string, error) {
	var uid, gid uint32
	if _, err := fmt.Sscanf(c.User, "%d:%d", &uid, &gid); err != nil {
		return "", fmt.Errorf("user %q: %w", c.User, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// exec.Command looked the path up on the host; the chroot resolves it.
	cmd.Path = argv[0]
	cmd.Dir = "/"
	cmd.Env = c.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// TestSameInputsSameDigest builds the image twice from copies of one
// binary at other paths with other file times, and checks the digests and
// the written tarballs agree byte for byte; another creation time must
// change the digest, or the timestamps are not in it at all.
//
// The binary is the host's true(1), a dynamically linked ELF like the
// command: what is under test is the assembly, and 50 MB of gzip per
// build under the race detector would be most of CI's time. That the Go
// build is itself reproducible (-trimpath, no VCS stamp) is measured by
// running scripts/build-image twice.
func TestSameInputsSameDigest(t *testing.T) {
	needDpkg(t)
	bin, err := exec.LookPath("true")
	if err != nil {
		kubetest.Missing(t, "the reproducibility test builds an image around true(1): "+err.Error())
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var digests []v1.Hash
	var sums [][32]byte
	for i, mtime := range []time.Time{time.Unix(1, 0), time.Now()} {
		dir := t.TempDir()
		cp := filepath.Join(dir, fmt.Sprintf("gpuchaos-%d", i))
		if err := os.WriteFile(cp, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(cp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		b, err := image.Build(options(cp, cp))
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.Image.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "image.tar")
		if err := image.WriteTarball(out, name.MustParseReference("gpuchaos:test").(name.Tag), b.Image); err != nil {
			t.Fatal(err)
		}
		tb, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		sums = append(sums, sha256.Sum256(tb))
	}
	if digests[0] != digests[1] {
		t.Errorf("one binary, two digests: %s, %s", digests[0], digests[1])
	}
	if sums[0] != sums[1] {
		t.Errorf("one binary, two different tarballs")
	}
	o := options(bin, bin)
	o.Created = created.Add(time.Second)
	b, err := image.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Image.Digest(); d == digests[0] {
		t.Errorf("another creation time, the same digest %s: the timestamp is not in the image", d)
	}
}

// TestBuildNeedsBothBinaries: an image without gpuchaos-agent would start
// no DaemonSet, and one without gpuchaos no controller.
func TestBuildNeedsBothBinaries(t *testing.T) {
	for _, tc := range []struct{ name, bin, agent, want string }{
		{"no gpuchaos", "", "/bin/true", "Binary is empty"},
		{"no gpuchaos-agent", "/bin/true", "", "AgentBinary is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := image.Build(options(tc.bin, tc.agent)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestRuntimeFilesRefuses(t *testing.T) {
	bin := testutil.GPUChaos(t)
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	for _, tc := range []struct {
		name, binary, goarch, want string
	}{
		{"another architecture", bin, other, "is for"},
		{"an unknown architecture", bin, "riscv64", "knows only"},
		{"not an ELF file", notELF, runtime.GOARCH, "read binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := image.RuntimeFiles("/", tc.binary, tc.goarch)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RuntimeFiles: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestRuntimeFilesOfTheCommand: the cgo command needs its loader and libc
// (ldd lists the same on this host), and every file is found.
func TestRuntimeFilesOfTheCommand(t *testing.T) {
	bin := testutil.GPUChaos(t)
	files, err := image.RuntimeFiles("/", bin, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	var bases []string
	for _, f := range files {
		bases = append(bases, filepath.Base(f))
	}
	if !slices.Contains(bases, "libc.so.6") || !slices.ContainsFunc(bases, func(b string) bool { return strings.HasPrefix(b, "ld-linux") }) {
		t.Errorf("runtime files %v, want the loader and libc.so.6", files)
	}
}
