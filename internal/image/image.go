package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultRepository is where the chart's values.yaml pulls the image
	// from by default; a test holds the two equal.
	DefaultRepository = "ghcr.io/gpuchaos/gpuchaos"
	// DefaultSource is the org.opencontainers.image.source label.
	DefaultSource = "https://github.com/gpuchaos/gpuchaos"
	// BinaryPath is where the image keeps the command; the entrypoint.
	BinaryPath = "/usr/local/bin/gpuchaos"
	// AgentBinaryPath is where the image keeps gpuchaos-agent, the node
	// agent's lean binary, which the chart's DaemonSet runs as its
	// command; the faults it runs as child processes run BinaryPath.
	AgentBinaryPath = "/usr/local/bin/gpuchaos-agent"
	// PackagesFile lists, in the image, the Debian packages its runtime
	// files were taken from, with their versions and files.
	PackagesFile = "/usr/share/gpuchaos/image-packages.txt"
	// User is the image's default user: the controller runs as it (the
	// chart's runAsUser 65532, distroless's nonroot), the agent's pod
	// overrides it to root.
	User = "65532:65532"
	// PackagesLabel names the runtime files' packages, name=version.
	PackagesLabel = "io.gpuchaos.image.packages"
)

// Options says what goes into the image. Binary and AgentBinary are
// required; the rest are labels and the one timestamp.
type Options struct {
	// Binary is the gpuchaos command, built for GOARCH on this host.
	Binary string
	// AgentBinary is the gpuchaos-agent command, built likewise.
	AgentBinary string
	// GOARCH is the binary's architecture (runtime.GOARCH: the runtime
	// files come from this host, so it can only be the host's).
	GOARCH string
	// Created is every timestamp in the image: config, history and file
	// times. The commit time or SOURCE_DATE_EPOCH, for reproducibility.
	Created time.Time
	// Version, Revision, Source and Licenses are the OCI labels.
	Version  string
	Revision string
	Source   string
	Licenses string
}

// Built is the image and what it was made of.
type Built struct {
	Image    v1.Image
	Packages []Package
}

// Build assembles the image: a runtime layer (the C library files the
// binaries need, their copyright files, /etc/passwd and /etc/group with
// the nonroot user, /tmp) and a layer with the two binaries alone, so a
// new build of the commands reuses the runtime layer.
func Build(o Options) (*Built, error) {
	if o.Binary == "" {
		return nil, errors.New("image: Binary is empty")
	}
	if o.AgentBinary == "" {
		return nil, errors.New("image: AgentBinary is empty")
	}
	if o.Version == "" {
		return nil, errors.New("image: Version is empty")
	}
	if o.Created.IsZero() {
		return nil, errors.New("image: Created is zero (use the commit time or SOURCE_DATE_EPOCH)")
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	// A static binary needs no C library, so neither do the driver's
	// libraries it then cannot load; a dynamic one loads them.
	files, err := RuntimeFiles("/", o.Binary, o.GOARCH, DriverNeeds...)
	if err != nil {
		return nil, err
	}
	agentFiles, err := RuntimeFiles("/", o.AgentBinary, o.GOARCH, DriverNeeds...)
	if err != nil {
		return nil, err
	}
	files = append(files, agentFiles...)
	sort.Strings(files)
	files = slices.Compact(files)
	var pkgs []Package
	if len(files) > 0 {
		if pkgs, err = debianPackages(files); err != nil {
			return nil, err
		}
	}

	rt := newTree(o.Created)
	for _, d := range []string{"/etc", "/usr/local/bin", "/usr/share/gpuchaos"} {
		rt.dir(d, 0o755, 0)
	}
	rt.dir("/tmp", 0o1777, 0)
	rt.dir("/root", 0o700, 0)
	rt.dir("/home/nonroot", 0o700, 65532)
	rt.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
	rt.file("/etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	for _, f := range files {
		if err := rt.copyHost("/", f); err != nil {
			return nil, err
		}
	}
	var list strings.Builder
	list.WriteString("# Debian packages this image's runtime files were copied from, as dpkg\n# reported them on the build machine: package=version, then its files.\n")
	var names []string
	for _, p := range pkgs {
		names = append(names, p.String())
		fmt.Fprintf(&list, "%s\n", p)
		for _, f := range p.Files {
			fmt.Fprintf(&list, "\t%s\n", f)
		}
		// The licence of what the image redistributes travels with it.
		base := strings.SplitN(p.Name, ":", 2)[0]
		c := "/usr/share/doc/" + base + "/copyright"
		if _, err := os.Stat(c); err != nil {
			return nil, fmt.Errorf("image: package %s: its copyright file: %w", p.Name, err)
		}
		if err := rt.copyHost("/", c); err != nil {
			return nil, err
		}
	}
	rt.file(PackagesFile, 0o644, []byte(list.String()))

	bt := newTree(o.Created)
	bt.dir("/usr", 0o755, 0)
	bt.dir("/usr/local", 0o755, 0)
	bt.dir("/usr/local/bin", 0o755, 0)
	for p, host := range map[string]string{BinaryPath: o.Binary, AgentBinaryPath: o.AgentBinary} {
		bin, err := os.ReadFile(host)
		if err != nil {
			return nil, fmt.Errorf("image: read binary %s: %w", p, err)
		}
		bt.add(p, tar.Header{Typeflag: tar.TypeReg, Mode: 0o755}, bin)
	}

	var layers []mutate.Addendum
	for _, l := range []struct {
		t  *tree
		by string
	}{
		{rt, "gpuchaos image builder: runtime files (" + strings.Join(names, " ") + "), /etc/passwd, /etc/group"},
		{bt, "gpuchaos image builder: " + BinaryPath + " " + AgentBinaryPath},
	} {
		layer, err := l.t.layer()
		if err != nil {
			return nil, err
		}
		layers = append(layers, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: l.by},
		})
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, layers...); err != nil {
		return nil, fmt.Errorf("image: layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Created}
	cf.OS = "linux"
	cf.Architecture = o.GOARCH
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = []string{"--help"}
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "gpuchaos",
		"org.opencontainers.image.description": "GPU chaos experiments: the gpuchaos controller and node agent",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.licenses":    o.Licenses,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		PackagesLabel:                          strings.Join(names, " "),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return &Built{Image: img, Packages: pkgs}, nil
}

// tree is one layer's entries by path, written sorted so the tar (and so
// the digest) does not depend on the order they were added in.
type tree struct {
	created time.Time
	entries map[string]entry
}

type entry struct {
	hdr  tar.Header
	data []byte
}

func newTree(created time.Time) *tree {
	return &tree{created: created, entries: map[string]entry{}}
}

func (t *tree) add(p string, h tar.Header, data []byte) {
	h.Name = strings.TrimPrefix(p, "/")
	h.ModTime = t.created
	h.Size = int64(len(data))
	t.entries[p] = entry{hdr: h, data: data}
}

func (t *tree) dir(p string, mode int64, owner int) {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if _, ok := t.entries[d]; !ok {
			t.add(d, tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}, nil)
		}
	}
	t.add(p, tar.Header{Typeflag: tar.TypeDir, Mode: mode, Uid: owner, Gid: owner}, nil)
}

