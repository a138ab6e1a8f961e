package etcd

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sub-prefixes of the key space; see doc.go for the layout. What the
// replicas follow lives under keyState, so their watches carry nothing
// else; the owner index, the request records and the commit marker are
// read by key and stay outside it.
const (
	keyMarkers    = "rev/"
	keyOwners     = "owners/"
	keyRequests   = "requests/"
	keyState      = "state/"
	keyPools      = keyState + "pools/"
	keyAllocs     = keyState + "allocs/"
	keyQuarantine = keyState + "quarantine/"
	keyTick       = keyState + "tick"
	// keyPoolsChanged is put by every commit that puts or deletes a pool.
	keyPoolsChanged = "pools-changed"
)

// sep separates the parts of a key. Pool ids and owner keys never hold a
// NUL (store.Txn.Validate refuses them), and NUL sorts before every other
// byte, so "p\x00…" sorts before "p2\x00…" just as "p" sorts before "p2".
const sep = "\x00"

// keys builds the keys of one installation, all under one prefix.
type keys struct{ prefix string }

func (k keys) markers() string          { return k.prefix + keyMarkers }
func (k keys) tick() string             { return k.prefix + keyTick }
func (k keys) state() string            { return k.prefix + keyState }
func (k keys) pool(id string) string    { return k.prefix + keyPools + id }
func (k keys) pools() string            { return k.prefix + keyPools }
func (k keys) poolsChanged() string     { return k.prefix + keyPoolsChanged }
func (k keys) request(id string) string { return k.prefix + keyRequests + id }

func (k keys) alloc(pool string, a netip.Addr) string {
	return k.prefix + keyAllocs + pool + sep + encodeAddr(a)
}

func (k keys) quarantine(pool string, a netip.Addr) string {
	return k.prefix + keyQuarantine + pool + sep + encodeAddr(a)
}

// owner is the owner index entry of one allocation. The address is part
// of the key so an owner that holds two addresses (the store does not
// forbid it) stays indexed until both are gone.
func (k keys) owner(pool, ownerKey string, a netip.Addr) string {
	return k.ownerPrefix(pool, ownerKey) + encodeAddr(a)
}

// ownerPrefix covers every index entry of one owner key in one pool; the
// trailing separator keeps "web-2" from covering "web-22".
func (k keys) ownerPrefix(pool, ownerKey string) string {
	return k.prefix + keyOwners + pool + sep + ownerKey + sep
}

// marker is the commit marker of the slot-th commit of a transaction
// (combined commits each put their own; any other commit puts slot 0).
func (k keys) marker(slot int) string { return fmt.Sprintf("%s%s%02d", k.prefix, keyMarkers, slot) }

func (k keys) poolAllocs(pool string) string     { return k.prefix + keyAllocs + pool + sep }
func (k keys) poolOwners(pool string) string     { return k.prefix + keyOwners + pool + sep }
func (k keys) poolQuarantine(pool string) string { return k.prefix + keyQuarantine + pool + sep }

// encodeAddr renders an address so that keys sort as netip.Addr.Compare
// does: the family first (IPv4 before IPv6), then the bytes in hex.
func encodeAddr(a netip.Addr) string {
	if a.Is4() {
		b := a.As4()
		return "4" + hex.EncodeToString(b[:])
	}
	b := a.As16()
	return "6" + hex.EncodeToString(b[:])
}

var errBadKey = errors.New("malformed key")

func decodeAddr(s string) (netip.Addr, error) {
	if len(s) < 1 {
		return netip.Addr{}, errBadKey
	}
	raw, err := hex.DecodeString(s[1:])
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: address %q: %w", errBadKey, s, err)
	}
	switch {
	case s[0] == '4' && len(raw) == 4:
		return netip.AddrFrom4([4]byte(raw)), nil
	case s[0] == '6' && len(raw) == 16:
		return netip.AddrFrom16([16]byte(raw)), nil
	}
	return netip.Addr{}, fmt.Errorf("%w: address %q", errBadKey, s)
}

// kind is what a key under the prefix holds.
type kind int

const (
	kindOther kind = iota
	kindTick
	kindPool
	kindAlloc
	kindQuarantine
)

// parsed is a key taken apart.
type parsed struct {
	kind kind
	pool string
	addr netip.Addr
}

// parse tells what a key of the state range holds.
func (k keys) parse(key string) (parsed, error) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok {
		return parsed{}, fmt.Errorf("%w: %q is not under %q", errBadKey, key, k.prefix)
	}
	poolAddr := func(s string, kd kind) (parsed, error) {
		pool, addr, ok := strings.Cut(s, sep)
		if !ok {
			return parsed{}, fmt.Errorf("%w: %q", errBadKey, key)
		}
		a, err := decodeAddr(addr)
		if err != nil {
			return parsed{}, err
		}
		return parsed{kind: kd, pool: pool, addr: a}, nil
	}
	switch {
	case rest == keyTick:
		return parsed{kind: kindTick}, nil
	case strings.HasPrefix(rest, keyPools):
		return parsed{kind: kindPool, pool: rest[len(keyPools):]}, nil
	case strings.HasPrefix(rest, keyAllocs):
		return poolAddr(rest[len(keyAllocs):], kindAlloc)
	case strings.HasPrefix(rest, keyQuarantine):
		return poolAddr(rest[len(keyQuarantine):], kindQuarantine)
	}
	return parsed{kind: kindOther}, nil
}

// rangeEnd is the end of the range holding every key that starts with p.
func rangeEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }
