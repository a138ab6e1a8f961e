package etcd

import (
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// Values are package record's encoding, the bolt file's: a pool's without
// its id, which its key holds; an allocation's as a whole record (its pool
// and address too); a quarantine record's without its pool and address.
// Revisions are written as 0: a record's revision is its key's mod
// revision.

func encodePool(p *store.Pool) string { return string(record.EncodePool(p, 0)) }

// decodePool decodes a pool's key and value.
func (k keys) decodePool(kv *mvccpb.KeyValue) (store.Pool, error) {
	p, err := record.DecodePool(strings.TrimPrefix(string(kv.Key), k.pools()), kv.Value)
	p.Revision = kv.ModRevision
	return p, err
}

func encodeAlloc(a *store.Allocation) string { return string(record.EncodeRecord(a, 0)) }

func decodeAlloc(kv *mvccpb.KeyValue) (store.Allocation, error) {
	a, err := record.DecodeRecord(kv.Value)
	a.Revision = kv.ModRevision
	return a, err
}

// allocDecoder decodes allocation values in turn, sharing repeated
// strings (record.Sharer). One goroutine uses it at a time.
type allocDecoder struct{ last record.Sharer }

func (d *allocDecoder) decode(kv *mvccpb.KeyValue) (store.Allocation, error) {
	a, err := decodeAlloc(kv)
	d.last.Share(&a)
	return a, err
}

func encodeQuarantine(q *store.Quarantine) string { return string(record.EncodeQuarantine(q)) }

// decodeQuarantine decodes a quarantine record's key and value.
func (k keys) decodeQuarantine(kv *mvccpb.KeyValue) (store.Quarantine, error) {
	p, err := k.parse(string(kv.Key))
	if err != nil {
		return store.Quarantine{}, err
	}
	return record.DecodeQuarantine(p.pool, p.addr, kv.Value)
}

// encodeRequest is a request record's value; its put time is not kept, as
// etcd's lease expires it.
func encodeRequest(r *store.Request) string {
	return string(record.EncodeRequest(r, 0, time.Time{}))
}

func decodeRequest(id string, kv *mvccpb.KeyValue) (store.Request, error) {
	r, _, err := record.DecodeRequest(id, kv.Value)
	r.Revision = kv.ModRevision
	return r, err
}
