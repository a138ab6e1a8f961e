package etcd

import (
	"bytes"
	"time"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// Every replica decodes the value of every allocation any replica
// commits, as its watch delivers it, and encoding/json's reflection was a
// third of what a replica that only follows spends per commit. The values
// this store writes have one shape (encodeAlloc: the fields in order, no
// spaces, plain strings), and parseAllocValue reads that shape directly.
// Anything else, an escape in a string, a byte beyond ASCII, a space, an
// unknown or repeated field, is left to encoding/json: parseAllocValue
// then reports ok=false, and it never accepts a value that encoding/json
// would read differently or refuse (FuzzParseAllocValue checks both).

// Every commit encodes the allocations it writes, and encoding/json's
// reflection was the deepest and costliest part of it. appendAllocValue
// writes the same bytes directly for the values that are plain
// (FuzzEncodeAlloc checks it against encoding/json); anything else is left
// to encoding/json.

// appendAllocValue appends the JSON encoding/json writes for a's
// allocValue, or reports false when a string needs escaping or the time
// is one encoding/json would refuse.
func appendAllocValue(b []byte, a *store.Allocation) ([]byte, bool) {
	created := a.CreateTime.UTC()
	if y := created.Year(); y < 0 || y > 9999 {
		return nil, false
	}
	ok := true
	str := func(key, v string, omitEmpty bool) {
		if !ok || omitEmpty && v == "" {
			return
		}
		b = append(b, key...)
		b = append(b, '"')
		for i := range len(v) {
			if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				ok = false
				return
			}
		}
		b = append(b, v...)
		b = append(b, '"')
	}
	str(`{"pool":`, a.Pool, false)
	b = append(b, `,"address":"`...)
	b = a.Address.AppendTo(b)
	b = append(b, `","owner":{`...)
	mark := len(b)
	o := a.Owner
	for _, f := range [...]struct{ key, v string }{
		{`"cluster":`, o.Cluster}, {`"kind":`, o.Kind}, {`"namespace":`, o.Namespace}, {`"name":`, o.Name}, {`"uid":`, o.UID},
	} {
		if f.v != "" && len(b) > mark {
			b = append(b, ',')
		}
		str(f.key, f.v, true)
	}
	b = append(b, `},"create_time":"`...)
	b = created.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	str(`,"request_id":`, a.RequestID, true)
	b = append(b, '}')
	return b, ok
}

// allocFields and ownerFields are the fields in the order encodeAlloc
// writes them; a field may be missing (omitempty), not moved.
var (
	allocFields = [...]string{"pool", "address", "owner", "create_time", "request_id"}
	ownerFields = [...]string{"cluster", "kind", "namespace", "name", "uid"}
)

// allocStrings are the pool, cluster, kind and namespace of the last
// value an allocDecoder read. Values read one after another (a snapshot,
// a watch) mostly repeat them, and a repeated one is handed out again
// instead of allocated: four strings of the seven a value holds.
type allocStrings struct{ pool, cluster, kind, namespace string }

// allocDecoder decodes allocation values in turn, sharing repeated
// strings (allocStrings). One goroutine uses it at a time.
type allocDecoder struct{ last allocStrings }

func (d *allocDecoder) decode(v []byte, rev int64) (store.Allocation, error) {
	return decodeAllocWith(v, rev, &d.last)
}

func parseAllocValue(v []byte) (allocValue, bool) { return parseAllocValueWith(v, nil) }

// parseAllocValueWith is parseAllocValue, sharing the strings of last when
// not nil, and leaving in it those of v.
func parseAllocValueWith(v []byte, last *allocStrings) (allocValue, bool) {
	var av allocValue
	p := valueParser{buf: v, last: last}
	next := 0
	ok := p.object(func(key []byte) bool {
		i := fieldIndex(allocFields[:], next, key)
		if i < 0 {
			return false
		}
		next = i + 1
		switch i {
		case 0:
			return p.shared(&av.Pool, func(l *allocStrings) *string { return &l.pool })
		case 1:
			s, ok := p.strBytes()
			return ok && av.Address.UnmarshalText(s) == nil
		case 2:
			return p.owner(&av.Owner)
		case 3:
			return p.time(&av.CreateTime)
		default:
			return p.str(&av.RequestID)
		}
	})
	return av, ok && p.pos == len(p.buf)
}

func (p *valueParser) owner(o *ownerValue) bool {
	dst := [...]*string{&o.Cluster, &o.Kind, &o.Namespace, &o.Name, &o.UID}
	next := 0
	return p.object(func(key []byte) bool {
		i := fieldIndex(ownerFields[:], next, key)
		if i < 0 {
			return false
		}
		next = i + 1
		switch i {
		case 0:
			return p.shared(dst[i], func(l *allocStrings) *string { return &l.cluster })
		case 1:
			return p.shared(dst[i], func(l *allocStrings) *string { return &l.kind })
		case 2:
			return p.shared(dst[i], func(l *allocStrings) *string { return &l.namespace })
		}
		return p.str(dst[i])
	})
}

// fieldIndex finds key among fields[from:], so fields come in order and
// at most once.
func fieldIndex(fields []string, from int, key []byte) int {
	for i := from; i < len(fields); i++ {
		if string(key) == fields[i] {
			return i
		}
	}
	return -1
}

// valueParser reads the plain JSON subset described above.
type valueParser struct {
	buf  []byte
	pos  int
	last *allocStrings // nil: share nothing
}

func (p *valueParser) byte(c byte) bool {
	if p.pos < len(p.buf) && p.buf[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// object reads {"key":value,...}, calling field with each key while the
// parser stands on the value.
func (p *valueParser) object(field func(key []byte) bool) bool {
	if !p.byte('{') {
		return false
	}
	if p.byte('}') {
		return true
	}
	for {
		key, ok := p.strBytes()
		if !ok || !p.byte(':') || !field(key) {
			return false
		}
		if p.byte('}') {
			return true
		}
		if !p.byte(',') {
			return false
		}
	}
}

// strBytes reads a string with no escapes and only printable ASCII, and
// returns its contents without the quotes.
func (p *valueParser) strBytes() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	rest := p.buf[p.pos:]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	for _, c := range rest[:end] {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, false
		}
	}
	p.pos += end + 1
	return rest[:end], true
}

func (p *valueParser) str(dst *string) bool {
	s, ok := p.strBytes()
	*dst = string(s)
	return ok
}

// shared reads a string into dst as str does, handing out the field of
// p.last that field picks when it holds the same, and keeping the string
// read there otherwise.
func (p *valueParser) shared(dst *string, field func(*allocStrings) *string) bool {
	if p.last == nil {
		return p.str(dst)
	}
	s, ok := p.strBytes()
	if last := field(p.last); string(s) == *last {
		*dst = *last
	} else {
		*dst = string(s)
		*last = *dst
	}
	return ok
}

// time reads a quoted timestamp as time.Time's JSON decoding does.
func (p *valueParser) time(t *time.Time) bool {
	start := p.pos
	if _, ok := p.strBytes(); !ok {
		return false
	}
	return t.UnmarshalJSON(p.buf[start:p.pos]) == nil
}
