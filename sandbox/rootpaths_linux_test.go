package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rootWithLinks makes a Spec.Root whose programs are the node's /usr
// (bound read-only at /usr; /bin and the rest are links into it, as in
// a merged-/usr image), owned by uid, and a run dir beside it.
func rootWithLinks(t *testing.T, uid int) (root, work string) {
	t.Helper()
	base := testBase(t)
	root, work = filepath.Join(base, "root"), filepath.Join(base, "work")
	for _, d := range []string{root, filepath.Join(root, "usr"), work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{root, work} {
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return root, work
}

// A sandbox in a Root is refused nothing by the links its root holds, and
// bwrap follows none of them out of it. An agent, root in its image's
// overlay, leaves links at the paths where its checks' sandbox mounts the
// verifier part and the reward folder: /tests -> /oldroot/<a node folder>
// (bwrap's setup root sees the node's root at /oldroot: it made a folder
// on the node) and /solution -> /newroot/evil (bwrap's setup root sees the
// sandbox's at /newroot: the bind landed on /evil, and the check's
// /solution showed the agent's /newroot/evil, a forged verifier). Now each
// mount lands where the sandbox resolves its path: the check sees what the
// node binds there, and nothing appears on the node.
func TestRootLinksDoNotMoveMountsOutOrAside(t *testing.T) {
	r := requireBwrapHost(t)
	const uid = 60133
	root, work := rootWithLinks(t, uid)
	node := filepath.Join(testBase(t), "node-folder") // where the link points on the node
	if err := os.Mkdir(node, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(node, 0o1777); err != nil {
		t.Fatal(err)
	}
	verifier := filepath.Join(testBase(t), "verifier")
	if err := os.Mkdir(verifier, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(verifier, "test.sh"), []byte("the node's verifier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(script string, binds ...BindAt) (string, error) {
		var out bytes.Buffer
		res, err := r.Run(context.Background(), Spec{
			Argv: []string{"/bin/sh", "-c", script}, Dir: work, Env: []string{"PATH=/usr/bin:/bin"},
			ReadOnly: []string{"/usr"}, ReadWrite: []string{work}, BindAt: binds,
			Root: root, UID: uid, GID: uid, Stdout: &out, Stderr: &out,
		})
		if err == nil && res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, out.String())
		}
		return out.String(), err
	}
	// The agent's sandbox: root inside, it plants the links.
	if out, err := run(`set -e
mkdir -p /newroot/evil /newroot/evil2/verifier /evil /evil2/verifier
echo forged > /newroot/evil/test.sh
echo forged > /newroot/evil2/verifier/test.sh
ln -s /oldroot` + node + ` /tests
ln -s /newroot/evil /solution
ln -s /newroot/evil2 /logs`); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The check's sandbox.
	out, err := run(`cat /tests/test.sh /solution/test.sh /logs/verifier/test.sh`,
		BindAt{Source: verifier, Target: "/tests"},
		BindAt{Source: verifier, Target: "/solution"},
		BindAt{Source: verifier, Target: "/logs/verifier"})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("the node's verifier\n", 3); afterSetupRetries(out) != want {
		t.Errorf("the check saw:\n%s\nwant the node's verifier three times", out)
	}
	if ents, _ := os.ReadDir(node); len(ents) != 0 {
		t.Errorf("the sandbox's setup made %v in a folder of the node", ents)
	}
	// The links now resolve to the mounts' own folders in the root.
	if _, err := os.Stat(filepath.Join(root, "oldroot", strings.TrimPrefix(node, "/"))); err != nil {
		t.Errorf("the /tests mount is not inside the root: %v", err)
	}
}

// A link may move a mount, but not into another one: an agent that links
// /logs to its workspace (bound from the node, writable by it) would have
// the reward folder mounted inside a folder it controls, where bwrap
// follows its links. The sandbox is refused, saying so.
func TestRootLinkIntoAnotherMountIsRefused(t *testing.T) {
	r := requireBwrapHost(t)
	const uid = 60134
	root, work := rootWithLinks(t, uid)
	if err := os.Symlink(work, filepath.Join(root, "logs")); err != nil {
		t.Fatal(err)
	}
	reward := filepath.Join(testBase(t), "reward")
	if err := os.Mkdir(reward, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := r.Run(context.Background(), Spec{
		Argv: []string{"/bin/true"}, Dir: work, ReadOnly: []string{"/usr"}, ReadWrite: []string{work},
		BindAt: []BindAt{{Source: reward, Target: "/logs/verifier"}},
		Root:   root, UID: uid, GID: uid,
	})
	if err == nil || !strings.Contains(err.Error(), "may not move a mount") {
		t.Fatalf("want a refusal, got %v", err)
	}
}

func TestRootTargetsRelations(t *testing.T) {
	root := t.TempDir()
	for _, l := range [][2]string{{"/usr/bin", "bin"}, {"/", "up"}, {"../../..", "climb"}, {"run", "var-run"}, {"work", "wk"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := rootTargets(root, []string{"/dev", "/bin/tool", "/climb/x", "/work", "/work/hidden", "/var-run/a"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/bin/tool": "/usr/bin/tool", "/climb/x": "/x", "/var-run/a": "/run/a"}
	if len(moved) != len(want) {
		t.Fatalf("moved %v, want %v", moved, want)
	}
	for k, v := range want {
		if moved[k] != v {
			t.Errorf("%s moved to %q, want %q", k, moved[k], v)
		}
	}
	for _, bad := range [][]string{
		{"/up"},                 // onto the root itself
		{"/work", "/up/work/x"}, // into another mount
		{"/tmp", "/climb/tmp"},  // onto another mount
		{"/work/sub", "/wk"},    // over another mount
	} {
		if _, err := rootTargets(root, bad); err == nil {
			t.Errorf("%v: not refused", bad)
		}
	}
}
