// Package apidesc embeds the descriptors of Plexus's APIs with their
// comments (source info), which the generated Go code leaves out. Servers
// answer reflection from them, so `grpcurl describe` shows the documentation
// of every message and field. `make generate` rebuilds plexus.binpb.
package apidesc

import (
	_ "embed"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

//go:embed plexus.binpb
var raw []byte

var (
	once  sync.Once
	files *protoregistry.Files
	err   error
)

// Files returns the documented descriptors of every Plexus API file and the
// files they import.
func Files() (*protoregistry.Files, error) {
	once.Do(func() {
		var set descriptorpb.FileDescriptorSet
		if err = proto.Unmarshal(raw, &set); err != nil {
			err = fmt.Errorf("apidesc: %w", err)
			return
		}
		files, err = protodesc.NewFiles(&set)
	})
	return files, err
}

// Resolver finds descriptors in the documented files first and falls back to
// fallback (usually protoregistry.GlobalFiles) for everything else, such as
// the health and reflection services.
type Resolver struct {
	Documented *protoregistry.Files
	Fallback   *protoregistry.Files
}

// FindFileByPath implements protodesc.Resolver.
func (r Resolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if r.Documented != nil {
		if fd, err := r.Documented.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return r.Fallback.FindFileByPath(path)
}

// FindDescriptorByName implements protodesc.Resolver.
func (r Resolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if r.Documented != nil {
		if d, err := r.Documented.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return r.Fallback.FindDescriptorByName(name)
}
