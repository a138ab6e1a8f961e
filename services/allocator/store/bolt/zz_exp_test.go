package bolt

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
)

func TestZZExp(t *testing.T) {
	if os.Getenv("ZZEXP") == "" {
		return
	}
	for _, v := range []string{"default", "nofreelistsync", "allocsize64m", "both"} {
		path := filepath.Join(t.TempDir(), "x.db")
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if v == "nofreelistsync" || v == "both" {
			s.db.NoFreelistSync = true
		}
		if v == "allocsize64m" || v == "both" {
			s.db.AllocSize = 64 << 20
		}
		var lat []time.Duration
		for i := 0; i < 2000; i++ {
			t0 := time.Now()
			if _, err := s.Commit(t.Context(), allocTxn(i)); err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		s.Close()
		slices.Sort(lat)
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		fmt.Println(v, "mean", sum/time.Duration(len(lat)), "p50", lat[len(lat)/2], "p90", lat[len(lat)*9/10], "p99", lat[len(lat)*99/100], "max", lat[len(lat)-1])
	}
	_ = bbolt.FreelistMapType
}
