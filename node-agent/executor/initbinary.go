package executor

import (
	"debug/elf"
	"fmt"
	"os"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// elfInterpreter is the dynamic loader program p names (its PT_INTERP), or
// "" for a statically linked program or one that is not ELF.
func elfInterpreter(p string) string {
	f, err := elf.Open(p)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return ""
		}
		for len(b) > 0 && b[len(b)-1] == 0 {
			b = b[:len(b)-1]
		}
		return string(b)
	}
	return ""
}

// initLoaderProblem says why the init program (bound into the agent's
// sandbox when it runs there: the bridges where the runner cannot serve
// them, and the stdio MCP server) cannot start in a sandbox
// whose root is an environment image: a dynamically linked one needs its
// loader at the same path in the image, which an image of another libc
// (Alpine's musl, a distroless static base) does not have. make build and
// the images build it statically, so this names a build by other means.
func initLoaderProblem(initBinary, interp, root string) error {
	if interp == "" || root == "" {
		return nil
	}
	// The image's own symlinks (Debian's loader is one, absolute) are
	// resolved inside it, never on the node.
	if p, err := securejoin.SecureJoin(root, interp); err == nil {
		if _, err := os.Lstat(p); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%s is dynamically linked and the environment image has no %s to load it: build it with CGO_ENABLED=0 (make build and the images do)", initBinary, interp)
}
