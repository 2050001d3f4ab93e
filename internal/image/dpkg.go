package image

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Package is a Debian package the image takes files from, recorded in the
// image's labels and in PackagesFile for provenance.
type Package struct {
	// Name is the package with its architecture qualifier, libc6:amd64.
	Name    string
	Version string
	// Files are the host paths taken from it.
	Files []string
}

func (p Package) String() string { return p.Name + "=" + p.Version }

// debianPackages asks dpkg which installed package owns each file and at
// which version. A file no package owns is an error: the image carries no
// file without provenance.
func debianPackages(files []string) ([]Package, error) {
	// One dpkg-query for all the files (each reads dpkg's whole file
	// database); its status is 1 when any is not found, which the
	// per-file fallback below then tells apart.
	all, _ := exec.Command("dpkg-query", append([]string{"-S"}, files...)...).Output()
	byName := map[string]*Package{}
	for _, f := range files {
		name, err := parseSearch(all, f)
		if err != nil {
			if name, err = owner(f); err != nil {
				return nil, err
			}
		}
		p := byName[name]
		if p == nil {
			out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", name).Output()
			if err != nil {
				return nil, fmt.Errorf("dpkg-query -W %s: %w", name, exitDetail(err))
			}
			v := strings.TrimSpace(string(out))
			if v == "" {
				return nil, fmt.Errorf("dpkg-query -W %s: no version", name)
			}
			p = &Package{Name: name, Version: v}
			byName[name] = p
		}
		p.Files = append(p.Files, f)
	}
	pkgs := make([]Package, 0, len(byName))
	for _, p := range byName {
		sort.Strings(p.Files)
		pkgs = append(pkgs, *p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

// owner tries the path as given, then with its links resolved: dpkg knows
// a file by the path its package ships it under, which on a merged-/usr
// system is either.
func owner(file string) (string, error) {
	tries := []string{file}
	if r, err := filepath.EvalSymlinks(file); err == nil && r != file {
		tries = append(tries, r)
	}
	var errs []string
	for _, p := range tries {
		out, err := exec.Command("dpkg-query", "-S", p).Output()
		if err != nil {
			errs = append(errs, fmt.Sprintf("dpkg-query -S %s: %v", p, exitDetail(err)))
			continue
		}
		name, err := parseSearch(out, p)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		return name, nil
	}
	return "", fmt.Errorf("no Debian package owns %s (dpkg records where every runtime file came from): %s", file, strings.Join(errs, "; "))
}

// parseSearch reads `dpkg-query -S PATH` output, lines of
// "pkg[:arch][, pkg2...]: path", and returns the one package owning
// exactly path. Diversions ("diversion by ...") and other paths matching
// the pattern are ignored; two owners of one file are an error.
func parseSearch(out []byte, path string) (string, error) {
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "diversion by ") || strings.HasPrefix(line, "local diversion ") {
			continue
		}
		i := strings.LastIndex(line, ": ")
		if i <= 0 || line[i+2:] != path {
			continue
		}
		for _, n := range strings.Split(line[:i], ", ") {
			if n == "" || strings.ContainsAny(n, " \t\r,") {
				return "", fmt.Errorf("dpkg-query -S %s: bad package name %q", path, n)
			}
			found = append(found, n)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("dpkg-query -S %s: no line names that path", path)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("dpkg-query -S %s: owned by %d packages (%s)", path, len(found), strings.Join(found, ", "))
	}
}

func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(bytes.TrimSpace(ee.Stderr)) > 0 {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}
