// Package record encodes the store's records (pools, allocations,
// quarantine and request records) into compact bytes and back: the values
// of the bolt file and of etcd, and the events a store's history keeps.
//
// Values are a version byte and fields in a fixed order: strings as a
// uvarint length and bytes, integers as varints, times as seconds and
// nanoseconds. An allocation takes about 60 bytes and decodes with one
// allocation (its strings share one copy of the value).
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// Version is the version byte every value starts with (but an
// allocation's with flags: VersionFlagged).
const Version = 1

// ErrTruncated is what a decoder reports for a value cut short.
var ErrTruncated = errors.New("truncated value")

// Address families, as AppendAddr writes them.
const (
	famV4 = 4
	famV6 = 6
)

// AppendAddr appends an address as a family byte and its bytes, so that
// addresses sort IPv4 first, then by address.
func AppendAddr(k []byte, addr netip.Addr) []byte {
	if addr.Is4() {
		a := addr.As4()
		return append(append(k, famV4), a[:]...)
	}
	a := addr.As16()
	return append(append(k, famV6), a[:]...)
}

// ParseAddr reads an address as AppendAddr wrote it.
func ParseAddr(b []byte) (netip.Addr, bool) {
	switch {
	case len(b) == 5 && b[0] == famV4:
		return netip.AddrFrom4([4]byte(b[1:])), true
	case len(b) == 17 && b[0] == famV6:
		return netip.AddrFrom16([16]byte(b[1:])), true
	}
	return netip.Addr{}, false
}

// addrSize is the length of the address AppendAddr wrote at the start of
// b, or 0.
func addrSize(b []byte) int {
	switch {
	case len(b) >= 5 && b[0] == famV4:
		return 5
	case len(b) >= 17 && b[0] == famV6:
		return 17
	}
	return 0
}

// An Encoder appends fields to a value.
type Encoder []byte

// Str appends a string.
func (e Encoder) Str(s string) Encoder {
	return append(binary.AppendUvarint(e, uint64(len(s))), s...)
}

// Uint appends an unsigned integer.
func (e Encoder) Uint(u uint64) Encoder { return binary.AppendUvarint(e, u) }

// Int appends an integer.
func (e Encoder) Int(i int64) Encoder { return binary.AppendVarint(e, i) }

// Time appends a time, to the nanosecond (not its location).
func (e Encoder) Time(t time.Time) Encoder {
	return e.Int(t.Unix()).Uint(uint64(t.Nanosecond()))
}

// Strs appends a list of strings.
func (e Encoder) Strs(ss []string) Encoder {
	e = e.Uint(uint64(len(ss)))
	for _, s := range ss {
		e = e.Str(s)
	}
	return e
}

// Addr appends an address as AppendAddr does.
func (e Encoder) Addr(a netip.Addr) Encoder { return AppendAddr(e, a) }

// EncodePool is a pool's value, without its id.
func EncodePool(p *store.Pool, rev int64) []byte {
	return appendPool(make([]byte, 0, 64), p, rev)
}

func appendPool(e Encoder, p *store.Pool, rev int64) Encoder {
	e = e.Uint(Version).Strs(p.CIDRs).Strs(p.Reserved).Int(int64(p.ReuseDelay))
	e = e.Uint(uint64(len(p.Labels)))
	// Sorted, so equal pools encode equally.
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		e = e.Str(k).Str(p.Labels[k])
	}
	e = e.Uint(poolFlags(p))
	if p.ClusterQuota > 0 {
		e = e.Uint(uint64(p.ClusterQuota))
	}
	return e.Time(p.CreateTime).Time(p.UpdateTime).Int(rev)
}

// Pool flags, one bit each.
const (
	flagAllowOverlap = 1 << iota
	flagDeleting
	// flagClusterQuota: the quota follows the flags.
	flagClusterQuota
)

func poolFlags(p *store.Pool) uint64 {
	var f uint64
	if p.AllowOverlap {
		f |= flagAllowOverlap
	}
	if p.Deleting {
		f |= flagDeleting
	}
	if p.ClusterQuota > 0 {
		f |= flagClusterQuota
	}
	return f
}

