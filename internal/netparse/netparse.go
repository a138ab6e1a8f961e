package netparse

import (
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Option relaxes one of the parser's refusals.
type Option func(*options)

type options struct {
	allowMapped bool
}

// AllowMapped accepts IPv4-mapped IPv6 addresses ("::ffff:1.2.3.4") and keeps
// them as they are: IPv6 values, not converted to IPv4. Use it only where an
// IPv6 pool may really hold the ::ffff:0:0/96 block.
func AllowMapped() Option {
	return func(o *options) { o.allowMapped = true }
}

func collect(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// ParseAddr parses a single IP address strictly (see the package doc). The
// result never has a zone.
func ParseAddr(s string, opts ...Option) (netip.Addr, error) {
	return parseAddr(s, s, ReasonInvalidAddress, collect(opts))
}

// parseAddr parses text as an address; whole is the text to report and reason
// the refusal code for malformed text, so that range and prefix parsing can
// report their own input and code.
func parseAddr(text, whole string, reason Reason, o options) (netip.Addr, error) {
	if err := checkText(text, whole, reason); err != nil {
		return netip.Addr{}, err
	}
	if strings.ContainsRune(text, '%') {
		return netip.Addr{}, newError(whole, ReasonZoneNotAllowed,
			"IPv6 zones are not allowed: a zone names an interface of one host")
	}
	a, err := netip.ParseAddr(text)
	if err != nil {
		return netip.Addr{}, newError(whole, reason, "not an IP address: %s", detail(err))
	}
	if a.Is4In6() && !o.allowMapped {
		return netip.Addr{}, newError(whole, ReasonMappedNotAllowed,
			"IPv4-mapped IPv6 addresses are not allowed (%s is IPv4 %s written as IPv6)", a, a.Unmap())
	}
	return a, nil
}

// ParsePrefix parses a CIDR strictly: the prefix length must be present, and
// no bit past it may be set. The error for "10.0.0.1/24" has reason
// HOST_BITS_SET and names 10.0.0.0/24.
func ParsePrefix(s string, opts ...Option) (netip.Prefix, error) {
	return parsePrefix(s, collect(opts))
}

func parsePrefix(s string, o options) (netip.Prefix, error) {
	if err := checkText(s, s, ReasonInvalidCIDR); err != nil {
		return netip.Prefix{}, err
	}
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return netip.Prefix{}, newError(s, ReasonInvalidCIDR,
			"not a CIDR: the prefix length is missing (for example /24)")
	}
	if _, err := parseAddr(s[:slash], s, ReasonInvalidCIDR, o); err != nil {
		return netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, newError(s, ReasonInvalidCIDR, "not a CIDR: %s", detail(err))
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, newError(s, ReasonHostBitsSet,
			"host bits are set past the prefix length; the CIDR is %s", m)
	}
	return p, nil
}

// ParseRange parses an address range in one of three forms: a CIDR
// ("10.0.0.0/30", the whole block), a single address ("10.0.0.7"), or two
// addresses joined by a dash with no spaces ("10.0.0.5-10.0.0.9", both ends
// included).
func ParseRange(s string, opts ...Option) (Range, error) {
	o := collect(opts)
	if err := checkText(s, s, ReasonInvalidRange); err != nil {
		return Range{}, err
	}
	if strings.ContainsRune(s, '/') {
		p, err := parsePrefix(s, o)
		if err != nil {
			return Range{}, err
		}
		return PrefixRange(p), nil
	}
	firstText, lastText, dashed := strings.Cut(s, "-")
	first, err := parseAddr(firstText, s, ReasonInvalidRange, o)
	if err != nil {
		return Range{}, err
	}
	if !dashed {
		return Range{First: first, Last: first}, nil
	}
	last, err := parseAddr(lastText, s, ReasonInvalidRange, o)
	if err != nil {
		return Range{}, err
	}
	if first.Is4() != last.Is4() {
		return Range{}, newError(s, ReasonInvalidRange, "the two ends are of different address families")
	}
	if last.Less(first) {
		return Range{}, newError(s, ReasonInvalidRange, "the first address %s is above the last %s", first, last)
	}
	return Range{First: first, Last: last}, nil
}

// checkText refuses what no parser accepts, with a clearer message than
// net/netip would give.
func checkText(text, whole string, reason Reason) error {
	if text == "" {
		if text == whole {
			return newError(whole, reason, "empty")
		}
		return newError(whole, reason, "an address is missing")
	}
	if !utf8.ValidString(text) {
		return newError(whole, reason, "not valid UTF-8 text")
	}
	if strings.IndexFunc(text, unicode.IsSpace) >= 0 {
		return newError(whole, reason, "contains whitespace")
	}
	return nil
}

// detail strips net/netip's echo of the input from its error text, which we
// already report in Value, leaving only the cause.
func detail(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "): "); i >= 0 {
		return msg[i+3:]
	}
	return msg
}
