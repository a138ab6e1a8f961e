package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/dial"
)

// Modes of the load.
const (
	modeAllocate        = "allocate"
	modeAllocateRelease = "allocate-release"
	// modeAllocateGet reads each allocation back through the next
	// connection (another replica when --addr lists several).
	modeAllocateGet = "allocate-get"
	modeBatch       = "batch"
	// modeIPAddress is the peer: the Kubernetes-native way of claiming
	// an address, one networking.k8s.io/v1 IPAddress object per
	// allocation, created on the kube-apiserver of --kubeconfig.
	modeIPAddress = "ipaddress"
)

// loadConfig is the load to generate.
type loadConfig struct {
	addr      string
	clients   int
	conns     int
	duration  time.Duration
	requests  int
	warmup    time.Duration
	pool      string
	pools     int
	cidr      string
	mode      string
	batchSize int
	timeout   time.Duration
	format    string
	// kubeconfig is the cluster of the ipaddress mode.
	kubeconfig string
	// tokenFile, when set, holds the bearer token of every call, so the
	// load runs as a principal (an allocator with --auth-tokens).
	tokenFile string
}

func (c *loadConfig) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7401", "allocator gRPC address; several, comma-separated, spread the connections over replicas")
	fs.IntVar(&c.clients, "clients", 64, "concurrent clients, each with one call in flight")
	fs.IntVar(&c.conns, "conns", 4, "gRPC connections the clients share")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to measure (ignored with --requests)")
	fs.IntVar(&c.requests, "requests", 0, "stop after this many measured calls instead of after --duration")
	fs.DurationVar(&c.warmup, "warmup", 0, "run this long before measuring")
	fs.StringVar(&c.pool, "pool", "load", "pool to allocate from; created with --cidr when missing")
	fs.IntVar(&c.pools, "pools", 0, "spread the calls over the pools POOL-0 .. POOL-(N-1), which must exist (allocload prefill --pools)")
	fs.StringVar(&c.cidr, "cidr", "10.0.0.0/8", "CIDR of the pool when it has to be created")
	fs.StringVar(&c.mode, "mode", modeAllocate, "allocate (fresh owners), allocate-release (allocate, then release it guarded by etag), allocate-get (allocate, then read it back through the next connection: another replica when --addr lists several), batch (BatchAllocate of --batch-size fresh owners) "+
		"or ipaddress (the Kubernetes way, for comparison: create one IPAddress object per allocation on the kube-apiserver of --kubeconfig)")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster of the ipaddress mode")
	fs.IntVar(&c.batchSize, "batch-size", 1000, "addresses per BatchAllocate in batch mode")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of each call")
	fs.StringVar(&c.format, "format", "text", "output: text or json")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the bearer token presented on every call (an allocator with --auth-tokens); the owners are of cluster \"load\"")
}

func (c *loadConfig) validate() error {
	var errs []error
	if c.clients <= 0 {
		errs = append(errs, errors.New("--clients must be positive"))
	}
	if c.conns <= 0 {
		errs = append(errs, errors.New("--conns must be positive"))
	}
	if c.pools < 0 {
		errs = append(errs, errors.New("--pools must not be negative"))
	}
	if c.requests < 0 {
		errs = append(errs, errors.New("--requests must not be negative"))
	}
	if c.requests == 0 && c.duration <= 0 {
		errs = append(errs, errors.New("--duration must be positive"))
	}
	switch c.mode {
	case modeAllocate, modeAllocateRelease, modeAllocateGet, modeBatch:
	case modeIPAddress:
		if c.kubeconfig == "" {
			errs = append(errs, errors.New("--mode ipaddress needs --kubeconfig"))
		}
	default:
		errs = append(errs, fmt.Errorf("--mode %q: want allocate, allocate-release, allocate-get, batch or ipaddress", c.mode))
	}
	if c.mode == modeBatch && c.batchSize <= 0 {
		errs = append(errs, errors.New("--batch-size must be positive"))
	}
	if c.format != "text" && c.format != "json" {
		errs = append(errs, fmt.Errorf("--format %q: want text or json", c.format))
	}
	return errors.Join(errs...)
}

