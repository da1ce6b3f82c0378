package nodecmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// A config read from --kubeconfig has no client-side rate limit unless one is
// asked for, like the in-cluster one: client-go's default of 5 requests a
// second held the controller's bindings back.
func TestKubeAPIFlagsRateLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		qps   float32
		burst int
		err   bool
	}{
		{args: nil, qps: -1, burst: 0},
		{args: []string{"--kube-api-qps", "50", "--kube-api-burst", "100"}, qps: 50, burst: 100},
		{args: []string{"--kube-api-qps", "0"}, err: true},
	} {
		var k KubeAPIFlags
		fl := pflag.NewFlagSet("t", pflag.ContinueOnError)
		k.Add(fl)
		if err := fl.Parse(append([]string{"--kubeconfig", path}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := k.RestConfig()
		if tc.err {
			if err == nil {
				t.Errorf("%v: no error", tc.args)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if cfg.QPS != tc.qps || cfg.Burst != tc.burst || cfg.Host != "https://127.0.0.1:6443" {
			t.Errorf("%v: QPS %v burst %d host %s, want %v %d", tc.args, cfg.QPS, cfg.Burst, cfg.Host, tc.qps, tc.burst)
		}
	}
}
