package workload

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// torchLikeZip builds a zip laid out as torch.save lays one out: an
// archive/ folder with data.pkl and tensor data.
func torchLikeZip(t *testing.T, payload string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for name, body := range map[string]string{"archive/data.pkl": "\x80\x02}q\x00.", "archive/data/0": payload, "archive/version": "3\n"} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writeCheckpoint writes data and a manifest that matches it, as the
// training script does.
func writeCheckpoint(t *testing.T, dir string, step int64, data []byte) Manifest {
	t.Helper()
	sum := sha256.Sum256(data)
	m := Manifest{Format: ManifestFormat, Step: step, File: DataName(step), Size: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), Time: 1.7e9, WorldSize: 2, Mode: ModeSync}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DataName(step)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName(step)), mb, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestParseName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		step     int64
		kind     string
		ok       bool
		nameNote string
	}{
		{name: "ckpt-20.pt", step: 20, kind: "data", ok: true},
		{name: "ckpt-0.pt", step: 0, kind: "data", ok: true},
		{name: "ckpt-20.json", step: 20, kind: "manifest", ok: true},
		{name: "ckpt-20.pt.tmp", step: 20, kind: "temp", ok: true},
		{name: "ckpt-20.json.tmp", step: 20, kind: "temp", ok: true},
		{name: "ckpt-020.pt", nameNote: "leading zero: not a name the writer makes"},
		{name: "ckpt--1.pt", nameNote: "sign"},
		{name: "ckpt-+1.pt", nameNote: "sign"},
		{name: "ckpt-.pt", nameNote: "no step"},
		{name: "ckpt-1.pth", nameNote: "other suffix"},
		{name: "ckpt-1.pt.tmp.tmp", nameNote: "double temp"},
		{name: "model-1.pt", nameNote: "other prefix"},
		{name: "ckpt-99999999999999999999.pt", nameNote: "overflows int64"},
		{name: "ckpt-1 .pt", nameNote: "space"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			step, kind, ok := ParseName(tc.name)
			if ok != tc.ok || step != tc.step || kind != tc.kind {
				t.Errorf("ParseName(%q) = %d, %q, %v; want %d, %q, %v (%s)", tc.name, step, kind, ok, tc.step, tc.kind, tc.ok, tc.nameNote)
			}
		})
	}
}

