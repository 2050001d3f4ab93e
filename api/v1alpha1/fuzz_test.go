package v1alpha1

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: Load never panics, its errors are located one-liners, and an
// accepted document re-marshals to JSON that loads back to the same object.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(validDoc))
	for _, pattern := range []string{"testdata/bad/*.yaml", "../../examples/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("spec: {faults: [{params: {a: &p [1, *p]}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		exp, err := Load(data, "f.yaml")
		if err != nil {
			for _, r := range err.Error() {
				if r == '\n' {
					t.Fatalf("error is not one line: %q", err)
				}
			}
			return
		}
		raw, err := json.Marshal(exp)
		if err != nil {
			t.Fatalf("accepted document does not marshal to JSON: %v", err)
		}
		again, err := Load(raw, "f.json")
		if err != nil {
			t.Fatalf("own JSON does not load: %v\n%s", err, raw)
		}
		raw2, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) != string(raw2) {
			t.Fatalf("JSON round trip changed the object:\n%s\n%s", raw, raw2)
		}
		// Validation must not panic on anything Load accepts either.
		exp.Default()
		_ = exp.Validate(ValidateOptions{})
	})
}
