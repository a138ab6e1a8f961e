package netparse

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var fuzzSeeds = []string{
	"", " ", "10.0.0.1", "010.0.0.1", "10.0.0.0/24", "10.0.0.1/24", "10.0.0.0/08",
	"0.0.0.0/0", "255.255.255.255/32", "2001:db8::/48", "2001:db8::1/64",
	"fe80::1%eth0", "fe80::%eth0/64", "::ffff:1.2.3.4", "::ffff:0.0.0.0/96",
	"10.0.0.5-10.0.0.9", "10.0.0.9-10.0.0.5", "10.0.0.1-2001:db8::1",
	"2001:db8::a-2001:db8::1:0", "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	"1.2.3.4-1.2.3.4-1.2.3.4", "::1.2.3.4", "2001:DB8::1", "1.2.3.4\x00",
}

// requireParseError checks that a refusal is always a well-formed *Error.
func requireParseError(t *testing.T, err error) {
	t.Helper()
	var pe *Error
	require.True(t, errors.As(err, &pe), "error %v is not a *netparse.Error", err)
	require.NotEmpty(t, pe.Reason)
	require.NotEmpty(t, pe.Description)
	require.LessOrEqual(t, len(pe.Value), maxValueLen+len("..."))
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, mapped bool) {
		var opts []Option
		if mapped {
			opts = append(opts, AllowMapped())
		}
		a, err := ParseAddr(s, opts...)
		if err != nil {
			requireParseError(t, err)
			return
		}
		require.True(t, a.IsValid())
		require.Empty(t, a.Zone())
		require.False(t, strings.ContainsFunc(s, func(r rune) bool { return r == ' ' || r == '%' }))
		if !mapped {
			require.False(t, a.Is4In6())
		}
		canon := a.String()
		again, err := ParseAddr(canon, opts...)
		require.NoError(t, err, "canonical form %q of %q does not parse", canon, s)
		require.Equal(t, a, again)
		require.Equal(t, canon, again.String())
		// Whatever we accept, net/netip reads the same way.
		std, err := netip.ParseAddr(s)
		require.NoError(t, err)
		require.Equal(t, std, a)
	})
}

func FuzzParsePrefix(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, mapped bool) {
		var opts []Option
		if mapped {
			opts = append(opts, AllowMapped())
		}
		p, err := ParsePrefix(s, opts...)
		if err != nil {
			requireParseError(t, err)
			return
		}
		require.True(t, p.IsValid())
		require.Equal(t, p.Masked(), p, "accepted a CIDR with host bits set")
		if !mapped {
			require.False(t, p.Addr().Is4In6())
		}
		canon := p.String()
		again, err := ParsePrefix(canon, opts...)
		require.NoError(t, err, "canonical form %q of %q does not parse", canon, s)
		require.Equal(t, p, again)
		require.Equal(t, canon, again.String())
		r := PrefixRange(p)
		require.True(t, r.IsValid())
		require.True(t, p.Contains(r.First))
		require.True(t, p.Contains(r.Last))
		if next := r.Last.Next(); next.IsValid() {
			require.False(t, p.Contains(next))
		}
	})
}

func FuzzParseRange(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, mapped bool) {
		var opts []Option
		if mapped {
			opts = append(opts, AllowMapped())
		}
		r, err := ParseRange(s, opts...)
		if err != nil {
			requireParseError(t, err)
			return
		}
		require.True(t, r.IsValid())
		require.True(t, r.Contains(r.First))
		require.True(t, r.Contains(r.Last))
		canon := r.String()
		again, err := ParseRange(canon, opts...)
		require.NoError(t, err, "canonical form %q of %q does not parse", canon, s)
		require.Equal(t, r, again)
		require.Equal(t, canon, again.String())
	})
}