// AppendAllocation appends an allocation's value without its pool and
// address; only one with a creator cluster has flags (VersionFlagged).
func AppendAllocation(e Encoder, a *store.Allocation, rev int64) Encoder {
	if a.CreatorCluster == "" {
		return appendAllocationBase(e, Version, a, rev)
	}
	e = appendAllocationBase(e, VersionFlagged, a, rev)
	if a.CreatorCluster == a.Owner.Cluster {
		return e.Uint(allocCreatorIsOwner)
	}
	return e.Uint(allocCreator).Str(a.CreatorCluster)
}

// VersionFlagged is the version byte of an allocation's value that has
// flags after the fields every allocation has.
const VersionFlagged = 2

// appendAllocationBase appends the fields every allocation's value has,
// after version.
func appendAllocationBase(e Encoder, version uint64, a *store.Allocation, rev int64) Encoder {
	o := a.Owner
	return e.Uint(version).Str(o.Cluster).Str(o.Kind).Str(o.Namespace).Str(o.Name).Str(o.UID).
		Time(a.CreateTime).Str(a.RequestID).Int(rev)
}

// HashOwnerKey writes to h the owner key (owner.Identity's form) of the
// allocation whose value is v, without decoding or copying it.
func HashOwnerKey(h *maphash.Hash, v []byte) error {
	version, n := binary.Uvarint(v)
	if n <= 0 || (version != Version && version != VersionFlagged) {
		return errors.New("unknown or damaged value version")
	}
	v = v[n:]
	for i := range 4 { // the owner's first four fields (appendAllocationBase)
		size, n := binary.Uvarint(v)
		if n <= 0 || size > uint64(len(v)-n) {
			return ErrTruncated
		}
		if i > 0 {
			h.WriteByte('/')
		}
		h.Write(v[n : n+int(size)])
		v = v[n+int(size):]
	}
	return nil
}

// Allocation flags, one bit each.
const (
	// allocCreator: the creator's cluster follows the flags.
	allocCreator = 1 << iota
	// allocCreatorIsOwner: the creator's cluster is the owner's (what a
	// member cluster's callers make), not repeated.
	allocCreatorIsOwner
	// allocKnown are the flags this version reads.
	allocKnown = allocCreator | allocCreatorIsOwner
)

// AppendRecord appends an allocation's record: its pool and address, then
// its value as AppendAllocation writes it.
func AppendRecord(e Encoder, a *store.Allocation, rev int64) Encoder {
	return AppendAllocation(e.Str(a.Pool).Addr(a.Address), a, rev)
}

// EncodeRecord is an allocation's record (AppendRecord).
func EncodeRecord(a *store.Allocation, rev int64) []byte {
	o := a.Owner
	e := Encoder(make([]byte, 0, 58+len(a.Pool)+len(o.Cluster)+len(o.Kind)+len(o.Namespace)+len(o.Name)+len(o.UID)+len(a.RequestID)+len(a.CreatorCluster)))
	return AppendRecord(e, a, rev)
}

// SplitRecord returns the pool and address of a record and the value
// after them (AppendAllocation's form). The pool and value alias v.
func SplitRecord(v []byte) (pool []byte, addr netip.Addr, val []byte, err error) {
	n, w := binary.Uvarint(v)
	if w > 0 && n <= uint64(len(v)-w) {
		pool, v = v[w:w+int(n)], v[w+int(n):]
		size := addrSize(v)
		if a, ok := ParseAddr(v[:size]); ok {
			return pool, a, v[size:], nil
		}
	}
	return nil, netip.Addr{}, nil, errors.New("malformed allocation record")
}

// DecodeRecord decodes an allocation record, with one allocation for all
// its strings.
func DecodeRecord(v []byte) (store.Allocation, error) {
	d := Decoder{s: string(v)}
	var a store.Allocation
	a.Pool = d.Str()
	a.Address = d.Addr()
	d.allocation(&a)
	if err := d.Finish(); err != nil {
		if !a.Address.IsValid() {
			return a, fmt.Errorf("decode allocation record: %w", err)
		}
		return a, fmt.Errorf("decode allocation %s/%s: %w", a.Pool, a.Address, err)
	}
	return a, nil
}

