package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// Keys. Pool ids and owner keys never contain NUL (store.Txn.Validate), so
// NUL ends them and a pool's records form one contiguous, prefix-free key
// range sorted by pool id. Addresses follow as a family byte and their
// bytes, so a pool's quarantine records are sorted by address.
//
// Allocations are filed under a sequence number (format 3), given when an
// allocation is first written and kept while it lives; the record starts
// with its pool and address, which an index in memory maps back to the
// number (index.go). Format 2 filed them under pool, then address, in an
// allocations bucket; format 1 also kept an owner index, keyed by a hash
// of the owner. Open rewrites a file of either into format 3 (compact.go).
//
//	pools       pool id
//	records     sequence number (8 bytes, big-endian)    (format 3)
//	allocations pool 0x00 family address                 (formats 1 and 2)
//	owners      pool 0x00 hash(owner-key) family address (format 1)
//	quarantine  pool 0x00 family address
//	requests    request id
const (
	famV4 = 4
	famV6 = 6
)

func poolPrefix(pool string) []byte {
	k := make([]byte, 0, len(pool)+1)
	return append(append(k, pool...), 0)
}

// addrKey is the key of an address in a pool (allocations, quarantine).
func addrKey(pool string, addr netip.Addr) []byte {
	k := make([]byte, 0, len(pool)+2+16)
	k = append(append(k, pool...), 0)
	return appendAddr(k, addr)
}

func appendAddr(k []byte, addr netip.Addr) []byte {
	if addr.Is4() {
		a := addr.As4()
		return append(append(k, famV4), a[:]...)
	}
	a := addr.As16()
	return append(append(k, famV6), a[:]...)
}

