package dial

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/plexusnet/plexus/api/apidesc"
)

// A call that fails with UNAVAILABLE may still have taken effect: the
// server can commit and die before it answers, and the client sees the
// connection drop. Repeating such a call is safe only when doing it twice
// is the same as doing it once. The Plexus protos say so per method
// (idempotency_level NO_SIDE_EFFECTS or IDEMPOTENT); a method that does
// not, such as a Release by address, which a retry could apply to the
// address's next holder, is not retried once it may have reached the
// server. (gRPC still retries, transparently, a call that never left the
// client.)

var (
	unsafeOnce    sync.Once
	unsafeMethods []map[string]string
	unsafeErr     error
)

// notRetried returns the service-config names of the Plexus methods that
// declare no idempotency level.
func notRetried() ([]map[string]string, error) {
	unsafeOnce.Do(func() {
		files, err := apidesc.Files()
		if err != nil {
			unsafeErr = err
			return
		}
		files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
			if !strings.HasPrefix(string(fd.Package()), "plexus.") {
				return true
			}
			for i := range fd.Services().Len() {
				sd := fd.Services().Get(i)
				for j := range sd.Methods().Len() {
					md := sd.Methods().Get(j)
					if idempotency(md) == descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN {
						unsafeMethods = append(unsafeMethods, map[string]string{"service": string(sd.FullName()), "method": string(md.Name())})
					}
				}
			}
			return true
		})
		sort.Slice(unsafeMethods, func(i, j int) bool {
			a, b := unsafeMethods[i], unsafeMethods[j]
			return a["service"]+"/"+a["method"] < b["service"]+"/"+b["method"]
		})
		if len(unsafeMethods) == 0 {
			unsafeErr = fmt.Errorf("no Plexus service in the API descriptors")
		}
	})
	return unsafeMethods, unsafeErr
}

func idempotency(md protoreflect.MethodDescriptor) descriptorpb.MethodOptions_IdempotencyLevel {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok {
		return descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN
	}
	return opts.GetIdempotencyLevel()
}
