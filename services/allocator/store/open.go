package store

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
)

// DefaultSpec is the default of the allocator's --store flag: the
// embedded bolt store in the working directory.
const DefaultSpec = "bolt:plexus-allocator.db"

// Config is what Open hands a driver besides the argument of the spec.
type Config struct {
	// Logger is never nil when a driver gets it.
	Logger *slog.Logger
	// History is how many events to keep for watches from a past
	// revision; 0 leaves the driver's default.
	History int
	// ObserveExpired, when set, is called with the number of request
	// records the store dropped past their retention, for a metric.
	ObserveExpired func(records int)
}

// OpenOption configures Open.
type OpenOption func(*Config)

// WithLogger sets the store's logger (default slog.Default()).
func WithLogger(l *slog.Logger) OpenOption { return func(c *Config) { c.Logger = l } }

// WithHistory sets how many events the store keeps for watches.
func WithHistory(events int) OpenOption { return func(c *Config) { c.History = events } }

// WithExpiredObserver sets Config.ObserveExpired.
func WithExpiredObserver(fn func(records int)) OpenOption {
	return func(c *Config) { c.ObserveExpired = fn }
}

// Driver opens a store of one kind; arg is the part of the spec after
// "kind:" and hasArg tells "kind" from "kind:".
type Driver func(arg string, hasArg bool, cfg Config) (Store, error)

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a kind of store available to Open. Store packages call
// it from init, so a program selects the kinds it supports by importing
// them (the allocator imports bolt and memory). Registering a kind twice
// panics, as it is a programming error.
func Register(kind string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[kind]; dup {
		panic("store: driver registered twice: " + kind)
	}
	drivers[kind] = d
}

// Open opens the store a --store flag names:
//
//	bolt:PATH       the embedded bbolt file at PATH (DefaultSpec)
//	memory          in memory, lost on exit (tests, demos)
//	etcd:ENDPOINTS  etcd, shared by several replicas (registered by package etcd)
func Open(spec string, opts ...OpenOption) (Store, error) {
	cfg := Config{Logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	kind, arg, hasArg := strings.Cut(spec, ":")
	driversMu.RLock()
	d, ok := drivers[kind]
	known := slices.Sorted(maps.Keys(drivers))
	driversMu.RUnlock()
	switch {
	case spec == "":
		return nil, fmt.Errorf("store spec is empty (want e.g. %q)", DefaultSpec)
	case !ok:
		return nil, fmt.Errorf("store %q: unknown kind %q (known: %s)", spec, kind, strings.Join(known, ", "))
	}
	s, err := d(arg, hasArg, cfg)
	if err != nil {
		return nil, fmt.Errorf("store %q: %w", spec, err)
	}
	return s, nil
}
