package pagination

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		in      int32
		want    int
		wantErr bool
	}{{0, DefaultSize, false}, {1, 1, false}, {5000, MaxSize, false}, {-1, 0, true}} {
		got, err := Size(tc.in)
		if tc.wantErr {
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
}

func TestRoundTrip(t *testing.T) {
	type pos struct {
		Pool string
		Addr string
	}
	tok := Encode(pos{"a", "10.0.0.1"})
	var got pos
	require.NoError(t, Decode(tok, &got))
	require.Equal(t, pos{"a", "10.0.0.1"}, got)
	require.ErrorIs(t, Decode("%%%", &got), ErrInvalidToken)
	require.ErrorIs(t, Decode("bm90IGpzb24", &got), ErrInvalidToken)
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(map[string]string{"a": "b"}))
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		var m map[string]any
		_ = Decode(tok, &m) // must never panic
	})
}
