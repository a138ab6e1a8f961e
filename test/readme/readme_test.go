// Package readme runs the command examples of README.md, so they cannot
// rot: every line of every ```sh block runs with bash against the four
// services started as processes on a real kube-apiserver and etcd, with
// plexusctl and grpcurl on PATH, and must exit 0.
//
// A line that cannot run in a test ends with a comment "# not run: REASON";
// a whole block is left out by the line "<!-- not run: REASON -->" right
// before its opening fence. Every left-out line is listed in notRun below,
// so leaving one out is a visible change.
package readme

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// notRun are the README commands that are not run, as written (without
// the marker), and why.
var notRun = map[string]string{
	"make demo":                      "runs the whole system itself",
	"make test":                      "is the test suite",
	"plexusctl alloc watch lab-vips": "streams until interrupted",
	"plexusctl members watch":        "streams until interrupted",
	"make demo SECURE=1":             "runs the whole system itself",
	"plexusctl --tls-ca .certs/ca.crt --tls-cert .certs/fleet/operator/tls.crt --tls-key .certs/fleet/operator/tls.key status": "needs the services serving mutual TLS",
}

// maxNotRun bounds notRun: most of the examples must really run.
const maxNotRun = 6

// example is one command of a ```sh block.
type example struct {
	line    int    // in README.md, of the command's first line
	command string // continuation lines joined, the marker comment removed
	notRun  string // the reason of a "not run" marker, if any
}

var (
	lineMarker  = regexp.MustCompile(`\s+#\s*not run:\s*(.*)$`)
	blockMarker = regexp.MustCompile(`^<!--\s*not run:\s*(.*?)\s*-->$`)
)

// examples reads the commands of the ```sh blocks of a Markdown file.
func examples(path string) ([]example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out       []example
		inBlock   bool
		blockSkip string
		prev      string // the previous non-blank line outside blocks
		cur       *example
		n         int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !inBlock {
			if trimmed == "```sh" || trimmed == "```bash" || trimmed == "```shell" {
				inBlock, blockSkip = true, ""
				if m := blockMarker.FindStringSubmatch(prev); m != nil {
					blockSkip = m[1]
					if blockSkip == "" {
						return nil, fmt.Errorf("%s:%d: a not-run marker must say why", path, n-1)
					}
				}
			} else if trimmed != "" {
				prev = trimmed
			}
			continue
		}
		if trimmed == "```" {
			if cur != nil {
				return nil, fmt.Errorf("%s:%d: block ends inside a continued command", path, n)
			}
			inBlock, prev = false, ""
			continue
		}
		if cur == nil {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			cur = &example{line: n, notRun: blockSkip}
		} else {
			cur.command += "\n"
		}
		if body, ok := strings.CutSuffix(line, `\`); ok {
			cur.command += body + `\`
			continue
		}
		if m := lineMarker.FindStringSubmatchIndex(line); m != nil {
			cur.notRun = strings.TrimSpace(line[m[2]:m[3]])
			if cur.notRun == "" {
				return nil, fmt.Errorf("%s:%d: a not-run marker must say why", path, n)
			}
			line = line[:m[0]]
		}
		cur.command += line
		cur.command = strings.TrimSpace(cur.command)
		out = append(out, *cur)
		cur = nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if inBlock {
		return nil, fmt.Errorf("%s: a ```sh block is not closed", path)
	}
	return out, nil
}

// withoutComment is a command without a trailing comment, to name it.
func withoutComment(cmd string) string {
	if i := strings.Index(cmd, " #"); i >= 0 {
		cmd = cmd[:i]
	}
	return strings.TrimSpace(cmd)
}

func TestExamplesParse(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, "x.md")
	require.NoError(t, os.WriteFile(md, []byte("text\n\n```sh\n"+
		"plexusctl status      # health\n"+
		"# a comment line\n\n"+
		"grpcurl -d '{}' \\\n  127.0.0.1:7401 x/Y\n"+
		"plexusctl alloc watch vips   # not run: streams\n"+
		"```\n\n<!-- not run: needs docker -->\n```sh\ndocker compose up\n```\n"+
		"```go\nnot.Shell()\n```\n"), 0o644))
	ex, err := examples(md)
	require.NoError(t, err)
	require.Equal(t, []example{
		{line: 4, command: "plexusctl status      # health"},
		{line: 7, command: "grpcurl -d '{}' \\\n  127.0.0.1:7401 x/Y"},
		{line: 9, command: "plexusctl alloc watch vips", notRun: "streams"},
		{line: 14, command: "docker compose up", notRun: "needs docker"},
	}, ex)

	require.NoError(t, os.WriteFile(md, []byte("```sh\nplexusctl alloc watch   # not run:\n```\n"), 0o644))
	_, err = examples(md)
	require.ErrorContains(t, err, "must say why")
}

