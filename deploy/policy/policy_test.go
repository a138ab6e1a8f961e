package policy_test

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/deploy/policy"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
)

// needs is the call graph between the services: the methods of other
// services each one calls. The operator may call everything; nobody else
// may call anything. TestCallGraphMatchesSource keeps this table honest.
var needs = map[string][]string{
	"membership": {
		allocatorv1.AllocatorService_GetPool_FullMethodName,
		allocatorv1.AllocatorService_Allocate_FullMethodName,
		allocatorv1.AllocatorService_GetAllocation_FullMethodName,
		allocatorv1.AllocatorService_Release_FullMethodName,
		// A workload's own address is looked up in the pools.
		allocatorv1.AllocatorService_ListPools_FullMethodName,
	},
	"importer": {
		allocatorv1.AllocatorService_BatchAllocate_FullMethodName,
		// The VIP pools' CIDRs, for the ServiceCIDRs.
		allocatorv1.AllocatorService_GetPool_FullMethodName,
		membershipv1.MembershipService_WatchServices_FullMethodName,
	},
	"repair": {
		allocatorv1.AllocatorService_ListPools_FullMethodName,
		allocatorv1.AllocatorService_ListAllocations_FullMethodName,
		allocatorv1.AllocatorService_Release_FullMethodName,
		// A pool left deleting, guarded by the etag the pass saw.
		allocatorv1.AllocatorService_DeletePool_FullMethodName,
		membershipv1.MembershipService_WatchServices_FullMethodName,
	},
}

// api is one service's gRPC API.
type api struct {
	service string // "allocator"
	desc    *grpc.ServiceDesc
	impl    any // answers UNIMPLEMENTED to every method
}

var apis = []api{
	{"allocator", &allocatorv1.AllocatorService_ServiceDesc, allocatorv1.UnimplementedAllocatorServiceServer{}},
	{"membership", &membershipv1.MembershipService_ServiceDesc, membershipv1.UnimplementedMembershipServiceServer{}},
	{"importer", &importerv1.ImporterService_ServiceDesc, importerv1.UnimplementedImporterServiceServer{}},
	{"repair", &repairv1.RepairService_ServiceDesc, repairv1.UnimplementedRepairServiceServer{}},
}

// method is one RPC of an API.
type method struct {
	full   string // "/plexus.allocator.v1.AllocatorService/Release"
	name   string // "Release"
	stream bool
}

func (a api) methods() []method {
	var out []method
	for _, m := range a.desc.Methods {
		out = append(out, method{full: "/" + a.desc.ServiceName + "/" + m.MethodName, name: m.MethodName})
	}
	for _, s := range a.desc.Streams {
		out = append(out, method{full: "/" + a.desc.ServiceName + "/" + s.StreamName, name: s.StreamName, stream: true})
	}
	return out
}

// pkgPath is the import path of the API's generated Go package.
func (a api) pkgPath() string { return reflect.TypeOf(a.impl).PkgPath() }

// TestPoliciesOverMutualTLS runs each shipped policy in a real server of
// the shared runtime with mutual TLS and certificates from `plexusctl
// certs`, and calls every method of every service as every identity: the
// calls a caller needs reach the handler (UNIMPLEMENTED here), every other
// call is PERMISSION_DENIED. Clients without a certificate of the CA get no
// further than the handshake.
func TestPoliciesOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	_, err := certgen.Generate(certgen.Options{Dir: dir})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Cluster: "cluster-a"})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Fleet: true})
	require.NoError(t, err)
	ca, _ := certgen.CAFiles(dir)
	// Every identity, shared, of a member cluster or of the fleet, has
	// the rights of its service.
	type identity struct {
		label, service string
		files          certgen.Paths
	}
	var callers []identity
	for _, c := range append(slices.Clone(certgen.Services), certgen.Operator) {
		callers = append(callers, identity{c, c, certgen.For(dir, c)})
	}
	for _, c := range certgen.MemberServices {
		callers = append(callers, identity{"cluster-a/" + c, c, certgen.MemberFor(dir, "cluster-a", c)})
	}
	for _, c := range certgen.FleetServices {
		callers = append(callers, identity{"fleet/" + c, c, certgen.MemberFor(dir, "", c)})
	}

	for _, a := range apis {
		t.Run(a.service, func(t *testing.T) {
			addr := startServer(t, dir, a)
			conns := map[string]*grpc.ClientConn{}
			for _, c := range callers {
				conns[c.label] = connect(t, addr, dial.WithTLSFiles(ca, c.files.Cert, c.files.Key))
			}
			require.Eventually(t, func() bool { return healthCheck(t, conns[certgen.Operator]) == nil },
				10*time.Second, 20*time.Millisecond, "the server answers its health check")

			allowed := 0
			for _, c := range callers {
				for _, m := range a.methods() {
					want := codes.PermissionDenied
					if c.service == certgen.Operator || slices.Contains(needs[c.service], m.full) {
						want = codes.Unimplemented // through the guard, into the handler
						allowed++
					}
					err := call(t, conns[c.label], m)
					require.Equal(t, want, status.Code(err), "%s calling %s: %v", c.label, m.full, err)
				}
				// Health checks are open to every holder of a certificate.
				require.NoError(t, healthCheck(t, conns[c.label]), "%s checking health", c.label)
			}
			require.GreaterOrEqual(t, allowed, len(a.methods()), "the operator may call every method")

			some := a.methods()[0]
			rogue := testcerts.NewCA(t, "rogue")
			forgedCert, forgedKey := rogue.Issue("operator", testcerts.Leaf{CommonName: certgen.Operator,
				URIs: []string{certgen.SPIFFEID(certgen.Operator)}})
			for name, opts := range map[string][]dial.Option{
				"no client certificate":            {dial.WithTLSFiles(ca, "", "")},
				"operator identity of another CA":  {dial.WithTLSFiles(ca, forgedCert, forgedKey)},
				"plaintext":                        {dial.WithInsecure()},
				"server not trusted by the client": {dial.WithTLSFiles(rogue.File, certgen.For(dir, certgen.Operator).Cert, certgen.For(dir, certgen.Operator).Key)},
			} {
				cc := connect(t, addr, opts...)
				require.Equal(t, codes.Unavailable, status.Code(call(t, cc, some)), "%s: %s", name, some.full)
				require.Equal(t, codes.Unavailable, status.Code(healthCheck(t, cc)), "%s: health", name)
			}
		})
	}
}

