package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Flags are the command-line settings of the etcd store; the endpoints
// come from the store spec (--store etcd:ENDPOINTS).
type Flags struct {
	// CA verifies etcd's server certificates.
	CA string
	// Cert and Key are the client certificate presented to etcd.
	Cert, Key string
	// Prefix is put before every key.
	Prefix string
	// WatchHistory is Config.History.
	WatchHistory int
}

// AddFlags registers --etcd-ca, --etcd-cert, --etcd-key, --etcd-prefix and
// --etcd-watch-history.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	if f.Prefix == "" {
		f.Prefix = DefaultPrefix
	}
	fs.StringVar(&f.CA, "etcd-ca", f.CA, "PEM CA bundle that verifies etcd's certificates (https endpoints)")
	fs.StringVar(&f.Cert, "etcd-cert", f.Cert, "PEM client certificate presented to etcd")
	fs.StringVar(&f.Key, "etcd-key", f.Key, "PEM private key of --etcd-cert")
	fs.StringVar(&f.Prefix, "etcd-prefix", f.Prefix, "key prefix of this installation in etcd; installations sharing an etcd need different prefixes")
	fs.IntVar(&f.WatchHistory, "etcd-watch-history", f.WatchHistory, fmt.Sprintf("events kept in memory for the watches (the follower's, WatchAllocations streams) that share this replica's one etcd watch; a watch from before them gets an etcd watch of its own (0: %d; -1: every watch its own)", DefaultHistory))
}

// Validate reports settings that cannot work together.
func (f *Flags) Validate() error {
	var errs []error
	if (f.Cert == "") != (f.Key == "") {
		errs = append(errs, errors.New("--etcd-cert and --etcd-key: give both or neither"))
	}
	if f.Prefix == "" || f.Prefix == "/" {
		errs = append(errs, errors.New("--etcd-prefix: must name a key prefix of its own, such as /plexus/"))
	}
	if f.WatchHistory < -1 || f.WatchHistory > maxHistory {
		errs = append(errs, fmt.Errorf("--etcd-watch-history: %d is not -1, 0 or up to %d events", f.WatchHistory, maxHistory))
	}
	return errors.Join(errs...)
}

// Config returns the store configuration for endpoints (comma-separated
// client URLs), loading the TLS files. TLS is used when any of them is
// set or an endpoint is https.
func (f *Flags) Config(endpoints string) (Config, error) {
	cfg := Config{Prefix: f.Prefix, History: f.WatchHistory}
	for _, ep := range strings.Split(endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			cfg.Endpoints = append(cfg.Endpoints, ep)
		}
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, errors.New("the etcd store needs endpoints: etcd:http://127.0.0.1:2379[,...]")
	}
	secure := f.CA != "" || f.Cert != ""
	for _, ep := range cfg.Endpoints {
		secure = secure || strings.HasPrefix(ep, "https://")
	}
	if !secure {
		return cfg, nil
	}
	tc, err := f.tls()
	if err != nil {
		return cfg, err
	}
	cfg.TLS = tc
	return cfg, nil
}

func (f *Flags) tls() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca: no PEM certificate in %s", f.CA)
		}
		tc.RootCAs = pool
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