func runLoad(args []string, out io.Writer) error {
	var cfg loadConfig
	fs := pflag.NewFlagSet("load", pflag.ContinueOnError)
	cfg.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var t target
	if cfg.mode == modeIPAddress {
		kube, err := kubeClient(cfg.kubeconfig)
		if err != nil {
			return err
		}
		t.kube = kube
	} else {
		addrs := strings.Split(cfg.addr, ",")
		t.conns = make([]*grpc.ClientConn, max(cfg.conns, len(addrs)))
		opts := []dial.Option{dial.WithoutRetry()} // a failed call is counted, not hidden
		if cfg.tokenFile != "" {
			opts = append(opts, dial.WithTokenFile(cfg.tokenFile))
		}
		for i := range t.conns {
			conn, err := dial.New(strings.TrimSpace(addrs[i%len(addrs)]), opts...)
			if err != nil {
				return err
			}
			defer conn.Close()
			t.conns[i] = conn
		}
	}
	rep, err := load(ctx, cfg, t)
	if err != nil {
		return err
	}
	return rep.write(out, cfg.format)
}

// report is the outcome of a load.
type report struct {
	Mode      string        `json:"mode"`
	Clients   int           `json:"clients"`
	Conns     int           `json:"conns"`
	BatchSize int           `json:"batch_size,omitempty"`
	Window    time.Duration `json:"window_ns"`
	Ops       []opStats     `json:"ops"`
	// Addresses is the number of addresses allocated in the window, and
	// AddressesPerSec its rate: for batches, many per call.
	Addresses       int     `json:"addresses"`
	AddressesPerSec float64 `json:"addresses_per_sec"`
}

// opStats summarises the calls of one method.
type opStats struct {
	Method  string         `json:"method"`
	Calls   int            `json:"calls"`
	Errors  map[string]int `json:"errors,omitempty"`
	PerSec  float64        `json:"per_sec"`
	P50     time.Duration  `json:"p50_ns"`
	P90     time.Duration  `json:"p90_ns"`
	P99     time.Duration  `json:"p99_ns"`
	Max     time.Duration  `json:"max_ns"`
	Average time.Duration  `json:"avg_ns"`
}

// recorder collects the latencies of one client, by method, so clients
// never contend on a shared lock while measuring.
type recorder struct {
	lat  map[string][]time.Duration
	errs map[string]map[string]int
	// addresses allocated by successful calls.
	addresses int
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, errs: map[string]map[string]int{}}
}

func (r *recorder) record(method string, d time.Duration, err error) {
	if err != nil {
		if r.errs[method] == nil {
			r.errs[method] = map[string]int{}
		}
		key := status.Code(err).String()
		if reason := apierr.Reason(err); reason != "" {
			key += "/" + reason
		}
		r.errs[method][key]++
		return
	}
	r.lat[method] = append(r.lat[method], d)
}

// load runs cfg.clients clients over conns and measures them.
// target is what the load goes to: allocator connections, or a
// Kubernetes client in the ipaddress mode.
type target struct {
	conns []*grpc.ClientConn
	kube  kubernetes.Interface
}

