// Package harbor turns Harbor task folders (the task format of Harbor, the
// harness behind Terminal-Bench) into HarnessFacts fixtures: a folder per
// task with fixture.yaml, the task's verifier part (tests/) and, for the
// oracle, its solution (solution/), each made into a ConfigMap by a
// kustomization, plus a HarnessSuite over them. docs/harbor.md gives the
// mapping field by field.
//
// A Harbor task folder:
//
//	instruction.md   the task given to the agent          -> prompt
//	task.toml        timeouts, resources, metadata        -> limits, labels, annotations
//	environment/     a Dockerfile, or task.toml names an   -> environment.image (pinned),
//	                 image (environment.docker_image)         or a placeholder the fixture
//	                                                          parser refuses
//	tests/           test.sh, the hidden verifier         -> tests/ and one check
//	solution/        solve.sh, the reference solution     -> solution/ (hidden), for the oracle
//
// What cannot be mapped is said in Task.Warnings: nothing is dropped
// silently.
package harbor

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// Harbor's documented defaults for the timeouts it applies when task.toml
// leaves them out; HarnessFacts' own (360 s, 120 s) are shorter, and a task
// written for Harbor is calibrated to Harbor's.
const (
	HarborAgentTimeoutSec    = 600
	HarborVerifierTimeoutSec = 600
)

// CheckName is the name of the check that runs the task's tests/test.sh.
const CheckName = "harbor-verifier"

// Label and annotation keys the importer puts on a task's ConfigMap.
const (
	LabelDifficulty      = "harbor.harnessfacts.io/difficulty"
	LabelCategory        = "harbor.harnessfacts.io/category"
	AnnotationTask       = "harbor.harnessfacts.io/task"
	AnnotationMetadata   = "harbor.harnessfacts.io/metadata"
	AnnotationSchema     = "harbor.harnessfacts.io/schema-version"
	AnnotationSource     = "harbor.harnessfacts.io/source"
	AnnotationDockerfile = "harbor.harnessfacts.io/dockerfile"
)

// PlaceholderPrefix starts the environment.image a task gets when its
// environment is only a Dockerfile. It is not an image reference (spaces,
// no digest), so the fixture parser refuses the fixture, and a run of it
// ends with reason BadFixture before any agent starts: a task never runs
// without the environment it was written for.
const PlaceholderPrefix = "BUILD-AND-PUSH"

// maxConfigMapBytes is what the importer lets into one ConfigMap: the API
// server refuses an object over 1 MiB, and the metadata needs some room.
const maxConfigMapBytes = 1000 << 10

// Task is one imported Harbor task.
type Task struct {
	// Dir is the task folder.
	Dir string
	// Name is the fixture's (the ConfigMap's) name.
	Name string
	// Manifest is the fixture.yaml written for it.
	Manifest fixture.Manifest
	// Files are the fixture's files besides fixture.yaml (tests/...,
	// solution/...), by fixture-relative path.
	Files map[string][]byte
	// Labels and Annotations go on the ConfigMap.
	Labels, Annotations map[string]string
	// Image is the pinned image reference, empty when the task needs one
	// built (BuildContext is then the folder to build).
	Image        string
	BuildContext string
	// HasSolution is true when the task has solution/solve.sh.
	HasSolution bool
	// AllowInternet is task.toml's environment.allow_internet (Harbor's
	// default true when unset).
	AllowInternet bool
	// Warnings say what was not mapped, one line each.
	Warnings []string
}

// Options are the importer's choices.
type Options struct {
	// Images maps a task's name (or folder name) to an image reference
	// pinned by digest, for tasks whose environment is only a Dockerfile or
	// a tag: the image the user built and pushed.
	Images map[string]string
}

func (t *Task) warn(format string, args ...any) {
	t.Warnings = append(t.Warnings, fmt.Sprintf(format, args...))
}

