//go:build node

package node

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/harnessfacts/harnessfacts/test/oci"
)

// The images are the Dockerfile's, built without an engine: the same static
// binary (built as the Dockerfile's build stage builds it), at the paths its
// COPY lines name, with its ENTRYPOINT, CMD, USER and ENV, on a base we can
// make here. The controller's base is a few files instead of distroless
// (an /etc/passwd naming uid 65532, /tmp); the node-agent's is Debian trixie
// from debootstrap with the Dockerfile's packages and its install step
// (hack/node-agent-rootfs.sh), instead of python:3.12-slim-trixie.
const tag = "node-test"

// The images' references: their tag names the binary's digest, so that a
// changed binary is a changed pod template (a node kept running between test
// runs, HARNESSFACTS_NODE_KEEP, rolls its pods to it) and an unchanged one
// is not.
var controllerRef, nodeAgentRef string

type images struct {
	controller, nodeAgent, pause v1.Image
	pauseRef                     string
	tarball                      string
}

// dockerStage is one FROM ... AS name stage of the Dockerfile.
type dockerStage struct {
	from  string
	lines []string
}

func readDockerfile() (map[string]*dockerStage, error) {
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	var pending string
	from := regexp.MustCompile(`^FROM\s+(?:--platform=\S+\s+)?(\S+)\s+AS\s+(\S+)$`)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			pending += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		line, pending = pending+line, ""
		if m := from.FindStringSubmatch(line); m != nil {
			cur = &dockerStage{from: m[1]}
			stages[m[2]] = cur
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, line)
		}
	}
	return stages, sc.Err()
}

// instr returns the arguments of the stage's last instruction of kind (e.g.
// "ENTRYPOINT"), or "".
func (s *dockerStage) instr(kind string) string {
	out := ""
	for _, l := range s.lines {
		if strings.HasPrefix(l, kind+" ") {
			out = strings.TrimSpace(strings.TrimPrefix(l, kind+" "))
		}
	}
	return out
}

// execForm parses a JSON-array ENTRYPOINT or CMD.
func execForm(s string) ([]string, error) {
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, fmt.Errorf("not an exec-form array: %q", s)
	}
	return v, nil
}

// copyDest returns where the stage's COPY --from=build puts the binary.
func (s *dockerStage) copyDest() (string, error) { return s.copyDestOf("harnessfacts") }

// copyDestOf returns where the stage's COPY --from=build puts the program
// name (harnessfacts, harnessfacts-sandbox-init).
func (s *dockerStage) copyDestOf(name string) (string, error) {
	for _, l := range s.lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "COPY" && f[1] == "--from=build" && strings.HasSuffix(f[2], "/linux/"+name) {
			return f[3], nil
		}
	}
	return "", fmt.Errorf("no COPY --from=build .../linux/%s line", name)
}

// config is the stage's ENTRYPOINT, CMD, USER and ENV.
func (s *dockerStage) config() (oci.Config, error) {
	var c oci.Config
	var err error
	if c.Entrypoint, err = execForm(s.instr("ENTRYPOINT")); err != nil {
		return c, err
	}
	if c.Cmd, err = execForm(s.instr("CMD")); err != nil {
		return c, err
	}
	c.User = s.instr("USER")
	for _, l := range s.lines {
		if strings.HasPrefix(l, "ENV ") {
			c.Env = append(c.Env, strings.TrimSpace(strings.TrimPrefix(l, "ENV ")))
		}
	}
	if len(c.Env) == 0 {
		c.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	return c, nil
}

// buildBinary builds cmd/harnessfacts, and harnessfacts-full,
// harnessfacts-node-agent and harnessfacts-sandbox-init beside it, as the
// Dockerfile's build stage does.
func buildBinary(dir string) (string, error) {
	out := filepath.Join(dir, "harnessfacts")
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/harnessfacts/harnessfacts/internal/version.Version="+tag,
		"-o", dir+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent", "./cmd/harnessfacts-sandbox-init")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, b)
	}
	return out, nil
}