func load(ctx context.Context, cfg loadConfig, t target) (*report, error) {
	if t.kube == nil {
		if err := ensurePool(ctx, allocatorv1.NewAllocatorServiceClient(t.conns[0]), cfg); cfg.pools == 0 && err != nil {
			return nil, err
		}
	}
	var next atomic.Uint32 // the ipaddress mode's addresses, from 10.0.0.1
	run := make([]byte, 4)
	if _, err := rand.Read(run); err != nil {
		return nil, err
	}
	runID := hex.EncodeToString(run)

	start := time.Now()
	measureFrom := start.Add(cfg.warmup)
	// Calls are not cut off at the end of the window: a client starts no
	// call after it, and the calls in flight finish and count, so the end
	// of the run leaves no canceled calls behind to blur the figures.
	stopAt := time.Time{}
	if cfg.requests == 0 {
		stopAt = measureFrom.Add(cfg.duration)
	}
	var (
		measured atomic.Int64 // calls started in the measuring window
		lastEnd  atomic.Int64 // unix nanos of the last measured call's end
		wg       sync.WaitGroup
		recs     = make([]*recorder, cfg.clients)
	)
	for i := range cfg.clients {
		recs[i] = newRecorder()
		c := &loadClient{
			cfg:    cfg,
			rec:    recs[i],
			prefix: fmt.Sprintf("load-%s-%d", runID, i),
			kube:   t.kube,
			next:   &next,
		}
		if t.kube == nil {
			c.client = allocatorv1.NewAllocatorServiceClient(t.conns[i%len(t.conns)])
			c.reader = allocatorv1.NewAllocatorServiceClient(t.conns[(i+1)%len(t.conns)])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				t0 := time.Now()
				if !stopAt.IsZero() && !t0.Before(stopAt) {
					return
				}
				inWindow := !t0.Before(measureFrom)
				if inWindow && cfg.requests > 0 && measured.Add(1) > int64(cfg.requests) {
					return
				}
				c.step(ctx, n, inWindow)
				if inWindow {
					end := time.Now().UnixNano()
					for {
						prev := lastEnd.Load()
						if end <= prev || lastEnd.CompareAndSwap(prev, end) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()

	window := time.Duration(lastEnd.Load() - measureFrom.UnixNano())
	if cfg.requests == 0 {
		window = cfg.duration
	}
	if window <= 0 {
		return nil, errors.New("nothing was measured: is --warmup longer than the run?")
	}
	return summarize(cfg, recs, window), nil
}

func ensurePool(ctx context.Context, c allocatorv1.AllocatorServiceClient, cfg loadConfig) error {
	cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	_, err := c.GetPool(cctx, &allocatorv1.GetPoolRequest{Name: "pools/" + cfg.pool})
	if status.Code(err) == codes.NotFound {
		_, err = c.CreatePool(cctx, &allocatorv1.CreatePoolRequest{PoolId: cfg.pool, Pool: &allocatorv1.Pool{Cidrs: []string{cfg.cidr}}})
	}
	if err != nil {
		return fmt.Errorf("pool %s: %w", cfg.pool, err)
	}
	return nil
}

// loadClient is one client: it makes one call at a time.
type loadClient struct {
	cfg    loadConfig
	client allocatorv1.AllocatorServiceClient
	// reader is the client of the next connection (allocate-get).
	reader allocatorv1.AllocatorServiceClient
	rec    *recorder
	prefix string
	kube   kubernetes.Interface
	next   *atomic.Uint32
}

func (c *loadClient) owner(n, i int) *allocatorv1.Owner {
	name := fmt.Sprintf("%s-%d-%d", c.prefix, n, i)
	return &allocatorv1.Owner{Cluster: "load", Kind: "Pod", Namespace: "load", Name: name, Uid: "uid-" + name}
}

// step makes the calls of one iteration and records them when in the
// measuring window.
func (c *loadClient) step(ctx context.Context, n int, record bool) {
	call := func(method string, fn func(context.Context) error) bool {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
		t0 := time.Now()
		err := fn(cctx)
		d := time.Since(t0)
		if ctx.Err() != nil {
			return false // interrupted: neither a result nor an error
		}
		if record {
			c.rec.record(method, d, err)
		}
		return err == nil
	}
	pool := "pools/" + c.cfg.pool
	if c.cfg.pools > 0 {
		pool = fmt.Sprintf("pools/%s-%d", c.cfg.pool, c.next.Add(1)%uint32(c.cfg.pools))
	}
	switch c.cfg.mode {
	case modeAllocate, modeAllocateRelease, modeAllocateGet:
		var a *allocatorv1.Allocation
		ok := call("Allocate", func(ctx context.Context) error {
			resp, err := c.client.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: pool, Owner: c.owner(n, 0)})
			a = resp.GetAllocation()
			return err
		})
		if !ok {
			return
		}
		if record {
			c.rec.addresses++
		}
		switch c.cfg.mode {
		case modeAllocateRelease:
			call("Release", func(ctx context.Context) error {
				_, err := c.client.Release(ctx, &allocatorv1.ReleaseRequest{Name: a.GetName(), Etag: a.GetEtag(), OwnerUid: a.GetOwner().GetUid()})
				return err
			})
		case modeAllocateGet:
			call("GetAllocation", func(ctx context.Context) error {
				resp, err := c.reader.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: a.GetName()})
				if err == nil && resp.GetAllocation().GetEtag() != a.GetEtag() {
					err = fmt.Errorf("read %s back at etag %s, allocated at %s", a.GetName(), resp.GetAllocation().GetEtag(), a.GetEtag())
				}
				return err
			})
		}
	case modeIPAddress:
		// The IPAddress object's name is the address: the API server's
		// uniqueness of names is what makes the claim exclusive.
		n := c.next.Add(1)
		ip := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
		ok := call("CreateIPAddress", func(ctx context.Context) error {
			_, err := c.kube.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{
				ObjectMeta: metav1.ObjectMeta{Name: ip.String()},
				Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
					Resource: "services", Namespace: "load", Name: c.owner(int(n), 0).GetName()}},
			}, metav1.CreateOptions{})
			return err
		})
		if ok && record {
			c.rec.addresses++
		}
	case modeBatch:
		req := &allocatorv1.BatchAllocateRequest{Requests: make([]*allocatorv1.AllocateRequest, c.cfg.batchSize)}
		for i := range req.Requests {
			req.Requests[i] = &allocatorv1.AllocateRequest{Pool: pool, Owner: c.owner(n, i)}
		}
		ok := call("BatchAllocate", func(ctx context.Context) error {
			_, err := c.client.BatchAllocate(ctx, req)
			return err
		})
		if ok && record {
			c.rec.addresses += c.cfg.batchSize
		}
	}
}

