package netparse

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireReason checks that err is an *Error with the given reason and that
// its description mentions every fragment.
func requireReason(t *testing.T, err error, reason Reason, fragments ...string) {
	t.Helper()
	require.Error(t, err)
	var pe *Error
	require.True(t, errors.As(err, &pe), "error %v is not a *netparse.Error", err)
	require.Equal(t, reason, pe.Reason, "error: %v", err)
	for _, f := range fragments {
		require.Contains(t, pe.Description, f)
	}
}

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in     string
		opts   []Option
		want   string
		reason Reason
	}{
		{in: "10.0.0.1", want: "10.0.0.1"},
		{in: "0.0.0.0", want: "0.0.0.0"},
		{in: "255.255.255.255", want: "255.255.255.255"},
		{in: "2001:db8::1", want: "2001:db8::1"},
		{in: "2001:DB8:0000::0001", want: "2001:db8::1"},
		{in: "::", want: "::"},
		{in: "::1.2.3.4", want: "::102:304"},
		{in: "::ffff:1.2.3.4", opts: []Option{AllowMapped()}, want: "::ffff:1.2.3.4"},
		{in: "::ffff:102:304", opts: []Option{AllowMapped()}, want: "::ffff:1.2.3.4"},

		{in: "", reason: ReasonInvalidAddress},
		{in: " 10.0.0.1", reason: ReasonInvalidAddress},
		{in: "10.0.0.1\n", reason: ReasonInvalidAddress},
		{in: "10.0.0 .1", reason: ReasonInvalidAddress},
		{in: "010.0.0.1", reason: ReasonInvalidAddress},
		{in: "10.0.0.01", reason: ReasonInvalidAddress},
		{in: "10.0.0.00", reason: ReasonInvalidAddress},
		{in: "::ffff:10.0.0.01", opts: []Option{AllowMapped()}, reason: ReasonInvalidAddress},
		{in: "10.0.0", reason: ReasonInvalidAddress},
		{in: "10.0.0.256", reason: ReasonInvalidAddress},
		{in: "0x0a.0.0.1", reason: ReasonInvalidAddress},
		{in: "10.0.0.1/32", reason: ReasonInvalidAddress},
		{in: "2001:db8::g", reason: ReasonInvalidAddress},
		{in: "2001:db8:::1", reason: ReasonInvalidAddress},
		{in: "\xff10.0.0.1", reason: ReasonInvalidAddress},
		{in: "fe80::1%eth0", reason: ReasonZoneNotAllowed},
		{in: "fe80::1%", reason: ReasonZoneNotAllowed},
		{in: "10.0.0.1%eth0", reason: ReasonZoneNotAllowed},
		{in: "::ffff:1.2.3.4", reason: ReasonMappedNotAllowed},
		{in: "::ffff:102:304", reason: ReasonMappedNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAddr(tt.in, tt.opts...)
			if tt.reason != "" {
				requireReason(t, err, tt.reason)
				require.False(t, got.IsValid())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
			require.Empty(t, got.Zone())
		})
	}
}

