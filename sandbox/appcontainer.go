package sandbox

// This file holds everything of the Windows AppContainer runner that is not a
// system call, without a build tag, so that its tests run on Linux:
// profile naming, ACL entries, Job Object limits, the environment block and
// the `.container` record that lets a later start clean up after a killed
// node-agent. appcontainer_windows.go turns these plans into Win32 calls.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf16"
)

// containerFile ends the name of the record kept, and held open without
// sharing, for as long as a run's AppContainer profile and grants exist.
const containerFile = ".container"

// runRecord is where a run's record goes and what it says: the profile is
// named after the run directory (the first read-write path of the Spec) and
// the record after the profile.
func runRecord(recordsDir string, spec Spec) (path string, rec containerRecord) {
	name := appContainerName(spec.ReadWrite[0])
	return filepath.Join(recordsDir, name+containerFile), containerRecord{Profile: name, Grants: planGrants(spec)}
}

// appContainerName is the AppContainer profile name for a run directory:
// deterministic (so a record can be checked against it), at most 64
// characters, letters, digits and dots only.
func appContainerName(runDir string) string {
	key := strings.ToLower(filepath.Clean(strings.ReplaceAll(runDir, `\`, `/`)))
	sum := sha256.Sum256([]byte(key))
	return "harnessfacts.run." + hex.EncodeToString(sum[:12])
}

// Access masks of the file-system grants (winnt.h values).
const (
	fileGenericRead    uint32 = 0x00120089
	fileGenericWrite   uint32 = 0x00120116
	fileGenericExecute uint32 = 0x001200A0
	accessDelete       uint32 = 0x00010000
	fileDeleteChild    uint32 = 0x00000040

	// subContainersAndObjectsInherit is SUB_CONTAINERS_AND_OBJECTS_INHERIT.
	subContainersAndObjectsInherit uint32 = 0x3
)

// aclGrant is one explicit ACE for the AppContainer SID.
type aclGrant struct {
	Path    string `json:"path"`
	Mask    uint32 `json:"mask"`
	Inherit uint32 `json:"inherit"`
}

// planGrants lists the grants of a run: write (read, write, execute, delete)
// on the read-write paths (the run directory), read+execute on the read-only
// ones (the runtime copy). Nothing else: an AppContainer can open only what
// grants it, besides the few system locations that grant ALL APPLICATION
// PACKAGES read access.
func planGrants(spec Spec) []aclGrant {
	var out []aclGrant
	seen := map[string]bool{}
	add := func(p string, mask uint32) {
		k := strings.ToLower(filepath.Clean(p))
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, aclGrant{Path: p, Mask: mask, Inherit: subContainersAndObjectsInherit})
	}
	for _, p := range spec.ReadWrite {
		add(p, fileGenericRead|fileGenericWrite|fileGenericExecute|accessDelete|fileDeleteChild)
	}
	for _, p := range spec.ReadOnly {
		add(p, fileGenericRead|fileGenericExecute)
	}
	return out
}

// Job Object limit flags (winnt.h values).
const (
	jobLimitActiveProcess        uint32 = 0x00000008
	jobLimitJobMemory            uint32 = 0x00000200
	jobLimitDieOnUnhandledExcept uint32 = 0x00000400
	jobLimitKillOnJobClose       uint32 = 0x00002000
)

// jobPlan is JOBOBJECT_EXTENDED_LIMIT_INFORMATION's fields we set.
type jobPlan struct {
	LimitFlags         uint32
	ActiveProcessLimit uint32
	JobMemoryLimit     uint64
}

// planJob translates Limits: the job's total committed memory, the number of
// processes (not threads: Windows counts processes), killed when the job's
// last handle closes, which is when the runner or the node-agent ends.
// Breakaway is not allowed (JOB_OBJECT_LIMIT_BREAKAWAY_OK is not set), so no
// child can leave the job.
func planJob(l Limits) jobPlan {
	l = l.WithDefaults()
	procs := l.MaxProcesses
	if procs > math.MaxUint32 {
		procs = math.MaxUint32
	}
	return jobPlan{
		LimitFlags:         jobLimitKillOnJobClose | jobLimitActiveProcess | jobLimitJobMemory | jobLimitDieOnUnhandledExcept,
		ActiveProcessLimit: uint32(procs),
		JobMemoryLimit:     uint64(l.MemoryBytes),
	}
}

// envBlock builds a CreateProcess environment block from env: the last value
// of a key wins (keys compare case-insensitively, as on Windows), sorted as
// Windows expects, each "K=V\0", then a final "\0".
func envBlock(env []string) ([]uint16, error) {
	byKey := map[string]string{}
	keys := map[string]string{}
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, errors.New("sandbox: environment entry with a NUL byte")
		}
		k, _, _ := strings.Cut(kv, "=")
		up := strings.ToUpper(k)
		byKey[up] = kv
		keys[up] = k
	}
	sorted := make([]string, 0, len(byKey))
	for up := range byKey {
		sorted = append(sorted, up)
	}
	sort.Strings(sorted)
	var b []uint16
	for _, up := range sorted {
		b = append(b, utf16.Encode([]rune(byKey[up]))...)
		b = append(b, 0)
	}
	if len(b) == 0 {
		b = append(b, 0)
	}
	return append(b, 0), nil
}

// containerRecord is the content of the `.container` file.
type containerRecord struct {
	Profile string     `json:"profile"`
	Grants  []aclGrant `json:"grants"`
}

func (r containerRecord) encode() ([]byte, error) { return json.Marshal(r) }

func decodeRecord(b []byte) (containerRecord, error) {
	var r containerRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("sandbox: bad %s record: %w", containerFile, err)
	}
	if !strings.HasPrefix(r.Profile, "harnessfacts.run.") {
		return r, fmt.Errorf("sandbox: %s record names profile %q, not one of ours", containerFile, r.Profile)
	}
	return r, nil
}

// containerOS is what recovery needs from Windows. The real one holds the
// record with a share-nothing handle; tests use a fake.
type containerOS interface {
	// open opens path for reading without sharing; it fails with errHeld if
	// another handle (a live run) holds it.
	open(path string) (content []byte, release func(), err error)
	// revoke removes every ACE for the profile's SID from path's DACL.
	revoke(profile, path string) error
	// deleteProfile removes the AppContainer profile.
	deleteProfile(profile string) error
}

// errHeld means a `.container` record is held by a live run.
var errHeld = errors.New("held by a running sandbox")

// recoverRecord removes what a killed run left: if the record at path
// exists and no live run holds it, the grants it lists are revoked, its
// profile deleted, and the record removed. It returns whether anything was
// recovered.
func recoverRecord(path string, sys containerOS) (bool, error) {
	b, release, err := sys.open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case errors.Is(err, errHeld):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("sandbox: open %s: %w", path, err)
	}
	released := false
	releaseOnce := func() {
		if !released {
			released = true
			release()
		}
	}
	defer releaseOnce()
	rec, err := decodeRecord(b)
	if err != nil {
		return false, err
	}
	var errs []error
	for _, g := range rec.Grants {
		if err := sys.revoke(rec.Profile, g.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("revoke %s: %w", g.Path, err))
		}
	}
	if err := sys.deleteProfile(rec.Profile); err != nil {
		errs = append(errs, fmt.Errorf("delete profile %s: %w", rec.Profile, err))
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("sandbox: recover %s: %w", path, errors.Join(errs...))
	}
	releaseOnce()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("sandbox: remove %s: %w", path, err)
	}
	return true, nil
}

// recoverRecords runs recoverRecord on every record in dir and returns the
// profiles it cleaned up.
func recoverRecords(dir string, sys containerOS) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var done []string
	var errs []error
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), containerFile) {
			continue
		}
		ok, err := recoverRecord(filepath.Join(dir, e.Name()), sys)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			done = append(done, strings.TrimSuffix(e.Name(), containerFile))
		}
	}
	return done, errors.Join(errs...)
}