// TestReadmeExamples starts what the README's examples talk to, as the
// demo does: the allocator, membership on cluster a (with shop/cart
// exported and 3 ready Pods), the importer on cluster b importing from it,
// and repair on cluster a; then it runs every example in order.
func TestReadmeExamples(t *testing.T) {
	all, err := examples(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)

	var run []example
	marked := map[string]string{}
	for _, e := range all {
		if e.notRun != "" {
			marked[withoutComment(e.command)] = e.notRun
			continue
		}
		run = append(run, e)
	}
	require.LessOrEqual(t, len(notRun), maxNotRun, "most README examples must run")
	for cmd := range marked {
		_, ok := notRun[cmd]
		require.True(t, ok, "README marks %q as not run: list it in notRun, or make it run", cmd)
	}
	for cmd := range notRun {
		_, ok := marked[cmd]
		require.True(t, ok, "notRun lists %q, which README.md does not mark as not run: remove it from notRun", cmd)
	}
	require.GreaterOrEqual(t, len(run), 10, "the README should have examples that run")

	env := startSystem(t)
	for _, e := range run {
		cmd := env.rewrite(e.command)
		t.Run(fmt.Sprintf("README.md:%d", e.line), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", cmd)
			c.Dir, c.Env = env.dir, env.vars
			out, err := c.CombinedOutput()
			require.NoError(t, err, "README.md:%d: %s\n%s", e.line, e.command, out)
			t.Logf("$ %s\n%s", e.command, out)
		})
	}
}

// system is what the examples run against.
type system struct {
	dir  string   // the working directory of the examples
	vars []string // their environment
	// addrs maps the README's default addresses to the processes' ones.
	addrs *strings.Replacer
}

// rewrite points a command's default addresses at the test's processes.
func (s *system) rewrite(cmd string) string { return s.addrs.Replace(cmd) }

func startSystem(t *testing.T) *system {
	etcd := kubetest.StartEtcd(t)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithEtcdPrefix("/cluster-a"))
	b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithEtcdPrefix("/cluster-b"))
	kubetest.InstallCRDs(t, a.Config, b.Config)
	kubetest.StartControllers(t, a, netip.MustParsePrefix("10.128.0.0/16"))

	plexusctl := proctest.Build(t, "./clients/plexusctl")
	demokube := proctest.Build(t, "./hack/demokube")
	grpcurl := grpcurlBinary(t)

	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store=memory"})
	members := proctest.Start(t, proctest.Build(t, "./services/membership"),
		[]string{"--cluster-name=a", "--kubeconfig=" + a.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr})
	importer := proctest.Start(t, proctest.Build(t, "./services/importer"),
		[]string{"--cluster-name=b", "--kubeconfig=" + b.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr, "--source=a=" + members.GRPCAddr})
	repair := proctest.Start(t, proctest.Build(t, "./services/repair"),
		[]string{"--cluster-name=a", "--kubeconfig=" + a.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr, "--source=a=" + members.GRPCAddr})
	procs := []*proctest.Proc{alloc, members, importer, repair}

	home := t.TempDir()
	s := &system{dir: t.TempDir()}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		// Only what the test sets: no address, token or config file of
		// whoever runs it.
		if strings.HasPrefix(name, "PLEXUS") || name == "HOME" || name == "XDG_CONFIG_HOME" || name == "PATH" {
			continue
		}
		s.vars = append(s.vars, kv)
	}
	s.vars = append(s.vars, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"PATH="+filepath.Dir(plexusctl)+string(os.PathListSeparator)+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var pairs []string
	for i, p := range procs {
		name := []string{"ALLOCATOR", "MEMBERSHIP", "IMPORTER", "REPAIR"}[i]
		s.vars = append(s.vars, "PLEXUS_"+name+"_ADDR="+p.GRPCAddr)
		pairs = append(pairs, fmt.Sprintf("127.0.0.1:%d", 7401+i), p.GRPCAddr, fmt.Sprintf("127.0.0.1:%d", 9401+i), p.HTTPAddr)
	}
	s.addrs = strings.NewReplacer(pairs...)

	// What the examples read about: shop/cart exported from cluster a
	// with a Deployment of 3 ready Pods, imported into cluster b's own shop namespace.
	sh := func(name string, args ...string) error {
		c := exec.Command(name, args...)
		c.Dir, c.Env = s.dir, s.vars
		out, err := c.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return nil
	}
	require.NoError(t, sh(demokube, "seed", "--kubeconfig", a.Kubeconfig, "--namespace", "shop", "--service", "cart", "--replicas", "3"))
	require.NoError(t, sh(demokube, "namespace", "--kubeconfig", b.Kubeconfig, "--namespace", "shop"))
	eventually(t, 2*time.Minute, "the importer did not import shop/cart", func() error {
		return sh(plexusctl, "imports", "get", "shop/cart")
	})
	// Repair answers once it leads and its sources and informers are
	// synced; the examples run a pass and read its report.
	eventually(t, 2*time.Minute, "repair did not run a pass", func() error {
		return sh(plexusctl, "repair", "run", "--dry-run")
	})
	return s
}

// eventually polls fn until it succeeds, and fails with its last error
// after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after %s: %v", what, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// grpcurlBinary is grpcurl from .bin (make tools), else built from the
// pinned tools module.
func grpcurlBinary(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	if p := filepath.Join(root, ".bin", "grpcurl"); fileExists(p) {
		return p
	}
	out := filepath.Join(t.TempDir(), "grpcurl")
	c := exec.Command("go", "build", "-o", out, "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	c.Dir = filepath.Join(root, "tools")
	b, err := c.CombinedOutput()
	require.NoError(t, err, "build grpcurl from tools/go.mod (or run make tools):\n%s", b)
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