// splitAddrKey returns the pool and address of an allocation or
// quarantine key. The pool aliases k.
func splitAddrKey(k []byte) ([]byte, netip.Addr, error) {
	if i := bytes.IndexByte(k, 0); i >= 0 {
		if addr, ok := parseAddr(k[i+1:]); ok {
			return k[:i], addr, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("malformed address key %q", k)
}

// parseAddr reads an address as appendAddr wrote it.
func parseAddr(b []byte) (netip.Addr, bool) {
	switch {
	case len(b) == 5 && b[0] == famV4:
		return netip.AddrFrom4([4]byte(b[1:])), true
	case len(b) == 17 && b[0] == famV6:
		return netip.AddrFrom16([16]byte(b[1:])), true
	}
	return netip.Addr{}, false
}

// Values are a version byte and fields in a fixed order: strings as a
// uvarint length and bytes, integers as varints, times as seconds and
// nanoseconds. A million allocations take about 60 bytes each, and decode
// with one allocation each (all string fields share one copy of the
// value).
const valueVersion = 1

var errTruncated = errors.New("truncated value")

type encoder []byte

func (e encoder) str(s string) encoder {
	return append(binary.AppendUvarint(e, uint64(len(s))), s...)
}

func (e encoder) uint(u uint64) encoder { return binary.AppendUvarint(e, u) }

func (e encoder) int(i int64) encoder { return binary.AppendVarint(e, i) }

func (e encoder) time(t time.Time) encoder {
	return e.int(t.Unix()).uint(uint64(t.Nanosecond()))
}

func (e encoder) strs(ss []string) encoder {
	e = e.uint(uint64(len(ss)))
	for _, s := range ss {
		e = e.str(s)
	}
	return e
}

func encodePool(p *store.Pool, rev int64) []byte {
	e := encoder(make([]byte, 0, 64)).uint(valueVersion).strs(p.CIDRs).strs(p.Reserved).int(int64(p.ReuseDelay))
	e = e.uint(uint64(len(p.Labels)))
	// Sorted, so equal pools encode equally.
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		e = e.str(k).str(p.Labels[k])
	}
	overlap := uint64(0)
	if p.AllowOverlap {
		overlap = 1
	}
	return e.uint(overlap).time(p.CreateTime).time(p.UpdateTime).int(rev)
}

// appendAllocation appends an allocation's value: its fields without its
// pool and address.
func appendAllocation(e encoder, a *store.Allocation, rev int64) encoder {
	o := a.Owner
	return e.uint(valueVersion).str(o.Cluster).str(o.Kind).str(o.Namespace).str(o.Name).str(o.UID).
		time(a.CreateTime).str(a.RequestID).int(rev)
}

// recordKey is the key of the allocation record numbered seq.
func recordKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// encodeRecord is an allocation's record: its pool and address, then its
// value as appendAllocation writes it.
func encodeRecord(a *store.Allocation, rev int64) []byte {
	o := a.Owner
	e := encoder(make([]byte, 0, 56+len(a.Pool)+len(o.Cluster)+len(o.Kind)+len(o.Namespace)+len(o.Name)+len(o.UID)+len(a.RequestID)))
	return appendAllocation(encoder(appendAddr(e.str(a.Pool), a.Address)), a, rev)
}

// splitRecord returns the pool and address of a record and the value
// after them (appendAllocation's form). The pool and value alias v.
func splitRecord(v []byte) (pool []byte, addr netip.Addr, val []byte, err error) {
	n, w := binary.Uvarint(v)
	if w > 0 && n <= uint64(len(v)-w) {
		pool, v = v[w:w+int(n)], v[w+int(n):]
		size := 0
		switch {
		case len(v) >= 5 && v[0] == famV4:
			size = 5
		case len(v) >= 17 && v[0] == famV6:
			size = 17
		}
		if a, ok := parseAddr(v[:size]); ok {
			return pool, a, v[size:], nil
		}
	}
	return nil, netip.Addr{}, nil, errors.New("malformed allocation record")
}

// decodeRecord decodes an allocation record.
func decodeRecord(v []byte) (store.Allocation, error) {
	pool, addr, val, err := splitRecord(v)
	if err != nil {
		return store.Allocation{}, err
	}
	return decodeAllocation(string(pool), addr, val)
}

func encodeQuarantine(q *store.Quarantine) []byte {
	return encoder(make([]byte, 0, 16)).uint(valueVersion).time(q.Until)
}

func encodeRequest(r *store.Request, rev int64) []byte {
	return encoder(make([]byte, 0, 64)).uint(valueVersion).strs(r.Allocations).int(rev)
}

// decoder reads a value copied into one string, so every string field is
// a substring of it rather than an allocation of its own.
type decoder struct {
	s   string
	err error
}

// newDecoder returns a decoder by value, so it lives on the caller's
// stack.
func newDecoder(v []byte) decoder {
	d := decoder{s: string(v)}
	if v := d.uint(); d.err == nil && v != valueVersion {
		d.err = fmt.Errorf("unknown value version %d", v)
	}
	return d
}

func (d *decoder) uint() uint64 {
	var x uint64
	for i := 0; i < len(d.s) && i < binary.MaxVarintLen64; i++ {
		b := d.s[i]
		if b < 0x80 {
			d.s = d.s[i+1:]
			return x | uint64(b)<<(7*i)
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	if d.err == nil {
		d.err = errTruncated
	}
	d.s = ""
	return 0
}

func (d *decoder) int() int64 {
	u := d.uint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) str() string {
	n := d.uint()
	if n > uint64(len(d.s)) {
		if d.err == nil {
			d.err = errTruncated
		}
		d.s = ""
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

// strs returns nil for no strings, as an empty list was most likely nil
// when encoded.
func (d *decoder) strs() []string {
	n := d.uint()
	if n == 0 || n > uint64(len(d.s)) { // each string takes at least a byte
		if n > 0 && d.err == nil {
			d.err = errTruncated
		}
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str()
	}
	return out
}

func (d *decoder) time() time.Time {
	sec := d.int()
	nsec := d.uint()
	if nsec >= 1e9 && d.err == nil {
		d.err = fmt.Errorf("nanoseconds %d out of range", nsec)
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// finish reports what went wrong, if anything; callers add the record's
// name only then, which keeps decoding free of allocations.
func (d *decoder) finish() error {
	if d.err == nil && d.s != "" {
		d.err = fmt.Errorf("%d trailing bytes", len(d.s))
	}
	return d.err
}

func decodePool(id string, v []byte) (store.Pool, error) {
	d := newDecoder(v)
	p := store.Pool{ID: id}
	p.CIDRs = d.strs()
	p.Reserved = d.strs()
	p.ReuseDelay = time.Duration(d.int())
	if n := d.uint(); n > 0 && n <= uint64(len(d.s)) {
		p.Labels = make(map[string]string, n)
		for range n {
			k := d.str()
			p.Labels[k] = d.str()
		}
	} else if n > 0 && d.err == nil {
		d.err = errTruncated
	}
	p.AllowOverlap = d.uint() == 1
	p.CreateTime = d.time()
	p.UpdateTime = d.time()
	p.Revision = d.int()
	if err := d.finish(); err != nil {
		return p, fmt.Errorf("decode pool %s: %w", id, err)
	}
	return p, nil
}

func decodeAllocation(pool string, addr netip.Addr, v []byte) (store.Allocation, error) {
	d := newDecoder(v)
	a := store.Allocation{Pool: pool, Address: addr}
	a.Owner.Cluster = d.str()
	a.Owner.Kind = d.str()
	a.Owner.Namespace = d.str()
	a.Owner.Name = d.str()
	a.Owner.UID = d.str()
	a.CreateTime = d.time()
	a.RequestID = d.str()
	a.Revision = d.int()
	if err := d.finish(); err != nil {
		return a, fmt.Errorf("decode allocation %s/%s: %w", pool, addr, err)
	}
	return a, nil
}

func decodeQuarantine(pool string, addr netip.Addr, v []byte) (store.Quarantine, error) {
	d := newDecoder(v)
	q := store.Quarantine{Pool: pool, Address: addr, Until: d.time()}
	if err := d.finish(); err != nil {
		return q, fmt.Errorf("decode quarantine %s/%s: %w", pool, addr, err)
	}
	return q, nil
}

func decodeRequest(id string, v []byte) (store.Request, error) {
	d := newDecoder(v)
	r := store.Request{ID: id, Allocations: d.strs()}
	r.Revision = d.int()
	if err := d.finish(); err != nil {
		return r, fmt.Errorf("decode request %s: %w", id, err)
	}
	return r, nil
}
