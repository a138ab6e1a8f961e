package kubetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/deploy/crds"
)

// CRDs returns the CustomResourceDefinitions every Plexus cluster needs
// (crds.All: ServiceExport and ServiceImport from the mcs-api module this
// project is built with, and ExternalWorkload).
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	manifests := crds.All()
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(manifests))
	for _, m := range manifests {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(m.YAML, crd); err != nil {
			return nil, fmt.Errorf("decode %s CRD: %w", m.Source, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

// ApplyCRDs creates or updates the CRDs of CRDs() in the cluster and waits
// until every served version can be listed and creates are no longer held
// back (up to about two seconds after a CRD is first established).
func ApplyCRDs(ctx context.Context, cfg *rest.Config) error {
	want, err := CRDs()
	if err != nil {
		return err
	}
	crdClient, dyn, err := crdClients(cfg)
	if err != nil {
		return err
	}
	for _, crd := range want {
		if err := applyCRD(ctx, crdClient, crd); err != nil {
			return err
		}
	}
	var settled time.Time
	for _, crd := range want {
		established, err := waitCRDServed(ctx, crdClient, dyn, crd)
		if err != nil {
			return err
		}
		if s := established.Add(crdCreateDelayWindow); s.After(settled) {
			settled = s
		}
	}
	// The API server holds every create of a custom resource for two
	// seconds while its CRD was established less than two seconds ago (so
	// that other API servers catch up). Waiting the window out here keeps
	// that stall out of the first create of every test.
	select {
	case <-time.After(time.Until(settled)):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for new CRDs to settle: %w", ctx.Err())
	}
}

// WaitCRDsEstablished waits until each CRD named, made by another hand
// (kubectl, helm, plexusctl crds), exists in the cluster of cfg, is
// established, and every served version of it can be listed.
func WaitCRDsEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	crdClient, dyn, err := crdClients(cfg)
	if err != nil {
		return err
	}
	for _, name := range names {
		var crd *apiextensionsv1.CustomResourceDefinition
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			crd, err = crdClient.Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			return fmt.Errorf("wait for CRD %s to exist: %w", name, err)
		}
		if _, err := waitCRDServed(ctx, crdClient, dyn, crd); err != nil {
			return err
		}
	}
	return nil
}

// crdClients are the clients of cfg's cluster that apply and wait for
// CRDs.
func crdClients(cfg *rest.Config) (crdInterface, dynamic.Interface, error) {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build apiextensions client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("build dynamic client: %w", err)
	}
	return client.ApiextensionsV1().CustomResourceDefinitions(), dyn, nil
}

// crdCreateDelayWindow is the API server's window (measured from the
// Established condition's transition time) in which creates of a new CRD's
// objects are delayed, plus a margin.
const crdCreateDelayWindow = 2*time.Second + 50*time.Millisecond

type crdInterface interface {
	Create(context.Context, *apiextensionsv1.CustomResourceDefinition, metav1.CreateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Get(context.Context, string, metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Update(context.Context, *apiextensionsv1.CustomResourceDefinition, metav1.UpdateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}

func applyCRD(ctx context.Context, client crdInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	_, err := client.Create(ctx, crd, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Labels = crd.Labels
		current.Annotations = crd.Annotations
		current.Spec = crd.Spec
		_, err = client.Update(ctx, current, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("update CRD %s: %w", crd.Name, err)
	}
	return nil
}

// waitCRDServed waits for Established and then for a list of every served
// version to succeed: a client that creates an object right after
// Established can still meet a 404 while the handler is installed.
//
// It returns when the CRD was established, by the API server's clock (which
// is this machine's).
func waitCRDServed(ctx context.Context, client crdInterface, dyn dynamic.Interface, crd *apiextensionsv1.CustomResourceDefinition) (time.Time, error) {
	var established time.Time
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		current, err := client.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range current.Status.Conditions {
			if cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse {
				return false, fmt.Errorf("names not accepted: %s", cond.Message)
			}
		}
		for _, cond := range current.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				established = cond.LastTransitionTime.Time
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("wait for CRD %s to be established: %w", crd.Name, err)
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served {
			continue
		}
		gvr := crdGVR(crd, v.Name)
		err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			return err == nil, nil
		})
		if err != nil {
			return time.Time{}, fmt.Errorf("wait for %s to be served: %w", gvr, err)
		}
	}
	return established, nil
}

func crdGVR(crd *apiextensionsv1.CustomResourceDefinition, version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
}

// InstallCRDs applies CRDs() to the clusters behind cfgs for the test, all
// at once, and waits until they are served. Installed CRDs stay: the
// clusters are torn down with the test anyway.
func InstallCRDs(t testing.TB, cfgs ...*rest.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
	defer cancel()
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() { errs[i] = ApplyCRDs(ctx, cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("install CRDs: %v", err)
	}
}
