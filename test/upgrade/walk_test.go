package upgrade

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// upgradeSteps reads the order of docs/upgrade.md's "Upgrading a fleet,
// one service at a time": the bold name of each numbered step, lower
// case ("crds", "allocator", ...), and the section's text.
func upgradeSteps(t *testing.T) (steps []string, section string) {
	t.Helper()
	root, err := moduleRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "upgrade.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "\n## Upgrading a fleet, one service at a time\n")
	require.True(t, ok, "docs/upgrade.md has no section \"Upgrading a fleet, one service at a time\"")
	section, rollback, _ := strings.Cut(rest, "\n## Rolling back\n")
	section, _, _ = strings.Cut(section, "\n## ")
	rollback, _, _ = strings.Cut(rollback, "\n## ")
	// The rollback this test does, as the document words it.
	words := strings.Join(strings.Fields(rollback), " ")
	require.Contains(t, words, "Roll back in the reverse order of the upgrade", "docs/upgrade.md's rollback order")
	require.Contains(t, words, "The CRDs stay at the newer release", "docs/upgrade.md says the CRDs are not rolled back")
	step := regexp.MustCompile(`(?m)^\d+\. \*\*([A-Za-z]+)\*\*`)
	for _, m := range step.FindAllStringSubmatch(section, -1) {
		steps = append(steps, strings.ToLower(m[1]))
	}
	return steps, section
}

// walkFleet is a clusterset of clusters a and b, each with a membership,
// an importer and a repair, and one allocator on a bolt file, all of
// one build to start with; web is exported from namespace "walk" of both.
type walkFleet struct {
	pki      *fleetPKI
	a, b     *cluster
	alloc    *service
	services map[string][]*service // by service name, a's then b's
	ips      []string
	vip      string
}

func startWalkFleet(ctx context.Context, t *testing.T, b *Build) *walkFleet {
	t.Helper()
	f := &walkFleet{pki: newPKI(t), services: map[string][]*service{}}
	f.a, f.b = startClusters(t, false)
	for _, c := range []*cluster{f.a, f.b} {
		applyCRDs(ctx, t, b, c)
	}
	f.alloc = startService(t, f.pki, "allocator", "", b, allocatorArgs("bolt:"+filepath.Join(t.TempDir(), "plexus-allocator.db")))
	createVIPPool(ctx, t, f.pki, f.alloc.proc)
	sources := map[string]*service{}
	for _, c := range []*cluster{f.a, f.b} {
		m := startService(t, f.pki, "membership", c.Name, b, membershipArgs(c, f.alloc.proc))
		f.services["membership"] = append(f.services["membership"], m)
		sources[c.Name] = m
	}
	for _, c := range []*cluster{f.a, f.b} {
		f.services["importer"] = append(f.services["importer"], startService(t, f.pki, "importer", c.Name, b, importerArgs(c, f.alloc.proc, sources, false)))
		f.services["repair"] = append(f.services["repair"], startService(t, f.pki, "repair", c.Name, b, importerArgs(c, f.alloc.proc, sources, true)))
	}
	f.services["allocator"] = []*service{f.alloc}
	exportWeb(ctx, t, f.a, "walk", "10.128.0.10")
	exportWeb(ctx, t, f.b, "walk", "10.129.0.10")
	f.ips = []string{"10.128.0.10", "10.129.0.10"}
	f.vip = f.serves(ctx, t, "the fleet of "+b.Name)
	return f
}

// serves checks that the fleet serves the export: a new endpoint of a's
// web reaches both clusters' imports, which keep their VIP.
func (f *walkFleet) serves(ctx context.Context, t *testing.T, why string) string {
	t.Helper()
	ip := fmt.Sprintf("10.128.1.%d", len(f.ips))
	addPod(ctx, t, f.a, "walk", ip)
	f.ips = append(f.ips, ip)
	vip := waitServed(ctx, t, f.a, "walk", f.ips, why+", in a")
	require.Equal(t, vip, waitServed(ctx, t, f.b, "walk", f.ips, why+", in b"), "%s: both clusters import web at one VIP", why)
	if f.vip != "" {
		require.Equal(t, f.vip, vip, "%s: the VIP stays", why)
	}
	return vip
}

