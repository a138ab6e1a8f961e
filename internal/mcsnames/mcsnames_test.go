package mcsnames

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDerivedServiceName(t *testing.T) {
	require.Equal(t, "derived-cart", DerivedServiceName("cart"))
	long := strings.Repeat("a", 63)
	got := DerivedServiceName(long)
	require.LessOrEqual(t, len(got), 63)
	require.NotEqual(t, got, DerivedServiceName(strings.Repeat("a", 62)+"b"), "long names stay distinct")
}

func FuzzDerivedServiceName(f *testing.F) {
	f.Add("cart")
	f.Add(strings.Repeat("x", 100))
	f.Fuzz(func(t *testing.T, name string) {
		if len(name) > 253 {
			return
		}
		got := DerivedServiceName(name)
		if len(name) <= 55 {
			require.Equal(t, "derived-"+name, got)
		} else {
			require.Len(t, got, 63)
		}
	})
}