var (
	imageRE = regexp.MustCompile(harnessv1.EnvironmentImagePattern)
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Read reads one Harbor task folder. A folder that is not a usable task
// (no instruction.md, no tests/test.sh, a multi-step task, a symbolic link
// among its files) is an error naming the problem.
func Read(dir string, opts Options) (*Task, error) {
	dir = filepath.Clean(dir)
	t := &Task{Dir: dir, Files: map[string][]byte{}, Labels: map[string]string{}, Annotations: map[string]string{}}
	instruction, err := readTaskFile(dir, "instruction.md", fixture.MaxPromptBytes, "a prompt")
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%s: a Harbor task needs instruction.md: %w", dir, err)
	}
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(instruction)) == "" {
		return nil, fmt.Errorf("%s: instruction.md is empty", dir)
	}
	if bytes.IndexByte(instruction, 0) >= 0 {
		// The fixture's manifest refuses it (the prompt would end there
		// where the agent receives it): said at import, not at each run.
		return nil, fmt.Errorf("%s: instruction.md holds a NUL byte, which a prompt may not", dir)
	}
	t.Manifest.Prompt = string(instruction)

	cfg := &taskConfig{}
	var unknown []string
	raw, err := readTaskFile(dir, "task.toml", maxTaskConfigBytes, "task.toml")
	switch {
	case err == nil:
		if cfg, unknown, err = parseTaskConfig(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	case os.IsNotExist(err):
		t.warn("no task.toml: Harbor's defaults apply (agent and verifier timeouts %d s)", HarborAgentTimeoutSec)
	default:
		return nil, err
	}
	for _, k := range unknown {
		t.warn("task.toml: %s is not a field this importer knows; it is not applied", k)
	}
	if len(cfg.Steps) > 0 {
		return nil, fmt.Errorf("%s: task.toml has [[steps]] (a multi-step task), which HarnessFacts cannot run: a fixture has one prompt and one verifier", dir)
	}
	if err := t.name(cfg); err != nil {
		return nil, err
	}
	t.metadata(cfg)
	t.limits(cfg)
	if err := t.environment(cfg, opts); err != nil {
		return nil, err
	}
	if err := t.verifier(cfg); err != nil {
		return nil, err
	}
	if err := t.solution(cfg); err != nil {
		return nil, err
	}
	return t, nil
}

