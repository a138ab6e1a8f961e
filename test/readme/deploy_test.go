package readme

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/plexusnet/plexus/clients/plexusctl/cmd"
	"github.com/plexusnet/plexus/deploy"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestDeployGuide checks docs/deploy.md against the code, since its
// commands need real clusters and a Docker engine: every plexusctl command
// names a real command and real flags (and `plexusctl certs` runs, its
// SANs landing in the certificates), `make images` tags as the guide says,
// every file of deploy/ it applies exists, and every metric, flag and
// condition reason it names exists.
func TestDeployGuide(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "deploy.md")
	exs, err := examples(path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(exs), 6)
	for _, ex := range exs {
		for _, part := range strings.Split(ex.command, "|") {
			args := shellWords(part)
			switch args[0] {
			case "plexusctl":
				checkPlexusctl(t, ex.line, args[1:])
			case "make":
				checkMake(t, ex.line, args[1:])
			case "kubectl":
				checkKubectl(t, ex.line, args[1:])
			case "helm":
				checkHelm(t, ex.line, args[1:])
			default:
				t.Errorf("docs/deploy.md:%d: %q is not checked; add a check", ex.line, args[0])
			}
		}
	}

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(raw)
	metrics, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("`(plexus_[a-z_]+)`").FindAllStringSubmatch(doc, -1) {
		require.Contains(t, string(metrics), "`"+m[1]+"`", "docs/deploy.md names a metric docs/metrics.md does not list")
	}
	flags, err := os.ReadFile(filepath.Join("..", "..", "docs", "flags.md"))
	require.NoError(t, err)
	// Flags of the services (docs/flags.md) or of plexusctl; some are
	// not Plexus's: kube-apiserver's Service range, --version, which
	// every binary has, and etcd's own, checked against etcd's help.
	etcdHelp := etcdHelp(t)
	for _, f := range regexp.MustCompile("`(--[a-z-]+)").FindAllStringSubmatch(doc, -1) {
		known := strings.Contains(string(flags), "`"+f[1]+"`") || plexusctlFlag(f[1]) ||
			f[1] == "--version" || f[1] == "--service-cluster-ip-range" ||
			strings.Contains(etcdHelp, f[1]+" ")
		require.True(t, known, "docs/deploy.md names a flag %s that no service, plexusctl or etcd has", f[1])
	}
	reasons := sourceText(t, "services/importer/materialize/status.go", "services/importer/mcs/merge.go", "services/membership/controller/exportstatus.go")
	for _, r := range []string{"ClusterSetIPNotProgrammed", "EndpointSlicesNotWritten", "AllocationFailed", "EndpointsDropped", "NamespaceMissing"} {
		require.Contains(t, doc, r)
		require.Contains(t, reasons, `"`+r+`"`, "reason %s is not one the code writes", r)
	}
	mcsReasons := regexp.MustCompile("`([A-Za-z]+Conflict)`").FindAllStringSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(mcsReasons), 8)
	for _, r := range mcsReasons {
		require.Contains(t, reasons, "ServiceExportReason"+r[1], "conflict reason %s is not one the importer reports", r[1])
	}
}

func sourceText(t *testing.T, files ...string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join("..", "..", f))
		require.NoError(t, err)
		b.Write(raw)
	}
	return b.String()
}

// etcdHelp is the help of the etcd the tests run.
func etcdHelp(t *testing.T) string {
	t.Helper()
	bins, err := kubetest.FindBinaries()
	require.NoError(t, err)
	out, err := exec.Command(bins.Etcd(), "--help").CombinedOutput()
	require.NoError(t, err)
	return string(out)
}

// plexusctlFlag reports whether some plexusctl command has the flag.
func plexusctlFlag(flag string) bool {
	name := strings.TrimPrefix(flag, "--")
	root := cmd.NewRoot(&bytes.Buffer{})
	if root.PersistentFlags().Lookup(name) != nil {
		return true
	}
	for stack := root.Commands(); len(stack) > 0; {
		c := stack[0]
		stack = append(stack[1:], c.Commands()...)
		if c.Flags().Lookup(name) != nil {
			return true
		}
	}
	return false
}