func buildImages(dir string) (*images, error) {
	stages, err := readDockerfile()
	if err != nil {
		return nil, err
	}
	if stages["controller"] == nil || stages["node-agent"] == nil {
		return nil, fmt.Errorf("the Dockerfile has no controller or node-agent stage")
	}
	if bin, err = buildBinary(dir); err != nil {
		return nil, err
	}
	full := filepath.Join(filepath.Dir(bin), "harnessfacts-full")
	sum, err := fileDigest(bin, full)
	if err != nil {
		return nil, err
	}
	controllerRef = "localhost/harnessfacts/harnessfacts:" + tag + "-" + sum[:12]
	nodeAgentRef = "localhost/harnessfacts/harnessfacts-node-agent:" + tag + "-" + sum[:12]
	imgs := &images{pauseRef: os.Getenv("HARNESSFACTS_PAUSE_IMAGE")}
	if imgs.pauseRef == "" {
		imgs.pauseRef = "localhost/harnessfacts/pause:1"
	}

	// controller: the binary and what distroless' nonroot base gives it.
	dest, err := stages["controller"].copyDest()
	if err != nil {
		return nil, fmt.Errorf("controller stage: %w", err)
	}
	cfg, err := stages["controller"].config()
	if err != nil {
		return nil, fmt.Errorf("controller stage: %w", err)
	}
	base, err := oci.LayerFromFiles(dir, []oci.File{
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Content: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Content: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/home", Dir: true, Mode: 0o755},
		{Path: "/home/nonroot", Dir: true, Mode: 0o700, Uid: 65532, Gid: 65532},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
	})
	if err != nil {
		return nil, err
	}
	fullDest, err := stages["controller"].copyDestOf("harnessfacts-full")
	if err != nil {
		return nil, fmt.Errorf("controller stage: %w", err)
	}
	binLayer, err := oci.LayerFromFiles(dir, []oci.File{{Path: dest, Mode: 0o755, Source: bin}, {Path: fullDest, Mode: 0o755, Source: full}})
	if err != nil {
		return nil, err
	}
	if imgs.controller, err = oci.Build([]v1.Layer{base, binLayer}, cfg); err != nil {
		return nil, err
	}

	// node-agent: the Debian rootfs with the install script's CLIs, and the
	// binary where the Dockerfile copies it.
	rootfs, err := script("node-agent-rootfs.sh")
	if err != nil {
		return nil, err
	}
	layerTar := filepath.Join(filepath.Dir(rootfs), "layer.tar")
	if _, err := os.Stat(layerTar); err != nil {
		if err := oci.WriteDirTar(layerTar, rootfs); err != nil {
			return nil, err
		}
	}
	rootLayer, err := oci.LayerFromTar(layerTar)
	if err != nil {
		return nil, err
	}
	if dest, err = stages["node-agent"].copyDest(); err != nil {
		return nil, fmt.Errorf("node-agent stage: %w", err)
	}
	if cfg, err = stages["node-agent"].config(); err != nil {
		return nil, fmt.Errorf("node-agent stage: %w", err)
	}
	initDest, err := stages["node-agent"].copyDestOf("harnessfacts-sandbox-init")
	if err != nil {
		return nil, fmt.Errorf("node-agent stage: %w", err)
	}
	agentDest, err := stages["node-agent"].copyDestOf("harnessfacts-node-agent")
	if err != nil {
		return nil, fmt.Errorf("node-agent stage: %w", err)
	}
	if fullDest, err = stages["node-agent"].copyDestOf("harnessfacts-full"); err != nil {
		return nil, fmt.Errorf("node-agent stage: %w", err)
	}
	naBin, err := oci.LayerFromFiles(dir, []oci.File{{Path: dest, Mode: 0o755, Source: bin}, {Path: fullDest, Mode: 0o755, Source: full},
		{Path: agentDest, Mode: 0o755, Source: filepath.Join(filepath.Dir(bin), "harnessfacts-node-agent")},
		{Path: initDest, Mode: 0o755, Source: filepath.Join(filepath.Dir(bin), "harnessfacts-sandbox-init")}})
	if err != nil {
		return nil, err
	}
	if imgs.nodeAgent, err = oci.Build([]v1.Layer{rootLayer, naBin}, cfg); err != nil {
		return nil, err
	}
	// The pod sandbox ("pause") image: the same rootfs layer, sleeping.
	if imgs.pause, err = oci.Build([]v1.Layer{rootLayer}, oci.Config{Entrypoint: []string{"/bin/sleep", "infinity"}}); err != nil {
		return nil, err
	}
	imgs.tarball = filepath.Join(dir, "images.tar")
	err = oci.WriteTarball(imgs.tarball, map[string]v1.Image{
		controllerRef: imgs.controller, nodeAgentRef: imgs.nodeAgent, imgs.pauseRef: imgs.pause,
	})
	return imgs, err
}

// fileDigest is the SHA-256 of the files' contents, one after the other.
func fileDigest(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// load imports the images into the node's containerd (namespace k8s.io, the
// CRI's), so the kubelet finds them without a pull.
func (i *images) load(ctx context.Context) error {
	return oci.Import(ctx, ctr, nodeEnv["HARNESSFACTS_NODE_CONTAINERD"], "k8s.io", i.tarball)
}
