package decide

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzClip: whatever the input, the echo is short, valid UTF-8 and names
// the full length when it cuts.
func FuzzClip(f *testing.F) {
	for _, s := range []string{"", "pools/p", strings.Repeat("é", 100), "a\xffb", strings.Repeat("x", 1<<16)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Clip(s)
		require.LessOrEqual(t, len(got), 4*maxEcho+40)
		require.True(t, utf8.ValidString(got), "%q", got)
		if len(s) > maxEcho {
			require.Contains(t, got, "bytes)")
		}
	})
}

// FuzzOwnerField: an accepted owner field is short, valid UTF-8, printable,
// without '/' or format characters; nothing panics.
func FuzzOwnerField(f *testing.F) {
	for _, s := range []string{"web-0", "", "a/b", "a\x00b", "abc\u202egpj", "a\u200bb", "\xff", "café", strings.Repeat("a", 254)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := validateOwnerField("owner.name", s); err != nil {
			require.Less(t, len(err.Error()), 300)
			return
		}
		require.LessOrEqual(t, len(s), MaxOwnerField)
		require.True(t, utf8.ValidString(s))
		require.NotContains(t, s, "/")
		for _, r := range s {
			require.True(t, unicode.IsPrint(r) && !unicode.Is(unicode.Cf, r), "%U", r)
		}
	})
}

// FuzzLabels: accepted labels are what Kubernetes accepts on an object;
// a refusal's message stays short whatever the label's size.
func FuzzLabels(f *testing.F) {
	f.Add("team", "web")
	f.Add("example.com/team", "")
	f.Add("", "v")
	f.Add("a\x00", strings.Repeat("v", 64))
	f.Add(strings.Repeat("k", 300), "v")
	f.Fuzz(func(t *testing.T, k, v string) {
		err := ValidateLabels(map[string]string{k: v})
		if err != nil {
			require.Less(t, len(err.Error()), 1200)
			return
		}
		require.Empty(t, validation.IsQualifiedName(k))
		require.Empty(t, validation.IsValidLabelValue(v))
	})
}
