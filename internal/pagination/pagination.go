// Package pagination implements AIP-158 page tokens and sizes for every
// List method: a token is an opaque, URL-safe encoding of the position after
// which the next page starts.
package pagination

import (
	"encoding/base64"
	"encoding/json"
	"errors"
)

// Default and maximum page sizes of every List method.
const (
	DefaultSize = 100
	MaxSize     = 1000
)

// ErrInvalidToken means a page token was not produced by this server.
var ErrInvalidToken = errors.New("invalid page token")

// Size returns the page size to use for a requested size: the default for
// 0, the maximum for larger values. Negative sizes are an error.
func Size(requested int32) (int, error) {
	switch {
	case requested < 0:
		return 0, errors.New("page_size must not be negative")
	case requested == 0:
		return DefaultSize, nil
	case requested > MaxSize:
		return MaxSize, nil
	}
	return int(requested), nil
}

// Encode returns the token for position pos (any JSON-encodable value).
func Encode(pos any) string {
	b, err := json.Marshal(pos)
	if err != nil {
		// Positions are plain structs of strings and numbers.
		panic("pagination: encode position: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads token into pos. An empty token leaves pos unchanged.
func Decode(token string, pos any) error {
	if token == "" {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return ErrInvalidToken
	}
	if err := json.Unmarshal(b, pos); err != nil {
		return ErrInvalidToken
	}
	return nil
}
