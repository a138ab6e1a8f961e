package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// Keys. NUL ends a pool id (ids hold none), so a pool's quarantine records
// form one key range, sorted by address (record.AppendAddr). Allocations
// are filed under the sequence number of their first write; the record
// starts with its pool and address (index.go maps them back).
//
//	pools       pool id
//	records     sequence number (8 bytes, big-endian)
//	quarantine  pool 0x00 family address
//	requests    request id
//
// Values are package record's.

func poolPrefix(pool string) []byte {
	k := make([]byte, 0, len(pool)+1)
	return append(append(k, pool...), 0)
}

// addrKey is the key of an address in a pool (allocations, quarantine).
func addrKey(pool string, addr netip.Addr) []byte {
	k := make([]byte, 0, len(pool)+2+16)
	k = append(append(k, pool...), 0)
	return record.AppendAddr(k, addr)
}

// splitAddrKey returns the pool and address of an allocation or
// quarantine key. The pool aliases k.
func splitAddrKey(k []byte) ([]byte, netip.Addr, error) {
	if i := bytes.IndexByte(k, 0); i >= 0 {
		if addr, ok := record.ParseAddr(k[i+1:]); ok {
			return k[:i], addr, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("malformed address key %q", k)
}

// recordKey is the key of the allocation record numbered seq.
func recordKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }
