// Package manifests carries the Kubernetes manifests of Plexus: RBAC with
// least privilege per service (rbac.yaml) and the services' workloads
// (services.yaml). Its test applies them to a real kube-apiserver and
// checks every ServiceAccount's access with SubjectAccessReviews.
package manifests

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed *.yaml
var files embed.FS

// Objects returns the objects of one manifest file, in order.
func Objects(name string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}
