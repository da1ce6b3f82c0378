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

	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
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

// executorRunDir makes a run dir as the node-agent's executor does: the
// fixture package's Materialize (harnessfacts-<random>
// under the run root, holding its owner lock) and MakeAgentDirs, and the
// agent's Spec with the paths the executor gives it (executor.baseSpec:
// the workspace first, whose path names the profile). The run dir stays
// locked, as by a live node-agent, until the test closes it.
func executorRunDir(t *testing.T, runsRoot string) (Spec, *fixture.RunDir) {
	t.Helper()
	f, err := fixture.FromInline(map[string]string{"fixture.yaml": "prompt: p\n", "workspace/a": "x\n"}, fixture.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := f.Materialize(runsRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dir.Remove() })
	if err := dir.MakeAgentDirs(); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Argv: []string{"agent"}, Dir: dir.Workspace(),
		ReadWrite: []string{dir.Workspace(), dir.Home(), dir.Tmp()},
		ReadOnly:  []string{dir.FixtureDir(), dir.Sockets(), `C:\harnessfacts\harnessfacts.exe`},
	}, dir
}

// writeRecord writes the record Run holds for spec, where Run puts it.
func writeRecord(t *testing.T, records string, spec Spec) (path string, rec containerRecord) {
	t.Helper()
	path, rec = runRecord(records, spec)
	b, _ := rec.encode()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, rec
}

// TestRecoverAfterTheRunDirIsGone: a node-agent killed during a run leaves
// the profile, the grants and the run dir; at its next start the run dir is
// removed (the executor's RemoveAbandoned) and then RecoverAbandoned runs.
// The record must survive the run dir, so it is not in it.
func TestRecoverAfterTheRunDirIsGone(t *testing.T) {
	runsRoot, records := filepath.Join(t.TempDir(), "runs"), t.TempDir()
	dead, deadDir := executorRunDir(t, runsRoot)
	live, _ := executorRunDir(t, runsRoot)
	deadPath, deadRec := writeRecord(t, records, dead)
	livePath, _ := writeRecord(t, records, live)
	for _, p := range []string{deadPath, livePath} {
		if strings.HasPrefix(p, runsRoot+string(filepath.Separator)) {
			t.Fatalf("the record %s is inside the run root %s, which the node-agent deletes", p, runsRoot)
		}
	}
	// The dead run's node-agent is gone (its lock with it); at the next
	// start the executor's RemoveAbandoned removes its run dir, and only
	// that one, before recovery runs (or after: the record is elsewhere).
	if err := deadDir.Close(); err != nil {
		t.Fatal(err)
	}
	removed, err := fixture.RemoveAbandoned(runsRoot)
	if err != nil || len(removed) != 1 || removed[0] != deadDir.Path {
		t.Fatalf("RemoveAbandoned removed %v (%v), want only %s", removed, err, deadDir.Path)
	}
	sys := &fakeContainerOS{held: map[string]bool{livePath: true}}
	done, err := recoverRecords(records, sys)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{deadRec.Profile}, done); d != "" {
		t.Errorf("recovered (-want +got):\n%s", d)
	}
	var wantRevoked []string
	for _, g := range deadRec.Grants {
		wantRevoked = append(wantRevoked, deadRec.Profile+" "+g.Path)
	}
	if len(wantRevoked) < 4 {
		t.Fatalf("the record lists only %d grants: %v", len(wantRevoked), deadRec.Grants)
	}
	if d := cmp.Diff(wantRevoked, sys.revoked); d != "" {
		t.Errorf("revoked (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{deadRec.Profile}, sys.deleted); d != "" {
		t.Errorf("deleted profiles (-want +got):\n%s", d)
	}
	if _, err := os.Stat(deadPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead run's record is still there: %v", err)
	}
	if _, err := os.Stat(livePath); err != nil {
		t.Errorf("the live run's record was touched: %v", err)
	}
}

func TestRecoverKeepsRecordWhenCleanupFails(t *testing.T) {
	records := t.TempDir()
	spec, _ := executorRunDir(t, t.TempDir())
	path, _ := writeRecord(t, records, spec)
	sys := &fakeContainerOS{failOnce: true}
	if ok, err := recoverRecord(path, sys); ok || err == nil {
		t.Fatalf("a failed revoke reported success: %v %v", ok, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the record was dropped although the grant remains: %v", err)
	}
	if ok, err := recoverRecord(path, sys); !ok || err != nil {
		t.Fatalf("the retry: %v %v", ok, err)
	}
}

func TestRecoverRejectsForeignRecords(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x"+containerFile)
	if err := os.WriteFile(path, []byte(`{"profile":"Microsoft.Something"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sys := &fakeContainerOS{}
	if _, err := recoverRecords(dir, sys); err == nil || len(sys.deleted) != 0 {
		t.Fatalf("a record naming another profile was acted on: %v %v", err, sys.deleted)
	}
}
