package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"time"

	"github.com/plexusnet/plexus/services/allocator/app"
	"github.com/plexusnet/plexus/services/allocator/decide"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// prefillConfig says what to write into a store.
type prefillConfig struct {
	file    string
	store   string
	pool    string
	cidr    string
	count   int
	txnSize int
	pools   int
}

func runPrefill(args []string, out io.Writer) error {
	var cfg prefillConfig
	fs := pflag.NewFlagSet("prefill", pflag.ContinueOnError)
	fs.StringVar(&cfg.file, "file", "", "bolt store file to fill (created when missing; the allocator must not be running on it)")
	fs.StringVar(&cfg.store, "store", "", "instead of --file, the store to fill as the allocator's --store names it, such as etcd:http://127.0.0.1:2379 (the default --etcd-prefix; keep --txn-size within etcd's --max-txn-ops, 128 by default: 30)")
	fs.StringVar(&cfg.pool, "pool", "prefill", "pool to create and fill")
	fs.StringVar(&cfg.cidr, "cidr", "10.0.0.0/8", "CIDR of the pool (IPv4 or IPv6)")
	fs.IntVar(&cfg.count, "count", 1_000_000, "allocations to write")
	fs.IntVar(&cfg.txnSize, "txn-size", 10_000, "allocations per store transaction")
	fs.IntVar(&cfg.pools, "pools", 0, "instead of one pool, create this many, POOL-0 .. POOL-(N-1), each with --count allocations, in consecutive equal IPv4 CIDRs carved from --cidr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (cfg.file == "") == (cfg.store == "") {
		return errors.New("one of --file and --store is required")
	}
	if cfg.store == "" {
		cfg.store = "bolt:" + cfg.file
	}
	if cfg.count <= 0 || cfg.txnSize <= 0 {
		return errors.New("--count and --txn-size must be positive")
	}
	start := time.Now()
	if cfg.pools > 0 {
		n, err := prefillPools(context.Background(), cfg)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "wrote %d pools %s-* with %d allocations in all to %s in %s\n", cfg.pools, cfg.pool, n, cfg.store, time.Since(start).Round(time.Millisecond))
		return err
	}
	n, err := prefill(context.Background(), cfg)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "wrote pool %s with %d allocations to %s in %s\n", cfg.pool, n, cfg.store, time.Since(start).Round(time.Millisecond))
	return err
}

// prefill writes a pool and cfg.count allocations with consecutive
// addresses through the store's own API, so the store holds exactly what
// an allocator would have written, only sooner: many allocations per
// transaction and no gRPC. It returns the number written.
func prefill(ctx context.Context, cfg prefillConfig) (int, error) {
	pfx, err := netparse.ParsePrefix(cfg.cidr)
	if err != nil {
		return 0, fmt.Errorf("--cidr: %w", err)
	}
	st, err := openStore(cfg.store)
	if err != nil {
		return 0, err
	}
	defer st.Close()

	now := time.Now().UTC()
	pool := &store.Pool{ID: cfg.pool, CIDRs: []string{pfx.String()}, CreateTime: now, UpdateTime: now}
	if _, err := st.Commit(ctx, store.Txn{
		Conds: []store.Cond{{Kind: store.CondPoolAbsent, Pool: cfg.pool}},
		Ops:   []store.Op{{Kind: store.OpPutPool, Pool: pool}},
	}); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return 0, fmt.Errorf("pool %s already exists in %s: prefill a new store", cfg.pool, cfg.store)
		}
		return 0, err
	}

	// Skip the network address, which an IPv4 pool never hands out.
	addr := pfx.Addr().Next()
	written := 0
	for written < cfg.count {
		n := min(cfg.txnSize, cfg.count-written)
		txn := store.Txn{Ops: make([]store.Op, 0, n)}
		for range n {
			if !pfx.Contains(addr) || (addr.Is4() && pfx.Bits() < 31 && addr == lastAddr(pfx)) {
				return written, fmt.Errorf("%s holds fewer than %d addresses", pfx, cfg.count)
			}
			name := fmt.Sprintf("pod-%08d", written+len(txn.Ops))
			txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
				Pool:       cfg.pool,
				Address:    addr,
				Owner:      decide.Owner{Cluster: "prefill", Kind: "Pod", Namespace: "prefill", Name: name, UID: "uid-" + name},
				CreateTime: now,
			}})
			addr = addr.Next()
		}
		if _, err := st.Commit(ctx, txn); err != nil {
			return written, fmt.Errorf("commit after %d allocations: %w", written, err)
		}
		written += n
	}
	return written, st.Close()
}

// prefillPools writes cfg.pools pools, each a CIDR just large enough for
// cfg.count allocations, carved one after the other from cfg.cidr, and
// fills each. It returns the number of allocations written.
func prefillPools(ctx context.Context, cfg prefillConfig) (int, error) {
	pfx, err := netparse.ParsePrefix(cfg.cidr)
	if err != nil || !pfx.Addr().Is4() {
		return 0, fmt.Errorf("--cidr %q: --pools needs an IPv4 CIDR", cfg.cidr)
	}
	host := 2
	for 1<<host < cfg.count+2 { // network and broadcast addresses
		host++
	}
	if pfx.Bits()+host > 32 || (32-pfx.Bits()-host < 31 && cfg.pools > 1<<(32-pfx.Bits()-host)) {
		return 0, fmt.Errorf("%s holds fewer than %d pools of %d addresses", pfx, cfg.pools, cfg.count)
	}
	st, err := openStore(cfg.store)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	base := binary.BigEndian.Uint32(pfx.Addr().AsSlice())
	now := time.Now().UTC()
	written := 0
	for i := range cfg.pools {
		first := base + uint32(i)<<host
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, first))), 32-host)
		id := fmt.Sprintf("%s-%d", cfg.pool, i)
		txn := store.Txn{
			Conds: []store.Cond{{Kind: store.CondPoolAbsent, Pool: id}},
			Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id, CIDRs: []string{cidr.String()}, CreateTime: now, UpdateTime: now}}},
		}
		addr := cidr.Addr().Next()
		for j := range cfg.count {
			name := fmt.Sprintf("pod-%d-%d", i, j)
			txn.Ops = append(txn.Ops, store.Op{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
				Pool: id, Address: addr, CreateTime: now,
				Owner: decide.Owner{Cluster: "prefill", Kind: "Pod", Namespace: "prefill", Name: name, UID: "uid-" + name},
			}})
			addr = addr.Next()
		}
		if _, err := st.Commit(ctx, txn); err != nil {
			return written, fmt.Errorf("pool %s: %w", id, err)
		}
		written += cfg.count
	}
	return written, st.Close()
}

// lastAddr is the highest address of p (the broadcast address of an IPv4
// CIDR).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 7; j >= 0; j-- {
			if i*8+(7-j) >= bits {
				b[i] |= 1 << j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// openStore opens the store a --store flag names, as the allocator does.
func openStore(spec string) (store.Store, error) {
	o := app.DefaultOptions().Store
	o.Spec = spec
	st, _, err := app.OpenStore(o, slog.Default(), app.StoreHooks{})
	return st, err
}