// name is [task].name, else the folder's name, made a DNS-1123 name: the
// ConfigMap's name and the fixture's identity in the suite's cells.
func (t *Task) name(cfg *taskConfig) error {
	src := cfg.Task.Name
	if src == "" {
		src = filepath.Base(t.Dir)
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(src) {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		if !ok {
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		b.WriteRune(r)
		dash = false
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > 63 {
		// The suite's runs carry the fixture's name in a label (at most 63).
		name = strings.TrimRight(name[:63], "-")
	}
	if name == "" {
		return fmt.Errorf("%s: the task's name %q has no letter or digit to name a fixture by", t.Dir, src)
	}
	if name != src {
		t.Annotations[AnnotationTask] = src
	}
	t.Name = name
	return nil
}

// metadata keeps what describes the task on its ConfigMap: difficulty and
// category as labels (to select by), the rest as annotations.
func (t *Task) metadata(cfg *taskConfig) {
	if v := cfg.SchemaVersion; v != "" {
		t.Annotations[AnnotationSchema] = v
	} else if v := cfg.Version; v != "" {
		t.Annotations[AnnotationSchema] = v
	}
	if cfg.Source != "" {
		t.Annotations[AnnotationSource] = cfg.Source
	}
	meta := map[string]any{}
	for k, v := range cfg.Metadata {
		meta[k] = v
	}
	if cfg.Task.Description != "" {
		meta["description"] = cfg.Task.Description
	}
	if len(cfg.Task.Authors) > 0 {
		meta["authors"] = cfg.Task.Authors
	}
	if len(cfg.Task.Keywords) > 0 {
		meta["keywords"] = cfg.Task.Keywords
	}
	for key, label := range map[string]string{"difficulty": LabelDifficulty, "category": LabelCategory} {
		s, ok := meta[key].(string)
		if !ok {
			continue
		}
		if len(validation.IsValidLabelValue(s)) == 0 {
			t.Labels[label] = s
		}
	}
	if len(meta) > 0 {
		t.Annotations[AnnotationMetadata] = canonicalJSON(meta)
	}
}

// seconds rounds a Harbor timeout up to whole seconds within the API's
// bounds, saying so when it had to.
func (t *Task) seconds(field string, v *float64, def int) int32 {
	s := float64(def)
	if v != nil {
		s = *v
	}
	n := int64(math.Ceil(s))
	switch {
	case math.IsNaN(s) || n < 1:
		t.warn("%s = %v is not a positive time; %d s is used", field, s, def)
		n = int64(def)
	case n > int64(harnessv1.MaxEpisodeSeconds):
		t.warn("%s = %v is more than the %d s a run may have; %d s is used", field, s, harnessv1.MaxEpisodeSeconds, harnessv1.MaxEpisodeSeconds)
		n = int64(harnessv1.MaxEpisodeSeconds)
	}
	return int32(n)
}

func (t *Task) limits(cfg *taskConfig) {
	l := &harnessv1.Limits{}
	l.EpisodeSeconds = t.seconds("agent.timeout_sec", cfg.Agent.TimeoutSec, HarborAgentTimeoutSec)
	l.ProbeSeconds = t.seconds("verifier.timeout_sec", cfg.Verifier.TimeoutSec, HarborVerifierTimeoutSec)
	if l.ProbeSeconds > l.EpisodeSeconds {
		t.warn("verifier.timeout_sec (%d s) is longer than agent.timeout_sec (%d s): HarnessFacts bounds each check by limits.probeSeconds, which may not exceed limits.episodeSeconds, so the verifier gets %d s",
			l.ProbeSeconds, l.EpisodeSeconds, l.EpisodeSeconds)
		l.ProbeSeconds = l.EpisodeSeconds
	}
	env := cfg.Environment
	if q, ok := t.size("environment.memory_mb", env.MemoryMB, "environment.memory", env.Memory); ok {
		l.Memory = t.within("memory", q, harnessv1.MinMemory, harnessv1.MaxMemory)
	}
	if q, ok := t.size("environment.storage_mb", env.StorageMB, "environment.storage", env.Storage); ok {
		l.Disk = t.within("disk", q, harnessv1.MinDisk, harnessv1.MaxDisk)
	}
	if cfg.Agent.SetupTimeoutSec != nil {
		t.warn("agent.setup_timeout_sec is not applied: HarnessFacts installs no agent into the environment (the node's CLIs are bound in read-only)")
	}
	if env.BuildTimeoutSec != nil {
		t.warn("environment.build_timeout_sec is not applied: HarnessFacts builds no image; it runs the image you built and pushed")
	}
	if env.CPUs != nil {
		t.warn("environment.cpus = %v is not applied: a HarnessRun has no CPU limit (memory, disk, processes and time are bounded)", *env.CPUs)
	}
	if env.GPUs != nil && *env.GPUs > 0 || len(env.GPUTypes) > 0 || len(env.TPU) > 0 {
		t.warn("the task asks for accelerators (environment.gpus/gpu_types/tpu): the sandbox provides none, the task may fail")
	}
	if len(env.MCPServers) > 0 {
		t.warn("environment.mcp_servers is not applied: a run's MCP server is HarnessFacts' own token server (spec.mcp)")
	}
	if env.SkillsDir != "" {
		t.warn("environment.skills_dir is not applied: HarnessFacts copies no skills into the agent's home")
	}
	if cfg.Agent.User != "" || cfg.Verifier.User != "" {
		t.warn("agent.user / verifier.user are not applied: in an environment image the agent and the checks are root inside the sandbox (an unprivileged uid outside); on the node's root they are the run's unprivileged uid")
	}
	if len(cfg.Verifier.Environment) > 0 {
		t.warn("[verifier.environment] (a separate verifier sandbox) is not applied: the checks run in the task's environment, over what the agent left")
	}
	t.Manifest.Limits = l
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?$`)

// size reads memory_mb/storage_mb, or the deprecated "4G" spelling, as a
// binary quantity (Harbor's G and M are 1024-based, as Docker's are).
func (t *Task) size(mbField string, mb *int64, strField, str string) (resource.Quantity, bool) {
	if mb != nil {
		if str != "" {
			t.warn("both %s and %s are set; %s is used", mbField, strField, mbField)
		}
		return *resource.NewQuantity(*mb<<20, resource.BinarySI), true
	}
	if str == "" {
		return resource.Quantity{}, false
	}
	m := sizeRE.FindStringSubmatch(strings.ToUpper(strings.TrimSpace(str)))
	if m == nil {
		t.warn("%s = %q is not a size like \"4G\" or \"512M\"; it is not applied", strField, str)
		return resource.Quantity{}, false
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m[2]]
	return *resource.NewQuantity(int64(v*float64(uint64(1)<<shift)), resource.BinarySI), true
}

func (t *Task) within(name string, q resource.Quantity, lo, hi string) *resource.Quantity {
	low, high := resource.MustParse(lo), resource.MustParse(hi)
	switch {
	case q.Cmp(low) < 0:
		t.warn("limits.%s %s is below the least a run may have; %s is used", name, q.String(), lo)
		q = low
	case q.Cmp(high) > 0:
		t.warn("limits.%s %s is above the most a run may have; %s is used", name, q.String(), hi)
		q = high
	}
	return &q
}

// environment keeps the task's environment as an image reference pinned by
// digest. A tag alone, or only a Dockerfile, gets the placeholder (unless
// Options.Images names the image built for it).
func (t *Task) environment(cfg *taskConfig, opts Options) error {
	env := cfg.Environment
	t.AllowInternet = env.AllowInternet == nil || *env.AllowInternet
	if os := strings.ToLower(env.OS); os != "" && os != "linux" {
		return fmt.Errorf("%s: environment.os is %q: HarnessFacts runs Linux task environments only", t.Dir, env.OS)
	}
	given := opts.Images[t.Name]
	if given == "" {
		given = opts.Images[filepath.Base(t.Dir)]
	}
	if given != "" {
		if !imageRE.MatchString(given) {
			return fmt.Errorf("%s: the image given for %s, %q, is not pinned by digest (registry/repository[:tag]@sha256:<64 hex digits>)", t.Dir, t.Name, given)
		}
		t.Image = given
	} else if imageRE.MatchString(env.DockerImage) {
		t.Image = env.DockerImage
	}
	dockerfile := filepath.Join(t.Dir, "environment", "Dockerfile")
	_, dfErr := os.Stat(dockerfile)
	if _, err := os.Stat(filepath.Join(t.Dir, "environment", "docker-compose.yaml")); err == nil {
		t.warn("environment/docker-compose.yaml is not applied: HarnessFacts runs one environment image, without the compose file's other services")
	}
	if t.Image != "" {
		t.Manifest.Environment = &fixture.Environment{Image: t.Image}
		return nil
	}
	what := "a Dockerfile only"
	switch {
	case env.DockerImage != "":
		what = fmt.Sprintf("environment.docker_image %q, which is not pinned by digest", env.DockerImage)
	case dfErr != nil:
		// No environment at all (not Harbor's own format, which always has
		// one): the fixture has no image and runs on the node's root, as
		// every fixture without one does. Loud, since a task written for an
		// image would find little it expects there.
		t.warn("the task names no environment (no environment.docker_image, no environment/Dockerfile): it runs on the node's own root file system, read-only, like a fixture without an image")
		return nil
	}
	t.BuildContext = filepath.Join(t.Dir, "environment")
	if dfErr == nil {
		t.Annotations[AnnotationDockerfile] = "environment/Dockerfile"
	}
	t.Manifest.Environment = &fixture.Environment{Image: fmt.Sprintf("%s %s: the task has %s; push its image, put REGISTRY/REPO@sha256:DIGEST here", PlaceholderPrefix, t.Name, what)}
	return nil
}

// verifier maps tests/ to the fixture's hidden verifier part and test.sh
// to its one check, run as Harbor runs it: the script itself (its #! line
// picks the shell), with [verifier].env set.
func (t *Task) verifier(cfg *taskConfig) error {
	if _, err := os.Lstat(filepath.Join(t.Dir, "tests", "test.sh")); err != nil {
		return fmt.Errorf("%s: a Harbor task needs tests/test.sh, the verifier: %w", t.Dir, err)
	}
	if err := t.addFolder("tests"); err != nil {
		return err
	}
	t.markExecutable("tests/test.sh")
	script, err := exportLines("verifier.env", cfg.Verifier.Env)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Dir, err)
	}
	for _, k := range sortedKeys(cfg.Verifier.Env) {
		if strings.Contains(cfg.Verifier.Env[k], "${") {
			t.Warnings = append(t.Warnings, fmt.Sprintf("verifier.env %s names a variable of the host's environment; a check gets no host environment and no credential: the value is set as written", k))
		}
	}
	if len(cfg.Verifier.Env) > 0 {
		t.warn("verifier.env values are written into the fixture (a ConfigMap) and the check's script: they must hold no secret")
	}
	t.Manifest.Checks = []fixture.Check{{Name: CheckName, Shell: script + `exec "$HARNESSFACTS_TESTS/test.sh"`}}
	return nil
}

// solution keeps solution/ as the fixture's hidden solution, for the oracle.
func (t *Task) solution(cfg *taskConfig) error {
	if _, err := os.Stat(filepath.Join(t.Dir, "solution", "solve.sh")); err != nil {
		if len(cfg.Solution.Env) > 0 {
			t.warn("[solution].env is set but the task has no solution/solve.sh")
		}
		return nil
	}
	if err := t.addFolder("solution"); err != nil {
		return err
	}
	t.markExecutable("solution/solve.sh")
	for k := range cfg.Solution.Env {
		if !envName.MatchString(k) {
			return fmt.Errorf("%s: solution.env has %q, which is not an environment variable name", t.Dir, k)
		}
	}
	t.Manifest.Solution = &fixture.Solution{Command: "solution/solve.sh", Env: cfg.Solution.Env}
	t.HasSolution = true
	return nil
}

func (t *Task) markExecutable(p string) {
	for _, e := range t.Manifest.Executables {
		if e == p {
			return
		}
	}
	t.Manifest.Executables = append(t.Manifest.Executables, p)
	sort.Strings(t.Manifest.Executables)
}

// addFolder adds every regular file below the task's folder name, keeping
// the executable bit as executables; a symbolic link or another kind of file
// is an error, never followed.
func (t *Task) addFolder(name string) error {
	root := filepath.Join(t.Dir, name)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", t.Dir, err)
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(t.Dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: %s is not a regular file (a link or a device); a fixture carries regular files only", t.Dir, rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > maxConfigMapBytes {
			// Said before anything is read: a task's data set can be large.
			return fmt.Errorf("%s: %s is %d bytes: a fixture ConfigMap holds at most %d in all", t.Dir, rel, info.Size(), maxConfigMapBytes)
		}
		data, err := readTaskFile(t.Dir, filepath.FromSlash(rel), maxConfigMapBytes, "a fixture ConfigMap")
		if err != nil {
			return err
		}
		t.Files[rel] = data
		if info.Mode().Perm()&0o111 != 0 {
			t.markExecutable(rel)
		}
		return nil
	})
}

// maxTaskConfigBytes bounds task.toml: Harbor's are a few hundred bytes.
const maxTaskConfigBytes = 1 << 20

// readTaskFile reads the task's file name, of at most limit bytes (what a
// kind of text may hold), as addFolder reads the folders: a regular file
// only, never a link followed. A task is someone else's data set, and
// instruction.md becomes the prompt every run sends to the agent and the
// provider: a link to the importing user's ~/.kube/config was read into it,
// /dev/zero ran the import out of memory and a FIFO held it for ever.
// The file is judged by Lstat, then opened without waiting on a FIFO
// (O_NONBLOCK) and must still be the file judged (a link swapped in
// meanwhile is refused); the read is bounded whatever its size said.
func readTaskFile(dir, name string, limit int, kind string) ([]byte, error) {
	p := filepath.Join(dir, name)
	before, err := os.Lstat(p)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if !before.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s is not a regular file (a link, a device or a FIFO); a task's files are read as regular files only, never followed", dir, name)
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if !os.SameFile(before, info) || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %s changed while it was read", dir, name)
	}
	if info.Size() > int64(limit) {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than the %d %s may have", dir, name, info.Size(), limit, kind)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s: %s is more than the %d bytes %s may have", dir, name, limit, kind)
	}
	return data, nil
}

// exportLines are shell lines that export env, keys sorted, values single-
// quoted (nothing in them is expanded).
func exportLines(field string, env map[string]string) (string, error) {
	for k := range env {
		if !envName.MatchString(k) {
			return "", fmt.Errorf("%s has %q, which is not an environment variable name", field, k)
		}
		if strings.HasPrefix(k, "HARNESSFACTS_") {
			return "", fmt.Errorf("%s sets %s, a variable of the harness's own", field, k)
		}
	}
	var b strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String(), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// configMapKey is a fixture path as a flat ConfigMap key ('/' as "__", see
// node-agent/fixture), or false when the path cannot be one.
func configMapKey(p string) (string, bool) {
	for _, seg := range strings.Split(p, "/") {
		if strings.Contains(seg, "__") || strings.HasPrefix(seg, "_") || strings.HasSuffix(seg, "_") {
			return "", false
		}
	}
	k := strings.ReplaceAll(p, "/", "__")
	return k, len(validation.IsConfigMapKey(k)) == 0
}