func (t *tree) file(p string, mode int64, data []byte) {
	if _, ok := t.entries[path.Dir(p)]; !ok && path.Dir(p) != "/" {
		t.dir(path.Dir(p), 0o755, 0)
	}
	t.add(p, tar.Header{Typeflag: tar.TypeReg, Mode: mode}, data)
}

// copyHost copies the file at p under sysroot into the tree, recreating
// every symbolic link on the way as a link, so the image resolves p as
// the host does (/lib64 → usr/lib64 on a merged-/usr host, the loader's
// /lib64 name → the multiarch folder).
func (t *tree) copyHost(sysroot, p string) error {
	for hops := 0; ; hops++ {
		if hops > 40 {
			return fmt.Errorf("image: %s: too many links", p)
		}
		next, done, err := t.copyStep(sysroot, path.Clean(p))
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		p = next
	}
}

// copyStep walks p from the root; at the first link it records the link
// and returns the path with it resolved, else it copies the file.
func (t *tree) copyStep(sysroot, p string) (string, bool, error) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, part := range parts {
		cur = path.Join(cur, part)
		host := filepath.Join(sysroot, cur)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", false, fmt.Errorf("image: runtime file %s: %w", p, err)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return "", false, fmt.Errorf("image: runtime file %s: %w", p, err)
			}
			t.add(cur, tar.Header{Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil)
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(cur), target)
			}
			return path.Join(append([]string{target}, parts[i+1:]...)...), false, nil
		case fi.IsDir():
			if i == len(parts)-1 {
				return "", false, fmt.Errorf("image: runtime file %s is a folder", p)
			}
			if _, ok := t.entries[cur]; !ok {
				t.add(cur, tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}, nil)
			}
		case fi.Mode().IsRegular() && i == len(parts)-1:
			data, err := os.ReadFile(host)
			if err != nil {
				return "", false, fmt.Errorf("image: runtime file %s: %w", p, err)
			}
			t.add(cur, tar.Header{Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm())}, data)
			return "", true, nil
		default:
			return "", false, fmt.Errorf("image: runtime file %s: %s is a %v", p, cur, fi.Mode().Type())
		}
	}
	return "", false, fmt.Errorf("image: runtime file %s: empty path", p)
}

func (t *tree) layer() (v1.Layer, error) {
	paths := make([]string, 0, len(t.entries))
	for p := range t.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := t.entries[p]
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("image: tar %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// EpochFromEnv reads SOURCE_DATE_EPOCH (reproducible-builds.org), the
// seconds since 1970 every timestamp in the image is set to.
func EpochFromEnv(v string) (time.Time, error) {
	s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a count of seconds since 1970", v)
	}
	return time.Unix(s, 0).UTC(), nil
}
