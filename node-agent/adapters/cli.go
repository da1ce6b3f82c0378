package adapters

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// command finds a CLI's command: in CLIDir when it is set, else on PATH.
func (c Config) command(name string) (string, error) {
	if c.CLIDir != "" {
		p := filepath.Join(c.CLIDir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%s is not installed in %s: %w", name, c.CLIDir, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not an executable", p)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed on this node's PATH", name)
	}
	return filepath.Abs(p)
}

// mounts are the folders the sandbox shows read-only for a command found by
// command. With CLIDir (install-agent-clis.sh's PREFIX/bin, an install the
// operator named) that is the whole install prefix, since PREFIX/bin's links
// point into PREFIX/<cli>-<version>/, and the folder of the command's real
// file when that lies elsewhere. A command found on PATH gets no bind: the
// sandbox shows the host as it is, with host homes hidden, so a CLI in
// ~/.local/bin cannot uncover the rest of that home.
func (c Config) mounts(cmdPath string) (ro, path []string) {
	dir := filepath.Dir(cmdPath)
	if c.CLIDir == "" {
		return nil, []string{dir}
	}
	ro = []string{filepath.Dir(dir)}
	if file, err := filepath.EvalSymlinks(cmdPath); err == nil && !within(file, ro[0]) {
		ro = append(ro, filepath.Dir(file))
	}
	return ro, []string{dir}
}

func within(p, parent string) bool {
	rel, err := filepath.Rel(parent, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

var versionRE = regexp.MustCompile(`\d+\.\d+\.\d+[0-9A-Za-z.+-]*`)

// cliVersion runs cmd args (for example `claude --version`) with a
// throwaway HOME, so that asking a version writes nothing into the node's
// home, and returns the first version number it prints.
func cliVersion(ctx context.Context, cmd string, args ...string) (string, error) {
	home, err := os.MkdirTemp("", "harnessfacts-version-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(home) }()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, cmd, args...)
	c.Env = []string{"PATH=" + filepath.Dir(cmd) + ":" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8",
		"XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CACHE_HOME=" + home, "XDG_STATE_HOME=" + home, "TMPDIR=" + home,
		"NO_COLOR=1", "CI=1"}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", cmd, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	v := versionRE.FindString(out.String())
	if v == "" {
		return "", errors.New(cmd + " printed no version: " + strings.TrimSpace(out.String()))
	}
	return v, nil
}

// ImageCLIDir is where the node-agent image installs the agent CLIs, and
// where `make agent-clis` installs them when run as root: a folder every uid
// can pass through, as bwrap, running as the agent's uid, must reach what it
// binds (a root user's ~/.cache is not: /root is mode 0700).
const ImageCLIDir = "/opt/harnessfacts/agents/bin"

// InstalledCLIDir is the folder of the agent CLIs on this machine:
// ImageCLIDir when it exists, else `make agent-clis`' cache folder for a
// user other than root ($XDG_CACHE_HOME or ~/.cache, harnessfacts/agent-clis/bin),
// else "".
func InstalledCLIDir() string {
	dirs := []string{ImageCLIDir}
	if cache, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(cache, "harnessfacts", "agent-clis", "bin"))
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	return ""
}

// refuseOwnedFlags refuses extraArgs that set a flag the adapter sets itself
// from the run's spec and limits. A CLI takes the last value of a flag, and
// extraArgs come after the adapter's: `extraArgs: [--max-turns, "50"]`
// lifted limits.maxDecisions (and a HarnessPolicy ceiling on it) while the
// receipt recorded the limit. The same holds for the model the status
// names, the MCP configuration the token proof rests on, and the output
// format the usage and trajectory are read from. A flag is matched as
// --name, --name=value and, for a one-letter flag -x, any single-dash
// argument that starts with it (-xVALUE).
func refuseOwnedFlags(adapter harnessv1.Adapter, extra []string, owned ...string) error {
	for _, a := range extra {
		name, _, _ := strings.Cut(a, "=")
		for _, o := range owned {
			short := len(o) == 2 && o[0] == '-' && o[1] != '-'
			if name == o || short && strings.HasPrefix(a, o) && !strings.HasPrefix(a, "--") {
				return fmt.Errorf("agent.extraArgs sets %s, which the %s adapter sets itself from the run's spec (agent.model, limits, mcp): leave it out of extraArgs", o, adapter)
			}
		}
	}
	return nil
}
