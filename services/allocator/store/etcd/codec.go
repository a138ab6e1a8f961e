package etcd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// Values are JSON, so an operator can read them with etcdctl. Revisions
// are not stored: they are the keys' mod revisions.

type poolValue struct {
	ID           string            `json:"id"`
	CIDRs        []string          `json:"cidrs,omitempty"`
	Reserved     []string          `json:"reserved,omitempty"`
	ReuseDelay   time.Duration     `json:"reuse_delay_ns,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	AllowOverlap bool              `json:"allow_overlap,omitempty"`
	ClusterQuota uint32            `json:"cluster_quota,omitempty"`
	Deleting     bool              `json:"deleting,omitempty"`
	CreateTime   time.Time         `json:"create_time"`
	UpdateTime   time.Time         `json:"update_time"`
}

type ownerValue struct {
	Cluster   string `json:"cluster,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

type allocValue struct {
	Pool       string     `json:"pool"`
	Address    netip.Addr `json:"address"`
	Owner      ownerValue `json:"owner"`
	CreateTime time.Time  `json:"create_time"`
	RequestID  string     `json:"request_id,omitempty"`
}

type quarantineValue struct {
	Pool    string     `json:"pool"`
	Address netip.Addr `json:"address"`
	Until   time.Time  `json:"until"`
}

type requestValue struct {
	Allocations []string `json:"allocations"`
}

func encodePool(p *store.Pool) string {
	return mustJSON(poolValue{
		ID: p.ID, CIDRs: p.CIDRs, Reserved: p.Reserved, ReuseDelay: p.ReuseDelay, Labels: p.Labels,
		AllowOverlap: p.AllowOverlap, ClusterQuota: p.ClusterQuota, Deleting: p.Deleting, CreateTime: p.CreateTime.UTC(), UpdateTime: p.UpdateTime.UTC(),
	})
}

func decodePool(v []byte, rev int64) (store.Pool, error) {
	var pv poolValue
	if err := json.Unmarshal(v, &pv); err != nil {
		return store.Pool{}, fmt.Errorf("decode pool: %w", err)
	}
	return store.Pool{
		ID: pv.ID, CIDRs: pv.CIDRs, Reserved: pv.Reserved, ReuseDelay: pv.ReuseDelay, Labels: pv.Labels,
		AllowOverlap: pv.AllowOverlap, ClusterQuota: pv.ClusterQuota, Deleting: pv.Deleting, CreateTime: pv.CreateTime, UpdateTime: pv.UpdateTime, Revision: rev,
	}, nil
}

// encodeAlloc returns the value of a: what encoding/json writes for its
// allocValue, written without reflection when it can be (appendAllocValue).
func encodeAlloc(a *store.Allocation) string {
	if b, ok := appendAllocValue(make([]byte, 0, 256), a); ok {
		return string(b)
	}
	return mustJSON(allocValueOf(a))
}

func allocValueOf(a *store.Allocation) allocValue {
	o := a.Owner
	return allocValue{
		Pool: a.Pool, Address: a.Address, CreateTime: a.CreateTime.UTC(), RequestID: a.RequestID,
		Owner: ownerValue{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID},
	}
}

func decodeAlloc(v []byte, rev int64) (store.Allocation, error) { return decodeAllocWith(v, rev, nil) }

// decodeAllocWith is decodeAlloc sharing repeated strings with last (see
// allocDecoder).
func decodeAllocWith(v []byte, rev int64, last *allocStrings) (store.Allocation, error) {
	av, ok := parseAllocValueWith(v, last)
	if !ok {
		av = allocValue{}
		if err := json.Unmarshal(v, &av); err != nil {
			return store.Allocation{}, fmt.Errorf("decode allocation: %w", err)
		}
	}
	o := av.Owner
	return store.Allocation{
		Pool: av.Pool, Address: av.Address, CreateTime: av.CreateTime, RequestID: av.RequestID, Revision: rev,
		Owner: decide.Owner{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, UID: o.UID},
	}, nil
}

func encodeQuarantine(q *store.Quarantine) string {
	return mustJSON(quarantineValue{Pool: q.Pool, Address: q.Address, Until: q.Until.UTC()})
}

func decodeQuarantine(v []byte) (store.Quarantine, error) {
	var qv quarantineValue
	if err := json.Unmarshal(v, &qv); err != nil {
		return store.Quarantine{}, fmt.Errorf("decode quarantine: %w", err)
	}
	return store.Quarantine{Pool: qv.Pool, Address: qv.Address, Until: qv.Until}, nil
}

func encodeRequest(r *store.Request) string {
	return mustJSON(requestValue{Allocations: r.Allocations})
}

func decodeRequest(id string, v []byte, rev int64) (store.Request, error) {
	var rv requestValue
	if err := json.Unmarshal(v, &rv); err != nil {
		return store.Request{}, fmt.Errorf("decode request %s: %w", id, err)
	}
	return store.Request{ID: id, Allocations: rv.Allocations, Revision: rev}, nil
}

// mustJSON marshals the value types above, which cannot fail to encode.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("etcd store: encode %T: %v", v, err))
	}
	return string(b)
}
