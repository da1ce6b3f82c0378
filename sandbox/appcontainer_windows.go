//go:build windows

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/harnessfacts/harnessfacts/sandbox/internal/winapi"
)

// AppContainerRunner runs commands in an AppContainer with zero capabilities
// inside a Job Object. It is built for Windows but not exercised on Windows
// by this project's CI (see docs/sandbox.md).
type AppContainerRunner struct{}

var _ Runner = (*AppContainerRunner)(nil)

// Mode returns ModeAppContainer.
func (*AppContainerRunner) Mode() Mode { return ModeAppContainer }

// hrAlreadyExists is HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS).
const hrAlreadyExists = syscall.Errno(0x800700B7)

// hrNotFound is HRESULT_FROM_WIN32(ERROR_FILE_NOT_FOUND).
const hrNotFound = syscall.Errno(0x80070002)

// statusNoMemory is STATUS_NO_MEMORY, the exit code of a process that
// failed an allocation it could not survive.
const statusNoMemory = 0xC0000017

// errLoopbackAppContainer: an AppContainer's loopback is its own, and a
// listener outside it cannot be reached from inside.
var errLoopbackAppContainer = errors.New("sandbox: the AppContainer runner cannot serve the command's loopback from outside it: bridge it inside (harnessfacts sandbox-init)")

// Run runs spec in an AppContainer. See Runner.
func (r *AppContainerRunner) Run(ctx context.Context, spec Spec) (res Result, err error) {
	res = Result{Mode: ModeAppContainer, ExitCode: -1}
	if spec.Root != "" {
		return res, errRootNeedsBwrap
	}
	if len(spec.Loopback) > 0 {
		return res, errLoopbackAppContainer
	}
	if err := spec.validate(); err != nil {
		return res, err
	}
	if len(spec.ReadWrite) == 0 {
		return res, errors.New("sandbox: appcontainer: the run directory must be the first ReadWrite path")
	}
	limits := spec.Limits.WithDefaults()
	sys := winContainerOS{}
	records, err := containerRecordsDir()
	if err != nil {
		return res, err
	}
	recPath, record := runRecord(records, spec)
	// A run of the same run directory killed with its node-agent left a
	// profile and grants.
	if _, err := recoverRecord(recPath, sys); err != nil {
		return res, err
	}

	name := record.Profile
	sid, err := createProfile(name)
	if err != nil {
		return res, err
	}
	defer func() { _ = windows.FreeSid(sid) }()
	grants := record.Grants

	// The record is written and held before any grant exists, so there is
	// never a grant without a record that names it.
	rec, err := holdRecord(recPath, record)
	if err != nil {
		_ = winapi.DeleteAppContainerProfile(windows.StringToUTF16Ptr(name))
		return res, err
	}
	defer func() {
		var errs []error
		for _, g := range grants {
			if e := revokeSID(sid, g.Path); e != nil && !errors.Is(e, fs.ErrNotExist) {
				errs = append(errs, e)
			}
		}
		if e := sys.deleteProfile(name); e != nil {
			errs = append(errs, e)
		}
		if len(errs) == 0 {
			// Only a complete cleanup retires the record; otherwise the
			// next start retries it.
			rec.Close()
			_ = os.Remove(rec.Name())
		} else {
			rec.Close()
		}
		if cerr := errors.Join(errs...); cerr != nil && err == nil {
			err = fmt.Errorf("sandbox: appcontainer cleanup: %w", cerr)
		}
	}()
	for _, g := range grants {
		if err := grantSID(sid, g); err != nil {
			return res, err
		}
	}

	job, err := newJob(planJob(limits))
	if err != nil {
		return res, err
	}
	jobClosed := false
	closeJob := func() {
		if !jobClosed {
			jobClosed = true
			_ = windows.CloseHandle(job) // kill-on-job-close ends whatever is left
		}
	}
	defer closeJob()

	path, err := lookPathIn(spec.Argv[0], envValue(spec.Env, "PATH"))
	if err != nil {
		return res, fmt.Errorf("sandbox: appcontainer: %w", err)
	}
	env, err := envBlock(spec.Env)
	if err != nil {
		return res, err
	}

	stdoutW, stdoutR, err := inheritablePipe(false)
	if err != nil {
		return res, err
	}
	stderrW, stderrR, err := inheritablePipe(false)
	if err != nil {
		_ = windows.CloseHandle(stdoutR)
		_ = windows.CloseHandle(stdoutW)
		return res, err
	}
	// stdin is NUL, or a pipe the runner feeds with Spec.Stdin (the prompt
	// of CLIs that read it there, off the command line).
	var stdin, stdinW windows.Handle
	if spec.Stdin != nil {
		stdin, stdinW, err = inheritablePipe(true)
	} else {
		stdin, err = inheritableNul()
	}
	if err != nil {
		for _, h := range []windows.Handle{stdoutR, stdoutW, stderrR, stderrW} {
			_ = windows.CloseHandle(h)
		}
		return res, err
	}
	var copies sync.WaitGroup
	copyOut := func(h windows.Handle, w io.Writer) {
		f := os.NewFile(uintptr(h), "pipe")
		copies.Add(1)
		go func() {
			defer copies.Done()
			defer f.Close()
			if w == nil {
				w = io.Discard
			}
			_, _ = io.Copy(w, f)
		}()
	}
	copyOut(stdoutR, spec.Stdout)
	copyOut(stderrR, spec.Stderr)
	defer copies.Wait()

	runCtx, cancel := withTimeout(ctx, limits.Timeout)
	defer cancel()
	start := time.Now()
	pi, err := startInContainer(path, spec, sid, env, [3]windows.Handle{stdin, stdoutW, stderrW}, job)
	// The child has its copies; ours would keep the pipes open forever.
	_ = windows.CloseHandle(stdin)
	_ = windows.CloseHandle(stdoutW)
	_ = windows.CloseHandle(stderrW)
	if stdinW != 0 {
		f := os.NewFile(uintptr(stdinW), "stdin")
		if err != nil {
			f.Close()
		} else {
			// The write ends when the child has read it all, or with an
			// error once the child's end is closed (it exited, or the job
			// was killed), so it never outlives the run by much.
			copies.Add(1)
			go func() {
				defer copies.Done()
				defer f.Close()
				_, _ = io.Copy(f, spec.Stdin)
			}()
		}
	}
	if err != nil {
		return res, err
	}
	defer func() { _ = windows.CloseHandle(pi.Process) }()
	spec.started()

	stop := watch(runCtx, func() { _ = windows.TerminateJobObject(job, 1) })
	_, werr := windows.WaitForSingleObject(pi.Process, windows.INFINITE)
	stop()
	// The tree ends with its first process, as under bwrap's pid namespace.
	_ = windows.TerminateJobObject(job, 1)
	res.Duration = time.Since(start)
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded)
	var code uint32
	if err := windows.GetExitCodeProcess(pi.Process, &code); err == nil {
		res.ExitCode = int(code)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	if err := windows.QueryInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), nil); err == nil {
		res.PeakMemory = int64(info.PeakJobMemoryUsed)
	}
	// A job memory limit fails allocations rather than killing: count a run
	// as OOM when it died of a failed allocation or its peak reached the
	// limit.
	res.OOMKilled = code == statusNoMemory || (res.PeakMemory > 0 && res.PeakMemory >= limits.MemoryBytes-(1<<20))
	closeJob()
	if werr != nil {
		return res, fmt.Errorf("sandbox: appcontainer: wait: %w", werr)
	}
	if ctx.Err() != nil && !res.TimedOut {
		return res, fmt.Errorf("sandbox: appcontainer: %w", ctx.Err())
	}
	return res, nil
}

