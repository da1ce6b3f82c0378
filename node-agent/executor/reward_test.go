//go:build !windows

package executor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// A check's reward file is read as Harbor writes it; anything else is
// refused with a reason, and nothing outside the check's folder is read.
func TestReadReward(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0.99"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		setup       func(dir string) error
		want, wantE string
	}{
		{"none", func(string) error { return nil }, "", ""},
		{"reward.txt", func(d string) error { return os.WriteFile(filepath.Join(d, "reward.txt"), []byte(" 0.75\n"), 0o644) }, "0.75", ""},
		{"reward.json", func(d string) error {
			return os.WriteFile(filepath.Join(d, "reward.json"), []byte(`{"reward": 1, "tests_passed": 3}`), 0o644)
		}, "1", ""},
		{"reward.txt wins", func(d string) error {
			_ = os.WriteFile(filepath.Join(d, "reward.json"), []byte(`{"reward": 1}`), 0o644)
			return os.WriteFile(filepath.Join(d, "reward.txt"), []byte("0"), 0o644)
		}, "0", ""},
		{"not a number", func(d string) error { return os.WriteFile(filepath.Join(d, "reward.txt"), []byte("pass"), 0o644) }, "", "does not hold a number"},
		{"NaN", func(d string) error { return os.WriteFile(filepath.Join(d, "reward.txt"), []byte("NaN"), 0o644) }, "", "not finite"},
		{"above 1", func(d string) error { return os.WriteFile(filepath.Join(d, "reward.txt"), []byte("1e300"), 0o644) }, "", "1e+300, outside [0, 1]"},
		{"below 0", func(d string) error {
			return os.WriteFile(filepath.Join(d, "reward.json"), []byte(`{"reward": -0.5}`), 0o644)
		}, "", "-0.5, outside [0, 1]"},
		{"json without reward", func(d string) error {
			return os.WriteFile(filepath.Join(d, "reward.json"), []byte(`{"score": 1}`), 0o644)
		}, "", `no "reward" key`},
		{"symlink to a host file", func(d string) error { return os.Symlink(secret, filepath.Join(d, "reward.txt")) }, "", "not a regular file"},
		{"fifo", func(d string) error { return syscall.Mkfifo(filepath.Join(d, "reward.txt"), 0o644) }, "", "not a regular file"},
		{"huge", func(d string) error {
			return os.WriteFile(filepath.Join(d, "reward.txt"), []byte(strings.Repeat("1", maxRewardFile+1)), 0o644)
		}, "", "more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.setup(dir); err != nil {
				t.Fatal(err)
			}
			got, problem := readReward(dir)
			if got != tc.want || !strings.Contains(problem, tc.wantE) || (tc.wantE == "" && problem != "") {
				t.Fatalf("readReward = %q, %q; want %q, ...%q...", got, problem, tc.want, tc.wantE)
			}
		})
	}
	if m := meanReward([]harnessv1.CheckResult{{Reward: "1"}, {Reward: "0"}, {}}); m != "0.5" {
		t.Fatalf("mean = %q", m)
	}
}
