package owner

import "testing"

func TestKeyStringSame(t *testing.T) {
	pod := Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "u1"}
	if got := pod.Key(); got != "a/Pod/ns/web-0" {
		t.Fatalf("Key = %q", got)
	}
	if got := pod.String(); got != "a/Pod/ns/web-0(u1)" {
		t.Fatalf("String = %q", got)
	}
	next := pod
	next.UID = "u2"
	anyUID := pod
	anyUID.UID = ""
	other := pod
	other.Cluster = "b"
	for _, c := range []struct {
		a, b Owner
		want bool
	}{
		{pod, pod, true},
		{pod, next, false},  // another incarnation
		{pod, anyUID, true}, // no uid: identity alone decides
		{anyUID, next, true},
		{pod, other, false},
	} {
		if got := Same(c.a, c.b); got != c.want {
			t.Errorf("Same(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
	if pod.Identity() != next.Identity() || pod.Key() != next.Key() {
		t.Fatal("incarnations of one owner share identity and key")
	}
}
