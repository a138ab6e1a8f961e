package kubetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Resource names a resource of the API.
type Resource = schema.GroupVersionResource

// Resources whose writes a test can follow with WatchWrites.
var (
	EndpointSlices = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	Services       = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	ServiceImports = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1beta1", Resource: "serviceimports"}
	ServiceExports = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1beta1", Resource: "serviceexports"}
	ServiceCIDRs   = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}
	Leases         = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

// markerNamespace holds the marker objects WatchWrites writes to find the
// end of its watches; nothing a test watches for lives there.
const markerNamespace = "write-markers"

// markers are the objects WatchWrites writes, one per resource: the
// smallest valid object of each.
var markers = map[schema.GroupVersionResource]func() map[string]any{
	EndpointSlices: func() map[string]any {
		return map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4", "endpoints": []any{}}
	},
	Services: func() map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Service", "spec": map[string]any{"clusterIP": "None", "ports": []any{map[string]any{"port": int64(80)}}}}
	},
	ServiceImports: func() map[string]any {
		return map[string]any{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
			"spec": map[string]any{"type": "Headless", "ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}}}
	},
	ServiceExports: func() map[string]any {
		return map[string]any{"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport"}
	},
	ServiceCIDRs: func() map[string]any {
		// A documentation range no Service uses.
		return map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "spec": map[string]any{"cidrs": []any{"192.0.2.0/28"}}}
	},
	Leases: func() map[string]any {
		return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": map[string]any{}}
	},
}

// Write is one change a watch saw.
type Write struct {
	Resource  string
	Type      watch.EventType
	Namespace string
	Name      string
	// ResourceVersion is the object's after the change.
	ResourceVersion string
}

func (w Write) String() string {
	return fmt.Sprintf("%s %s %s/%s@%s", w.Type, w.Resource, w.Namespace, w.Name, w.ResourceVersion)
}

// Writes follows every write to some resources of a cluster from the
// moment WatchWrites returns: writes that are undone later (a field
// rewritten and put back, an object created and deleted again) show as
// well as those that stay.
type Writes struct {
	dyn       dynamic.Interface
	resources []schema.GroupVersionResource
	// Before are the resourceVersions when the watch began, by
	// "resource namespace/name".
	Before map[string]string

	mu     sync.Mutex
	seen   []Write
	errs   []error
	marked map[schema.GroupVersionResource]string // marker name once seen
	n      int
}

// WatchWrites lists the resources of the cluster behind cfg and watches
// them from that list on, until the test ends. Only resources with a
// marker (the variables above) can be watched.
func WatchWrites(t testing.TB, cfg *rest.Config, resources ...schema.GroupVersionResource) *Writes {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &Writes{dyn: dyn, resources: resources, Before: map[string]string{}, marked: map[schema.GroupVersionResource]string{}}
	for _, gvr := range resources {
		if markers[gvr] == nil {
			t.Fatalf("WatchWrites: no marker for %s", gvr)
		}
		objs, rv, err := listAll(ctx, dyn, gvr)
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		maps.Copy(w.Before, objs)
		wi, err := dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatalf("watch %s: %v", gvr.Resource, err)
		}
		go w.follow(gvr, wi)
	}
	return w
}

// listAll lists every object of a resource, page by page, by "resource
// namespace/name", and returns the list's resourceVersion.
func listAll(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) (map[string]string, string, error) {
	out := map[string]string{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := dyn.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for _, o := range list.Items {
			out[gvr.Resource+" "+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
		}
		if list.GetContinue() == "" {
			return out, list.GetResourceVersion(), nil
		}
		opts.Continue = list.GetContinue()
	}
}

// Versions lists the resources again, by "resource namespace/name",
// without the markers.
func (w *Writes) Versions(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range w.resources {
		objs, _, err := listAll(context.Background(), w.dyn, gvr)
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		maps.Copy(out, objs)
	}
	maps.DeleteFunc(out, func(k, _ string) bool { return markerKey(k) })
	return out
}

// markerKey reports whether a key of Versions names a marker.
func markerKey(k string) bool {
	return strings.Contains(k, " "+markerNamespace+"/") || strings.HasPrefix(k, ServiceCIDRs.Resource+" /"+markerNamespace)
}

func (w *Writes) follow(gvr schema.GroupVersionResource, wi watch.Interface) {
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			w.mu.Lock()
			w.errs = append(w.errs, apierrors.FromObject(ev.Object))
			w.mu.Unlock()
			continue
		}
		o, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || ev.Type == watch.Bookmark {
			continue
		}
		w.mu.Lock()
		if isMarker(gvr, o) {
			w.marked[gvr] = o.GetName()
		} else if o.GetNamespace() != markerNamespace {
			w.seen = append(w.seen, Write{Resource: gvr.Resource, Type: ev.Type, Namespace: o.GetNamespace(), Name: o.GetName(), ResourceVersion: o.GetResourceVersion()})
		}
		w.mu.Unlock()
	}
}

func isMarker(gvr schema.GroupVersionResource, o *unstructured.Unstructured) bool {
	if gvr == ServiceCIDRs {
		return o.GetLabels()["write-marker"] == "true"
	}
	return o.GetNamespace() == markerNamespace && o.GetLabels()["write-marker"] == "true"
}

// Settle writes a marker object of every watched resource and waits until
// each watch has seen its marker; it returns every write the watches saw
// before their markers, that is every write made before Settle was called
// (a watch delivers a resource's changes in order).
func (w *Writes) Settle(t testing.TB) []Write {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": markerNamespace}}}
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	if _, err := w.dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("marker namespace: %v", err)
	}
	w.mu.Lock()
	w.n++
	name := fmt.Sprintf("%s-%d", markerNamespace, w.n)
	w.mu.Unlock()
	for _, gvr := range w.resources {
		obj := &unstructured.Unstructured{Object: markers[gvr]()}
		obj.SetName(name)
		obj.SetLabels(map[string]string{"write-marker": "true"})
		res := dynamic.ResourceInterface(w.dyn.Resource(gvr))
		if gvr != ServiceCIDRs {
			obj.SetNamespace(markerNamespace)
			res = w.dyn.Resource(gvr).Namespace(markerNamespace)
		}
		if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("marker %s: %v", gvr.Resource, err)
		}
	}
	for {
		w.mu.Lock()
		done := true
		for _, gvr := range w.resources {
			done = done && w.marked[gvr] == name
		}
		seen, errs := slices.Clone(w.seen), slices.Clone(w.errs)
		w.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("watch failed: %v", errs)
		}
		if done {
			return seen
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the watches did not see their markers: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Churn renders the writes that are not the normal life of leader
// election: updates of the Leases named in leases ("namespace/name"), and
// any write of the API server's own Leases in kube-system.
func Churn(writes []Write, leases ...string) []string {
	var out []string
	for _, w := range writes {
		if w.Resource == Leases.Resource && (w.Namespace == metav1.NamespaceSystem ||
			w.Type == watch.Modified && slices.Contains(leases, w.Namespace+"/"+w.Name)) {
			continue
		}
		out = append(out, w.String())
	}
	return out
}

// WithoutLeases returns versions (see Versions) without the Leases, which
// renewals change.
func WithoutLeases(versions map[string]string) map[string]string {
	out := maps.Clone(versions)
	maps.DeleteFunc(out, func(k, _ string) bool { return strings.HasPrefix(k, Leases.Resource+" ") })
	return out
}
