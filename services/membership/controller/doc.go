// Package controller is membership's loop: it keeps the endpoint set of
// every Service of one cluster in a watch.Hub, from the caches of package
// kube.
//
// It follows the sample-controller pattern. Event handlers do no work
// beyond keeping the selector index current and finding, with
// selector.Affected, which Services a change concerns; they queue those
// Services on a rate-limited workqueue, which merges repeated keys, so a
// burst of changes to one Service's Pods costs few reconciles. Workers take
// a Service, recompute its endpoint set from the caches with
// endpoints.Compute, and publish it only when it changed; the
// ServiceExport's status is written only when its conditions change.
//
// Every change that concerns at least one Service is marked by a span,
// "membership.observe", started when the handler sees it. The reconcile
// span is its child, and the event published carries the observation's time
// and its trace context, so a consumer can follow a change from the moment
// membership saw it.
//
// The controller counts as synced only when the caches have synced and
// every Service found at start-up has been reconciled once: before that, a
// snapshot would miss Services and a consumer would delete their
// endpoints.
package controller
