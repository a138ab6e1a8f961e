package deploy

import (
	"testing"
)

// FuzzDecodeFile: any bytes decode to objects that each name a kind and a
// name, or to an error; never a panic.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# only a comment\n"))
	f.Add([]byte("kind: X\nmetadata: {name: b}\nkind: Y\n"))
	f.Add([]byte("---\n---\n- 1\n"))
	f.Add([]byte("metadata:\n  name: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := DecodeFile("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, o := range objs {
			if o.GetName() == "" || o.File != "fuzz.yaml" {
				t.Fatalf("object %#v without a name or its file", o.Object)
			}
		}
	})
}
