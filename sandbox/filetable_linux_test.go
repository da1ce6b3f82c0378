package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeFileTable points fs.file-max and /proc/meminfo at files of the test's
// (values in the form the kernel writes them) until the test ends.
func fakeFileTable(t *testing.T, fileMax string, memKB uint64) string {
	t.Helper()
	dir := t.TempDir()
	fm, mi := filepath.Join(dir, "file-max"), filepath.Join(dir, "meminfo")
	if err := os.WriteFile(fm, []byte(fileMax+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	meminfo := "MemTotal:       " + strconv.FormatUint(memKB, 10) + " kB\nMemFree:        1000 kB\n"
	if err := os.WriteFile(mi, []byte(meminfo), 0o644); err != nil {
		t.Fatal(err)
	}
	oldFM, oldMI := fileMaxPath, meminfoPath
	fileMaxPath, meminfoPath = fm, mi
	t.Cleanup(func() { fileMaxPath, meminfoPath = oldFM, oldMI })
	return fm
}

// TestFileTableVerdict: the node's open-file table is out of one run's
// reach when the node's memory holds no more open files than it allows;
// the kernel's default (about one file per 10 KiB of memory, this
// machine's 2,466,290 for 24 GiB) is not.
func TestFileTableVerdict(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		fileMax, mem uint64
		bounded      bool
	}{
		{2466290, 24 * gib, false}, // the kernel's default
		{MaxFileTable, 24 * gib, true},
		{24 * gib / fileBytes, 24 * gib, true},
		{24*gib/fileBytes - 1, 24 * gib, false},
	} {
		v := fileTableVerdict(c.fileMax, c.mem)
		if (v == "") != c.bounded || Degraded(v) == c.bounded {
			t.Errorf("file-max %d, memory %d: verdict %q; want bounded %v", c.fileMax, c.mem, v, c.bounded)
		}
	}
	if v := fileTableVerdict(2466290, 24*gib); !strings.Contains(v, "fs.file-max 2466290") || !strings.Contains(v, "more than 470 MiB") ||
		!strings.Contains(v, "sysctl fs.file-max=9223372036854775807") {
		t.Errorf("the verdict %q does not say the table, the memory that fills it and the remedy", v)
	}
}

// TestRaiseFileTable: the node-agent raises fs.file-max to the kernel's
// most where one run could fill it, leaves it where none can, and says
// when it cannot write it.
func TestRaiseFileTable(t *testing.T) {
	fm := fakeFileTable(t, "2466290", 24<<20)
	before, after, err := RaiseFileTable()
	if err != nil || before != 2466290 || after != MaxFileTable {
		t.Fatalf("RaiseFileTable = %d, %d, %v; want 2466290 raised to %d", before, after, err, uint64(MaxFileTable))
	}
	if b, _ := os.ReadFile(fm); strings.TrimSpace(string(b)) != "9223372036854775807" {
		t.Fatalf("fs.file-max now %q", b)
	}
	// High enough already: left as it is.
	fm = fakeFileTable(t, "200000000", 24<<20)
	if before, after, err := RaiseFileTable(); err != nil || before != 200000000 || after != before {
		t.Errorf("RaiseFileTable over a high enough table = %d, %d, %v; want it left", before, after, err)
	}
	if b, _ := os.ReadFile(fm); strings.TrimSpace(string(b)) != "200000000" {
		t.Errorf("fs.file-max rewritten to %q", b)
	}
	// Not writable (a read-only /proc/sys): an error, the value unchanged.
	fakeFileTable(t, "2466290", 24<<20)
	fileMaxPath = "/proc/self/status/file-max" // a path under a file: nothing can write it
	if _, _, err := RaiseFileTable(); err == nil {
		t.Error("RaiseFileTable of an unwritable table: no error")
	}
}

// TestPreflightSaysTheFileTable: the real preflight's verdict names the
// missing bound, loudly (Degraded), where one run could fill the node's
// open-file table, and not where none can.
func TestPreflightSaysTheFileTable(t *testing.T) {
	requireBwrapHost(t)
	fakeFileTable(t, "2466290", 24<<20)
	got := Preflight(context.Background(), Options{})
	if len(got) == 0 || !got[0].Available || !strings.Contains(got[0].Reason, NoFileTableBound+" (fs.file-max 2466290") || !Degraded(got[0].Reason) {
		t.Fatalf("preflight under a small open-file table: %+v", got)
	}
	fakeFileTable(t, "9223372036854775807", 24<<20)
	got = Preflight(context.Background(), Options{})
	if len(got) == 0 || !got[0].Available || strings.Contains(got[0].Reason, NoFileTableBound) {
		t.Fatalf("preflight under the kernel's largest open-file table: %+v", got)
	}
}
