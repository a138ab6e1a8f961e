package decide

import (
	"regexp"
	"strings"
	"testing"
)

// poolIDReference is the grammar isPoolID implements, as a regular
// expression: the fuzz test holds the two to the same answers.
var poolIDReference = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

func TestIsPoolID(t *testing.T) {
	for id, want := range map[string]bool{
		"vips": true, "a": true, "a1": true, "pod-cidrs": true, strings.Repeat("a", 63): true,
		"": false, "1a": false, "-a": false, "a-": false, "A": false, "a_b": false, "a.b": false,
		strings.Repeat("a", 64): false, "vips\x00": false, "é": false,
	} {
		if got := isPoolID(id); got != want {
			t.Errorf("isPoolID(%q) = %v, want %v", id, got, want)
		}
	}
}

func FuzzIsPoolID(f *testing.F) {
	for _, s := range []string{"vips", "a", "a-", "1a", "a--b", strings.Repeat("z", 63), strings.Repeat("z", 64), "Ab", "a\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := isPoolID(id), poolIDReference.MatchString(id); got != want {
			t.Fatalf("isPoolID(%q) = %v, the grammar says %v", id, got, want)
		}
	})
}

func BenchmarkValidatePoolID(b *testing.B) {
	for b.Loop() {
		if err := ValidatePoolID("pool", "workload-pool-7"); err != nil {
			b.Fatal(err)
		}
	}
}
