// Package clusterid finds out which cluster a service serves, the way
// SIG-Multicluster standardised it (KEP-2149): the ClusterProperty
// cluster.clusterset.k8s.io (group about.k8s.io) holds the cluster's id in
// its clusterset and clusterset.k8s.io the clusterset's name. --cluster-name
// overrides nothing silently: given both, they must agree, so that a
// cluster never writes slices, owners and endpoints under two names.
package clusterid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
)

// ErrNotFound is what a Getter returns for a property that does not exist
// (or when the About API is not installed at all).
var ErrNotFound = errors.New("not found")

// Getter returns the value of the named ClusterProperty.
type Getter func(ctx context.Context, name string) (string, error)

// Where an identity came from.
const (
	FromFlag     = "flag"
	FromProperty = "ClusterProperty"
	FromBoth     = "flag and ClusterProperty"
)

// Identity is a cluster's name in its clusterset.
type Identity struct {
	// Cluster is the cluster's id.
	Cluster string
	// ClusterSet is the clusterset's name; empty when no property names
	// it.
	ClusterSet string
	// Source says where Cluster came from.
	Source string
}

// Options tune Resolve.
type Options struct {
	// Flag is --cluster-name; empty when not given.
	Flag string
	// Wait bounds how long Resolve retries while the API cannot be read
	// (it is starting, or a network blip); 30 s when zero.
	Wait time.Duration
}

// Resolve reads the identity through get. A property that is not there
// leaves the flag to decide; a property that says another name than the
// flag is refused, as is no name at all and a name that is not a DNS label
// (it becomes a label value and a ServiceImport's cluster name). Errors
// other than ErrNotFound are retried until opts.Wait passes.
func Resolve(ctx context.Context, get Getter, opts Options) (Identity, error) {
	if opts.Wait <= 0 {
		opts.Wait = 30 * time.Second
	}
	id, err := retry(ctx, get, aboutv1alpha1.ClusterIDProperty, opts.Wait)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Identity{}, fmt.Errorf("read ClusterProperty %s: %w", aboutv1alpha1.ClusterIDProperty, err)
	}
	found := err == nil
	set, err := retry(ctx, get, aboutv1alpha1.ClusterSetProperty, opts.Wait)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Identity{}, fmt.Errorf("read ClusterProperty %s: %w", aboutv1alpha1.ClusterSetProperty, err)
	}
	return decide(strings.TrimSpace(opts.Flag), id, found, set)
}

// decide applies the rules to what was read.
func decide(flag, property string, found bool, set string) (Identity, error) {
	out := Identity{ClusterSet: set}
	switch {
	case found && flag != "" && flag != property:
		return Identity{}, fmt.Errorf("--cluster-name %q disagrees with the ClusterProperty %s, which says %q: remove the flag, or correct the property (a cluster has one name in its clusterset)",
			flag, aboutv1alpha1.ClusterIDProperty, clip(property))
	case found && flag != "":
		out.Cluster, out.Source = flag, FromBoth
	case found:
		out.Cluster, out.Source = property, FromProperty
	case flag != "":
		out.Cluster, out.Source = flag, FromFlag
	default:
		return Identity{}, fmt.Errorf("no cluster id: create the ClusterProperty %s (group %s) with the cluster's name in its clusterset, or set --cluster-name",
			aboutv1alpha1.ClusterIDProperty, aboutv1alpha1.GroupName)
	}
	if msgs := validation.IsDNS1123Label(out.Cluster); len(msgs) > 0 {
		return Identity{}, fmt.Errorf("cluster id %q (from the %s) is not a DNS label: %s", clip(out.Cluster), out.Source, strings.Join(msgs, "; "))
	}
	return out, nil
}

// clip cuts a value read from the API to a length fit for a message.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:most], len(s))
}

// retry reads one property, retrying errors other than ErrNotFound with
// backoff until wait has passed.
func retry(ctx context.Context, get Getter, name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	backoff := 100 * time.Millisecond
	for {
		v, err := get(ctx, name)
		if err == nil || errors.Is(err, ErrNotFound) || time.Now().Add(backoff).After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return "", errors.Join(ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// FromAPI reads ClusterProperties through a dynamic client. A missing
// object and a missing resource (the CRD is not installed) are both
// ErrNotFound; a property without a value is an error.
func FromAPI(client dynamic.Interface) Getter {
	return func(ctx context.Context, name string) (string, error) {
		obj, err := client.Resource(aboutv1alpha1.ClusterPropertiesResource).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", ErrNotFound
		}
		if err != nil {
			return "", err
		}
		v, ok, err := unstructured.NestedString(obj.Object, "spec", "value")
		if err != nil || !ok || v == "" {
			return "", fmt.Errorf("ClusterProperty %s has no spec.value", name)
		}
		return v, nil
	}
}

// Apply resolves the identity of the cluster client talks to, with flag as
// --cluster-name, logs where it came from, and returns it.
func Apply(ctx context.Context, client dynamic.Interface, flag string, logger *slog.Logger) (Identity, error) {
	id, err := Resolve(ctx, FromAPI(client), Options{Flag: flag})
	if err != nil {
		return Identity{}, err
	}
	logger.Info("cluster identity", "cluster", id.Cluster, "clusterset", id.ClusterSet, "from", id.Source)
	return id, nil
}
