package kmsg

import "testing"

func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{
		"3,1201,6085126134786,-;NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=x, y\n SUBSYSTEM=pci\n",
		"11,5,6,c;a\\x0ab\n",
		"6,1,2,-,caller=T1;x",
		";",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		if r.Priority < 0 || r.Priority > 7 || r.Facility < 0 || r.Time < 0 {
			t.Fatalf("ParseRecord(%q) = %+v: out-of-range field", b, r)
		}
	})
}