// EncodeQuarantine is a quarantine record's value, without its pool and
// address.
func EncodeQuarantine(q *store.Quarantine) []byte {
	return Encoder(make([]byte, 0, 16)).Uint(Version).Time(q.Until)
}

// EncodeRequest is a request record's value, without its id: the
// allocations it answered, the revision of its commit and when it was put
// (which dates it for expiry).
func EncodeRequest(r *store.Request, rev int64, put time.Time) []byte {
	return Encoder(make([]byte, 0, 64)).Uint(Version).Strs(r.Allocations).Int(rev).Time(put)
}

// DecodeRequest decodes the value of request record id, and returns when
// it was put.
func DecodeRequest(id string, v []byte) (store.Request, time.Time, error) {
	d := NewDecoder(v)
	r := store.Request{ID: id, Allocations: d.Strs()}
	r.Revision = d.Int()
	put := d.Time()
	if err := d.Finish(); err != nil {
		return r, put, fmt.Errorf("decode request %s: %w", id, err)
	}
	return r, put, nil
}

// Sharer makes equal pool, cluster, kind and namespace strings of
// consecutive allocations one string, which the allocator's interning
// then finds equal by pointer.
type Sharer struct{ pool, cluster, kind, namespace string }

// Share shares a's strings with those of the allocation before it.
func (p *Sharer) Share(a *store.Allocation) {
	same := func(last *string, s *string) {
		if *last == *s {
			*s = *last
		} else {
			*last = *s
		}
	}
	same(&p.pool, &a.Pool)
	same(&p.cluster, &a.Owner.Cluster)
	same(&p.kind, &a.Owner.Kind)
	same(&p.namespace, &a.Owner.Namespace)
}

// A Decoder reads a value copied into one string, whose substrings its
// string fields are. It remembers the first error; later reads return
// zero values.
type Decoder struct {
	s   string
	err error
}

// NewDecoder returns a decoder of v, which starts with Version.
func NewDecoder(v []byte) Decoder {
	d := Decoder{s: string(v)}
	d.version()
	return d
}

func (d *Decoder) version() {
	if v := d.Uint(); d.err == nil && v != Version {
		d.err = fmt.Errorf("unknown value version %d", v)
	}
}

// Fail records err, unless an error came before it.
func (d *Decoder) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.s = ""
}

// Uint reads an unsigned integer.
func (d *Decoder) Uint() uint64 {
	var x uint64
	for i := 0; i < len(d.s) && i < binary.MaxVarintLen64; i++ {
		b := d.s[i]
		if b < 0x80 {
			d.s = d.s[i+1:]
			return x | uint64(b)<<(7*i)
		}
		x |= uint64(b&0x7f) << (7 * i)
	}
	d.Fail(ErrTruncated)
	return 0
}

// Int reads an integer.
func (d *Decoder) Int() int64 {
	u := d.Uint()
	return int64(u>>1) ^ -int64(u&1)
}

