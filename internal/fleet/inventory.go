package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// Inventory reports the whole set of members, once at the start and again
// whenever it changes, until ctx ends. It calls update from one goroutine
// at a time.
type Inventory interface {
	// Describe names the inventory for logs.
	Describe() string
	// Run reports the members until ctx ends.
	Run(ctx context.Context, update func([]Member)) error
}

// Static is a fixed set of members (--source).
type Static []Member

// Describe implements Inventory.
func (s Static) Describe() string { return "--source" }

// Run reports the set once and waits for ctx.
func (s Static) Run(ctx context.Context, update func([]Member)) error {
	update(s)
	<-ctx.Done()
	return nil
}

// MaxFileSize bounds a sources file.
const MaxFileSize = 4 << 20

// DefaultFileInterval is how often a sources file is looked at.
const DefaultFileInterval = time.Second

// sourcesFile is the format of a sources file.
type sourcesFile struct {
	// Clusters are the members.
	Clusters []Member `json:"clusters"`
	// Empty says that a file listing no clusters means it.
	Empty bool `json:"empty,omitempty"`
}

// ErrNoMembers is the error of a sources file that lists no clusters
// without saying that it means it: an empty file (a ConfigMap key gone
// missing, a truncated write) would otherwise make every member leave, and
// every import go after the grace.
var ErrNoMembers = errors.New("lists no clusters; write \"empty: true\" to mean that the fleet has no members")

// ParseFile reads a sources file: YAML (or JSON) with one list, clusters,
// of {name, address, tlsServerName, ranges, clusterset}, and, for a file
// that lists none, empty: true (ErrNoMembers without). Unknown fields are
// refused, so that a misspelt field does not silently drop a member's TLS
// identity.
func ParseFile(data []byte) ([]Member, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%d bytes, at most %d", len(data), MaxFileSize)
	}
	var f sourcesFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	switch {
	case len(f.Clusters) == 0 && !f.Empty:
		return nil, ErrNoMembers
	case len(f.Clusters) > 0 && f.Empty:
		return nil, fmt.Errorf("says empty: true and lists %d clusters", len(f.Clusters))
	}
	return check(f.Clusters)
}

// marshalFile writes members as a sources file; none is written as an
// explicitly empty file.
func marshalFile(members []Member) ([]byte, error) {
	return yaml.Marshal(sourcesFile{Clusters: members, Empty: len(members) == 0})
}

// File is a sources file, re-read when its content changes: the way a
// mounted ConfigMap or Secret changes under a running process (the kubelet
// swaps a symlink; the path stays).
type File struct {
	// ClusterSet, when set, is the clusterset of the follower: members
	// whose entry names another clusterset are skipped, as
	// ClusterProfiles of another clusterset are.
	ClusterSet string

	path   string
	every  time.Duration
	logger *slog.Logger
}

// NewFile returns the inventory of the file at path, looked at every
// interval (DefaultFileInterval when zero).
func NewFile(path string, every time.Duration, logger *slog.Logger) *File {
	if every <= 0 {
		every = DefaultFileInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &File{path: path, every: every, logger: logger.With("sources_file", path)}
}

// Describe implements Inventory.
func (f *File) Describe() string { return "--sources-file " + f.path }

// Run reports the file's members whenever its content changes. A file that
// cannot be read or parsed keeps the last good set (none, at the start),
// with a warning each time its content changes.
func (f *File) Run(ctx context.Context, update func([]Member)) error {
	var last []byte
	var lastErr string
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		data, err := readFile(f.path)
		var members []Member
		if err == nil && (last == nil || !bytes.Equal(data, last)) {
			last = data
			members, err = ParseFile(data)
			if err == nil {
				lastErr = ""
				update(f.ofClusterSet(members))
			}
		}
		if err != nil && err.Error() != lastErr {
			lastErr = err.Error()
			f.logger.Warn("sources file not applied; the members stay as they were", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ofClusterSet leaves out the members of another clusterset, with a
// warning.
func (f *File) ofClusterSet(members []Member) []Member {
	if f.ClusterSet == "" {
		return members
	}
	out := members[:0:0]
	for _, m := range members {
		if m.ClusterSet != "" && m.ClusterSet != f.ClusterSet {
			f.logger.Warn("sources file entry skipped: it belongs to another clusterset", "cluster", m.Name, "clusterset", m.ClusterSet, "want", f.ClusterSet)
			continue
		}
		out = append(out, m)
	}
	return out
}

// readFile reads at most MaxFileSize+1 bytes of path.
func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, errors.New("larger than " + fmt.Sprint(MaxFileSize) + " bytes")
	}
	return data, nil
}
