package app_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/services/importer/app"
	"github.com/plexusnet/plexus/services/importer/sources"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// Two sources that reach one membership under two names used to import
// one cluster twice: two slices holding the same Pod addresses. The
// membership says which cluster it serves; the source named otherwise is
// refused, shown so in ListSources, counted, and reported as an Event on
// the importer's Lease, and only the cluster's own slices are written.
func TestSourceUnderAnotherNameIsRefused(t *testing.T) {
	e := newEnv(t)
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.1.0.1", "10.1.0.2"))
	o := e.options()
	o.Sources = []string{"mirror=" + east.Addr()}
	im := e.startImporter(t, o, east)

	require.Eventually(t, func() bool {
		srcs := im.sources(t)
		return srcs["east"].GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED &&
			srcs["mirror"].GetState() == importerv1.SourceState_SOURCE_STATE_REFUSED
	}, waitFor, tick)
	mirror := im.sources(t)["mirror"]
	require.Equal(t, sources.RefusedServesOther, mirror.GetRefusalReason())
	require.Contains(t, mirror.GetLastError(), "the membership serves cluster east, not mirror")
	require.Zero(t, mirror.GetExportedServices())
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "cart"))) == "map[east:2]"
	}, waitFor, tick)
	idle(t, im)
	require.Equal(t, "map[east:2]", fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "cart"))), "the refused source wrote nothing")
	require.Positive(t, counter(t, im.registry, "plexus_importer_source_refusals_total", map[string]string{"source": "mirror", "reason": sources.RefusedServesOther}))
	require.Zero(t, counter(t, im.registry, "plexus_importer_source_refusals_total", map[string]string{"source": "east"}))

	var events []corev1.Event
	require.Eventually(t, func() bool {
		list, err := e.kube.CoreV1().Events(o.LeaseNamespace).List(ctxFor(t), metav1.ListOptions{FieldSelector: "involvedObject.kind=Lease,reason=" + app.ReasonSourceRefused})
		require.NoError(t, err)
		events = list.Items
		return len(events) > 0
	}, waitFor, tick)
	require.Len(t, events, 1, "a refusal that repeats is one Event")
	require.Equal(t, o.LeaseName, events[0].InvolvedObject.Name)
	require.Equal(t, corev1.EventTypeWarning, events[0].Type)
	require.Contains(t, events[0].Message, "source cluster mirror ("+east.Addr()+") refused: SERVES_OTHER_CLUSTER")
}