func TestParsePrefix(t *testing.T) {
	tests := []struct {
		in        string
		opts      []Option
		want      string
		reason    Reason
		fragments []string
	}{
		{in: "10.0.0.0/8", want: "10.0.0.0/8"},
		{in: "10.0.0.0/24", want: "10.0.0.0/24"},
		{in: "10.0.0.1/32", want: "10.0.0.1/32"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "2001:db8::/48", want: "2001:db8::/48"},
		{in: "2001:DB8::/64", want: "2001:db8::/64"},
		{in: "::/0", want: "::/0"},
		{in: "2001:db8::1/128", want: "2001:db8::1/128"},
		{in: "::ffff:10.0.0.0/104", opts: []Option{AllowMapped()}, want: "::ffff:10.0.0.0/104"},

		{in: "", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/24 ", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/ 24", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0", reason: ReasonInvalidCIDR, fragments: []string{"prefix length is missing"}},
		{in: "10.0.0.0/", reason: ReasonInvalidCIDR},
		{in: "/24", reason: ReasonInvalidCIDR, fragments: []string{"missing"}},
		{in: "10.0.0.0/33", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/08", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/+8", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/-1", reason: ReasonInvalidCIDR},
		{in: "2001:db8::/129", reason: ReasonInvalidCIDR},
		{in: "010.0.0.0/8", reason: ReasonInvalidCIDR},
		{in: "10.0.0.0/8/8", reason: ReasonInvalidCIDR},
		{in: "10.0.0.1/24", reason: ReasonHostBitsSet, fragments: []string{"10.0.0.0/24"}},
		{in: "10.0.0.128/24", reason: ReasonHostBitsSet, fragments: []string{"10.0.0.0/24"}},
		{in: "2001:db8::1/64", reason: ReasonHostBitsSet, fragments: []string{"2001:db8::/64"}},
		{in: "1.2.3.4/0", reason: ReasonHostBitsSet, fragments: []string{"0.0.0.0/0"}},
		{in: "fe80::%eth0/64", reason: ReasonZoneNotAllowed},
		{in: "::ffff:10.0.0.0/104", reason: ReasonMappedNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePrefix(tt.in, tt.opts...)
			if tt.reason != "" {
				requireReason(t, err, tt.reason, tt.fragments...)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
		})
	}
}

func TestParseRange(t *testing.T) {
	tests := []struct {
		in          string
		opts        []Option
		first, last string
		reason      Reason
	}{
		{in: "10.0.0.0/30", first: "10.0.0.0", last: "10.0.0.3"},
		{in: "10.0.0.7/32", first: "10.0.0.7", last: "10.0.0.7"},
		{in: "0.0.0.0/0", first: "0.0.0.0", last: "255.255.255.255"},
		{in: "10.0.0.7", first: "10.0.0.7", last: "10.0.0.7"},
		{in: "10.0.0.5-10.0.0.9", first: "10.0.0.5", last: "10.0.0.9"},
		{in: "10.0.0.5-10.0.0.5", first: "10.0.0.5", last: "10.0.0.5"},
		{in: "2001:db8::/120", first: "2001:db8::", last: "2001:db8::ff"},
		{in: "2001:db8::/63", first: "2001:db8::", last: "2001:db8:0:1:ffff:ffff:ffff:ffff"},
		{in: "::/0", first: "::", last: "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		{in: "2001:db8::a-2001:db8::1:0", first: "2001:db8::a", last: "2001:db8::1:0"},
		{in: "::ffff:1.2.3.4-::ffff:1.2.3.9", opts: []Option{AllowMapped()}, first: "::ffff:1.2.3.4", last: "::ffff:1.2.3.9"},

		{in: "", reason: ReasonInvalidRange},
		{in: "10.0.0.5 - 10.0.0.9", reason: ReasonInvalidRange},
		{in: "10.0.0.5-", reason: ReasonInvalidRange},
		{in: "-10.0.0.5", reason: ReasonInvalidRange},
		{in: "10.0.0.5-10.0.0.9-10.0.0.10", reason: ReasonInvalidRange},
		{in: "10.0.0.9-10.0.0.5", reason: ReasonInvalidRange},
		{in: "10.0.0.5-2001:db8::1", reason: ReasonInvalidRange},
		{in: "10.0.0.05-10.0.0.9", reason: ReasonInvalidRange},
		{in: "10.0.0.1/30", reason: ReasonHostBitsSet},
		{in: "10.0.0.0/33", reason: ReasonInvalidCIDR},
		{in: "fe80::1%eth0-fe80::2", reason: ReasonZoneNotAllowed},
		{in: "::ffff:1.2.3.4", reason: ReasonMappedNotAllowed},
		{in: "1.2.3.4-::ffff:1.2.3.9", opts: []Option{AllowMapped()}, reason: ReasonInvalidRange},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseRange(tt.in, tt.opts...)
			if tt.reason != "" {
				requireReason(t, err, tt.reason)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.first, got.First.String())
			require.Equal(t, tt.last, got.Last.String())
			require.True(t, got.IsValid())
		})
	}
}

func TestRangeMethods(t *testing.T) {
	r := Range{First: netip.MustParseAddr("10.0.0.5"), Last: netip.MustParseAddr("10.0.0.9")}
	require.Equal(t, "10.0.0.5-10.0.0.9", r.String())
	require.True(t, r.Contains(netip.MustParseAddr("10.0.0.5")))
	require.True(t, r.Contains(netip.MustParseAddr("10.0.0.9")))
	require.False(t, r.Contains(netip.MustParseAddr("10.0.0.10")))
	require.False(t, r.Contains(netip.MustParseAddr("10.0.0.4")))
	require.False(t, r.Contains(netip.MustParseAddr("::ffff:10.0.0.6")))
	require.False(t, r.Contains(netip.Addr{}))

	single := Range{First: netip.MustParseAddr("2001:db8::1"), Last: netip.MustParseAddr("2001:db8::1")}
	require.Equal(t, "2001:db8::1", single.String())

	require.False(t, Range{}.IsValid())
	require.Equal(t, "invalid Range", Range{}.String())
	backwards := Range{First: r.Last, Last: r.First}
	require.False(t, backwards.IsValid())
	require.False(t, backwards.Contains(netip.MustParseAddr("10.0.0.6")))
	mixed := Range{First: netip.MustParseAddr("10.0.0.1"), Last: netip.MustParseAddr("2001:db8::1")}
	require.False(t, mixed.IsValid())

	require.Equal(t, Range{}, PrefixRange(netip.Prefix{}))
	require.Equal(t, "10.0.0.0-10.0.0.255", PrefixRange(netip.MustParsePrefix("10.0.0.77/24")).String())
}

func TestErrorField(t *testing.T) {
	_, err := ParsePrefix("10.0.0.1/24")
	var pe *Error
	require.True(t, errors.As(err, &pe))
	ferr := pe.Field("pool.cidrs[1]")
	wrapped := fmt.Errorf("create pool: %w", ferr)

	var fe *FieldError
	require.True(t, errors.As(wrapped, &fe))
	require.Equal(t, "pool.cidrs[1]", fe.Field)
	require.Equal(t, ReasonHostBitsSet, fe.Err.Reason)
	require.Equal(t, "10.0.0.1/24", fe.Err.Value)
	var inner *Error
	require.True(t, errors.As(wrapped, &inner), "the *Error stays reachable through the field")
	require.Equal(t, `pool.cidrs[1]: "10.0.0.1/24": host bits are set past the prefix length; the CIDR is 10.0.0.0/24`, ferr.Error())
}

func TestErrorValueIsBounded(t *testing.T) {
	long := strings.Repeat("1", 10_000)
	_, err := ParseAddr(long)
	var pe *Error
	require.True(t, errors.As(err, &pe))
	require.Len(t, pe.Value, maxValueLen+len("..."))
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(pe.Value, "...")))
}
