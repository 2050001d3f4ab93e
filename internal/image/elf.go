package image

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// multiarch is the Debian multiarch triplet of each architecture the
// builder knows: the folder its libraries live in.
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu",
	"arm64": "aarch64-linux-gnu",
}

// elfMachine is the ELF machine of each GOARCH, to refuse a binary built
// for another architecture than the runtime files taken from this host.
var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64,
	"arm64": elf.EM_AARCH64,
}

// DriverNeeds are the C library's sonames NVIDIA's driver libraries need
// besides libc.so.6: libnvidia-ml.so.1 and libcuda.so.1 of driver
// 580.159.04 (ldd on an H200 host, 2026-12-02) need libpthread.so.0,
// libm.so.6, libdl.so.2 and librt.so.1. The NVIDIA container runtime
// mounts the driver's libraries into the pod but never the C library, and
// the command dlopens them (NVML through go-nvml, CUDA through purego), so
// a loader and libc alone would fail there with "libpthread.so.0: cannot
// open shared object file".
var DriverNeeds = []string{"libdl.so.2", "libm.so.6", "libpthread.so.0", "librt.so.1"}

// RuntimeFiles returns the absolute paths, under sysroot, of the files a
// dynamically linked binary needs to start: its interpreter and the
// shared libraries it needs, transitively, and the extra sonames (which
// the binary loads at run time, or libraries it loads need). A static
// binary needs none. The libraries are looked up where Debian's dynamic
// loader looks by default, so the result is what the loader would pick on
// this host without LD_LIBRARY_PATH.
func RuntimeFiles(sysroot, binary, goarch string, extra ...string) ([]string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("read binary %s: %w", binary, err)
	}
	defer f.Close()
	if want, ok := elfMachine[goarch]; !ok {
		return nil, fmt.Errorf("architecture %q: the builder knows only amd64 and arm64", goarch)
	} else if f.Machine != want {
		return nil, fmt.Errorf("binary %s is for %v, not %s", binary, f.Machine, goarch)
	}
	interp, err := interpreter(f)
	if err != nil {
		return nil, fmt.Errorf("binary %s: %w", binary, err)
	}
	if interp == "" {
		return nil, nil
	}
	dirs := []string{"/lib/" + multiarch[goarch], "/usr/lib/" + multiarch[goarch], "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	seen := map[string]bool{interp: true}
	files := []string{interp}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("binary %s: needed libraries: %w", binary, err)
	}
	queue = append(queue, extra...)
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		path, err := findLibrary(sysroot, dirs, lib)
		if err != nil {
			return nil, err
		}
		if seen[path] {
			continue
		}
		seen[path] = true
		files = append(files, path)
		more, err := neededBy(filepath.Join(sysroot, path))
		if err != nil {
			return nil, err
		}
		queue = append(queue, more...)
	}
	sort.Strings(files)
	return files, nil
}

func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("read PT_INTERP: %w", err)
		}
		for len(b) > 0 && b[len(b)-1] == 0 {
			b = b[:len(b)-1]
		}
		if len(b) == 0 || b[0] != '/' {
			return "", fmt.Errorf("PT_INTERP %q is not an absolute path", b)
		}
		return string(b), nil
	}
	return "", nil
}

func neededBy(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read library %s: %w", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("library %s: needed libraries: %w", path, err)
	}
	return libs, nil
}

func findLibrary(sysroot string, dirs []string, lib string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, lib)
		if _, err := os.Stat(filepath.Join(sysroot, p)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s: not found in %v under %s", lib, dirs, sysroot)
}
