package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSources(t *testing.T) {
	got, err := ParseSources([]string{"east=127.0.0.1:7402", " west = dns:///membership.west:7402 ", "north=127.0.0.1:1,127.0.0.1:2"})
	require.NoError(t, err)
	require.Equal(t, []Source{{"east", "127.0.0.1:7402"}, {"west", "dns:///membership.west:7402"}, {"north", "127.0.0.1:1,127.0.0.1:2"}}, got)

	for in, want := range map[string]string{
		"east":             "want NAME=ADDR",
		"=127.0.0.1:1":     "want NAME=ADDR",
		"East=127.0.0.1:1": "name:",
		"east=127.0.0.1":   "address:",
		"e_st=127.0.0.1:1": "name:",
	} {
		_, err := ParseSources([]string{in})
		require.ErrorContains(t, err, want, in)
	}
	_, err = ParseSources([]string{"a=127.0.0.1:1", "a=127.0.0.1:2"})
	require.ErrorContains(t, err, `source "a" given twice`)
}
