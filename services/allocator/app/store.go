package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// StoreOptions say which store the allocator keeps its allocations in:
// --store and, for etcd, the --etcd-* flags.
type StoreOptions struct {
	// Spec is --store: bolt:PATH, etcd:URL[,URL...] or memory.
	Spec string
	// EtcdCA verifies etcd's server certificates; EtcdCert and EtcdKey
	// are the client certificate presented to etcd.
	EtcdCA, EtcdCert, EtcdKey string
	// EtcdPrefix is put before every key.
	EtcdPrefix string
	// EtcdWatchHistory is etcd.Config.History.
	EtcdWatchHistory int
}

// AddFlags registers --store and the --etcd-* flags.
func (o *StoreOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Spec, "store", o.Spec, "where allocations are kept: bolt:PATH (embedded file, fsync per acknowledged write), "+
		"etcd:URL[,URL...] (shared by several allocator replicas, all active) or memory (lost on exit)")
	fs.StringVar(&o.EtcdCA, "etcd-ca", o.EtcdCA, "PEM CA bundle that verifies etcd's certificates (https endpoints)")
	fs.StringVar(&o.EtcdCert, "etcd-cert", o.EtcdCert, "PEM client certificate presented to etcd")
	fs.StringVar(&o.EtcdKey, "etcd-key", o.EtcdKey, "PEM private key of --etcd-cert")
	fs.StringVar(&o.EtcdPrefix, "etcd-prefix", o.EtcdPrefix, "key prefix of this installation in etcd; installations sharing an etcd need different prefixes")
	fs.IntVar(&o.EtcdWatchHistory, "etcd-watch-history", o.EtcdWatchHistory, fmt.Sprintf("events kept in memory for the watches (the follower's, WatchAllocations streams) that share this replica's one etcd watch; a watch from before them gets an etcd watch of its own (0: %d; -1: every watch its own)", etcd.DefaultHistory))
}

// Validate reports settings that cannot work together.
func (o *StoreOptions) Validate() error {
	var errs []error
	if (o.EtcdCert == "") != (o.EtcdKey == "") {
		errs = append(errs, errors.New("--etcd-cert and --etcd-key: give both or neither"))
	}
	if o.EtcdPrefix == "" || o.EtcdPrefix == "/" {
		errs = append(errs, errors.New("--etcd-prefix: must name a key prefix of its own, such as /plexus/"))
	}
	if o.EtcdWatchHistory < -1 || o.EtcdWatchHistory > etcd.MaxHistory {
		errs = append(errs, fmt.Errorf("--etcd-watch-history: %d is not -1, 0 or up to %d events", o.EtcdWatchHistory, etcd.MaxHistory))
	}
	return errors.Join(errs...)
}

// StoreHooks are what a store reports for metrics; nil hooks are not
// called.
type StoreHooks struct {
	// Expired is told how many request records the bolt store dropped
	// past their retention.
	Expired func(records int)
	// Combined is told how many commits the etcd store sent to etcd in
	// one transaction.
	Combined func(commits int)
}

// OpenStore opens the store o names; shared reports whether other
// replicas may commit to it too. It is the one way a program opens a
// store from its flags:
//
//	bolt:PATH       the embedded bbolt file at PATH (DefaultStore)
//	memory          lost on exit: a bolt file without a name (tests, demos)
//	etcd:ENDPOINTS  etcd, shared by several replicas
func OpenStore(o StoreOptions, logger *slog.Logger, hooks StoreHooks) (st store.Store, shared bool, err error) {
	kind, arg, hasArg := strings.Cut(o.Spec, ":")
	switch {
	case o.Spec == "":
		err = fmt.Errorf("is empty (want e.g. %q)", DefaultStore)
	case kind == "bolt" && arg == "":
		err = errors.New("the bolt store needs a file: bolt:PATH")
	case kind == "bolt":
		st, err = bolt.Open(arg, bolt.WithLogger(logger), bolt.WithExpiredObserver(hooks.Expired))
	case kind == "memory" && hasArg:
		err = errors.New(`the memory store takes no argument: use "memory"`)
	case kind == "memory":
		st, err = bolt.OpenTemp(bolt.WithLogger(logger), bolt.WithExpiredObserver(hooks.Expired))
	case kind == "etcd":
		var cfg etcd.Config
		if cfg, err = o.etcdConfig(arg); err == nil {
			cfg.Logger, cfg.ObserveCombined = logger, hooks.Combined
			st, err = etcd.Open(cfg)
			shared = true
		}
	default:
		err = fmt.Errorf("unknown kind %q (known: bolt, etcd, memory)", kind)
	}
	if err != nil {
		return nil, false, fmt.Errorf("--store %q: %w", o.Spec, err)
	}
	return st, shared, nil
}

// etcdConfig returns the etcd store's configuration for endpoints
// (comma-separated client URLs), loading the TLS files. TLS is used when
// any of them is set or an endpoint is https.
func (o *StoreOptions) etcdConfig(endpoints string) (etcd.Config, error) {
	cfg := etcd.Config{Prefix: o.EtcdPrefix, History: o.EtcdWatchHistory}
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, errors.New("the etcd store needs endpoints: etcd:http://127.0.0.1:2379[,...]")
	}
	secure := o.EtcdCA != "" || o.EtcdCert != ""
	for _, ep := range cfg.Endpoints {
		secure = secure || strings.HasPrefix(ep, "https://")
	}
	if !secure {
		return cfg, nil
	}
	tc, err := o.etcdTLS()
	cfg.TLS = tc
	return cfg, err
}

func (o *StoreOptions) etcdTLS() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.EtcdCA != "" {
		pem, err := os.ReadFile(o.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca: no PEM certificate in %s", o.EtcdCA)
		}
		tc.RootCAs = pool
	}
	if o.EtcdCert != "" {
		cert, err := tls.LoadX509KeyPair(o.EtcdCert, o.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