// TestPolicyFiles: every service has a policy named after it, and nothing
// else is in the folder.
func TestPolicyFiles(t *testing.T) {
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		p, err := auth.LoadPolicy(f)
		require.NoError(t, err)
		name := strings.TrimSuffix(f, ".json")
		require.Equal(t, name, p.Name(), "%s names its service", f)
		data, err := policy.File(name)
		require.NoError(t, err)
		require.NotEmpty(t, data)
		names = append(names, name)
	}
	require.ElementsMatch(t, certgen.Services, names)
}

// TestCallGraphMatchesSource reads the services' Go source and finds every
// call of another service's RPC (a method of that name with a context and
// a request, in a file that imports the API's generated package), so a new
// call cannot be added without a policy that allows it, and a call that is
// gone does not stay allowed.
func TestCallGraphMatchesSource(t *testing.T) {
	type rpc struct{ full, pkg, service string }
	byName := map[string]rpc{}
	for _, a := range apis {
		for _, m := range a.methods() {
			_, dup := byName[m.name]
			require.False(t, dup, "method name %s is in two APIs: the scan below cannot tell them apart", m.name)
			byName[m.name] = rpc{full: m.full, pkg: a.pkgPath(), service: a.service}
		}
	}

	for _, caller := range certgen.Services {
		root := filepath.Join("..", "..", "services", caller)
		found := map[string][]string{} // method → where
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// Test helpers (sourcetest, repairtest) and end-to-end tests
				// play other parts.
				if name := d.Name(); path != root && (strings.HasSuffix(name, "test") || name == "e2e" || name == "testdata") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			imports := map[string]bool{}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				imports[p] = true
			}
			ast.Inspect(f, func(n ast.Node) bool {
				ce, ok := n.(*ast.CallExpr)
				if !ok || len(ce.Args) < 2 {
					return true // proto getters (GetPool()) take no arguments
				}
				sel, ok := ce.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				r, ok := byName[sel.Sel.Name]
				if ok && r.service != caller && imports[r.pkg] {
					found[r.full] = append(found[r.full], fset.Position(ce.Pos()).String())
				}
				return true
			})
			return nil
		})
		require.NoError(t, err)
		var got []string
		for m := range found {
			got = append(got, m)
		}
		require.ElementsMatch(t, needs[caller], got,
			"the RPCs %s calls (found: %v); update the table and deploy/policy/*.json together", caller, found)
	}
}

// startServer runs a server of the shared runtime for a with its shipped
// policy, its certificate and mutual TLS, and returns its address.
func startServer(t *testing.T, dir string, a api) string {
	t.Helper()
	cfg := config.New(config.Service{Name: a.service})
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	p := certgen.For(dir, a.service)
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = p.Cert, p.Key, p.CA
	cfg.AuthzPolicy = a.service + ".json"
	srv, err := server.New(*cfg, a.service, server.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		server.WithoutSignalHandling(), server.WithDrainDelay(0))
	require.NoError(t, err)
	srv.GRPC().RegisterService(a.desc, a.impl)
	servertest.Serve(t, srv)
	return srv.GRPCAddr()
}

func connect(t *testing.T, addr string, opts ...dial.Option) *grpc.ClientConn {
	t.Helper()
	cc, err := dial.New(addr, append(opts, dial.WithoutRetry())...)
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

func healthCheck(t *testing.T, cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return errors.New(resp.GetStatus().String())
	}
	return err
}

// call calls m with an empty request: the guard decides on the method and
// the caller alone, before the request is looked at.
func call(t *testing.T, cc *grpc.ClientConn, m method) error {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if !m.stream {
		return cc.Invoke(ctx, m.full, &emptypb.Empty{}, &emptypb.Empty{})
	}
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, m.full)
	if err != nil {
		return err
	}
	// A refused stream may already be closed here; RecvMsg reports why.
	_ = st.SendMsg(&emptypb.Empty{})
	_ = st.CloseSend()
	return st.RecvMsg(&emptypb.Empty{})
}
