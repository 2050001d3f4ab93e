package rules

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpuchaos/gpuchaos/internal/model/suggest"
)

//go:embed packs/*.yaml packs/README.md
var packFiles embed.FS

// Packs returns the names of the bundled rule packs, sorted: "recommended",
// "seed" and "typical".
func Packs() []string {
	files, _ := fs.Glob(packFiles, "packs/*.yaml")
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = strings.TrimSuffix(path.Base(f), ".yaml")
	}
	slices.Sort(names)
	return names
}

// Pack loads a bundled rule pack by name. Its rules' Source is
// "packs/NAME.yaml".
func Pack(name string) (*Set, error) {
	file := "packs/" + name + ".yaml"
	data, err := packFiles.ReadFile(file)
	if err != nil || strings.ContainsAny(name, "/.") {
		msg := fmt.Sprintf("unknown rule pack %q (known: %s)", name, strings.Join(Packs(), ", "))
		if s, d := suggest.Closest(name, Packs()); d <= 2 {
			msg = fmt.Sprintf("unknown rule pack %q; did you mean %q?", name, s)
		}
		return nil, fmt.Errorf("load pack: %s", msg)
	}
	set, err := Load(data, file)
	if err != nil {
		return nil, fmt.Errorf("load pack %s: %w", name, err)
	}
	return set, nil
}
