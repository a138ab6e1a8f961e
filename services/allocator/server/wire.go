package server

import (
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// A watch's snapshot of a large pool is most of what the allocator sends:
// a million allocations built as messages and marshalled took more of its
// CPU than anything else a watch does, most of it in allocating the
// messages' parts. wireEncoder writes the same bytes straight from the
// allocations. FuzzWireEncoder holds it to proto.Marshal of what
// allocationTo builds.

// Field numbers of the messages written here (allocator.proto).
const (
	fieldResponseType       protowire.Number = 1
	fieldResponseAllocation protowire.Number = 2
	fieldResponseRevision   protowire.Number = 3
	fieldResponseSnapshot   protowire.Number = 5

	fieldAllocName       protowire.Number = 1
	fieldAllocPool       protowire.Number = 2
	fieldAllocAddress    protowire.Number = 3
	fieldAllocOwner      protowire.Number = 4
	fieldAllocEtag       protowire.Number = 5
	fieldAllocCreateTime protowire.Number = 6
	fieldAllocRevision   protowire.Number = 7
	fieldAllocOutOfRange protowire.Number = 8
	fieldAllocCreator    protowire.Number = 9

	fieldOwnerCluster   protowire.Number = 1
	fieldOwnerKind      protowire.Number = 2
	fieldOwnerNamespace protowire.Number = 3
	fieldOwnerName      protowire.Number = 4
	fieldOwnerUID       protowire.Number = 5

	fieldTimestampSeconds protowire.Number = 1
	fieldTimestampNanos   protowire.Number = 2
)

// wireEncoder writes WatchAllocationsResponse messages of allocations in
// protobuf's wire format, as proto.Marshal writes them (fields in number
// order, zero values of scalars left out, a present message written even
// when empty). It reuses its buffers: one encoder per goroutine.
type wireEncoder struct {
	alloc, owner, addr, etag []byte
}

// allocation writes the Allocation message of a (outOfRange as
// allocationTo computes it) into the encoder's buffer and returns it,
// valid until the next call. ok is false when a string is not valid
// UTF-8, which proto.Marshal refuses, or the address is the zero Addr
// (allocationTo writes "invalid IP"): the caller then goes through them.
func (e *wireEncoder) allocation(a *store.Allocation, outOfRange bool) (b []byte, ok bool) {
	o := &a.Owner
	if !a.Address.IsValid() || !utf8.ValidString(a.Pool) || !utf8.ValidString(o.Cluster) || !utf8.ValidString(o.Kind) ||
		!utf8.ValidString(o.Namespace) || !utf8.ValidString(o.Name) || !utf8.ValidString(o.UID) || !utf8.ValidString(a.CreatorCluster) {
		return nil, false
	}
	e.addr = a.Address.AppendTo(e.addr[:0])
	e.etag = strconv.AppendInt(e.etag[:0], a.Revision, 10)

	e.owner = appendStringField(e.owner[:0], fieldOwnerCluster, o.Cluster)
	e.owner = appendStringField(e.owner, fieldOwnerKind, o.Kind)
	e.owner = appendStringField(e.owner, fieldOwnerNamespace, o.Namespace)
	e.owner = appendStringField(e.owner, fieldOwnerName, o.Name)
	e.owner = appendStringField(e.owner, fieldOwnerUID, o.UID)

	const poolsPrefix, allocsInfix = "pools/", "/allocations/"
	b = e.alloc[:0]
	b = protowire.AppendTag(b, fieldAllocName, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(poolsPrefix)+len(a.Pool)+len(allocsInfix)+len(e.addr)))
	b = append(append(append(append(b, poolsPrefix...), a.Pool...), allocsInfix...), e.addr...)
	b = protowire.AppendTag(b, fieldAllocPool, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(poolsPrefix)+len(a.Pool)))
	b = append(append(b, poolsPrefix...), a.Pool...)
	b = appendBytesField(b, fieldAllocAddress, e.addr)
	b = protowire.AppendTag(b, fieldAllocOwner, protowire.BytesType)
	b = protowire.AppendBytes(b, e.owner)
	b = appendBytesField(b, fieldAllocEtag, e.etag)

	secs, nanos := a.CreateTime.Unix(), int64(int32(a.CreateTime.Nanosecond()))
	tsLen := 0
	if secs != 0 {
		tsLen += protowire.SizeTag(fieldTimestampSeconds) + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		tsLen += protowire.SizeTag(fieldTimestampNanos) + protowire.SizeVarint(uint64(nanos))
	}
	b = protowire.AppendTag(b, fieldAllocCreateTime, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(tsLen))
	if secs != 0 {
		b = protowire.AppendTag(b, fieldTimestampSeconds, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, fieldTimestampNanos, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(nanos))
	}

	if a.Revision != 0 {
		b = protowire.AppendTag(b, fieldAllocRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.Revision))
	}
	if outOfRange {
		b = protowire.AppendTag(b, fieldAllocOutOfRange, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	b = appendStringField(b, fieldAllocCreator, a.CreatorCluster)
	e.alloc = b
	return b, true
}

// appendSnapshot appends the WatchAllocationsResponse that carries the
// allocations of as as one batch of a snapshot (type ADDED, snapshot).
func (e *wireEncoder) appendSnapshot(b []byte, as []store.Allocation, outOfRange func(*store.Allocation) bool) ([]byte, bool) {
	b = protowire.AppendTag(b, fieldResponseType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(allocatorv1.EventType_EVENT_TYPE_ADDED))
	for i := range as {
		m, ok := e.allocation(&as[i], outOfRange(&as[i]))
		if !ok {
			return nil, false
		}
		b = protowire.AppendTag(b, fieldResponseSnapshot, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, true
}

// appendAdded appends the WatchAllocationsResponse of one allocation of a
// snapshot sent a message at a time (type ADDED, allocation, revision).
func (e *wireEncoder) appendAdded(b []byte, a *store.Allocation, outOfRange bool) ([]byte, bool) {
	m, ok := e.allocation(a, outOfRange)
	if !ok {
		return nil, false
	}
	b = protowire.AppendTag(b, fieldResponseType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(allocatorv1.EventType_EVENT_TYPE_ADDED))
	b = protowire.AppendTag(b, fieldResponseAllocation, protowire.BytesType)
	b = protowire.AppendBytes(b, m)
	if a.Revision != 0 {
		b = protowire.AppendTag(b, fieldResponseRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.Revision))
	}
	return b, true
}

// appendStringField appends a proto3 string field, left out when empty.
func appendStringField(b []byte, n protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendBytesField appends a proto3 string field given as bytes, left out
// when empty.
func appendBytesField(b []byte, n protowire.Number, s []byte) []byte {
	if len(s) == 0 {
		return b
	}
	b = protowire.AppendTag(b, n, protowire.BytesType)
	return protowire.AppendBytes(b, s)
}
