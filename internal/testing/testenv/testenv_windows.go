// Package testenv starts the real control plane the tests run against. On
// Windows it cannot: controller-runtime's envtest does not build there, and
// the control plane the tests use is Linux-only. This file keeps the
// packages that use it compiling (GOOS=windows go vet), and Start says why
// no test can run.
package testenv

import (
	"errors"
	"path/filepath"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Env is a running control plane; never one on Windows.
type Env struct {
	Config *rest.Config
	Scheme *runtime.Scheme
	Assets string
}

// RepoRoot is the root of this repository, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var errWindows = errors.New("testenv: the tests' control plane (envtest's kube-apiserver and etcd) runs on Linux only")

// Start fails: see errWindows.
func Start() (*Env, error) { return nil, errWindows }

// Stop does nothing.
func (e *Env) Stop() error { return nil }

// Kubeconfig fails: see errWindows.
func (e *Env) Kubeconfig(string) error { return errWindows }
