package held

import (
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, f := range []fields{
		{},
		{revision: 1, create: time.Unix(1_700_000_000, 123456789).UTC(), prefix: 3, name: "web", uid: "0f6c1e8a-3b9e-4c5d-8f7a-1b2c3d4e5f60", requestID: "req-1"},
		{revision: 1<<63 - 1, create: time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC), prefix: 1<<32 - 1, name: "x", uid: "0F6C1E8A-3B9E-4C5D-8F7A-1B2C3D4E5F60"},
		{revision: 7, uid: "not-a-uuid-but-36-characters-long-xx"},
		{revision: 7, uid: "0f6c1e8a-3b9e-4c5d-8f7a-1b2c3d4e5f6g"},
		{revision: 8, name: "vip", creator: "east"},
		{revision: 9, name: "pod", requestID: "r", sameCreator: true},
	} {
		got, err := encode(f).decode()
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if got != f {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, f)
		}
		if p, n := encode(f).prefixAndName(); p != f.prefix || n != f.name {
			t.Fatalf("prefixAndName = %d %q, want %d %q", p, n, f.prefix, f.name)
		}
		if c := encode(f).creator(); c != f.creator {
			t.Fatalf("creator = %q, want %q", c, f.creator)
		}
		if r := encode(f).revision(); r != f.revision {
			t.Fatalf("revision = %d, want %d", r, f.revision)
		}
	}
}

func TestRecordPacksUUIDs(t *testing.T) {
	raw := encode(fields{uid: "uid-of-something"})
	uuid := encode(fields{uid: "0f6c1e8a-3b9e-4c5d-8f7a-1b2c3d4e5f60"})
	if len(uuid) >= len(raw)+4 {
		t.Fatalf("a UUID takes %d bytes of record, a 16-character uid %d: not packed", len(uuid), len(raw))
	}
}

func TestRecordCorrupt(t *testing.T) {
	good := string(encode(fields{revision: 5, name: "n", uid: "u", requestID: "r"}))
	for i := 0; i < len(good); i++ {
		if _, err := record(good[:i]).decode(); err == nil {
			t.Fatalf("a record cut to %d of %d bytes decoded", i, len(good))
		}
	}
	if _, err := record(good + "x").decode(); err == nil {
		t.Fatal("a record with a trailing byte decoded")
	}
}

func FuzzRecord(f *testing.F) {
	f.Add(int64(1), int64(1_700_000_000), int64(5), uint32(0), "web", "0f6c1e8a-3b9e-4c5d-8f7a-1b2c3d4e5f60", "", []byte{})
	f.Add(int64(0), int64(-62135596800), int64(0), uint32(9), "", "u", "req", []byte{0x80, 0x80})
	f.Fuzz(func(t *testing.T, rev, sec, nsec int64, prefix uint32, name, uid, req string, junk []byte) {
		// Whatever the bytes, decoding never panics.
		_, _ = record(junk).decode()
		_ = record(junk).revision()
		_, _ = record(junk).prefixAndName()
		_ = record(junk).creator()

		if rev < 0 {
			rev = -rev
		}
		if nsec < 0 {
			nsec = -nsec
		}
		in := fields{revision: rev & (1<<63 - 1), create: time.Unix(sec%(1<<40), nsec%1e9).UTC(), prefix: prefix, name: name, uid: uid, requestID: req}
		got, err := encode(in).decode()
		if err != nil {
			t.Fatalf("%+v: %v", in, err)
		}
		if got != in {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
		}
	})
}
