// Package client talks to the ExternalWorkload API with plain client-go: a
// REST client for the group, a small typed wrapper for the calls membership
// makes, and a shared informer. There is no generated clientset; the REST
// client and the informer are all client-go needs.
package client

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
)

// Scheme knows the ExternalWorkload types; the REST client encodes and
// decodes with it.
var Scheme = runtime.NewScheme()

// Codecs are the serializers of Scheme.
var Codecs = serializer.NewCodecFactory(Scheme)

func init() {
	if err := v1alpha1.AddToScheme(Scheme); err != nil {
		panic(fmt.Sprintf("register %s: %v", v1alpha1.SchemeGroupVersion, err))
	}
}

// NewRESTClient returns a REST client for workload.plexus.dev/v1alpha1 that
// shares cfg's server, credentials, rate limits and transport wrappers.
func NewRESTClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	// CRDs are served as JSON only.
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build REST client for %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	return client, nil
}

// NewInformer returns a shared informer over the ExternalWorkloads of one
// namespace (metav1.NamespaceAll for all), indexed by namespace.
func NewInformer(client rest.Interface, namespace string, resync time.Duration) cache.SharedIndexInformer {
	return NewFilteredInformer(client, namespace, resync, nil)
}

// NewFilteredInformer is NewInformer with a hook that narrows every list and
// watch, for example with a label selector.
func NewFilteredInformer(client rest.Interface, namespace string, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	lw := cache.NewFilteredListWatchFromClient(client, v1alpha1.ResourceExternalWorkloads, namespace, tweak)
	return cache.NewSharedIndexInformer(lw, &v1alpha1.ExternalWorkload{}, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// ExternalWorkloads is a typed client for the ExternalWorkloads of one
// namespace.
type ExternalWorkloads struct {
	client    rest.Interface
	namespace string
}

// ForNamespace returns a typed client for the ExternalWorkloads in namespace.
func ForNamespace(client rest.Interface, namespace string) *ExternalWorkloads {
	return &ExternalWorkloads{client: client, namespace: namespace}
}

// Get returns the workload called name.
func (c *ExternalWorkloads) Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.ExternalWorkload, error) {
	out := &v1alpha1.ExternalWorkload{}
	err := c.client.Get().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List returns the workloads that match opts.
func (c *ExternalWorkloads) List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.ExternalWorkloadList, error) {
	out := &v1alpha1.ExternalWorkloadList{}
	err := c.client.Get().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches the workloads that match opts.
func (c *ExternalWorkloads) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.client.Get().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create creates w; the status is ignored by the server.
func (c *ExternalWorkloads) Create(ctx context.Context, w *v1alpha1.ExternalWorkload, opts metav1.CreateOptions) (*v1alpha1.ExternalWorkload, error) {
	out := &v1alpha1.ExternalWorkload{}
	err := c.client.Post().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).
		VersionedParams(&opts, metav1.ParameterCodec).Body(w).Do(ctx).Into(out)
	return out, err
}

// Update replaces the spec and metadata of w, guarded by its resourceVersion.
func (c *ExternalWorkloads) Update(ctx context.Context, w *v1alpha1.ExternalWorkload, opts metav1.UpdateOptions) (*v1alpha1.ExternalWorkload, error) {
	out := &v1alpha1.ExternalWorkload{}
	err := c.client.Put().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).Name(w.Name).
		VersionedParams(&opts, metav1.ParameterCodec).Body(w).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus replaces the status of w through the status subresource,
// guarded by its resourceVersion; the spec is left alone.
func (c *ExternalWorkloads) UpdateStatus(ctx context.Context, w *v1alpha1.ExternalWorkload, opts metav1.UpdateOptions) (*v1alpha1.ExternalWorkload, error) {
	out := &v1alpha1.ExternalWorkload{}
	err := c.client.Put().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).Name(w.Name).
		SubResource("status").VersionedParams(&opts, metav1.ParameterCodec).Body(w).Do(ctx).Into(out)
	return out, err
}

// Patch applies a patch of type pt to the workload called name, or to its
// status when subresources is "status".
func (c *ExternalWorkloads) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.ExternalWorkload, error) {
	out := &v1alpha1.ExternalWorkload{}
	err := c.client.Patch(pt).Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).Name(name).
		SubResource(subresources...).VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the workload called name; opts.Preconditions can guard the
// delete by uid or resourceVersion.
func (c *ExternalWorkloads) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.client.Delete().Namespace(c.namespace).Resource(v1alpha1.ResourceExternalWorkloads).Name(name).
		Body(&opts).Do(ctx).Error()
}