func createProfile(name string) (*windows.SID, error) {
	n := windows.StringToUTF16Ptr(name)
	var sid *windows.SID
	err := winapi.CreateAppContainerProfile(n, n, windows.StringToUTF16Ptr("HarnessFacts run sandbox"), nil, 0, &sid)
	if errors.Is(err, hrAlreadyExists) {
		err = winapi.DeriveAppContainerSidFromAppContainerName(n, &sid)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: appcontainer profile %s: %w", name, err)
	}
	return sid, nil
}

// holdRecord writes the `.container` record at path and keeps it open with
// no sharing, so that a later start can tell a live run from a dead one.
func holdRecord(path string, rec containerRecord) (*os.File, error) {
	b, err := rec.encode()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	h, err := windows.CreateFile(windows.StringToUTF16Ptr(path), windows.GENERIC_READ|windows.GENERIC_WRITE, 0, nil,
		windows.CREATE_ALWAYS, windows.FILE_ATTRIBUTE_HIDDEN, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: create %s: %w", path, err)
	}
	f := os.NewFile(uintptr(h), path)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: write %s: %w", path, err)
	}
	return f, nil
}

func explicitAccess(sid *windows.SID, mask uint32, mode windows.ACCESS_MODE, inherit uint32) windows.EXPLICIT_ACCESS {
	return windows.EXPLICIT_ACCESS{
		AccessPermissions: windows.ACCESS_MASK(mask),
		AccessMode:        mode,
		Inheritance:       inherit,
		Trustee: windows.TRUSTEE{
			TrusteeForm:  windows.TRUSTEE_IS_SID,
			TrusteeType:  windows.TRUSTEE_IS_WELL_KNOWN_GROUP,
			TrusteeValue: windows.TrusteeValueFromSID(sid),
		},
	}
}