// checkPlexusctl: the words name a command and every flag is one of it.
func checkPlexusctl(t *testing.T, line int, args []string) {
	t.Helper()
	root := cmd.NewRoot(&bytes.Buffer{})
	c, rest, err := root.Find(args)
	require.NoError(t, err, "docs/deploy.md:%d: plexusctl %s", line, strings.Join(args, " "))
	require.NotEqual(t, root, c, "docs/deploy.md:%d: plexusctl %s names no command", line, strings.Join(args, " "))
	for _, a := range rest {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		require.NotNil(t, c.Flag(name), "docs/deploy.md:%d: %s has no --%s", line, c.CommandPath(), name)
	}
	if c.Name() == "certs" {
		runCerts(t, line, args)
	}
}

// runCerts runs the guide's plexusctl certs into a temporary directory and
// checks that each --san SERVICE=NAME is in that service's certificate, in
// the folder the guide makes its Secret from: .certs/<service>, a member
// cluster's .certs/<cluster>/<service>, or the fleet's .certs/fleet/<service>.
func runCerts(t *testing.T, line int, args []string) {
	t.Helper()
	dir := t.TempDir()
	var run []string
	var sans [][2]string
	folder := dir
	services := []string{"allocator", "membership", "importer", "repair", "operator"}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--dir":
			i++
			continue
		case "--san":
			svc, name, _ := strings.Cut(args[i+1], "=")
			sans = append(sans, [2]string{svc, name})
		case "--cluster":
			folder, services = filepath.Join(dir, args[i+1]), []string{"membership", "importer", "repair"}
		case "--fleet":
			folder, services = filepath.Join(dir, "fleet"), []string{"repair", "operator"}
		}
		run = append(run, args[i])
	}
	run = append(run, "--dir", dir)
	root := cmd.NewRoot(&bytes.Buffer{})
	root.SetArgs(run)
	require.NoError(t, root.Execute(), "docs/deploy.md:%d", line)
	for _, s := range sans {
		raw, err := os.ReadFile(filepath.Join(folder, s[0], "tls.crt"))
		require.NoError(t, err, "docs/deploy.md:%d: the Secret folder of %s", line, s[0])
		block, _ := pem.Decode(raw)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		require.Contains(t, cert.DNSNames, s[1])
	}
	for _, svc := range services {
		require.DirExists(t, filepath.Join(folder, svc), "docs/deploy.md:%d mounts the folder of %s", line, svc)
	}
}

// checkMake: make -n with the guide's arguments works and, for images,
// tags with the prefix and tag given.
func checkMake(t *testing.T, line int, args []string) {
	t.Helper()
	c := exec.Command("make", append([]string{"-n"}, args...)...)
	c.Dir = filepath.Join("..", "..")
	out, err := c.CombinedOutput()
	require.NoError(t, err, "docs/deploy.md:%d: make %s:\n%s", line, strings.Join(args, " "), out)
	if args[0] == "images" {
		vars := map[string]string{}
		for _, a := range args[1:] {
			k, v, _ := strings.Cut(a, "=")
			vars[k] = v
		}
		require.Contains(t, string(out), "-t "+vars["IMAGE_PREFIX"]+"$t:"+vars["IMAGE_TAG"], "docs/deploy.md:%d", line)
	}
}