func TestParseManifest(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		json    string
		wantErr string
	}{
		{name: "valid", json: `{"format":"gpuchaos-ckpt/1","step":40,"file":"ckpt-40.pt","size":10,"sha256":"` + sum + `","time":1.5,"world_size":2,"mode":"async","extra":1}`},
		{name: "not json", json: `{"format":`, wantErr: "not JSON"},
		{name: "other format", json: `{"format":"gpuchaos-ckpt/2","step":40,"file":"ckpt-40.pt","size":10,"sha256":"` + sum + `"}`, wantErr: "format"},
		{name: "file of another step", json: `{"format":"gpuchaos-ckpt/1","step":40,"file":"ckpt-20.pt","size":10,"sha256":"` + sum + `"}`, wantErr: "names file"},
		{name: "negative step", json: `{"format":"gpuchaos-ckpt/1","step":-1,"file":"ckpt--1.pt","size":10,"sha256":"` + sum + `"}`, wantErr: "negative"},
		{name: "negative size", json: `{"format":"gpuchaos-ckpt/1","step":4,"file":"ckpt-4.pt","size":-3,"sha256":"` + sum + `"}`, wantErr: "size"},
		{name: "short sha", json: `{"format":"gpuchaos-ckpt/1","step":4,"file":"ckpt-4.pt","size":3,"sha256":"abcd"}`, wantErr: "sha256"},
		{name: "upper-case sha", json: `{"format":"gpuchaos-ckpt/1","step":4,"file":"ckpt-4.pt","size":3,"sha256":"` + strings.ToUpper(sum) + `"}`, wantErr: "sha256"},
		{name: "step as string", json: `{"format":"gpuchaos-ckpt/1","step":"4","file":"ckpt-4.pt","size":3,"sha256":"` + sum + `"}`, wantErr: "not JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(tc.json))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseManifest: %v", err)
				}
				if m.Step != 40 || m.Size != 10 || m.Mode != "async" || m.WorldSize != 2 {
					t.Errorf("ParseManifest = %+v", m)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseManifest error = %v, want one wrapping ErrInvalid and saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantErr string // empty: valid
	}{
		{name: "complete", damage: func(*testing.T, string) {}},
		{name: "no manifest (killed between the renames)", wantErr: "no manifest", damage: func(t *testing.T, dir string) {
			mustRemove(t, filepath.Join(dir, ManifestName(40)))
		}},
		{name: "truncated data", wantErr: "torn or truncated", damage: func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, DataName(40)), 17); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "one byte flipped", wantErr: "corrupted", damage: func(t *testing.T, dir string) {
			p := filepath.Join(dir, DataName(40))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "data missing", wantErr: "missing", damage: func(t *testing.T, dir string) {
			mustRemove(t, filepath.Join(dir, DataName(40)))
		}},
		{name: "manifest of another step", wantErr: "names step", damage: func(t *testing.T, dir string) {
			other := t.TempDir()
			writeCheckpoint(t, other, 20, []byte("x"))
			b, err := os.ReadFile(filepath.Join(other, ManifestName(20)))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, ManifestName(40)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "replaced whole by a non-zip", wantErr: "not a torch.save zip", damage: func(t *testing.T, dir string) {
			writeCheckpoint(t, dir, 40, []byte("this is not a checkpoint"))
		}},
		{name: "zip without data.pkl", wantErr: "without data.pkl", damage: func(t *testing.T, dir string) {
			var b bytes.Buffer
			zw := zip.NewWriter(&b)
			if _, err := zw.Create("archive/other"); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			writeCheckpoint(t, dir, 40, b.Bytes())
		}},
		{name: "huge manifest", wantErr: "larger than", damage: func(t *testing.T, dir string) {
			big := bytes.Repeat([]byte(" "), maxManifestBytes+1)
			if err := os.WriteFile(filepath.Join(dir, ManifestName(40)), big, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			want := writeCheckpoint(t, dir, 40, torchLikeZip(t, "weights"))
			tc.damage(t, dir)
			m, err := Verify(dir, 40)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if m != want {
					t.Errorf("Verify manifest = %+v, want %+v", m, want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Errorf("Verify error = %v, want one wrapping ErrInvalid and saying %q", err, tc.wantErr)
			}
		})
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestScanNewest lays out what a job killed at different moments leaves
// and checks the choice of the checkpoint to resume from.
func TestScanNewest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, s := range []int64{20, 40, 60} {
		writeCheckpoint(t, dir, s, torchLikeZip(t, "step"+string(rune('0'+s/20))))
	}
	// 60 is corrupted after it was written; 80 was killed between the
	// data file's rename and the manifest's; 100 was killed mid-write.
	p := filepath.Join(dir, DataName(60))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 1
	for name, body := range map[string][]byte{DataName(60): b, DataName(80): torchLikeZip(t, "x"), "ckpt-100.pt.tmp": []byte("PK\x03"), "notes.txt": nil} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cps, temps, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cps {
		v := "ok"
		if !c.Valid() {
			v = "bad"
		}
		got = append(got, DataName(c.Step)+":"+v)
	}
	if want := "ckpt-80.pt:bad ckpt-60.pt:bad ckpt-40.pt:ok ckpt-20.pt:ok"; strings.Join(got, " ") != want {
		t.Errorf("Scan = %v, want %s", got, want)
	}
	if len(temps) != 1 || temps[0] != "ckpt-100.pt.tmp" {
		t.Errorf("Scan temps = %v, want [ckpt-100.pt.tmp]", temps)
	}
	cp, ok, err := Newest(dir)
	if err != nil || !ok || cp.Step != 40 {
		t.Errorf("Newest = step %d, %v, %v; want step 40", cp.Step, ok, err)
	}

	empty, ok, err := Newest(filepath.Join(dir, "absent"))
	if err != nil || ok {
		t.Errorf("Newest of a missing directory = %+v, %v, %v; want none and no error", empty, ok, err)
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"format":"gpuchaos-ckpt/1","step":40,"file":"ckpt-40.pt","size":10,"sha256":"` + strings.Repeat("0f", 32) + `"}`))
	f.Add([]byte(`{"format":"gpuchaos-ckpt/1","step":1e3}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// Whatever parses must name its own data file and carry a usable
		// digest, and survive a round trip.
		if m.File != DataName(m.Step) || m.Step < 0 || m.Size < 0 || !isHexSHA256(m.SHA256) {
			t.Fatalf("accepted %+v", m)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if m2, err := ParseManifest(again); err != nil || m2 != m {
			t.Fatalf("round trip: %+v, %v; want %+v", m2, err, m)
		}
	})
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"ckpt-20.pt", "ckpt-20.json", "ckpt-3.pt.tmp", "ckpt-007.pt", "ckpt-.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		step, kind, ok := ParseName(name)
		if !ok {
			return
		}
		// A name that parses is exactly the name the writer gives that
		// step and kind, so two names never claim one file.
		var want []string
		switch kind {
		case "data":
			want = []string{DataName(step)}
		case "manifest":
			want = []string{ManifestName(step)}
		case "temp":
			want = []string{DataName(step) + ".tmp", ManifestName(step) + ".tmp"}
		default:
			t.Fatalf("kind %q", kind)
		}
		for _, w := range want {
			if w == name {
				return
			}
		}
		t.Fatalf("ParseName(%q) = %d, %s: the writer would name it %v", name, step, kind, want)
	})
}
