package auth

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"strings"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying principal.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// PrincipalFrom returns the authenticated principal of the call ctx belongs
// to; ok is false for an anonymous caller.
func PrincipalFrom(ctx context.Context) (principal string, ok bool) {
	p, _ := ctx.Value(principalKey{}).(string)
	return p, p != ""
}

// CertPrincipal names the holder of a verified client certificate: its first
// spiffe:// URI SAN, else its subject common name.
func CertPrincipal(cert *x509.Certificate) string {
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			return u.String()
		}
	}
	return cert.Subject.CommonName
}

// Tokens maps bearer tokens to principals. Tokens are kept only as SHA-256
// digests, so a map lookup's timing says nothing useful about a token.
type Tokens struct {
	byDigest map[[sha256.Size]byte]string
}

// ParseTokens reads "token,principal" lines; blank lines and lines starting
// with # are skipped.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{byDigest: map[[sha256.Size]byte]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		token, principal, ok := strings.Cut(line, ",")
		token, principal = strings.TrimSpace(token), strings.TrimSpace(principal)
		if !ok || token == "" || principal == "" {
			return nil, fmt.Errorf("line %d: want \"token,principal\"", n)
		}
		d := sha256.Sum256([]byte(token))
		if prev, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("line %d: token already given to %q", n, prev)
		}
		t.byDigest[d] = principal
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return t, nil
}

// LoadTokens reads a tokens file (see ParseTokens).
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open tokens file: %w", err)
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return t, nil
}

// Lookup returns the principal of token.
func (t *Tokens) Lookup(token string) (string, bool) {
	p, ok := t.byDigest[sha256.Sum256([]byte(token))]
	return p, ok
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.byDigest) }