// status runs `plexusctl status` of build b against cluster i's services
// until every one is SERVING, as an operator watches a rollout (a service
// started a moment ago may still be syncing its caches), and returns each
// service's version.
func (f *walkFleet) status(t *testing.T, b *Build, i int) map[string]string {
	t.Helper()
	op := f.pki.operator()
	args := []string{"status", "-o", "json", "--tls-ca", f.pki.ca(), "--tls-cert", op.Cert, "--tls-key", op.Key, "--allocator-addr", f.alloc.proc.GRPCAddr}
	for _, s := range []string{"membership", "importer", "repair"} {
		args = append(args, "--"+s+"-addr", f.services[s][i].proc.GRPCAddr)
	}
	got := map[string]string{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := exec.Command(b.Plexusctl, args...).Output()
		require.NoError(c, err, "plexusctl status: %s", out)
		var list []map[string]string
		require.NoError(c, json.Unmarshal(out, &list), "%s", out)
		for _, s := range list {
			require.Equal(c, "SERVING", s["status"], "%v", s)
			got[s["service"]] = s["version"]
		}
	}, 30*time.Second, 50*time.Millisecond, "plexusctl status says every service is SERVING")
	return got
}

// step upgrades (or rolls back) one step of the document's to build to,
// cluster by cluster, checking after each service that status names its
// new release and that the fleet serves the export.
func (f *walkFleet) step(ctx context.Context, t *testing.T, name string, to *Build) {
	t.Helper()
	if name == "crds" {
		for _, c := range []*cluster{f.a, f.b} {
			applyCRDs(ctx, t, to, c)
			f.serves(ctx, t, fmt.Sprintf("the CRDs of %s in %s", to.Name, c.Name))
		}
		return
	}
	list, ok := f.services[name]
	require.True(t, ok, "docs/upgrade.md names a step %q the test does not know", name)
	for i, s := range list {
		s.replace(t, to)
		why := fmt.Sprintf("%s of %s", name, to.Name)
		if s.cluster != "" {
			why += " in " + s.cluster
		}
		require.Contains(t, f.status(t, to, i)[name], to.Version+" (commit ", "%s: plexusctl status names the release", why)
		f.serves(ctx, t, why)
	}
}

// TestUpgradeWalk follows docs/upgrade.md: a fleet of the last release is
// upgraded in the document's order, one service and one cluster at a
// time, checking at each step that the fleet serves its export, then
// rolled back the same way in reverse order.
func TestUpgradeWalk(t *testing.T) {
	steps, section := upgradeSteps(t)
	require.Equal(t, "crds", steps[0], "the CRDs come first")
	require.Contains(t, section, "`plexusctl crds | kubectl apply\n   --server-side -f -`", "the CRD step's command (which applyCRDs runs)")
	for _, s := range services {
		require.Contains(t, steps, s, "docs/upgrade.md upgrades every service")
	}
	rel, cur := release(t), current(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f := startWalkFleet(ctx, t, rel)
	for _, s := range steps {
		f.step(ctx, t, s, cur)
	}
	for i := range 2 {
		for s, v := range f.status(t, cur, i) {
			require.Contains(t, v, cur.Version+" ", "after the upgrade, %s runs %s", s, cur.Name)
		}
	}
	// Rollback: the reverse order; the CRDs stay (see the document).
	back := slices.Clone(steps)
	slices.Reverse(back)
	for _, s := range back {
		if s != "crds" {
			f.step(ctx, t, s, rel)
		}
	}
	for i := range 2 {
		for s, v := range f.status(t, rel, i) {
			require.Contains(t, v, rel.Version+" ", "after the rollback, %s runs %s", s, rel.Name)
		}
	}
}

// applyCRDs runs `plexusctl crds | kubectl apply --server-side -f -` with
// b's plexusctl against c (kubectl's apply done by the client library, as
// kubectl does it: server-side apply, field manager "kubectl"), and waits
// until every CRD is established.
func applyCRDs(ctx context.Context, t *testing.T, b *Build, c *cluster) {
	t.Helper()
	out, err := exec.Command(b.Plexusctl, "crds").Output()
	require.NoError(t, err)
	dyn := dynamic.NewForConfigOrDie(c.Config)
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var names []string
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{}
		require.NoError(t, utilyaml.Unmarshal(doc, &obj.Object))
		data, err := obj.MarshalJSON()
		require.NoError(t, err)
		_, err = crds.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "kubectl"})
		require.NoError(t, err, "apply %s", obj.GetName())
		names = append(names, obj.GetName())
	}
	require.NotEmpty(t, names, "plexusctl crds printed no CRD")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, kubetest.WaitCRDsEstablished(wctx, c.Config, names...))
}
