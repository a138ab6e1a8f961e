// Package deploy carries the Kubernetes manifests of the four Plexus
// services (the *.yaml files next to this one: namespace, ServiceAccounts,
// least-privilege RBAC, the repair admission policy, Deployments,
// PodDisruptionBudgets and Services), and the allocator on etcd in etcd/,
// the alternative to 10-allocator.yaml, so tests and tools can read them
// without touching the file system. The CRDs are in package crds below.
package deploy

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Namespace is the namespace every namespaced object of the manifests is in.
const Namespace = "plexus-system"

//go:embed *.yaml etcd/*.yaml
var files embed.FS

// EtcdAllocatorFile is the allocator on etcd, the alternative to
// 10-allocator.yaml.
const EtcdAllocatorFile = "etcd/10-allocator.yaml"

// Object is one manifest object and the file it came from.
type Object struct {
	// File is the manifest file's name, for example "40-repair.yaml".
	File string
	*unstructured.Unstructured
}

// Objects decodes every object of every manifest of this folder (not
// etcd/), files in name order (the order kubectl applies a folder in) and
// objects in file order. The YAML is decoded strictly: a key given twice
// is an error.
func Objects() ([]Object, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded manifests: %w", err)
	}
	var out []Object
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		objs, err := FileObjects(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// FileObjects decodes the objects of one manifest file, such as
// EtcdAllocatorFile, in file order.
func FileObjects(name string) ([]Object, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return DecodeFile(name, data)
}

// DecodeFile decodes the objects of the multi-document YAML data, from the
// file named name, as Objects does.
func DecodeFile(name string, data []byte) ([]Object, error) {
	objs, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	out := make([]Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, Object{File: name, Unstructured: o})
	}
	return out, nil
}

// decode splits a multi-document YAML stream and decodes each document that
// is not empty (only comments) into an object that names its kind.
func decode(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("document %d: %s without a name", i, u.GetKind())
		}
		out = append(out, u)
	}
}
