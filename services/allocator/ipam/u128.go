package ipam

import (
	"encoding/binary"
	"math/big"
	"math/bits"
	"net/netip"
)

// u128 is an unsigned 128-bit integer: an IPv6 address, or an offset inside
// an IPv6 CIDR, which can exceed 64 bits (a /48 holds 2^80 addresses).
type u128 struct{ hi, lo uint64 }

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

func (x u128) add64(y uint64) u128 {
	lo, carry := bits.Add64(x.lo, y, 0)
	return u128{x.hi + carry, lo}
}

func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, borrow)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}

func (x u128) cmp(y u128) int {
	switch {
	case x.less(y):
		return -1
	case y.less(x):
		return 1
	default:
		return 0
	}
}

// shr shifts right by n < 128. Go defines shifts of 64 or more as 0, which
// the two-word formulas rely on.
func (x u128) shr(n uint) u128 {
	if n >= 64 {
		return u128{0, x.hi >> (n - 64)}
	}
	return u128{x.hi >> n, x.lo>>n | x.hi<<(64-n)}
}

// shl shifts left by n < 128.
func (x u128) shl(n uint) u128 {
	if n >= 64 {
		return u128{x.lo << (n - 64), 0}
	}
	return u128{x.hi<<n | x.lo>>(64-n), x.lo << n}
}

// lowZero reports whether the n lowest bits of x are all zero.
func (x u128) lowZero(n uint) bool {
	if n >= 64 {
		return x.lo == 0 && x.hi&(1<<(n-64)-1) == 0
	}
	return x.lo&(1<<n-1) == 0
}

// lowOnes reports whether the n lowest bits of x are all one.
func (x u128) lowOnes(n uint) bool {
	if n >= 64 {
		m := uint64(1)<<(n-64) - 1
		return x.lo == ^uint64(0) && x.hi&m == m
	}
	m := uint64(1)<<n - 1
	return x.lo&m == m
}

func (x u128) big() *big.Int {
	b := new(big.Int).SetUint64(x.hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(x.lo))
}

// addrBits returns the address as a number: IPv4 in the low 32 bits, IPv6
// (including IPv4-mapped) as all 128.
func addrBits(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// bitsAddr is the inverse of addrBits for the given family.
func bitsAddr(x u128, is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(x.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
	return netip.AddrFrom16(b)
}
