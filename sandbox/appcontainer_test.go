package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/google/go-cmp/cmp"
)

func TestAppContainerName(t *testing.T) {
	a := appContainerName(`C:\hf\runs\r1`)
	if a != appContainerName(`c:/HF/runs/r1/`) {
		t.Errorf("the name depends on case or separators: %q", a)
	}
	if a == appContainerName(`C:\hf\runs\r2`) {
		t.Errorf("two run dirs share a profile name")
	}
	if len(a) > 64 || !strings.HasPrefix(a, "harnessfacts.run.") {
		t.Errorf("bad profile name %q", a)
	}
	for _, r := range a {
		if r != '.' && (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			t.Errorf("profile name %q has %q", a, r)
		}
	}
}

func TestPlanGrants(t *testing.T) {
	got := planGrants(Spec{
		ReadWrite: []string{`C:\runs\r1`, `c:\runs\R1`},
		ReadOnly:  []string{`C:\runtime\node`},
		Hidden:    []string{`C:\agent\state`},
	})
	write := fileGenericRead | fileGenericWrite | fileGenericExecute | accessDelete | fileDeleteChild
	want := []aclGrant{
		{Path: `C:\runs\r1`, Mask: write, Inherit: subContainersAndObjectsInherit},
		{Path: `C:\runtime\node`, Mask: fileGenericRead | fileGenericExecute, Inherit: subContainersAndObjectsInherit},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("grants (-want +got):\n%s", d)
	}
	if got[1].Mask&(fileGenericWrite&^fileGenericRead) != 0 || got[1].Mask&accessDelete != 0 {
		t.Errorf("the runtime copy is writable: %#x", got[1].Mask)
	}
}

func TestPlanJob(t *testing.T) {
	got := planJob(Limits{MaxProcesses: 32, MemoryBytes: 1 << 30})
	want := jobPlan{
		LimitFlags:         jobLimitKillOnJobClose | jobLimitActiveProcess | jobLimitJobMemory | jobLimitDieOnUnhandledExcept,
		ActiveProcessLimit: 32,
		JobMemoryLimit:     1 << 30,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("job (-want +got):\n%s", d)
	}
	if def := planJob(Limits{}); def.JobMemoryLimit != uint64(DefaultMemoryBytes) || def.ActiveProcessLimit != uint32(DefaultMaxProcesses) {
		t.Errorf("defaults: %+v", def)
	}
	if big := planJob(Limits{MaxProcesses: 1 << 40}); big.ActiveProcessLimit != ^uint32(0) {
		t.Errorf("overflowing process limit: %d", big.ActiveProcessLimit)
	}
}

func TestEnvBlock(t *testing.T) {
	b, err := envBlock([]string{"Path=C:\\x", "b=2", "PATH=C:\\y", "A=1"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(string(utf16.Decode(b)), "\x00")
	want := []string{"A=1", "b=2", "PATH=C:\\y", "", ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("env block (-want +got):\n%s", d)
	}
	if e, _ := envBlock(nil); len(e) != 2 || e[0] != 0 || e[1] != 0 {
		t.Errorf("empty block %v", e)
	}
	if _, err := envBlock([]string{"A=\x00"}); err == nil {
		t.Errorf("a NUL byte was accepted")
	}
}

// fakeContainerOS records what recovery did; held paths act like a live run.
type fakeContainerOS struct {
	held     map[string]bool
	revoked  []string
	deleted  []string
	failOnce bool
}

func (f *fakeContainerOS) open(path string) ([]byte, func(), error) {
	if f.held[path] {
		return nil, nil, errHeld
	}
	b, err := os.ReadFile(path)
	return b, func() {}, err
}

func (f *fakeContainerOS) revoke(profile, path string) error {
	if f.failOnce {
		f.failOnce = false
		return errors.New("access denied")
	}
	f.revoked = append(f.revoked, profile+" "+path)
	return nil
}

func (f *fakeContainerOS) deleteProfile(profile string) error {
	f.deleted = append(f.deleted, profile)
	return nil
}

func TestRecoverAbandonedRuns(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, rec *containerRecord) string {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			b, _ := rec.encode()
			if err := os.WriteFile(filepath.Join(dir, containerFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dead := mk("dead", &containerRecord{Profile: appContainerName("dead"), Grants: []aclGrant{{Path: `C:\runs\dead`}, {Path: `C:\runtime`}}})
	live := mk("live", &containerRecord{Profile: appContainerName("live"), Grants: []aclGrant{{Path: `C:\runs\live`}}})
	mk("clean", nil)
	sys := &fakeContainerOS{held: map[string]bool{filepath.Join(live, containerFile): true}}

	done, err := recoverRunsRoot(root, sys)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{dead}, done); d != "" {
		t.Errorf("recovered (-want +got):\n%s", d)
	}
	p := appContainerName("dead")
	if d := cmp.Diff([]string{p + ` C:\runs\dead`, p + ` C:\runtime`}, sys.revoked); d != "" {
		t.Errorf("revoked (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{p}, sys.deleted); d != "" {
		t.Errorf("deleted profiles (-want +got):\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(dead, containerFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead run's record is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(live, containerFile)); err != nil {
		t.Errorf("the live run's record was touched: %v", err)
	}
}

func TestRecoverKeepsRecordWhenCleanupFails(t *testing.T) {
	dir := t.TempDir()
	b, _ := containerRecord{Profile: appContainerName(dir), Grants: []aclGrant{{Path: dir}}}.encode()
	if err := os.WriteFile(filepath.Join(dir, containerFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	sys := &fakeContainerOS{failOnce: true}
	if ok, err := recoverRunDir(dir, sys); ok || err == nil {
		t.Fatalf("a failed revoke reported success: %v %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, containerFile)); err != nil {
		t.Fatalf("the record was dropped although the grant remains: %v", err)
	}
	if ok, err := recoverRunDir(dir, sys); !ok || err != nil {
		t.Fatalf("the retry: %v %v", ok, err)
	}
}

func TestRecoverRejectsForeignRecords(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, containerFile), []byte(`{"profile":"Microsoft.Something"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sys := &fakeContainerOS{}
	if _, err := recoverRunDir(dir, sys); err == nil || len(sys.deleted) != 0 {
		t.Fatalf("a record naming another profile was acted on: %v %v", err, sys.deleted)
	}
}
