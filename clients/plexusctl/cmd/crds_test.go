package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestCRDsApply: what `plexusctl crds` prints (docs/deploy.md pipes it to
// kubectl apply) is every CRD a cluster needs, and a real kube-apiserver
// accepts and establishes each of them.
func TestCRDsApply(t *testing.T) {
	var out bytes.Buffer
	root := NewRoot(&out)
	root.SetArgs([]string{"crds"})
	require.NoError(t, root.Execute())

	var got []*apiextensionsv1.CustomResourceDefinition
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		doc = strings.TrimPrefix(doc, "---\n")
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), crd))
		got = append(got, crd)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io",
		"externalworkloads.workload.plexus.dev", "clusterproperties.about.k8s.io", "clusterprofiles.multicluster.x-k8s.io",
		"clustersetpolicies.policy.plexus.dev"}, names)

	cluster := kubetest.StartAPIServer(t, kubetest.StartEtcd(t))
	client, err := apiextensionsclient.NewForConfig(cluster.Config)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range got {
		_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err, c.Name)
	}
	for _, c := range got {
		require.Eventually(t, func() bool {
			cur, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, c.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, cond := range cur.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true
				}
			}
			return false
		}, 30*time.Second, 50*time.Millisecond, "%s not established", c.Name)
	}
}