func summarize(cfg loadConfig, recs []*recorder, window time.Duration) *report {
	rep := &report{Mode: cfg.mode, Clients: cfg.clients, Conns: cfg.conns, Window: window}
	if cfg.mode == modeBatch {
		rep.BatchSize = cfg.batchSize
	}
	lat := map[string][]time.Duration{}
	errs := map[string]map[string]int{}
	for _, r := range recs {
		rep.Addresses += r.addresses
		for m, l := range r.lat {
			lat[m] = append(lat[m], l...)
		}
		for m, e := range r.errs {
			if errs[m] == nil {
				errs[m] = map[string]int{}
			}
			for k, n := range e {
				errs[m][k] += n
			}
		}
	}
	methods := map[string]bool{}
	for m := range lat {
		methods[m] = true
	}
	for m := range errs {
		methods[m] = true
	}
	names := make([]string, 0, len(methods))
	for m := range methods {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		l := lat[m]
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		s := opStats{Method: m, Calls: len(l), Errors: errs[m], PerSec: float64(len(l)) / window.Seconds()}
		if len(l) > 0 {
			var sum time.Duration
			for _, d := range l {
				sum += d
			}
			s.P50, s.P90, s.P99, s.Max = percentile(l, 50), percentile(l, 90), percentile(l, 99), l[len(l)-1]
			s.Average = sum / time.Duration(len(l))
		}
		rep.Ops = append(rep.Ops, s)
	}
	rep.AddressesPerSec = float64(rep.Addresses) / window.Seconds()
	return rep
}

// percentile returns the p-th percentile of sorted by the nearest-rank
// method: the smallest value with at least p% of the values at or below
// it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (r *report) write(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "mode=%s clients=%d conns=%d", r.Mode, r.Clients, r.Conns)
	if r.BatchSize > 0 {
		fmt.Fprintf(w, " batch-size=%d", r.BatchSize)
	}
	fmt.Fprintf(w, " window=%s\n", r.Window.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tcalls\terrors\tcalls/s\tp50\tp90\tp99\tmax\tavg\t")
	for _, s := range r.Ops {
		nerr := 0
		for _, n := range s.Errors {
			nerr += n
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", s.Method, s.Calls, nerr, s.PerSec,
			ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max), ms(s.Average))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range r.Ops {
		for k, n := range s.Errors {
			fmt.Fprintf(w, "  %s errors %s: %d\n", s.Method, k, n)
		}
	}
	_, err := fmt.Fprintf(w, "addresses allocated: %d (%.0f/s)\n", r.Addresses, r.AddressesPerSec)
	return err
}

// kubeClient is a client of the cluster of kubeconfig with the client-side
// limit out of the way: the comparison is of the servers.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6
	return kubernetes.NewForConfig(cfg)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
