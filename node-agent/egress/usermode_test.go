package egress

import (
	"testing"

	"github.com/harnessfacts/harnessfacts/sandbox"
)

// Every IPv4 instance metadata address the node-agent's own fetches refuse
// is also out of reach of a run with egress Unrestricted, whose user-mode
// network stack filters nothing: the sandbox routes it to a blackhole. The
// two lists live apart (the sandbox package sits below the node-agent's),
// so a metadata address added here and forgotten there fails this test.
// (The stack serves no IPv6.)
func TestUserModeBlocksEveryMetadataAddress(t *testing.T) {
	blocked := sandbox.UserModeUnreachable()
	for _, a := range metadataAddrs {
		if !a.Is4() {
			continue
		}
		found := false
		for _, p := range blocked {
			found = found || p.Contains(a)
		}
		if !found {
			t.Errorf("%s, a metadata address, is reachable from a user-mode network: add it to sandbox's userModeUnreachable", a)
		}
	}
}
