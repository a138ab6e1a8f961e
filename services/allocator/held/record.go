package held

import (
	"encoding/binary"
	"errors"
	"time"
)

// A record is one allocation packed into a string: everything but the
// pool and the address (the table's) and the owner's cluster, kind and
// namespace (interned, referred to by number). Strings are immutable, so
// a decoded allocation's name, uid and request id are slices of the
// record, not copies.
//
//	revision     uvarint
//	create time  zig-zag varint seconds, uvarint nanoseconds
//	prefix       uvarint (the interned cluster/kind/namespace)
//	name         uvarint length, bytes
//	uid          tag byte: 0 then uvarint length and bytes, or
//	             1 then the 16 bytes of a UUID in canonical form
//	request id   uvarint length, bytes
//	creator      absent when the creator's cluster is empty; else a tag
//	             byte: 0 when it is the owner's cluster, or 1 then
//	             uvarint length and bytes
type record string

// fields are a record's contents.
type fields struct {
	revision  int64
	create    time.Time
	prefix    uint32
	name      string
	uid       string
	requestID string
	// creator is the cluster of the allocation's creator; sameCreator
	// says it is the owner's (and creator is then empty).
	creator     string
	sameCreator bool
}

const (
	uidRaw  = 0
	uidUUID = 1

	creatorSame  = 0
	creatorOther = 1
)

var errCorrupt = errors.New("held: corrupt record")

// encode packs f into a record.
func encode(f fields) record { return record(appendRecord(nil, f)) }

// appendRecord packs f at the end of b.
func appendRecord(b []byte, f fields) []byte {
	var u [16]byte
	isUUID := parseUUID(f.uid, &u)
	b = binary.AppendUvarint(b, uint64(f.revision))
	b = binary.AppendVarint(b, f.create.Unix())
	b = binary.AppendUvarint(b, uint64(f.create.Nanosecond()))
	b = binary.AppendUvarint(b, uint64(f.prefix))
	b = appendString(b, f.name)
	if isUUID {
		b = append(b, uidUUID)
		b = append(b, u[:]...)
	} else {
		b = append(b, uidRaw)
		b = appendString(b, f.uid)
	}
	b = appendString(b, f.requestID)
	switch {
	case f.sameCreator:
		b = append(b, creatorSame)
	case f.creator != "":
		b = appendString(append(b, creatorOther), f.creator)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// revision reads the record's revision alone.
func (r record) revision() int64 {
	d := decoder{s: string(r)}
	return int64(d.uvarint())
}

// decode unpacks r.
func (r record) decode() (fields, error) {
	var f fields
	d := decoder{s: string(r)}
	f.revision = int64(d.uvarint())
	sec := d.varint()
	nsec := d.uvarint()
	f.create = time.Unix(sec, int64(nsec)).UTC()
	p := d.uvarint()
	f.prefix = uint32(p)
	f.name = d.str()
	switch d.byte() {
	case uidUUID:
		f.uid = formatUUID(d.take(16))
	case uidRaw:
		f.uid = d.str()
	default:
		d.bad = true
	}
	f.requestID = d.str()
	if d.s != "" {
		switch d.byte() {
		case creatorSame:
			f.sameCreator = true
		case creatorOther:
			f.creator = d.str()
			d.bad = d.bad || f.creator == ""
		default:
			d.bad = true
		}
	}
	if d.bad || d.s != "" || p > 1<<32-1 || nsec >= 1e9 {
		return fields{}, errCorrupt
	}
	return f, nil
}

// prefixAndName reads the interned prefix and the name alone: what an
// owner lookup compares.
func (r record) prefixAndName() (uint32, string) {
	d := decoder{s: string(r)}
	d.uvarint()
	d.varint()
	d.uvarint()
	p := d.uvarint()
	return uint32(p), d.str()
}

// creator reads the creator's cluster alone, of a record whose owner is
// of no cluster (so the creator is never "the owner's").
func (r record) creator() string {
	d := decoder{s: string(r)}
	d.uvarint()
	d.varint()
	d.uvarint()
	d.uvarint()
	d.str()
	if d.byte() == uidUUID {
		d.take(16)
	} else {
		d.str()
	}
	d.str()
	if d.s == "" || d.byte() != creatorOther {
		return ""
	}
	return d.str()
}

// decoder reads a record front to back; bad is set once anything does not
// decode, and every read after that returns zero values.
type decoder struct {
	s   string
	bad bool
}

func (d *decoder) uvarint() uint64 {
	var x uint64
	var sh uint
	for i := 0; i < len(d.s) && i < binary.MaxVarintLen64; i++ {
		c := d.s[i]
		if c < 0x80 {
			d.s = d.s[i+1:]
			return x | uint64(c)<<sh
		}
		x |= uint64(c&0x7f) << sh
		sh += 7
	}
	d.bad, d.s = true, ""
	return 0
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) take(n int) string {
	if n > len(d.s) {
		d.bad, d.s = true, ""
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}

func (d *decoder) byte() byte {
	b := d.take(1)
	if b == "" {
		return 0xff
	}
	return b[0]
}

func (d *decoder) str() string {
	n := d.uvarint()
	if n > uint64(len(d.s)) {
		d.bad, d.s = true, ""
		return ""
	}
	return d.take(int(n))
}

// parseUUID reads a UUID in canonical lower-case form (what Kubernetes
// gives every object) into u. Anything else is kept as it is.
func parseUUID(s string, u *[16]byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := fromHex(s[i])
		lo, ok2 := fromHex(s[i+1])
		if !ok1 || !ok2 {
			return false
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func formatUUID(b string) string {
	if len(b) != 16 {
		return ""
	}
	const digits = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i := 0; i < 16; i++ {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = digits[b[i]>>4], digits[b[i]&0xf]
		j += 2
	}
	return string(out[:])
}
