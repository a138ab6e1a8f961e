package decide

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Limits on what a client can make a pool hold. Labels follow Kubernetes'
// label syntax and sizes; the counts keep a pool (and ListPools, which
// returns up to a page of them) far below gRPC's default 4 MiB message.
const (
	// MaxLabels is the most labels a pool carries.
	MaxLabels = 64
	// MaxReserved is the most reserved entries a pool carries.
	MaxReserved = 256
	// MaxOwnerField is the longest an owner field may be (a Kubernetes
	// name or uid fits).
	MaxOwnerField = 253
	// maxEcho is how much of a refused value an error carries.
	maxEcho = 64
)

// Clip quotes s for an error message or a log line, cut to 64 bytes (at a
// character boundary) with its full length noted, so that a huge field
// makes neither a huge reply nor a huge log line.
func Clip(s string) string {
	if len(s) <= maxEcho {
		return fmt.Sprintf("%q", s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

// ValidateLabels checks a pool's labels as Kubernetes checks an object's:
// keys are qualified names (an optional DNS subdomain prefix and "/", then
// at most 63 characters of [A-Za-z0-9-_.] beginning and ending with an
// alphanumeric), values at most 63 such characters or empty; at most
// MaxLabels of them.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalid("pool.labels", "TOO_MANY_LABELS", "%d labels, at most %d", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad one is the same on every try
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return Invalid("pool.labels", "INVALID_LABEL", "label key %s: %s", Clip(k), strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return Invalid("pool.labels["+k+"]", "INVALID_LABEL", "label value %s: %s", Clip(labels[k]), strings.Join(errs, "; "))
		}
	}
	return nil
}

// validateOwnerField checks one owner field: at most MaxOwnerField bytes
// of printable UTF-8 without '/' (the owner key's separator) and without
// the invisible characters that make one name look like another (format
// characters such as bidi overrides and zero-width joiners).
func validateOwnerField(field, v string) error {
	switch {
	case len(v) > MaxOwnerField:
		return Invalid(field, "INVALID_OWNER", "at most %d bytes, got %d", MaxOwnerField, len(v))
	case !utf8.ValidString(v):
		return Invalid(field, "INVALID_OWNER", "not valid UTF-8")
	}
	for i := 0; i < len(v); i++ { // the common case, ASCII, without unicode tables
		c := v[i]
		if c >= 0x80 {
			return validateOwnerRunes(field, v, i)
		}
		if c == '/' {
			return Invalid(field, "INVALID_OWNER", "'/' at byte %d: owner fields cannot hold '/'", i)
		}
		if c < 0x20 || c == 0x7f {
			return Invalid(field, "INVALID_OWNER", "character %U at byte %d: owner fields hold printable characters only", rune(c), i)
		}
	}
	return nil
}

// validateOwnerRunes checks the rest of an owner field from byte at on,
// where a non-ASCII character starts.
func validateOwnerRunes(field, v string, at int) error {
	for i, r := range v[at:] {
		i += at
		switch {
		case r == '/':
			return Invalid(field, "INVALID_OWNER", "'/' at byte %d: owner fields cannot hold '/'", i)
		case !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r):
			return Invalid(field, "INVALID_OWNER", "character %U at byte %d: owner fields hold printable characters only", r, i)
		}
	}
	return nil
}