// Str reads a string.
func (d *Decoder) Str() string {
	n := d.Uint()
	if n > uint64(len(d.s)) {
		d.Fail(ErrTruncated)
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

// Strs reads a list of strings; nil for none.
func (d *Decoder) Strs() []string {
	n := d.Uint()
	if n == 0 || n > uint64(len(d.s)) { // each string takes at least a byte
		if n > 0 {
			d.Fail(ErrTruncated)
		}
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.Str()
	}
	return out
}

// Time reads a time, in UTC.
func (d *Decoder) Time() time.Time {
	sec := d.Int()
	nsec := d.Uint()
	if nsec >= 1e9 {
		d.Fail(fmt.Errorf("nanoseconds %d out of range", nsec))
		nsec = 0
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

// Addr reads an address as AppendAddr wrote it.
func (d *Decoder) Addr() netip.Addr {
	s := d.s
	switch {
	case len(s) >= 5 && s[0] == famV4:
		var a [4]byte
		copy(a[:], s[1:5])
		d.s = s[5:]
		return netip.AddrFrom4(a)
	case len(s) >= 17 && s[0] == famV6:
		var a [16]byte
		copy(a[:], s[1:17])
		d.s = s[17:]
		return netip.AddrFrom16(a)
	}
	d.Fail(errors.New("malformed address"))
	return netip.Addr{}
}

// Finish reports what went wrong, if anything.
func (d *Decoder) Finish() error {
	if d.err == nil && d.s != "" {
		d.err = fmt.Errorf("%d trailing bytes", len(d.s))
	}
	return d.err
}

// DecodePool decodes the value of pool id.
func DecodePool(id string, v []byte) (store.Pool, error) {
	d := NewDecoder(v)
	p := store.Pool{ID: id}
	d.pool(&p)
	if err := d.Finish(); err != nil {
		return p, fmt.Errorf("decode pool %s: %w", id, err)
	}
	return p, nil
}

// pool reads a pool's fields after the version.
func (d *Decoder) pool(p *store.Pool) {
	p.CIDRs = d.Strs()
	p.Reserved = d.Strs()
	p.ReuseDelay = time.Duration(d.Int())
	if n := d.Uint(); n > 0 && n <= uint64(len(d.s)) {
		p.Labels = make(map[string]string, n)
		for range n {
			k := d.Str()
			p.Labels[k] = d.Str()
		}
	} else if n > 0 {
		d.Fail(ErrTruncated)
	}
	f := d.Uint()
	p.AllowOverlap, p.Deleting = f&flagAllowOverlap != 0, f&flagDeleting != 0
	if f&flagClusterQuota != 0 {
		if q := d.Uint(); q <= math.MaxUint32 {
			p.ClusterQuota = uint32(q)
		} else {
			d.Fail(fmt.Errorf("cluster quota %d out of range", q))
		}
	}
	p.CreateTime = d.Time()
	p.UpdateTime = d.Time()
	p.Revision = d.Int()
}

// DecodeAllocation decodes the value of pool's allocation of addr.
func DecodeAllocation(pool string, addr netip.Addr, v []byte) (store.Allocation, error) {
	d := Decoder{s: string(v)}
	a := store.Allocation{Pool: pool, Address: addr}
	d.allocation(&a)
	if err := d.Finish(); err != nil {
		return a, fmt.Errorf("decode allocation %s/%s: %w", pool, addr, err)
	}
	return a, nil
}

// allocation reads an allocation's value, its version first.
func (d *Decoder) allocation(a *store.Allocation) {
	v := d.Uint()
	if d.err == nil && v != Version && v != VersionFlagged {
		d.Fail(fmt.Errorf("unknown value version %d", v))
	}
	d.allocationBase(a)
	if v != VersionFlagged {
		return
	}
	f := d.Uint()
	if f&^allocKnown != 0 {
		d.Fail(fmt.Errorf("unknown allocation flags %#x", f))
		return
	}
	switch {
	case f == allocCreatorIsOwner:
		a.CreatorCluster = a.Owner.Cluster
	case f&allocCreator != 0:
		a.CreatorCluster = d.Str()
	}
}

// allocationBase reads the fields every allocation has, after the version.
func (d *Decoder) allocationBase(a *store.Allocation) {
	a.Owner.Cluster = d.Str()
	a.Owner.Kind = d.Str()
	a.Owner.Namespace = d.Str()
	a.Owner.Name = d.Str()
	a.Owner.UID = d.Str()
	a.CreateTime = d.Time()
	a.RequestID = d.Str()
	a.Revision = d.Int()
}

// DecodeQuarantine decodes the value of pool's quarantine record of addr.
func DecodeQuarantine(pool string, addr netip.Addr, v []byte) (store.Quarantine, error) {
	d := NewDecoder(v)
	q := store.Quarantine{Pool: pool, Address: addr, Until: d.Time()}
	if err := d.Finish(); err != nil {
		return q, fmt.Errorf("decode quarantine %s/%s: %w", pool, addr, err)
	}
	return q, nil
}
