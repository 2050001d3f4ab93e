package promapi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestDecodeRange reads the server's captured range answers.
func TestDecodeRange(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	decode := func(status int, body []byte) ([]Series, error) {
		d, err := decodeEnvelope(status, body)
		if err != nil {
			return nil, err
		}
		return decodeMatrix(d)
	}
	got, err := decode(200, read("range-temp-high.json"))
	if err != nil || len(got) != 1 {
		t.Fatalf("range-temp-high: %v, %v; want one series", got, err)
	}
	s := got[0]
	if s.Labels["UUID"] != "GPU-n1-1" || s.Labels["__name__"] != "DCGM_FI_DEV_GPU_TEMP" || len(s.Points) != 4 ||
		s.Points[0] != (Point{T: 1796197995000, V: 92}) || s.Points[3].T-s.Points[0].T != 45000 {
		t.Errorf("range-temp-high = %+v", s)
	}
	if got, err := decode(200, read("range-empty.json")); err != nil || len(got) != 0 {
		t.Errorf("range-empty = %v, %v; want no series", got, err)
	}
	_, err = decode(422, read("range-error-execution.json"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Status != 422 || pe.Type != "execution" {
		t.Errorf("range-error-execution: %v, want an execution *Error with HTTP 422", err)
	}
	// An instant answer where a matrix belongs is an error, not nothing.
	if _, err := decode(200, read("gpu-count.json")); err == nil {
		t.Error("a vector decoded as a range answer")
	}
}

// FuzzDecodeMatrix checks that no range answer, however malformed, panics
// the decoder, and that what it accepts is well formed.
func FuzzDecodeMatrix(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"values":[[1e300,"1"],["x","NaN"]]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":null,"values":[[1.5,"+Inf"]]}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeEnvelope(200, body)
		if err != nil {
			return
		}
		got, err := decodeMatrix(d)
		if err != nil {
			return
		}
		for _, s := range got {
			if s.Labels == nil {
				t.Fatalf("series without a label map from %q", body)
			}
		}
	})
}