// checkKubectl: every deploy/ file and .certs folder it reads exists (or
// is made by plexusctl certs), a Secret's files from elsewhere land under
// the keys the manifests mount, every key of the ConfigMap plexus-cluster
// is one a Deployment reads, and a namespace it creates is one the guide
// names as an inventory namespace.
func checkKubectl(t *testing.T, line int, args []string) {
	t.Helper()
	checked := 0
	joined := strings.Join(args, " ")
	for i, a := range args {
		file := ""
		switch {
		case a == "-f" && i+1 < len(args):
			file = args[i+1]
		case strings.HasPrefix(a, "--from-file="):
			file = strings.TrimPrefix(a, "--from-file=")
			if key, path, ok := strings.Cut(file, "="); ok {
				require.Contains(t, []string{"ca.crt", "tls.crt", "tls.key"}, key, "docs/deploy.md:%d: a Secret key the manifests mount", line)
				file = path
				if !strings.HasPrefix(path, ".certs/") && !strings.HasPrefix(path, "deploy/") {
					checked++ // the reader's own file (etcd's certificates)
					continue
				}
			}
		case strings.HasPrefix(a, "--from-literal="):
			key, _, _ := strings.Cut(strings.TrimPrefix(a, "--from-literal="), "=")
			_, rest, ok := strings.Cut(joined, "create configmap ")
			require.True(t, ok, "docs/deploy.md:%d", line)
			name, _, _ := strings.Cut(rest, " ")
			require.Contains(t, configKeys(t, name), key, "docs/deploy.md:%d: no Deployment reads the key %s of %s", line, key, name)
			checked++
		case a == "namespace" && i > 0 && args[i-1] == "create" && i+1 < len(args):
			require.Contains(t, sourceText(t, "docs/deploy.md"), "--inventory-namespace "+args[i+1], "docs/deploy.md:%d", line)
			checked++
		}
		switch {
		case file == "" || file == "-":
		case strings.HasPrefix(file, ".certs/"):
			checked++ // runCerts checks the folders
		default:
			require.FileExists(t, filepath.Join("..", "..", file), "docs/deploy.md:%d", line)
			checked++
		}
	}
	require.True(t, checked > 0 || strings.Contains(joined, "-f -"), "docs/deploy.md:%d: kubectl %s reads nothing checked", line, joined)
}

// shellWords splits a command of the guide into words as the shell does
// for what the guide writes: at blanks, a '...' string one word without
// its quotes.
func shellWords(s string) []string {
	var out []string
	var w strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if inWord {
				out, inWord = append(out, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out
}

// checkHelm: helm install renders with the guide's values (as helm
// template, which needs no cluster), and what it renders is what the
// guide says the values set.
func checkHelm(t *testing.T, line int, args []string) {
	t.Helper()
	require.Equal(t, "install", args[0], "docs/deploy.md:%d: only helm install is checked", line)
	run := append([]string{"template"}, args[1:]...)
	for i, a := range run {
		if strings.HasPrefix(a, "deploy/") {
			run[i] = filepath.Join("..", "..", a)
		}
	}
	out, err := exec.Command(kubetest.RequireHelm(t), run...).CombinedOutput()
	require.NoError(t, err, "docs/deploy.md:%d: helm %s:\n%s", line, strings.Join(run, " "), out)
	objs, err := deploy.DecodeFile("helm template", out)
	require.NoError(t, err, "docs/deploy.md:%d", line)
	require.NotEmpty(t, objs, "docs/deploy.md:%d", line)
}

// configKeys are the keys of the ConfigMap name that the Deployments of
// deploy/ (either allocator) read.
func configKeys(t *testing.T, name string) []string {
	t.Helper()
	objs, err := deploy.Objects()
	require.NoError(t, err)
	etcd, err := deploy.FileObjects(deploy.EtcdAllocatorFile)
	require.NoError(t, err)
	var keys []string
	for _, o := range append(objs, etcd...) {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil && r.ConfigMapKeyRef.Name == name {
					keys = append(keys, r.ConfigMapKeyRef.Key)
				}
			}
		}
	}
	return keys
}

func TestShellWords(t *testing.T) {
	require.Equal(t, []string{"helm", "install", "x", "--set", "a={b,c}", "--set", "d=e f"},
		shellWords("helm install  x --set 'a={b,c}' --set 'd=e f'"))
	require.Equal(t, []string{"kubectl", "get", "ns"}, shellWords("kubectl get ns\n"))
	require.Empty(t, shellWords(" "))
}
