package image

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// ChartPath is the chart whose appVersion is the image's default tag: the
// chart pulls <values image.repository>:<appVersion> when image.tag is
// empty, so the builder tags what the chart pulls.
const ChartPath = "deploy/helm/gpuchaos/Chart.yaml"

// ChartAppVersion reads the appVersion of the chart under root.
func ChartAppVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, ChartPath))
	if err != nil {
		return "", err
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("%s: %w", ChartPath, err)
	}
	if c.AppVersion == "" {
		return "", fmt.Errorf("%s: appVersion is empty", ChartPath)
	}
	return c.AppVersion, nil
}

// GoBuildArgs are the `go build` arguments of the image's binary: cgo on
// for NVML; -trimpath and no VCS stamp so the binary depends on the
// source alone, not on where the tree is or on git's state; -s -w because
// an image has no use for the symbol table and DWARF (Go's own tables
// keep panics' stack traces readable).
var GoBuildArgs = []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// BuildBinary builds ./cmd/name of the module at root (gpuchaos or
// gpuchaos-agent) into out.
func BuildBinary(root, name, out string) error {
	cmd := exec.Command("go", append(append([]string{}, GoBuildArgs...), "-o", out, "./cmd/"+name)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", name, err, b)
	}
	return nil
}

// GitRevision is the commit at HEAD of the tree at root, with "-dirty"
// when tracked files differ from it, so a label never claims a commit the
// image was not built from.
func GitRevision(root string) (string, error) {
	rev, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	st, err := git(root, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", err
	}
	if st != "" {
		rev += "-dirty"
	}
	return rev, nil
}

// Created is SOURCE_DATE_EPOCH when set, else HEAD's commit time: the
// same tree gives the same time, so the same image.
func Created(root string) (time.Time, error) {
	if v, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
		return EpochFromEnv(v)
	}
	s, err := git(root, "log", "-1", "--format=%ct", "HEAD")
	if err != nil {
		return time.Time{}, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log --format=%%ct: %q: %w", s, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

func git(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), exitDetail(err))
	}
	return strings.TrimSpace(string(out)), nil
}