func updateDACL(path string, ea windows.EXPLICIT_ACCESS) error {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return err
	}
	old, _, err := sd.DACL()
	if err != nil {
		return err
	}
	acl, err := windows.ACLFromEntries([]windows.EXPLICIT_ACCESS{ea}, old)
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, acl, nil)
}

func grantSID(sid *windows.SID, g aclGrant) error {
	if err := updateDACL(g.Path, explicitAccess(sid, g.Mask, windows.GRANT_ACCESS, g.Inherit)); err != nil {
		return fmt.Errorf("sandbox: grant %s: %w", g.Path, err)
	}
	return nil
}

func revokeSID(sid *windows.SID, path string) error {
	if err := updateDACL(path, explicitAccess(sid, 0, windows.REVOKE_ACCESS, 0)); err != nil {
		return fmt.Errorf("sandbox: revoke %s: %w", path, err)
	}
	return nil
}

func newJob(p jobPlan) (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("sandbox: CreateJobObject: %w", err)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = p.LimitFlags
	info.BasicLimitInformation.ActiveProcessLimit = p.ActiveProcessLimit
	info.JobMemoryLimit = uintptr(p.JobMemoryLimit)
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return 0, fmt.Errorf("sandbox: SetInformationJobObject: %w", err)
	}
	return job, nil
}

// inheritablePipe makes a pipe of which only the child's end is
// inheritable: the write end for the child's output, the read end when
// childReads (its stdin). It returns the child's end first.
func inheritablePipe(childReads bool) (child, ours windows.Handle, err error) {
	sa := windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), InheritHandle: 1}
	var r, w windows.Handle
	if err := windows.CreatePipe(&r, &w, &sa, 0); err != nil {
		return 0, 0, fmt.Errorf("sandbox: CreatePipe: %w", err)
	}
	child, ours = w, r
	if childReads {
		child, ours = r, w
	}
	if err := windows.SetHandleInformation(ours, windows.HANDLE_FLAG_INHERIT, 0); err != nil {
		_ = windows.CloseHandle(r)
		_ = windows.CloseHandle(w)
		return 0, 0, err
	}
	return child, ours, nil
}

func inheritableNul() (windows.Handle, error) {
	sa := windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), InheritHandle: 1}
	h, err := windows.CreateFile(windows.StringToUTF16Ptr("NUL"), windows.GENERIC_READ, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE, &sa, windows.OPEN_EXISTING, 0, 0)
	if err != nil {
		return 0, fmt.Errorf("sandbox: open NUL: %w", err)
	}
	return h, nil
}

// startInContainer creates the process suspended in the AppContainer (zero
// capabilities), inheriting exactly the three standard handles, puts it in
// the job, and only then lets it run: nothing it starts escapes the job.
func startInContainer(path string, spec Spec, sid *windows.SID, env []uint16, std [3]windows.Handle, job windows.Handle) (*windows.ProcessInformation, error) {
	attrs, err := windows.NewProcThreadAttributeList(2)
	if err != nil {
		return nil, err
	}
	defer attrs.Delete()
	caps := winapi.SecurityCapabilities{AppContainerSid: sid}
	if err := attrs.Update(winapi.ProcThreadAttributeSecurityCapabilities, unsafe.Pointer(&caps), unsafe.Sizeof(caps)); err != nil {
		return nil, fmt.Errorf("sandbox: security capabilities attribute: %w", err)
	}
	handles := std
	if err := attrs.Update(windows.PROC_THREAD_ATTRIBUTE_HANDLE_LIST, unsafe.Pointer(&handles[0]), unsafe.Sizeof(handles)); err != nil {
		return nil, fmt.Errorf("sandbox: handle list attribute: %w", err)
	}
	si := windows.StartupInfoEx{
		StartupInfo: windows.StartupInfo{
			Cb:        uint32(unsafe.Sizeof(windows.StartupInfoEx{})),
			Flags:     windows.STARTF_USESTDHANDLES,
			StdInput:  std[0],
			StdOutput: std[1],
			StdErr:    std[2],
		},
		ProcThreadAttributeList: attrs.List(),
	}
	argv := append([]string{path}, spec.Argv[1:]...)
	cmdline, err := windows.UTF16PtrFromString(windows.ComposeCommandLine(argv))
	if err != nil {
		return nil, err
	}
	app, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	dir, err := windows.UTF16PtrFromString(spec.Dir)
	if err != nil {
		return nil, err
	}
	var pi windows.ProcessInformation
	flags := uint32(windows.CREATE_SUSPENDED | windows.EXTENDED_STARTUPINFO_PRESENT | windows.CREATE_UNICODE_ENVIRONMENT | windows.CREATE_NO_WINDOW)
	if err := windows.CreateProcess(app, cmdline, nil, nil, true, flags, &env[0], dir, &si.StartupInfo, &pi); err != nil {
		return nil, fmt.Errorf("sandbox: appcontainer: start %s: %w", spec.Argv[0], err)
	}
	if err := windows.AssignProcessToJobObject(job, pi.Process); err != nil {
		_ = windows.TerminateProcess(pi.Process, 1)
		_ = windows.CloseHandle(pi.Thread)
		_ = windows.CloseHandle(pi.Process)
		return nil, fmt.Errorf("sandbox: AssignProcessToJobObject: %w", err)
	}
	if _, err := windows.ResumeThread(pi.Thread); err != nil {
		_ = windows.TerminateJobObject(job, 1)
		_ = windows.CloseHandle(pi.Thread)
		_ = windows.CloseHandle(pi.Process)
		return nil, fmt.Errorf("sandbox: ResumeThread: %w", err)
	}
	_ = windows.CloseHandle(pi.Thread)
	return &pi, nil
}

// winContainerOS is containerOS on Windows.
type winContainerOS struct{}

func (winContainerOS) open(path string) ([]byte, func(), error) {
	h, err := windows.CreateFile(windows.StringToUTF16Ptr(path), windows.GENERIC_READ, 0, nil, windows.OPEN_EXISTING, 0, 0)
	if errors.Is(err, windows.ERROR_SHARING_VIOLATION) {
		return nil, nil, errHeld
	}
	if err != nil {
		return nil, nil, err // ERROR_FILE_NOT_FOUND is fs.ErrNotExist
	}
	f := os.NewFile(uintptr(h), path)
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return b, func() { f.Close() }, nil
}

func (winContainerOS) revoke(profile, path string) error {
	var sid *windows.SID
	if err := winapi.DeriveAppContainerSidFromAppContainerName(windows.StringToUTF16Ptr(profile), &sid); err != nil {
		return fmt.Errorf("derive SID of %s: %w", profile, err)
	}
	defer func() { _ = windows.FreeSid(sid) }()
	return revokeSID(sid, path)
}

func (winContainerOS) deleteProfile(profile string) error {
	err := winapi.DeleteAppContainerProfile(windows.StringToUTF16Ptr(profile))
	if err != nil && !errors.Is(err, hrNotFound) {
		return err
	}
	return nil
}

// RecoverAbandoned removes the AppContainer profiles and ACL grants that runs
// killed together with their node-agent left (those whose `.container`
// record no live run holds), whatever run root they had: the records are
// kept in one folder outside the run dirs. The node-agent calls it at start.
// It returns the profiles it removed.
func RecoverAbandoned(Options, string) ([]string, error) {
	dir, err := containerRecordsDir()
	if err != nil {
		return nil, err
	}
	return recoverRecords(dir, winContainerOS{})
}

func newSandboxRunner(mode Mode, _ Options) (Runner, error) {
	if mode != ModeAppContainer {
		return nil, fmt.Errorf("sandbox: mode %s is not available on windows", mode)
	}
	return &AppContainerRunner{}, nil
}

// preflight runs `cmd /c exit 0` in an AppContainer with the production
// limits in a temporary run directory.
func preflight(ctx context.Context, _ Options) []Availability {
	a := Availability{Mode: ModeAppContainer}
	dir, err := os.MkdirTemp("", "harnessfacts-preflight-")
	if err != nil {
		a.Reason = fmt.Sprintf("cannot make a temporary run directory: %v", err)
	} else {
		defer os.RemoveAll(dir)
		sysdir, _ := windows.GetSystemDirectory()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := (&AppContainerRunner{}).Run(ctx, Spec{
			Argv:      []string{sysdir + `\cmd.exe`, "/c", "exit 0"},
			Dir:       dir,
			Env:       []string{"SystemRoot=" + os.Getenv("SystemRoot"), "PATH=" + sysdir},
			ReadWrite: []string{dir},
		})
		switch {
		case err != nil:
			a.Reason = fmt.Sprintf("AppContainer run failed (needs Windows 8 / Server 2012 or later and a local profile): %v", err)
		case res.ExitCode != 0:
			a.Reason = fmt.Sprintf("a trivial command exited %d in the AppContainer", res.ExitCode)
		default:
			a.Available = true
			a.Reason = "AppContainer with zero capabilities in a Job Object"
		}
	}
	return []Availability{a, {Mode: ModePlain, Available: true, Reason: "always possible; not a sandbox"}}
}

// containerRecordsDir is where the records are kept: outside every run
// directory, since the node-agent deletes a run dir when its run ends
// (after a crash, at its next start, before RecoverAbandoned would see a
// record in it) and the agent may write in it. One folder per user of the
// machine: a record that no process holds is abandoned, whichever process
// wrote it.
func containerRecordsDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("sandbox: appcontainer: no folder for the .container records: %w", err)
	}
	return filepath.Join(d, "harnessfacts", "appcontainer"), nil
}
